//! Beam's TestStream as Weir's: one Weir TestStream per tagged output, played in step.

use std::time::Duration;

use prost::Message;
use weir_sdk::testing::TestStream;
use weir_sdk::time::MAX_TIMESTAMP;
use weir_sdk::windowed_value::TimestampedValue;

use super::{err, Bytes, Translator};
use crate::preprocess::wire::carried_from_outer;
use crate::preprocess::Stage;
use crate::proto::pipeline::v1 as rapi;
use crate::Error;

impl Translator<'_> {
    /// A TestStream's events played by Weir's TestStreams, one per output (tag), its elements
    /// in the form Weir carries them; the outputs in the order of `stage.outputs`.
    ///
    /// Beam's TestStream keeps a watermark per tag. Each tag's stream here has one event for
    /// every event of the proto's, its own or a no-op (its watermark again), so all of them
    /// play in step: the runner plays one event of each per step. The test clock moves in the
    /// first only.
    pub(super) fn test_stream(&self, stage: &Stage, name: &str) -> Result<Vec<Bytes>, Error> {
        use rapi::test_stream_payload::event::Event;
        let id = stage.transforms.first().ok_or_else(|| err(format!("TestStream '{name}' has no transform")))?;
        let t = self.c.transforms.get(id).ok_or_else(|| err(format!("no transform '{id}'")))?;
        let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
        let p = rapi::TestStreamPayload::decode(payload).map_err(|e| err(format!("TestStream '{name}': {e}")))?;
        let mut tags = Vec::with_capacity(stage.outputs.len());
        for out in &stage.outputs {
            let tag = t.outputs.iter().find(|(_, pc)| *pc == out).map(|(tag, _)| tag.clone());
            let tag = tag.ok_or_else(|| err(format!("TestStream '{name}' does not make {out}")))?;
            let coder = &self.pcollection(out)?.coder_id;
            if !crate::preprocess::same_coder(self.c, &p.coder_id, coder) {
                return Err(err(format!(
                    "TestStream '{name}' encodes its elements with coder '{}', and its output '{tag}' ({out}) has \
                     coder '{coder}'",
                    p.coder_id
                )));
            }
            tags.push(tag);
        }
        // Which output an event is for: its tag's, or the one output there is.
        let output_of = |tag: &str| -> Result<usize, Error> {
            match tags.iter().position(|t| t == tag) {
                Some(i) => Ok(i),
                None if tags.len() == 1 => Ok(0),
                None => Err(err(format!(
                    "TestStream '{name}' has an event for tag '{tag}', which is none of its outputs {tags:?}"
                ))),
            }
        };
        let mut streams: Vec<TestStream<Vec<u8>>> = tags.iter().map(|_| TestStream::create()).collect();
        let mut watermarks = vec![weir_sdk::time::MIN_TIMESTAMP; tags.len()];
        for e in p.events.iter().filter_map(|e| e.event.as_ref()) {
            let (target, event) = match e {
                Event::ElementEvent(add) => {
                    let i = output_of(&add.tag)?;
                    let coder = &self.pcollection(&stage.outputs[i])?.coder_id;
                    let mut values = Vec::with_capacity(add.elements.len());
                    for el in &add.elements {
                        let bytes = carried_from_outer(&self.c.coders, coder, &el.encoded_element)
                            .map_err(|e| err(format!("TestStream '{name}': {e}")))?;
                        values.push(TimestampedValue::new(bytes, el.timestamp));
                    }
                    (Some(i), Played::Elements(values))
                }
                Event::WatermarkEvent(w) => {
                    // As given: a watermark that moves backwards is refused by the TestStream.
                    let i = output_of(&w.tag)?;
                    watermarks[i] = w.new_watermark.min(MAX_TIMESTAMP);
                    (Some(i), Played::Watermark(watermarks[i]))
                }
                Event::ProcessingTimeEvent(d) => {
                    (None, Played::Clock(Duration::from_millis(d.advance_duration.max(0) as u64)))
                }
            };
            // The event goes to its tag's stream (the clock's to the first); the others play
            // their watermark again.
            let mut event = Some(event);
            for (i, stream) in streams.iter_mut().enumerate() {
                let mine = target.unwrap_or(0) == i;
                let played = event.take_if(|_| mine).unwrap_or(Played::Watermark(watermarks[i]));
                *stream = played.onto(std::mem::replace(stream, TestStream::create()));
            }
        }
        let mut outputs = Vec::with_capacity(tags.len());
        for ((stream, tag), out) in streams.into_iter().zip(&tags).zip(&stage.outputs) {
            let step = if tags.len() == 1 { name.to_string() } else { format!("{name}/{tag}") };
            let played = self.p.apply(&step, stream);
            played.set_windowing_strategy_internal(self.strategy(out)?);
            outputs.push(played);
        }
        Ok(outputs)
    }
}

/// One event of a TestStream as one tag's Weir TestStream plays it.
enum Played {
    /// Elements of this tag.
    Elements(Vec<TimestampedValue<Vec<u8>>>),
    /// The tag's watermark (again, for another tag's event).
    Watermark(weir_sdk::time::Timestamp),
    /// A move of the test clock.
    Clock(Duration),
}

impl Played {
    fn onto(self, stream: TestStream<Vec<u8>>) -> TestStream<Vec<u8>> {
        match self {
            Played::Elements(values) => stream.add_elements(values),
            Played::Watermark(w) if w >= MAX_TIMESTAMP => stream.advance_watermark_to_infinity(),
            Played::Watermark(w) => stream.advance_watermark_to(w),
            Played::Clock(d) => stream.advance_processing_time(d),
        }
    }
}
