//! TestStream events, as a runner plays them.

use crate::batch::Batch;
use crate::time::Timestamp;
use std::sync::Arc;

/// One event of a [`crate::testing::TestStream`], with its elements type-erased.
#[derive(Clone)]
pub enum TestStreamEvent {
    /// Elements to emit as one bundle; the function builds the batch.
    Elements(Arc<dyn Fn() -> Batch + Send + Sync>),
    /// Advance the source watermark.
    Watermark(Timestamp),
    /// Advance the test clock by this many milliseconds.
    ProcessingTime(i64),
}

impl std::fmt::Debug for TestStreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestStreamEvent::Elements(_) => f.write_str("Elements"),
            TestStreamEvent::Watermark(t) => write!(f, "Watermark({t})"),
            TestStreamEvent::ProcessingTime(d) => write!(f, "ProcessingTime(+{d})"),
        }
    }
}
