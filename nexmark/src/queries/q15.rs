//! Q15 PORTABILITY_BATCH (Beam's Query13): every event through a GroupByKey on a random shard
//! and out again, re-encoded. Its model is Q0's: the events themselves.

use weir_sdk::prelude::*;

use crate::model::Event;
use crate::queries::EventRoundTrip;
use crate::NexmarkConfig;

#[derive(Clone)]
struct AssignShard {
    buckets: i64,
}

impl DoFn for AssignShard {
    type In = Event;
    type Out = KV<i64, Event>;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, KV<i64, Event>>) -> UserResult {
        let shard = rand::random_range(0..self.buckets);
        ctx.output(KV::new(shard, e));
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Ungroup {
    coder: EventRoundTrip,
}

impl DoFn for Ungroup {
    type In = KV<i64, Vec<Event>>;
    type Out = Event;

    fn process(&mut self, kv: KV<i64, Vec<Event>>, ctx: &mut ProcessContext<'_, Event>) -> UserResult {
        for e in kv.value {
            ctx.output(self.coder.round_trip(&e)?.0);
        }
        Ok(())
    }
}

/// Q15 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Event> {
    events
        .apply("AssignShards", ParDo::of(AssignShard { buckets: i64::from(config.num_key_buckets) }))
        .apply("GroupByShard", GroupByKey::create())
        .apply("Ungroup", ParDo::of(Ungroup::default()))
}
