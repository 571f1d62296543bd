//! Event sources: Beam's bounded (batch) and unbounded (streaming) generator sources, and an
//! events file (Beam's JSON form, one event per line) read back instead of generating.

use std::collections::BinaryHeap;
use std::io::Write;

use rand::Rng;
use serde::{Deserialize, Serialize};
use weir_sdk::io::{BoundedReader, BoundedSource, TextIO, UnboundedReader, UnboundedSource};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP};
use weir_sdk::{DoFn, Metrics, PBegin, PCollection, PTransform, ParDo, ProcessContext, UserResult};

use crate::generator::{split_events, Generator, GeneratorConfig};
use crate::model::Event;
use crate::NexmarkConfig;

/// Beam's `BoundedEventSource`: the generator as a bounded source. Splitting gives the
/// `numEventGenerators` sub-generators of Beam's pipelines (the runner's desired bundle size is
/// ignored, as in Beam).
#[derive(Debug, Clone)]
pub struct BoundedEventSource {
    config: GeneratorConfig,
    num_generators: i64,
}

impl BoundedEventSource {
    /// The batch source of `config`: `numEvents` events over `numEventGenerators` timelines.
    pub fn new(config: &NexmarkConfig) -> Self {
        BoundedEventSource {
            config: GeneratorConfig::standard(config),
            num_generators: i64::from(config.num_event_generators),
        }
    }
}

/// Reads one [`BoundedEventSource`].
pub struct BoundedEventReader {
    generator: Generator,
}

impl BoundedSource for BoundedEventSource {
    type Output = Event;
    type Reader = BoundedEventReader;

    fn split(&self, _desired_bundle_size_bytes: u64) -> UserResult<Vec<Self>> {
        Ok(self
            .config
            .split(self.num_generators)
            .into_iter()
            .map(|config| Self { config, num_generators: 1 })
            .collect())
    }

    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(self.config.estimated_bytes_for_events(self.config.max_events).max(0) as u64)
    }

    fn create_reader(&self) -> UserResult<BoundedEventReader> {
        Ok(BoundedEventReader { generator: Generator::new(self.config.clone()) })
    }
}

impl BoundedReader for BoundedEventReader {
    type Output = Event;

    fn next(&mut self) -> UserResult<Option<(Event, Timestamp)>> {
        Ok(self.generator.next_event().map(|n| (n.event, n.event_timestamp)))
    }

    /// The generator's events left: it produces exactly that many.
    fn remaining(&self) -> Option<u64> {
        Some((self.generator.config().max_events - self.generator.events_so_far()).max(0) as u64)
    }
}

/// Beam's `UnboundedEventSource`: the generator as an unbounded source with a watermark
/// (held back by `watermarkHoldbackSec`), optional rate limiting in wall-clock time with
/// occasionally delayed events, and checkpoints that resume at the next event.
#[derive(Debug, Clone)]
pub struct UnboundedEventSource {
    config: GeneratorConfig,
    num_generators: i64,
    watermark_holdback_ms: i64,
    is_rate_limited: bool,
}

impl UnboundedEventSource {
    /// The streaming source of `config`.
    pub fn new(config: &NexmarkConfig) -> Self {
        UnboundedEventSource {
            config: GeneratorConfig::standard(config),
            num_generators: i64::from(config.num_event_generators),
            watermark_holdback_ms: config.watermark_holdback_sec * 1000,
            is_rate_limited: config.is_rate_limited,
        }
    }
}

/// Where an [`UnboundedEventReader`] resumes: events emitted so far, the watermark reached, the
/// wall-clock base of the rate schedule, and events held back but not yet emitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventCheckpoint {
    /// Events the generator has produced.
    pub events_so_far: i64,
    /// The reader's watermark.
    pub watermark: Timestamp,
    /// Wall-clock time of the first event, for rate-limited resumption.
    pub wallclock_base_time: Option<i64>,
    /// Delayed events not yet emitted: (due wall-clock ms, event time, event).
    pub held_back: Vec<(i64, Timestamp, Event)>,
}

#[derive(Debug, PartialEq, Eq)]
struct HeldBack {
    due: i64,
    timestamp: Timestamp,
    event: Event,
}

impl Ord for HeldBack {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Earliest due first out of a max-heap.
        other.due.cmp(&self.due).then_with(|| other.timestamp.cmp(&self.timestamp))
    }
}

impl PartialOrd for HeldBack {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Reads one [`UnboundedEventSource`].
pub struct UnboundedEventReader {
    source: UnboundedEventSource,
    generator: Generator,
    watermark: Timestamp,
    held_back: BinaryHeap<HeldBack>,
    /// A rate-limited event whose wall-clock time has not come yet.
    pending: Option<crate::generator::NextEvent>,
}

impl UnboundedSource for UnboundedEventSource {
    type Output = Event;
    type Checkpoint = EventCheckpoint;
    type Reader = UnboundedEventReader;

