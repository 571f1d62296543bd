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
    /// What the builder refused (as Beam's builder does), reported when the stream is applied.
    refused: Vec<String>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> TestStream<T> {
    /// An empty stream.
    pub fn create() -> Self {
        TestStream { events: Vec::new(), refused: Vec::new(), _t: PhantomData }
    }

    /// Emits `values` as one bundle. As in Beam, every timestamp must be strictly before the
    /// maximum timestamp ([`MAX_TIMESTAMP`]); the end of the global window and anything after it
    /// up to one millisecond before the maximum are valid. The pipeline is refused otherwise.
    pub fn add_elements(mut self, values: Vec<TimestampedValue<T>>) -> Self {
        if let Some(late) = values.iter().find(|v| v.timestamp >= MAX_TIMESTAMP) {
            self.refused.push(format!(
                "TestStream elements must have timestamps before the maximum timestamp \
                 ({MAX_TIMESTAMP}); got one at {}",
                late.timestamp
            ));
        }
        let values = Arc::new(values);
        self.events.push(TestStreamEvent::Elements(Arc::new(move || -> Batch {
            Batch::new(
                values.iter().map(|v| WindowedValue::timestamped(v.value.clone(), v.timestamp)).collect::<Vec<_>>(),
            )
        })));
        self
    }

    /// Advances the watermark to `ts`, which must be before the maximum timestamp, as in Beam:
    /// [`TestStream::advance_watermark_to_infinity`] is how a stream ends.
    pub fn advance_watermark_to(mut self, ts: Timestamp) -> Self {
        if ts >= MAX_TIMESTAMP {
            self.refused.push(format!(
                "TestStream watermark cannot advance to the maximum timestamp ({MAX_TIMESTAMP}) with \
                 advance_watermark_to({ts}); use advance_watermark_to_infinity() to end the stream"
            ));
        }
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
        TestStream { events: self.events.clone(), refused: self.refused.clone(), _t: PhantomData }
    }

    /// Advances the watermark to infinity: no more data.
    pub fn advance_watermark_to_infinity(mut self) -> Self {
        self.events.push(TestStreamEvent::Watermark(MAX_TIMESTAMP));
        self
    }
}

impl<T: Element> PTransform<PBegin> for TestStream<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input.pipeline_handle();
        for refused in &self.refused {
            p.record_error(&p.current_step(), refused.clone());
        }
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
