//! The expected results of the deterministic queries (Beam's `NexmarkQueryModel`s), computed
//! from the single unsplit timeline by each query's model (in its module under
//! [`crate::queries`]), and Beam's comparison rules.

use crate::generator::standard_events;
use crate::model::Event;
use crate::queries::{q0, q1, q10, q11, q13, q14, q2, q3, q4, q5, q6, q7, q8, q9, ResultRecord};
use crate::{NexmarkConfig, QueryName};

/// The model's results for `query`, or `None` when the query has no model (its output depends
/// on processing time).
pub fn expected(query: QueryName, config: &NexmarkConfig) -> Option<Vec<ResultRecord>> {
    let events: Vec<Event> = standard_events(config).collect();
    expected_for(query, config, &events)
}

/// The model's results for `query` over the given events, in the order a source produces them
/// (e.g. the split timelines of [`crate::generator::split_events`]).
pub fn expected_for(query: QueryName, config: &NexmarkConfig, all: &[Event]) -> Option<Vec<ResultRecord>> {
    Some(match query {
        // Q15 and Q16 only move events around: their output is the input, as Q0's.
        QueryName::Passthrough | QueryName::PortabilityBatch | QueryName::Reshuffle => q0::model(all),
        QueryName::CurrencyConversion => q1::model(all),
        QueryName::Selection => q2::model(config, all),
        QueryName::LocalItemSuggestion => q3::model(all),
        QueryName::AveragePriceForCategory => q4::model(config, all),
        QueryName::HotItems => q5::model(config, all),
        QueryName::AverageSellingPriceBySeller => q6::model(all),
        QueryName::HighestBid => q7::model(config, all),
        QueryName::MonitorNewUsers => q8::model(config, all),
        QueryName::WinningBids => q9::model(all),
        QueryName::LogToShardedFiles => q10::model(config, all),
        QueryName::UserSessions => q11::model(config, all)?,
        QueryName::BoundedSideInputJoin => q13::model(config, all),
        QueryName::SessionSideInputJoin => q14::model(config, all),
        QueryName::ProcessingTimeWindows => return None,
    })
}

/// How results are compared with the model (Beam's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Values with their timestamps, as multisets (Q0, Q1, Q2).
    ValuesAndTimestamps,
    /// Sets of values (Q3, Q5, Q7, Q8, Q9).
    ValueSets,
    /// The last value per key, as sets (Q4 per category, Q6 per seller).
    LastPerKey(&'static str),
}

/// The comparison rule of `query`.
pub fn comparison(query: QueryName) -> Comparison {
    match query {
        QueryName::Passthrough | QueryName::CurrencyConversion | QueryName::Selection => {
            Comparison::ValuesAndTimestamps
        }
        QueryName::AveragePriceForCategory => Comparison::LastPerKey("category"),
        QueryName::AverageSellingPriceBySeller => Comparison::LastPerKey("seller"),
        _ => Comparison::ValueSets,
    }
}

/// Compares `actual` with `expected` under `rule`; on a mismatch, a message with the counts and
/// a few differing results on each side.
pub fn compare(rule: Comparison, actual: &[ResultRecord], expected: &[ResultRecord]) -> Result<(), String> {
    use std::collections::{BTreeMap, BTreeSet};
    let normalise = |records: &[ResultRecord]| -> Vec<String> {
        match rule {
            Comparison::ValuesAndTimestamps => {
                let mut v: Vec<String> = records.iter().map(|r| format!("{} @ {}", r.value, r.timestamp)).collect();
                v.sort();
                v
            }
            Comparison::ValueSets => {
                records.iter().map(|r| r.value.clone()).collect::<BTreeSet<_>>().into_iter().collect()
            }
            Comparison::LastPerKey(key) => {
                let mut last: BTreeMap<String, ((i64, i64), String)> = BTreeMap::new();
                for r in records {
                    let k = serde_json::from_str::<serde_json::Value>(&r.value)
                        .ok()
                        .and_then(|v| v.get(key).map(|k| k.to_string()))
                        .unwrap_or_default();
                    let entry = last.entry(k).or_insert(((i64::MIN, i64::MIN), String::new()));
                    if ((r.timestamp, r.pane), &r.value) >= (entry.0, &entry.1) {
                        *entry = ((r.timestamp, r.pane), r.value.clone());
                    }
                }
                last.into_values().map(|(_, v)| v).collect::<BTreeSet<_>>().into_iter().collect()
            }
        }
    };
    let (a, e) = (normalise(actual), normalise(expected));
    if a == e {
        return Ok(());
    }
    let a_set: std::collections::BTreeSet<&String> = a.iter().collect();
    let e_set: std::collections::BTreeSet<&String> = e.iter().collect();
    let shorten = |s: &&String| -> String {
        if s.len() > 160 {
            format!("{}...", s.chars().take(160).collect::<String>())
        } else {
            s.to_string()
        }
    };
    let extra: Vec<String> = a_set.difference(&e_set).take(3).map(shorten).collect();
    let missing: Vec<String> = e_set.difference(&a_set).take(3).map(shorten).collect();
    Err(format!(
        "{} results where the model has {}; unexpected (first 3): {extra:?}; missing (first 3): {missing:?}",
        a.len(),
        e.len()
    ))
}