    fn split(&self, _desired: usize) -> UserResult<Vec<Self>> {
        Ok(self
            .config
            .split(self.num_generators)
            .into_iter()
            .map(|config| Self { config, num_generators: 1, ..self.clone() })
            .collect())
    }

    fn create_reader(&self, checkpoint: Option<EventCheckpoint>) -> UserResult<UnboundedEventReader> {
        let (generator, watermark, held_back) = match checkpoint {
            Some(c) => {
                if c.events_so_far < 0 || c.events_so_far > self.config.max_events {
                    return Err(format!(
                        "Nexmark source checkpoint is at event {} but the source has {} events",
                        c.events_so_far, self.config.max_events
                    )
                    .into());
                }
                let mut g = Generator::resume(self.config.clone(), c.events_so_far);
                if let Some(base) = c.wallclock_base_time {
                    g.set_wallclock_base_time(base);
                }
                let held =
                    c.held_back.into_iter().map(|(due, timestamp, event)| HeldBack { due, timestamp, event }).collect();
                (g, c.watermark, held)
            }
            None => (Generator::new(self.config.clone()), weir_sdk::time::MIN_TIMESTAMP, BinaryHeap::new()),
        };
        Ok(UnboundedEventReader { source: self.clone(), generator, watermark, held_back, pending: None })
    }
}

impl UnboundedReader for UnboundedEventReader {
    type Output = Event;
    type Checkpoint = EventCheckpoint;

    fn advance(&mut self) -> UserResult<Option<(Event, Timestamp)>> {
        let now = if self.source.is_rate_limited { weir_sdk::time::now_millis() } else { 0 };
        if self.held_back.peek().is_some_and(|h| h.due <= now) {
            let h = self.held_back.pop().expect("peeked");
            return Ok(Some((h.event, h.timestamp)));
        }
        loop {
            let next = match self.pending.take() {
                Some(n) => n,
                None => match self.generator.next_event() {
                    Some(n) => n,
                    None => return Ok(None),
                },
            };
            if self.source.is_rate_limited {
                if next.wallclock_timestamp > now {
                    self.pending = Some(next);
                    return Ok(None);
                }
                let config = &self.source.config.config;
                let mut rng = rand::rng();
                if config.occasional_delay_sec > 0 && rng.random_bool(config.prob_delayed_event) {
                    let delay = rng.random_range(1..=config.occasional_delay_sec * 1000);
                    let event = next.event.with_annotation("LATE");
                    self.held_back.push(HeldBack { due: now + delay, timestamp: next.event_timestamp, event });
                    self.watermark = self.watermark.max(next.watermark - self.source.watermark_holdback_ms);
                    continue;
                }
            }
            self.watermark = self.watermark.max(next.watermark - self.source.watermark_holdback_ms);
            return Ok(Some((next.event, next.event_timestamp)));
        }
    }

    fn watermark(&self) -> Timestamp {
        if !self.generator.has_next() && self.pending.is_none() && self.held_back.is_empty() {
            MAX_TIMESTAMP
        } else {
            self.watermark
        }
    }

