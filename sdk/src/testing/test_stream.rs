//! TestStream: a source of elements, watermark advances and processing-time advances, played in
//! order, for testing event-time behaviour deterministically.

use crate::coders::Element;
use crate::graph::{Boundedness, Payload};
use crate::kernel::{Batch, TestStreamEvent};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::{Timestamp, MAX_TIMESTAMP};
use crate::window_fn::WindowingStrategy;
use crate::windowed_value::{TimestampedValue, WindowedValue};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// Builds a TestStream: `TestStream::create().add_elements(..).advance_watermark_to(..)`.
/// Runners play one event at a time and let the pipeline settle in between; processing time is
/// a test clock that moves only with `advance_processing_time`. When the events run out the
/// watermark goes to infinity.
pub struct TestStream<T> {
    events: Vec<TestStreamEvent>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> TestStream<T> {
    /// An empty stream.
    pub fn create() -> Self {
        TestStream { events: Vec::new(), _t: PhantomData }
    }

    /// Emits `values` as one bundle.
    pub fn add_elements(mut self, values: Vec<TimestampedValue<T>>) -> Self {
        let values = Arc::new(values);
        self.events.push(TestStreamEvent::Elements(Arc::new(move || -> Batch {
            Batch::new(
                values.iter().map(|v| WindowedValue::timestamped(v.value.clone(), v.timestamp)).collect::<Vec<_>>(),
            )
        })));
        self
    }

    /// Advances the watermark to `ts`.
    pub fn advance_watermark_to(mut self, ts: Timestamp) -> Self {
        self.events.push(TestStreamEvent::Watermark(ts));
        self
    }

    /// Advances the test clock by `d`.
    pub fn advance_processing_time(mut self, d: Duration) -> Self {
        self.events.push(TestStreamEvent::ProcessingTime(crate::time::duration_millis(d)));
        self
    }

    /// A copy of this stream's events (to play the same stream into several branches).
    pub fn clone_events(&self) -> Self {
        TestStream { events: self.events.clone(), _t: PhantomData }
    }

    /// Advances the watermark to infinity: no more data.
    pub fn advance_watermark_to_infinity(self) -> Self {
        self.advance_watermark_to(MAX_TIMESTAMP)
    }
}

impl<T: Element> PTransform<PBegin> for TestStream<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input.pipeline_handle();
        let mut last = crate::time::MIN_TIMESTAMP;
        for e in &self.events {
            if let TestStreamEvent::Watermark(t) = e {
                if *t < last {
                    p.record_error(
                        &p.current_step(),
                        format!("TestStream watermark moves backwards from {last} to {t}"),
                    );
                }
                last = last.max(*t);
            }
        }
        let node = p.make_primitive(crate::urns::TEST_STREAM, Payload::TestStream(Arc::new(self.events)));
        p.new_output(node, "out", Boundedness::Unbounded, WindowingStrategy::global())
    }
}
