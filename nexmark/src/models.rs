//! Plain-Rust models of the deterministic queries (Beam's `NexmarkQueryModel`s): the expected
//! results computed from the single unsplit timeline, and Beam's comparison rules.

use crate::generator::standard_events;
use std::collections::{BTreeMap, HashMap};

use crate::generator::java_round;
use crate::model::{Auction, Bid, Event, Person};
use crate::queries::winning_bids::{
    ascending_time_then_price, mean_price, winner, AuctionBid, CategoryPrice, SellerPrice, Q6_LATEST_BIDS,
};
use crate::queries::{AuctionPrice, ResultRecord};
use crate::{NexmarkConfig, QueryName};
use weir_sdk::time::GLOBAL_WINDOW_MAX_TIMESTAMP;

fn record<T: serde::Serialize>(timestamp: i64, value: &T) -> ResultRecord {
    ResultRecord { timestamp, value: serde_json::to_string(value).expect("results are plain data"), pane: 0 }
}

/// The model's results for `query`, or `None` when the query has no model (its output depends
/// on processing time).
pub fn expected(query: QueryName, config: &NexmarkConfig) -> Option<Vec<ResultRecord>> {
    let events: Vec<Event> = standard_events(config).collect();
    expected_for(query, config, &events)
}

/// The model's results for `query` over the given events, in the order a source produces them
/// (e.g. the split timelines of [`crate::generator::split_events`]).
pub fn expected_for(query: QueryName, config: &NexmarkConfig, all: &[Event]) -> Option<Vec<ResultRecord>> {
    let events = all.iter().cloned();
    Some(match query {
        // Q15 and Q16 only move events around: their output is the input, as Q0's.
        QueryName::Passthrough | QueryName::PortabilityBatch | QueryName::Reshuffle => {
            events.map(|e| ResultRecord { timestamp: e.date_time(), value: e.to_json(), pane: 0 }).collect()
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
        QueryName::LocalItemSuggestion => q3(all),
        QueryName::AveragePriceForCategory => q4(config, all),
        QueryName::AverageSellingPriceBySeller => q6(all),
        QueryName::WinningBids => winning_bids(all).into_iter().map(|(ts, ab)| record(ts, &ab)).collect(),
        QueryName::HotItems => q5(config, all),
        QueryName::HighestBid => q7(config, all),
        QueryName::MonitorNewUsers => q8(config, all),
        QueryName::LogToShardedFiles => q10(config, all),
        QueryName::UserSessions => q11(config, all)?,
        QueryName::BoundedSideInputJoin => q13(config, all),
        QueryName::SessionSideInputJoin => q14(config, all),
        _ => return None,
    })
}

fn bids_of(events: &[Event]) -> impl Iterator<Item = Bid> + '_ {
    events.iter().filter_map(|e| match e {
        Event::Bid(b) => Some(b.clone()),
        _ => None,
    })
}

fn q3(events: &[Event]) -> Vec<ResultRecord> {
    use crate::queries::beyond_stateless::{NameCityStateId, Q3_STATES};
    let mut persons: HashMap<i64, Person> = HashMap::new();
    let mut waiting: HashMap<i64, Vec<Auction>> = HashMap::new();
    let mut out = Vec::new();
    let emit = |p: &Person, a: &Auction, out: &mut Vec<ResultRecord>, ts: i64| {
        let v = NameCityStateId { name: p.name.clone(), city: p.city.clone(), state: p.state.clone(), id: a.id };
        out.push(record(ts, &v));
    };
    for e in events.iter().cloned() {
        match e {
            Event::Person(p) if Q3_STATES.contains(&p.state.as_str()) => {
                for a in waiting.remove(&p.id).unwrap_or_default() {
                    emit(&p, &a, &mut out, p.date_time);
                }
                persons.insert(p.id, *p);
            }
            Event::Auction(a) if a.category == 10 => match persons.get(&a.seller) {
                Some(p) => emit(p, &a, &mut out, a.date_time),
                None => waiting.entry(a.seller).or_default().push(*a),
            },
            _ => {}
        }
    }
    out
}

