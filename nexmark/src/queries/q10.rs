//! Q10 LOG_TO_SHARDED_FILES: every event is logged to one of `5 × maxNumWorkers` shards per
//! fixed window, in panes of at most `maxLogEvents` events (early), then on time, then late
//! panes batched by count or 10 s of processing time; each pane becomes one file, and once the
//! window closes an index file lists them and one `Done` is emitted per window.
//!
//! Files are written only with an output path (Beam's `--outputPath`). Beam writes each pane as
//! concatenated coder bytes under a random name; Weir writes Beam's JSON lines (so that a log
//! file can be read back with `--events-file`) under a name that depends only on the window,
//! shard, pane index and timing, through a temporary file renamed into place, so that a batch
//! the micro-batch runner replays after a crash replaces its files instead of adding copies.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_sdk::coders::{Coder, ElementCoder};
use weir_sdk::pane::Timing;
use weir_sdk::prelude::*;
use weir_sdk::time::iso8601;

use crate::model::Event;
use crate::queries::{record, secs, ResultRecord};
use crate::{NexmarkConfig, QueryName};

/// Shards per worker (Beam's `NUM_SHARDS_PER_WORKER`).
const SHARDS_PER_WORKER: u32 = 5;
/// How long late events are batched before a late pane fires (Beam's `LATE_BATCHING_PERIOD`).
const LATE_BATCHING_PERIOD: Duration = Duration::from_secs(10);
/// Allowed lateness of both windowings: a forgotten hold stalls the pipeline visibly.
const ONE_DAY: Duration = Duration::from_secs(24 * 3600);

/// Options of the queries that are not part of the configuration (Beam's `NexmarkOptions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryOptions {
    /// Where Q10 writes its log and index files (Beam's `--outputPath`); none: no files.
    pub output_path: Option<PathBuf>,
    /// Beam's `--maxNumWorkers`: Q10 logs to `5 ×` this many shards.
    pub max_num_workers: u32,
}

impl Default for QueryOptions {
    /// No output files, and the 5 workers Beam's launcher sets (25 shards).
    fn default() -> Self {
        QueryOptions { output_path: None, max_num_workers: 5 }
    }
}

/// Q10's result (Beam's `Done`): one per window once its index is written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Done {
    /// `written for timestamp <window max timestamp>`.
    pub message: String,
}

crate::queries::serde_beam_json!(Done);

impl crate::queries::KnownSize for Done {
    fn size_in_bytes(&self) -> i64 {
        self.message.len() as i64
    }
}

impl Done {
    /// The `Done` of the window whose last instant is `max_timestamp`.
    pub fn for_window(max_timestamp: i64) -> Done {
        Done { message: format!("written for timestamp {}", iso8601(max_timestamp)) }
    }
}

/// One pane's log file (Beam's `OutputFile`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// The window's last instant.
    pub max_timestamp: i64,
    /// The shard, `shard-NNNNN-of-NNNNN`.
    pub shard: String,
    /// The pane's index in its window and shard.
    pub index: i64,
    /// The pane's timing: EARLY, ON_TIME, LATE or UNKNOWN.
    pub timing: String,
    /// The file written, if any.
    pub filename: Option<String>,
}

impl OutputFile {
    /// Beam's `OutputFile.toString()`: one line of the index file.
    pub fn index_line(&self) -> String {
        format!(
            "{} {} {} {} {}\n",
            iso8601(self.max_timestamp),
            self.shard,
            self.index,
            self.timing,
            self.filename.as_deref().unwrap_or("null")
        )
    }
}

fn counter(name: &str) -> Counter {
    Metrics::counter(QueryName::LogToShardedFiles.name(), name).expect("non-empty names")
}

/// Writes `contents` to `path` durably and atomically.
fn write_atomically(path: &Path, contents: &[u8]) -> UserResult {
    weir_sdk::io::atomic::write_atomic(path, contents).map_err(|e| format!("Q10 {e}").into())
}

/// The shard of an encoded event among `n`: FNV-1a taken eight bytes at a time (an event's
/// encoding is hundreds of bytes, and a multiply per byte was a tenth of the query's time),
/// then MurmurHash3's 64-bit finalizer. Stable across processes and versions, so a restarted
/// query writes an event to the shard it chose before.
fn shard_of(bytes: &[u8], n: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h ^= u64::from_le_bytes(w.try_into().expect("eight bytes"));
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    for b in words.remainder() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (weir_sdk::kernel::fmix64(h) % u64::from(n.max(1))) as u32
}

