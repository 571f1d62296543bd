//! Q14 SESSION_SIDE_INPUT_JOIN: each bidder session's bids joined with a row of a side table,
//! tagged with the session.

use weir_sdk::prelude::*;
use weir_sdk::view::MapOf;

use crate::model::{Bid, Event};
use crate::queries::q13::side_input;
use crate::queries::{bids, record, secs, sessions, ResultRecord};
use crate::NexmarkConfig;

#[derive(Clone)]
struct JoinSessions {
    table: PCollectionView<MapOf<i64, String>>,
    rows: i64,
}

impl DoFn for JoinSessions {
    type In = KV<i64, Vec<Bid>>;
    type Out = Bid;

    fn process(&mut self, kv: KV<i64, Vec<Bid>>, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let table = ctx.side_input(&self.table)?;
        let window = ctx.window().interval().ok_or("Q14: bids are not in session windows")?;
        let base = table.get(&(kv.key % self.rows)).cloned().unwrap_or_default();
        let extra: std::sync::Arc<str> =
            format!("{base}:{}:{}", weir_sdk::time::iso8601(window.start), weir_sdk::time::iso8601(window.end)).into();
        for bid in kv.value {
            ctx.output(Bid { extra: extra.clone(), ..bid });
        }
        Ok(())
    }
}

/// Q14 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let table = side_input(config, events);
    bids(events)
        .apply("Sessions", Window::into(Sessions::with_gap_duration(secs(config.session_gap_sec))))
        .apply("ByBidder", WithKeys::of(|b: &Bid| b.bidder))
        .apply("GroupByBidder", GroupByKey::create())
        .apply(
            "JoinSessions",
            ParDo::of(JoinSessions { table: table.clone(), rows: config.side_input_row_count })
                .with_side_inputs(vec![table.spec().clone()]),
        )
}

/// Q14's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    use weir_sdk::time::iso8601;
    let mut out = Vec::new();
    for (bidder, start, end, bids) in sessions(events, config.session_gap_sec * 1000) {
        let extra: std::sync::Arc<str> =
            format!("{}:{}:{}", bidder % config.side_input_row_count, iso8601(start), iso8601(end)).into();
        out.extend(bids.into_iter().map(|b| record(end - 1, &Bid { extra: extra.clone(), ..b })));
    }
    out
}