/// Beam's `WinningBids` over a whole run: per auction, the best bid at or above the reserve
/// among the bids placed before it expired (also before the auction itself appeared), stamped
/// `expires - 1`; in auction-id order.
fn winning_bids(events: &[Event]) -> Vec<(i64, AuctionBid)> {
    let mut auctions: BTreeMap<i64, Auction> = BTreeMap::new();
    let mut bids: HashMap<i64, Vec<Bid>> = HashMap::new();
    for e in events {
        match e {
            Event::Auction(a) => {
                auctions.insert(a.id, (**a).clone());
            }
            Event::Bid(b) => bids.entry(b.auction).or_default().push(b.clone()),
            Event::Person(_) => {}
        }
    }
    let mut out = Vec::new();
    for (id, auction) in auctions {
        let placed = bids.get(&id).into_iter().flatten().filter(|b| b.date_time < auction.expires);
        if let Some(bid) = winner(&auction, placed).cloned() {
            out.push((auction.expires - 1, AuctionBid { auction, bid }));
        }
    }
    out
}

/// Q4: for each category, the average winning price in the last sliding window holding one of
/// its winning bids (the last value the pipeline reports for the category).
fn q4(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    let (size, period) = (config.window_size_sec * 1000, config.window_period_sec * 1000);
    let mut per_category: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (ts, ab) in winning_bids(events) {
        per_category.entry(ab.auction.category).or_default().push((ts, ab.bid.price));
    }
    let mut out = Vec::new();
    for (category, prices) in per_category {
        let Some(latest) = prices.iter().map(|(ts, _)| *ts).max() else { continue };
        let Some(start) = sliding_starts(latest, size, period).next() else { continue };
        let in_window: Vec<i64> =
            prices.iter().filter(|(ts, _)| *ts >= start && *ts < start + size).map(|p| p.1).collect();
        let mean = in_window.iter().sum::<i64>() as f64 / in_window.len() as f64;
        out.push(record(start + size - 1, &CategoryPrice { category, price: java_round(mean), is_last: true }));
    }
    out
}

/// Q6: per seller, the average price of their latest winning bids (by bid time, then price).
fn q6(events: &[Event]) -> Vec<ResultRecord> {
    let mut per_seller: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for (_, ab) in winning_bids(events) {
        per_seller.entry(ab.auction.seller).or_default().push(ab.bid);
    }
    per_seller
        .into_iter()
        .map(|(seller, mut bids)| {
            bids.sort_by(ascending_time_then_price);
            let latest = &bids[bids.len().saturating_sub(Q6_LATEST_BIDS)..];
            record(GLOBAL_WINDOW_MAX_TIMESTAMP, &SellerPrice { seller, price: mean_price(latest) })
        })
        .collect()
}

/// Start of the sliding windows containing `ts` (size and period in ms, offset 0).
fn sliding_starts(ts: i64, size: i64, period: i64) -> impl Iterator<Item = i64> {
    let last = ts - ts.rem_euclid(period);
    (0..).map(move |i| last - i * period).take_while(move |s| *s > ts - size)
}