/// Keys every event by its shard (a stable hash of its encoding), counting annotated late events.
#[derive(Clone)]
struct ShardEvents {
    shards: u32,
    late: Counter,
    on_time: Counter,
    buf: Vec<u8>,
}

impl DoFn for ShardEvents {
    type In = Event;
    type Out = KV<String, Event>;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, KV<String, Event>>) -> UserResult {
        if e.has_annotation("LATE") {
            self.late.inc();
        } else {
            self.on_time.inc();
        }
        self.buf.clear();
        ElementCoder::<Event>::new().encode(&e, &mut self.buf)?;
        let shard = shard_of(&self.buf, self.shards);
        ctx.output(KV::new(format!("shard-{shard:05}-of-{:05}", self.shards), e));
        Ok(())
    }
}

/// Checks each pane's events against its timing (Beam's `CheckForLateEvents`).
#[derive(Clone)]
struct CheckForLateEvents {
    max_log_events: i64,
    early: Counter,
    on_time: Counter,
    late: Counter,
    unexpected_late_pane: Counter,
    unexpected_on_time_element: Counter,
    small_early_pane: Counter,
}

impl DoFn for CheckForLateEvents {
    type In = KV<String, Vec<Event>>;
    type Out = KV<String, Vec<Event>>;

    fn process(&mut self, kv: KV<String, Vec<Event>>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let num_late = kv.value.iter().filter(|e| e.has_annotation("LATE")).count() as i64;
        let num_on_time = kv.value.len() as i64 - num_late;
        match ctx.pane().timing {
            Timing::Late => {
                if num_late == 0 {
                    self.unexpected_late_pane.inc();
                }
                if num_on_time > 0 {
                    self.unexpected_on_time_element.inc();
                }
                self.late.inc();
            }
            Timing::Early => {
                if num_on_time + num_late < self.max_log_events {
                    self.small_early_pane.inc();
                }
                self.early.inc();
            }
            Timing::OnTime | Timing::Unknown => self.on_time.inc(),
        }
        ctx.output(kv);
        Ok(())
    }
}

/// Writes each pane's events to its log file (Beam's `UploadEvents`).
#[derive(Clone)]
struct UploadEvents {
    output_path: Option<PathBuf>,
    saved_file: Counter,
    written_records: Counter,
}

impl DoFn for UploadEvents {
    type In = KV<String, Vec<Event>>;
    type Out = KV<(), OutputFile>;

    fn process(&mut self, kv: KV<String, Vec<Event>>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let max_timestamp = ctx.window().max_timestamp();
        let pane = *ctx.pane();
        let timing = pane.timing.beam_name();
        let filename = match &self.output_path {
            None => None,
            Some(dir) => {
                let name = format!("LOG-{}-{}-{:03}-{}", iso8601(max_timestamp), kv.key, pane.index, &timing[..1]);
                let path = dir.join(name);
                let mut contents = String::new();
                for e in &kv.value {
                    contents.push_str(&e.to_json());
                    contents.push('\n');
                }
                write_atomically(&path, contents.as_bytes())?;
                self.written_records.inc_by(kv.value.len() as i64);
                Some(path.to_string_lossy().into_owned())
            }
        };
        self.saved_file.inc();
        let file = OutputFile { max_timestamp, shard: kv.key, index: pane.index, timing: timing.to_string(), filename };
        ctx.output(KV::new((), file));
        Ok(())
    }
}

/// Writes one index per window and emits its `Done` (Beam's `Index`).
#[derive(Clone)]
struct Index {
    output_path: Option<PathBuf>,
    unexpected_late: Counter,
    unexpected_early: Counter,
    unexpected_index: Counter,
    indexed: Counter,
}

impl DoFn for Index {
    type In = KV<(), Vec<OutputFile>>;
    type Out = Done;

    fn process(&mut self, kv: KV<(), Vec<OutputFile>>, ctx: &mut ProcessContext<'_, Done>) -> UserResult {
        let pane = *ctx.pane();
        match pane.timing {
            Timing::Late => self.unexpected_late.inc(),
            Timing::Early => self.unexpected_early.inc(),
            Timing::OnTime if pane.index != 0 => self.unexpected_index.inc(),
            _ => {
                let max_timestamp = ctx.window().max_timestamp();
                if let Some(dir) = &self.output_path {
                    let mut files = kv.value;
                    files.sort_by(|a, b| (&a.shard, a.index).cmp(&(&b.shard, b.index)));
                    let lines: String = files.iter().map(OutputFile::index_line).collect();
                    write_atomically(&dir.join(format!("INDEX-{}", iso8601(max_timestamp))), lines.as_bytes())?;
                }
                ctx.output(Done::for_window(max_timestamp));
                self.indexed.inc();
            }
        }
        Ok(())
    }
}

