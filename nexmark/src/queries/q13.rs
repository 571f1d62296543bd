//! Q13 BOUNDED_SIDE_INPUT_JOIN: every bid joined with a row of a bounded side table.

use weir_sdk::prelude::*;
use weir_sdk::view::MapOf;

use crate::model::{Bid, Event};
use crate::queries::{bids, bids_of, record, ResultRecord};
use crate::NexmarkConfig;

/// The side table: `sideInputRowCount` rows of (i, "i").
pub(crate) fn side_input(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollectionView<MapOf<i64, String>> {
    let rows: Vec<KV<i64, String>> = (0..config.side_input_row_count).map(|i| KV::new(i, i.to_string())).collect();
    let table = events.pipeline().apply("SideInput", Create::of(rows));
    View::as_map(&table)
}

#[derive(Clone)]
struct JoinToFiles {
    table: PCollectionView<MapOf<i64, String>>,
    rows: i64,
}

impl DoFn for JoinToFiles {
    type In = Bid;
    type Out = Bid;

    fn process(&mut self, bid: Bid, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let table = ctx.side_input(&self.table)?;
        let extra = table.get(&(bid.bidder % self.rows)).map_or("", String::as_str);
        ctx.output(Bid { extra: extra.into(), ..bid });
        Ok(())
    }
}

/// Q13 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let table = side_input(config, events);
    bids(events).apply(
        "JoinToFiles",
        ParDo::of(JoinToFiles { table: table.clone(), rows: config.side_input_row_count })
            .with_side_inputs(vec![table.spec().clone()]),
    )
}

/// Q13's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    bids_of(events)
        .map(|b| {
            let extra = (b.bidder % config.side_input_row_count).to_string();
            record(b.date_time, &Bid { extra: extra.into(), ..b })
        })
        .collect()
}