fn q5(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    use crate::queries::beyond_stateless::AuctionCount;
    let (size, period) = (config.window_size_sec * 1000, config.window_period_sec * 1000);
    let mut counts: BTreeMap<i64, HashMap<i64, i64>> = BTreeMap::new();
    for b in bids_of(events) {
        for start in sliding_starts(b.date_time, size, period) {
            *counts.entry(start).or_default().entry(b.auction).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    for (start, per_auction) in counts {
        let max = per_auction.values().copied().max().unwrap_or(0);
        for (&auction, &num) in per_auction.iter().filter(|(_, n)| **n == max) {
            out.push(record(start + size - 1, &AuctionCount { auction, num }));
        }
    }
    out
}

fn q7(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    let size = config.window_size_sec * 1000;
    let mut windows: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for b in bids_of(events) {
        windows.entry(b.date_time.div_euclid(size)).or_default().push(b);
    }
    let mut out = Vec::new();
    for bids in windows.into_values() {
        let max = bids.iter().map(|b| b.price).max().unwrap_or(i64::MIN);
        out.extend(bids.iter().filter(|b| b.price == max).map(|b| record(b.date_time, b)));
    }
    out
}

fn q8(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    use crate::queries::beyond_stateless::IdNameReserve;
    let size = config.window_size_sec * 1000;
    let mut persons: HashMap<(i64, i64), Person> = HashMap::new();
    let mut auctions: HashMap<(i64, i64), Vec<Auction>> = HashMap::new();
    for e in events.iter().cloned() {
        match e {
            Event::Person(p) => {
                persons.insert((p.date_time.div_euclid(size), p.id), *p);
            }
            Event::Auction(a) => auctions.entry((a.date_time.div_euclid(size), a.seller)).or_default().push(*a),
            Event::Bid(_) => {}
        }
    }
    let mut out = Vec::new();
    for (key, p) in &persons {
        for a in auctions.get(key).into_iter().flatten() {
            let end = (key.0 + 1) * size - 1;
            out.push(record(end, &IdNameReserve { id: p.id, name: p.name.clone(), reserve: a.reserve }));
        }
    }
    out
}

/// Q10: one `Done` per fixed window holding any event, once its index is written.
fn q10(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    use crate::queries::log_to_files::Done;
    let size = config.window_size_sec * 1000;
    let windows: std::collections::BTreeSet<i64> = events.iter().map(|e| e.date_time().div_euclid(size)).collect();
    windows
        .into_iter()
        .map(|w| {
            let max_timestamp = (w + 1) * size - 1;
            record(max_timestamp, &Done::for_window(max_timestamp))
        })
        .collect()
}

/// Session windows of `gap` ms per bidder: (bidder, start, end, bids in time order).
fn sessions(events: &[Event], gap: i64) -> Vec<(i64, i64, i64, Vec<Bid>)> {
    let mut per_bidder: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for b in bids_of(events) {
        per_bidder.entry(b.bidder).or_default().push(b);
    }
    let mut out = Vec::new();
    for (bidder, mut bids) in per_bidder {
        bids.sort_by_key(|b| b.date_time);
        let mut current: Option<(i64, i64, Vec<Bid>)> = None;
        for b in bids {
            match &mut current {
                Some((_, end, members)) if b.date_time < *end => {
                    *end = (*end).max(b.date_time + gap);
                    members.push(b);
                }
                _ => {
                    if let Some((s, e, m)) = current.take() {
                        out.push((bidder, s, e, m));
                    }
                    current = Some((b.date_time, b.date_time + gap, vec![b]));
                }
            }
        }
        if let Some((s, e, m)) = current {
            out.push((bidder, s, e, m));
        }
    }
    out
}

fn q11(config: &NexmarkConfig, events: &[Event]) -> Option<Vec<ResultRecord>> {
    use crate::queries::beyond_stateless::BidsPerSession;
    let sessions = sessions(events, config.window_size_sec * 1000);
    // The pipeline fires a pane every maxLogEvents bids; the model covers sessions below that.
    if sessions.iter().any(|s| s.3.len() as i64 >= config.max_log_events) {
        return None;
    }
    Some(
        sessions
            .into_iter()
            .map(|(bidder, _, end, bids)| {
                record(end - 1, &BidsPerSession { person_id: bidder, bids_per_session: bids.len() as i64 })
            })
            .collect(),
    )
}

fn q13(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    bids_of(events)
        .map(|b| {
            let extra = (b.bidder % config.side_input_row_count).to_string();
            record(b.date_time, &Bid { extra: extra.into(), ..b })
        })
        .collect()
}

fn q14(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    use weir_sdk::time::iso8601;
    let mut out = Vec::new();
    for (bidder, start, end, bids) in sessions(events, config.session_gap_sec * 1000) {
        let extra: std::sync::Arc<str> =
            format!("{}:{}:{}", bidder % config.side_input_row_count, iso8601(start), iso8601(end)).into();
        out.extend(bids.into_iter().map(|b| record(end - 1, &Bid { extra: extra.clone(), ..b })));
    }
    out
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