    fn checkpoint(&self) -> EventCheckpoint {
        let mut held_back: Vec<(i64, Timestamp, Event)> =
            self.held_back.iter().map(|h| (h.due, h.timestamp, h.event.clone())).collect();
        held_back.sort_by_key(|h| (h.0, h.1));
        let pending_count = i64::from(self.pending.is_some());
        EventCheckpoint {
            events_so_far: self.generator.events_so_far() - pending_count,
            watermark: self.watermark,
            wallclock_base_time: self.generator.wallclock_base_time(),
            held_back,
        }
    }
}

/// Writes the events of `config` as Beam's JSON lines (what `--export-events` does): the events
/// a pipeline's source produces, in split order. Returns how many were written.
pub fn export_events(config: &NexmarkConfig, path: &std::path::Path) -> std::io::Result<u64> {
    let file = std::fs::File::create(path)?;
    let mut out = std::io::BufWriter::new(file);
    let mut n = 0;
    for next in split_events(config) {
        out.write_all(next.event.to_json().as_bytes())?;
        out.write_all(b"\n")?;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}

/// Reads events from files of Beam's JSON lines (written by [`export_events`] or by Beam)
/// instead of generating them. Each event is stamped with its `dateTime`. A line that is not an
/// event is counted in the `nexmark:malformedEvents` counter and logged, not fatal.
pub struct ReadEventsFile {
    pattern: String,
}

impl ReadEventsFile {
    /// Reads the files matching `pattern`.
    pub fn from(pattern: impl Into<String>) -> Self {
        ReadEventsFile { pattern: pattern.into() }
    }
}

#[derive(Clone)]
struct ParseEvent;

impl DoFn for ParseEvent {
    type In = String;
    type Out = Event;

    fn process(&mut self, line: String, ctx: &mut ProcessContext<'_, Event>) -> UserResult {
        if line.trim().is_empty() {
            return Ok(());
        }
        match Event::from_json(&line) {
            Ok(event) => {
                let ts = event.date_time();
                ctx.output_with_timestamp(event, ts)
            }
            Err(e) => {
                Metrics::counter("nexmark", "malformedEvents")?.inc();
                let shown: String = line.chars().take(80).collect();
                tracing::warn!("skipping a malformed Nexmark event line ({e}): {shown}");
                Ok(())
            }
        }
    }
}

impl PTransform<PBegin> for ReadEventsFile {
    type Output = PCollection<Event>;

    fn expand(self, input: PBegin) -> PCollection<Event> {
        input.apply("ReadLines", TextIO::read().from(self.pattern)).apply("ParseEvents", ParDo::of(ParseEvent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(reader: &mut UnboundedEventReader) -> Vec<(Event, Timestamp)> {
        std::iter::from_fn(|| reader.advance().expect("generator never fails")).collect()
    }

    #[test]
    fn bounded_readers_know_exactly_how_many_events_they_have_left() {
        let config = NexmarkConfig { num_events: 250, num_event_generators: 3, ..NexmarkConfig::default() };
        let splits = BoundedEventSource::new(&config).split(0).expect("splits");
        let mut total = 0;
        for split in &splits {
            let mut reader = split.create_reader().expect("reader");
            let mut left = reader.remaining().expect("known");
            total += left;
            while reader.next().expect("generator never fails").is_some() {
                left -= 1;
                assert_eq!(reader.remaining(), Some(left));
            }
            assert_eq!(left, 0, "delivered exactly what it reported");
        }
        assert_eq!(total, 250);
    }

    #[test]
    fn unbounded_reader_resumes_from_its_checkpoint() {
        let config = NexmarkConfig { num_events: 200, num_event_generators: 2, ..NexmarkConfig::default() };
        let source = &UnboundedEventSource::new(&config).split(4).expect("splits")[1];
        let all = drain(&mut source.create_reader(None).expect("reader"));
        assert_eq!(all.len(), 100);
        let mut first = source.create_reader(None).expect("reader");
        let head: Vec<_> = (0..37).map(|_| first.advance().expect("ok").expect("event")).collect();
        let mark = first.checkpoint();
        assert_eq!(mark.events_so_far, 37);
        let encoded = serde_json::to_string(&mark).expect("checkpoints serialise");
        let mut resumed = source.create_reader(Some(serde_json::from_str(&encoded).expect("parse"))).expect("reader");
        assert_eq!(resumed.watermark(), first.watermark());
        let tail = drain(&mut resumed);
        assert_eq!([head, tail].concat(), all);
        assert_eq!(resumed.watermark(), MAX_TIMESTAMP, "exhausted");

        let bad = EventCheckpoint { events_so_far: 101, ..mark };
        let err = source.create_reader(Some(bad)).err().expect("beyond the end");
        assert!(err.to_string().contains("checkpoint is at event 101"), "{err}");
    }

    #[test]
    fn watermark_is_held_back() {
        let config = NexmarkConfig {
            num_events: 100,
            num_event_generators: 1,
            watermark_holdback_sec: 2,
            ..NexmarkConfig::default()
        };
        let source = UnboundedEventSource::new(&config);
        let mut reader = source.create_reader(None).expect("reader");
        let (_, ts) = (0..50).map(|_| reader.advance().expect("ok").expect("event")).last().expect("50 events");
        assert_eq!(reader.watermark(), ts - 2_000);
    }

    #[test]
    fn bounded_source_splits_into_the_generators() {
        let config = NexmarkConfig { num_events: 1_000, num_event_generators: 4, ..NexmarkConfig::default() };
        let source = BoundedEventSource::new(&config);
        let parts = source.split(1).expect("splits");
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0].split(1).expect("splits").len(), 1, "a split does not split again");
        let total: usize = parts
            .iter()
            .map(|s| {
                let mut r = s.create_reader().expect("reader");
                std::iter::from_fn(|| r.next().expect("ok")).count()
            })
            .sum();
        assert_eq!(total, 1_000);
        assert!(source.estimated_size_bytes().expect("size") > 0);
    }
}
