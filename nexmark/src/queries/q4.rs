//! Q4 AVERAGE_PRICE_FOR_CATEGORY: the mean winning price per category in sliding windows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

use crate::generator::java_round;
use crate::model::Event;
use crate::queries::winning_bids::{self, AuctionBid, WinningBids};
use crate::queries::{fanout, record, secs, sliding_starts, ResultRecord};
use crate::{NexmarkConfig, QueryName};

/// Q4's result (Beam's `CategoryPrice`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CategoryPrice {
    /// Auction category.
    pub category: i64,
    /// Average winning price in the window (rounded as Java's `Math.round`).
    pub price: i64,
    /// Whether this is the last pane of its window.
    pub is_last: bool,
}

crate::queries::serde_beam_json!(CategoryPrice);

impl crate::queries::KnownSize for CategoryPrice {
    fn size_in_bytes(&self) -> i64 {
        8 + 8 + 1
    }
}

/// Q4 AVERAGE_PRICE_FOR_CATEGORY: the mean winning price per category in sliding windows.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<CategoryPrice> {
    events
        .apply("WinningBids", WinningBids::new(QueryName::AveragePriceForCategory.name(), config))
        .apply("Rekey", Map::new(|ab: AuctionBid| KV::new(ab.auction.category, ab.bid.price)))
        .apply(
            "Window",
            Window::into(SlidingWindows::of(secs(config.window_size_sec)).every(secs(config.window_period_sec))),
        )
        .apply("Average", Mean::per_key::<i64, i64>().with_hot_key_fanout(fanout(config)))
        .apply("Project", ParDo::of(ProjectCategoryPrice))
}

#[derive(Clone)]
struct ProjectCategoryPrice;

impl DoFn for ProjectCategoryPrice {
    type In = KV<i64, f64>;
    type Out = CategoryPrice;

    fn process(&mut self, kv: KV<i64, f64>, ctx: &mut ProcessContext<'_, CategoryPrice>) -> UserResult {
        let is_last = ctx.pane().is_last;
        ctx.output(CategoryPrice { category: kv.key, price: java_round(kv.value), is_last });
        Ok(())
    }
}

/// Q4's model: for each category, the average winning price in the last sliding window holding
/// one of its winning bids (the last value the pipeline reports for the category).
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    let (size, period) = (config.window_size_sec * 1000, config.window_period_sec * 1000);
    let mut per_category: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (ts, ab) in winning_bids::model(events) {
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
