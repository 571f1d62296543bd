//! Q16 RESHUFFLE (Beam's Query14): every event through a reshuffle on random keys. Its model is
//! Q0's: the events themselves.

use weir_sdk::prelude::*;

use crate::model::Event;
use crate::NexmarkConfig;

/// Q16 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Event> {
    events.apply("Reshuffle", Reshuffle::via_random_key().with_num_buckets(config.num_key_buckets.max(1) as u32))
}
