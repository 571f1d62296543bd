//! Q5 HOT_ITEMS: the auctions with the most bids in each sliding window.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

use crate::model::{Bid, Event};
use crate::queries::{bids, bids_of, fanout, record, secs, sliding_starts, ResultRecord};
use crate::NexmarkConfig;

/// Q5's result (Beam's `AuctionCount`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuctionCount {
    /// Auction id.
    pub auction: i64,
    /// Bids in the window.
    pub num: i64,
}

crate::queries::serde_beam_json!(AuctionCount);

impl crate::queries::KnownSize for AuctionCount {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

/// Keeps every auction tied for the highest bid count.
#[derive(Clone, Default)]
struct TopCounts;

impl CombineFn for TopCounts {
    type In = KV<i64, i64>;
    type Accum = Vec<KV<i64, i64>>;
    type Out = Vec<KV<i64, i64>>;

    fn create_accumulator(&self) -> Self::Accum {
        Vec::new()
    }

    fn add_input(&self, acc: &mut Self::Accum, input: KV<i64, i64>) {
        match acc.first().map(|top| top.value) {
            Some(max) if input.value < max => {}
            Some(max) if input.value == max => acc.push(input),
            _ => *acc = vec![input],
        }
    }

    fn merge_accumulators(&self, accs: Vec<Self::Accum>) -> Self::Accum {
        let mut out = Vec::new();
        for kv in accs.into_iter().flatten() {
            self.add_input(&mut out, kv);
        }
        out
    }

    fn extract_output(&self, acc: Self::Accum) -> Self::Out {
        acc
    }
}

/// Q5 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<AuctionCount> {
    bids(events)
        .apply(
            "Window",
            Window::into(SlidingWindows::of(secs(config.window_size_sec)).every(secs(config.window_period_sec))),
        )
        .apply("AuctionIds", Map::new(|b: Bid| b.auction))
        .apply("CountPerAuction", Count::per_element())
        .apply("TopAuctions", Combine::globally(TopCounts).without_defaults().with_fanout(fanout(config)))
        .apply(
            "ToAuctionCount",
            FlatMap::new(|top: Vec<KV<i64, i64>>| {
                top.into_iter().map(|kv| AuctionCount { auction: kv.key, num: kv.value }).collect::<Vec<_>>()
            }),
        )
}

/// Q5's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
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
