//! Q0 PASSTHROUGH: every event, encoded and decoded with the pipeline's event coder (the cost
//! of the framework itself), counting the encoded bytes.

use weir_sdk::{Counter, DoFn, FinishBundleContext, Metrics, PCollection, ParDo, ProcessContext, UserResult};

use crate::model::Event;
use crate::queries::{EventRoundTrip, ResultRecord};

/// Q0: encodes and decodes every event with the pipeline's event coder, counting the encoded
/// bytes (reported once per bundle).
#[derive(Clone)]
struct Passthrough {
    bytes: Counter,
    pending_bytes: i64,
    coder: EventRoundTrip,
}

impl DoFn for Passthrough {
    type In = Event;
    type Out = Event;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, Event>) -> UserResult {
        let (copy, size) = self.coder.round_trip(&e)?;
        self.pending_bytes += size as i64;
        ctx.output(copy);
        Ok(())
    }

    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, Event>) -> UserResult {
        self.bytes.inc_by(std::mem::take(&mut self.pending_bytes));
        Ok(())
    }
}

/// Q0 over `events`, its byte counter in `namespace`.
pub(crate) fn query(namespace: &str, events: &PCollection<Event>) -> PCollection<Event> {
    events.apply(
        "Passthrough",
        ParDo::of(Passthrough {
            bytes: Metrics::counter(namespace, "bytes").expect("non-empty names"),
            pending_bytes: 0,
            coder: EventRoundTrip::default(),
        }),
    )
}

/// Q0's model (also Q15's and Q16's, which only move events around): the events themselves.
pub(crate) fn model(events: &[Event]) -> Vec<ResultRecord> {
    events.iter().map(|e| ResultRecord { timestamp: e.date_time(), value: e.to_json(), pane: 0 }).collect()
}
