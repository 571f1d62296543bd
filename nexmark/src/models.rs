//! Plain-Rust models of the deterministic queries (Beam's `NexmarkQueryModel`s): the expected
//! results computed from the single unsplit timeline, and Beam's comparison rules.

use crate::generator::standard_events;
use crate::model::{Bid, Event};
use crate::queries::{AuctionPrice, ResultRecord};
use crate::{NexmarkConfig, QueryName};

fn record<T: serde::Serialize>(timestamp: i64, value: &T) -> ResultRecord {
    ResultRecord { timestamp, value: serde_json::to_string(value).expect("results are plain data") }
}

/// The model's results for `query`, or `None` when the query has no model (its output depends
/// on processing time, or it is not implemented yet).
pub fn expected(query: QueryName, config: &NexmarkConfig) -> Option<Vec<ResultRecord>> {
    let events = standard_events(config);
    Some(match query {
        QueryName::Passthrough => {
            events.map(|e| ResultRecord { timestamp: e.date_time(), value: e.to_json() }).collect()
        }
        QueryName::CurrencyConversion => events
            .filter_map(|e| match e {
                Event::Bid(b) => Some(record(b.date_time, &Bid { price: b.price * 89 / 100, ..b })),
                _ => None,
            })
            .collect(),
        QueryName::Selection => events
            .filter_map(|e| match e {
                Event::Bid(b) if b.auction % i64::from(config.auction_skip) == 0 => {
                    Some(record(b.date_time, &AuctionPrice { auction: b.auction, price: b.price }))
                }
                _ => None,
            })
            .collect(),
        _ => return None,
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
                let mut last: BTreeMap<String, (i64, String)> = BTreeMap::new();
                for r in records {
                    let k = serde_json::from_str::<serde_json::Value>(&r.value)
                        .ok()
                        .and_then(|v| v.get(key).map(|k| k.to_string()))
                        .unwrap_or_default();
                    let entry = last.entry(k).or_insert((i64::MIN, String::new()));
                    if (r.timestamp, &r.value) >= (entry.0, &entry.1) {
                        *entry = (r.timestamp, r.value.clone());
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
