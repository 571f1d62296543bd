//! Event sources: Beam's bounded (batch) and unbounded (streaming) generator sources, and an
//! events file (Beam's JSON form, one event per line) read back instead of generating.

use std::collections::BinaryHeap;

use rand::Rng;
use serde::{Deserialize, Serialize};
use weir_sdk::io::bad_records::BadRecords;
use weir_sdk::io::{BoundedReader, BoundedSource, UnboundedReader, UnboundedSource};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP};
use weir_sdk::{PBegin, PCollection, PTransform, UserResult};

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

    fn describe(&self) -> String {
        describe_generator("BoundedEventSource", &self.config, self.num_generators, &[])
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

    /// The generator resumes `n` events on at once: every event follows from its number.
    fn skip(&mut self, n: u64) -> UserResult<u64> {
        let n = n.min(self.remaining().unwrap_or(0));
        let config = self.generator.config().clone();
        let so_far = self.generator.events_so_far() + n as i64;
        let base = self.generator.wallclock_base_time();
        self.generator = Generator::resume(config, so_far);
        if let Some(base) = base {
            self.generator.set_wallclock_base_time(base);
        }
        Ok(n)
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

/// A generator source's description for checkpoint fingerprints: every configuration field
/// but the query (which the pipeline's shape already tells), the generator's range, and its base
/// time unless that is the wall clock at startup.
fn describe_generator(kind: &str, c: &GeneratorConfig, generators: i64, extra: &[(&str, String)]) -> String {
    let mut fields = match serde_json::to_value(&c.config) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    fields.remove("query");
    let mut out =
        format!("{kind}(generators={generators}, firstEventId={}, maxEvents={}", c.first_event_id, c.max_events);
    if !c.config.use_wallclock_event_time {
        out.push_str(&format!(", baseTime={}", c.base_time));
    }
    for (k, v) in extra {
        out.push_str(&format!(", {k}={v}"));
    }
    out.push_str(&format!(", config={})", serde_json::Value::Object(fields)));
    out
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

    fn describe(&self) -> String {
        let extra = [
            ("watermarkHoldbackMs", self.watermark_holdback_ms.to_string()),
            ("isRateLimited", self.is_rate_limited.to_string()),
        ];
        describe_generator("UnboundedEventSource", &self.config, self.num_generators, &extra)
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

/// Writes the events of `config` to `path` (what `--export-events` does): the events a
/// pipeline's source produces, in split order, as Beam's JSON lines, or as CSV or Parquet by
/// the name's extension (see [`crate::event_files`]). Returns how many were written.
/// The file appears whole or not at all: an interrupted export leaves no truncated file.
pub fn export_events(config: &NexmarkConfig, path: &std::path::Path) -> std::io::Result<u64> {
    let mut n = 0;
    let format = crate::event_files::EventsFormat::of(&path.to_string_lossy());
    weir_sdk::io::atomic::write_atomic_with(path, |out| {
        n = crate::event_files::write_events(format, split_events(config).map(|next| next.event), out)?;
        Ok(())
    })
    .map_err(|e| std::io::Error::new(e.source.kind(), e.to_string()))?;
    Ok(n)
}

/// What happens to a line of an events file that is not an event: skip it (a warning names
/// the file and line, and `nexmark:malformedEvents` counts it), fail, or dead-letter it.
pub type OnMalformed = weir_sdk::io::BadRecordPolicy;

/// Reads events from files of Beam's JSON lines (written by [`export_events`] or by Beam)
/// instead of generating them. Each event is stamped with its `dateTime`. Blank lines are
/// skipped; a line that is not an event is handled as [`OnMalformed`] says.
pub struct ReadEventsFile {
    source: weir_sdk::io::text::TextSource,
    on_malformed: OnMalformed,
}

impl ReadEventsFile {
    /// Reads the file at `path`, its name taken as it is.
    pub fn from(path: impl Into<String>) -> Self {
        Self::of(weir_sdk::io::text::TextSource::File(path.into().into()))
    }

    /// Reads every file matching the glob `pattern`.
    pub fn from_glob(pattern: impl Into<String>) -> Self {
        Self::of(weir_sdk::io::text::TextSource::Pattern(pattern.into()))
    }

    fn of(source: weir_sdk::io::text::TextSource) -> Self {
        ReadEventsFile { source, on_malformed: OnMalformed::Skip }
    }

    /// What to do with lines that are not events (default: skip).
    pub fn on_malformed(mut self, policy: OnMalformed) -> Self {
        self.on_malformed = policy;
        self
    }
}

/// The source behind [`ReadEventsFile`]: byte ranges of the files, parsed line by line.
#[derive(Clone)]
pub struct EventsFileSource {
    text: weir_sdk::io::text::TextSource,
    bad: BadRecords,
}

impl BoundedSource for EventsFileSource {
    type Output = Event;
    type Reader = EventsFileReader;

    fn describe(&self) -> String {
        format!("EventsFile({:?})", self.text)
    }

    fn split(&self, desired_bundle_size_bytes: u64) -> UserResult<Vec<Self>> {
        let ranges = self.text.ranges()?;
        for (path, start, end) in &ranges {
            if start == end {
                tracing::warn!("events file {} is empty: it holds no events", path.display());
            }
        }
        Ok(self
            .text
            .split_ranges(desired_bundle_size_bytes)?
            .into_iter()
            .map(|text| EventsFileSource { text, ..self.clone() })
            .collect())
    }

    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(self.text.ranges()?.iter().map(|(_, s, e)| e - s).sum())
    }

    fn create_reader(&self) -> UserResult<EventsFileReader> {
        Ok(EventsFileReader { lines: self.text.line_reader()?, line: Vec::new(), source: self.clone(), last: None })
    }
}

/// Reads one [`EventsFileSource`].
pub struct EventsFileReader {
    lines: weir_sdk::io::text::LineReader,
    line: Vec<u8>,
    source: EventsFileSource,
    /// The last malformed line's file, byte offset and line number, to number the next one
    /// from there rather than from the start of the file.
    last: Option<(std::path::PathBuf, u64, u64)>,
}

impl EventsFileReader {
    /// The 1-based number of the line starting at byte `offset` of `path`, counted on from the
    /// last malformed line of the same file when there was one (bad lines are rare, but a file
    /// full of them should not be read from its start for each).
    fn line_number(&mut self, path: &std::path::Path, offset: u64) -> UserResult<u64> {
        let (from, base) = match &self.last {
            Some((p, at, n)) if p == path && *at <= offset => (*at, *n),
            _ => (0, 1),
        };
        let n = base
            + weir_sdk::io::text::count_newlines(path, from, offset).map_err(|e| format!("{}: {e}", path.display()))?;
        self.last = Some((path.to_path_buf(), offset, n));
        Ok(n)
    }
}

impl BoundedReader for EventsFileReader {
    type Output = Event;

    fn next(&mut self) -> UserResult<Option<(Event, Timestamp)>> {
        loop {
            // Parsed in the read buffer; only a malformed line is copied out, to report it.
            let read = self.lines.next_line_with(&mut self.line, |line| {
                if line.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                Some(crate::json::parse(line).map_err(|e| (e, line.to_vec())))
            })?;
            let Some((parsed, path, offset)) = read else { return Ok(None) };
            match parsed {
                None => continue,
                Some(Ok(event)) => {
                    let ts = event.date_time();
                    return Ok(Some((event, ts)));
                }
                Some(Err((e, line))) => {
                    self.line = line;
                    let path = path.to_path_buf();
                    let line_no = self.line_number(&path, offset)?;
                    self.source.bad.handle(&format!("{}:{line_no}", path.display()), &self.line, &e)?;
                }
            }
        }
    }
}

impl PTransform<PBegin> for ReadEventsFile {
    type Output = PCollection<Event>;

    fn expand(self, input: PBegin) -> PCollection<Event> {
        let bad = BadRecords::new(self.on_malformed, "Nexmark event", "nexmark", "malformedEvents")
            .with_fail_hint("--on-malformed fail");
        input.apply("ReadEvents", weir_sdk::io::Read::from(EventsFileSource { text: self.source, bad }))
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
