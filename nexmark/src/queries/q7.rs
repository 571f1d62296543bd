//! Q7 HIGHEST_BID: the bids at the highest price of each fixed window, through a side input of
//! the window's maximum.

use std::collections::BTreeMap;

use weir_sdk::prelude::*;
use weir_sdk::view::Singleton;

use crate::model::{Bid, Event};
use crate::queries::{bids, bids_of, fanout, record, secs, ResultRecord};
use crate::NexmarkConfig;

#[derive(Clone)]
struct SelectMaxBids {
    max: PCollectionView<Singleton<i64>>,
}

impl DoFn for SelectMaxBids {
    type In = Bid;
    type Out = Bid;

    fn process(&mut self, bid: Bid, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let max = ctx.side_input(&self.max)?;
        if bid.price == max {
            ctx.output(bid);
        }
        Ok(())
    }
}

/// Q7 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let windowed = bids(events).apply("Window", Window::into(FixedWindows::of(secs(config.window_size_sec))));
    let prices = windowed.apply("Prices", Map::new(|b: Bid| b.price));
    let max = Max::globally::<i64>().with_fanout(fanout(config)).as_singleton_view("MaxPrice", &prices);
    windowed.apply(
        "SelectMaxBids",
        ParDo::of(SelectMaxBids { max: max.clone() }).with_side_inputs(vec![max.spec().clone()]),
    )
}

/// Q7's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
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
