//! Q6 AVERAGE_SELLING_PRICE_BY_SELLER: per seller, the mean price of their latest winning bids.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;
use weir_sdk::time::GLOBAL_WINDOW_MAX_TIMESTAMP;

use crate::generator::java_round;
use crate::model::{Bid, Event};
use crate::queries::winning_bids::{self, AuctionBid, WinningBids};
use crate::queries::{record, ResultRecord};
use crate::{NexmarkConfig, QueryName};

/// Q6's result (Beam's `SellerPrice`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SellerPrice {
    /// Seller id.
    pub seller: i64,
    /// Average price of the seller's latest winning bids.
    pub price: i64,
}

crate::queries::serde_beam_json!(SellerPrice);

impl crate::queries::KnownSize for SellerPrice {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

/// Beam's `MovingMeanSellingPrice`: the average price of the latest `max` winning bids, ordered
/// by Beam's `ASCENDING_TIME_THEN_PRICE`.
#[derive(Clone)]
pub struct MovingMeanSellingPrice {
    max: usize,
}

/// Beam's `Bid.ASCENDING_TIME_THEN_PRICE`.
pub fn ascending_time_then_price(a: &Bid, b: &Bid) -> Ordering {
    a.date_time.cmp(&b.date_time).then(a.price.cmp(&b.price))
}

impl MovingMeanSellingPrice {
    fn keep_latest(&self, acc: &mut Vec<Bid>) {
        acc.sort_by(ascending_time_then_price);
        if acc.len() > self.max {
            acc.drain(..acc.len() - self.max);
        }
    }
}

impl CombineFn for MovingMeanSellingPrice {
    type In = Bid;
    type Accum = Vec<Bid>;
    type Out = i64;

    fn create_accumulator(&self) -> Vec<Bid> {
        Vec::new()
    }

    fn add_input(&self, acc: &mut Vec<Bid>, input: Bid) {
        acc.push(input);
        self.keep_latest(acc);
    }

    fn merge_accumulators(&self, accs: Vec<Vec<Bid>>) -> Vec<Bid> {
        let mut all: Vec<Bid> = accs.into_iter().flatten().collect();
        self.keep_latest(&mut all);
        all
    }

    fn extract_output(&self, acc: Vec<Bid>) -> i64 {
        mean_price(&acc)
    }
}

/// The rounded mean price of `bids` (0 for none), as Q6 reports it.
pub fn mean_price(bids: &[Bid]) -> i64 {
    if bids.is_empty() {
        return 0;
    }
    let sum: i64 = bids.iter().map(|b| b.price).sum();
    java_round(sum as f64 / bids.len() as f64)
}

/// How many of a seller's latest winning bids Q6 averages.
pub const Q6_LATEST_BIDS: usize = 10;

/// Q6 AVERAGE_SELLING_PRICE_BY_SELLER: per seller, the mean price of their latest 10 winning
/// bids, updated on every winning bid (global window, accumulating panes).
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<SellerPrice> {
    events
        .apply("WinningBids", WinningBids::new(QueryName::AverageSellingPriceBySeller.name(), config))
        .apply("Rekey", Map::new(|ab: AuctionBid| KV::new(ab.auction.seller, ab.bid)))
        .apply(
            "Window",
            Window::into(GlobalWindows)
                .triggering(Repeatedly::forever(AfterPane::element_count_at_least(1)))
                .accumulating_fired_panes()
                .with_allowed_lateness(Duration::ZERO),
        )
        .apply("Average", Combine::per_key(MovingMeanSellingPrice { max: Q6_LATEST_BIDS }))
        .apply("Select", Map::new(|kv: KV<i64, i64>| SellerPrice { seller: kv.key, price: kv.value }))
}

/// Q6's model: per seller, the average price of their latest winning bids (by bid time, then
/// price).
pub(crate) fn model(events: &[Event]) -> Vec<ResultRecord> {
    let mut per_seller: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for (_, ab) in winning_bids::model(events) {
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