/// Q10 LOG_TO_SHARDED_FILES.
/// Q10 over `events`.
pub(crate) fn query(config: &NexmarkConfig, options: &QueryOptions, events: &PCollection<Event>) -> PCollection<Done> {
    let window = secs(config.window_size_sec);
    let max_log_events = config.max_log_events;
    let output_path = options.output_path.clone();
    let shards = options.max_num_workers.max(1) * SHARDS_PER_WORKER;
    let trigger = AfterEach::in_order(vec![
        Repeatedly::forever(AfterPane::element_count_at_least(max_log_events))
            .or_finally(AfterWatermark::past_end_of_window()),
        Repeatedly::forever(AfterFirst::of(vec![
            AfterPane::element_count_at_least(max_log_events),
            AfterProcessingTime::past_first_element_in_pane().plus_delay_of(LATE_BATCHING_PERIOD).into(),
        ])),
    ]);
    events
        .apply(
            "ShardEvents",
            ParDo::of(ShardEvents {
                shards,
                late: counter("actuallyLateEvent"),
                on_time: counter("onTimeCounter"),
                buf: Vec::new(),
            }),
        )
        .apply(
            "WindowEvents",
            Window::into(FixedWindows::of(window))
                .triggering(trigger)
                .discarding_fired_panes()
                .with_allowed_lateness(ONE_DAY),
        )
        .apply("GroupByKey", GroupByKey::create())
        .apply(
            "CheckForLateEvents",
            ParDo::of(CheckForLateEvents {
                max_log_events,
                early: counter("earlyShard"),
                on_time: counter("onTimeShard"),
                late: counter("lateShard"),
                unexpected_late_pane: counter("ERROR_unexpectedLatePane"),
                unexpected_on_time_element: counter("ERROR_unexpectedOnTimeElement"),
                small_early_pane: counter("ERROR_smallEarlyPane"),
            }),
        )
        .apply(
            "UploadEvents",
            ParDo::of(UploadEvents {
                output_path: output_path.clone(),
                saved_file: counter("savedFile"),
                written_records: counter("writtenRecords"),
            }),
        )
        .apply(
            "WindowLogFiles",
            Window::into(FixedWindows::of(window))
                .triggering(Trigger::Default)
                .with_allowed_lateness(ONE_DAY)
                .discarding_fired_panes(),
        )
        .apply("GroupByKey2", GroupByKey::create())
        .apply(
            "Index",
            ParDo::of(Index {
                output_path,
                unexpected_late: counter("ERROR_unexpectedLate"),
                unexpected_early: counter("ERROR_unexpectedEarly"),
                unexpected_index: counter("ERROR_unexpectedIndex"),
                indexed: counter("indexed"),
            }),
        )
}

/// Q10's model: one `Done` per fixed window holding any event, once its index is written.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    let size = config.window_size_sec * 1000;
    let windows: std::collections::BTreeSet<i64> = events.iter().map(|e| e.date_time().div_euclid(size)).collect();
    windows
        .into_iter()
        .map(|w| {
            let max_timestamp = (w + 1) * size - 1;
            record(max_timestamp, &Done::for_window(max_timestamp))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::shard_of;

    #[test]
    fn shards_are_stable_and_spread_over_every_shard() {
        // Pinned: a restarted query must pick the shards it picked before.
        assert_eq!(shard_of(b"", 1000), PINNED_EMPTY);
        assert_eq!(shard_of(b"the quick brown fox jumps over the lazy dog", 1000), PINNED_FOX);
        let mut counts = [0u32; 7];
        for i in 0..70_000u32 {
            // Inputs that differ only in a high bit of one byte, or in length.
            let mut bytes = vec![0u8; 9 + (i % 13) as usize];
            bytes[..4].copy_from_slice(&i.to_le_bytes());
            counts[shard_of(&bytes, 7) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    const PINNED_EMPTY: u32 = 342;
    const PINNED_FOX: u32 = 98;
}
