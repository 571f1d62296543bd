//! `StreamingQueryProgress`: what each batch did, as JSON with Spark's field names. The schema is
//! runner-core's, which the timely runner fills too.

pub use weir_runner_core::progress::{
    DurationMs, EventTimeStats, SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress,
};
