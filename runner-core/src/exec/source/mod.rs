//! Sources as runners read them: a bounded slice per step (a batch, a round), with offsets for
//! logs and progress reports, and a watermark.
//!
//! One [`SourceState`] reads any source node of the plan: Impulse, a bounded source (split,
//! read split by split, its watermark at the beginning of time until every split is exhausted,
//! then at the end), an unbounded source (one reader per split, resumable from checkpoint
//! marks), and a TestStream (one event per step, moving the watermark or the test clock). A
//! replay after a restart reads exactly the counts the offset log recorded.
//!
//! The files: [`deferred`] (bounded splits read later, where the batch goes, or now),
//! [`reshare`](mod@reshare) (positions re-divided when the number of shares changes), and [`reads`] (one
//! step's slice of each kind of source: an impulse, a bounded read, an unbounded one, a
//! TestStream). This file holds a source's state across steps ([`SourceState`]).

pub mod deferred;
pub mod reads;
pub mod reshare;
#[cfg(test)]
mod tests;

use crate::do_fn_runner::guarded;
use crate::exec::clock::Clock;
use crate::plan::SourceSpec;
pub use deferred::*;
use reads::*;
pub use reshare::*;
use serde_json::{json, Value};
use std::sync::Arc;
use weir_sdk::batch::BatchKind;
use weir_sdk::kernel::{
    Batch, CollectionOps, ErasedBoundedSource, ErasedUnboundedReader, ErasedUnboundedSource, TestStreamEvent,
};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::Result;

enum Kind {
    Impulse {
        done: bool,
    },
    /// `split_bytes`: the desired split size the source was split by (logged, so a restart at
    /// another parallelism splits it alike).
    Bounded {
        source: Arc<dyn ErasedBoundedSource>,
        splits: Option<Vec<BoundedSplit>>,
        split_bytes: Option<u64>,
    },
    /// `desired`: the number of splits asked of the source (logged, as `split_bytes`).
    Unbounded {
        source: Arc<dyn ErasedUnboundedSource>,
        readers: Option<Vec<Box<dyn ErasedUnboundedReader>>>,
        desired: Option<usize>,
    },
    TestStream {
        events: Arc<Vec<TestStreamEvent>>,
        next: usize,
        watermark: Timestamp,
    },
}

/// What one batch read from a source.
pub struct SourceBatch {
    /// Bundles per partition.
    pub bundles: Vec<Vec<Batch>>,
    /// Elements read (or planned).
    pub rows: usize,
    /// The source's watermark after the read.
    pub watermark: Timestamp,
    /// The position before the read, as the offset log records it.
    pub start_offset: Value,
    /// The position after the read.
    pub end_offset: Value,
    /// Whether the source did anything (data, a watermark move, a clock move).
    pub moved: bool,
    /// Records read per split or reader, logged so that a replay reads exactly the same.
    pub counts: Vec<usize>,
    /// Of `rows`, those planned as [`DeferredRead`]s: the chains that read them count what they
    /// found (for a read of up to a count, maybe fewer).
    pub deferred_rows: usize,
    /// Minimum, maximum and sum of the element timestamps, and their count.
    pub ts_stats: TsStats,
    /// Whether a reader of an unbounded source gave all of its share of the batch (it may well
    /// have more now): the source is behind, and a processing-time trigger runs the next batch
    /// at once rather than waiting for its interval.
    pub full: bool,
}

/// Minimum, maximum and sum of element timestamps, and their count.
pub type TsStats = (Timestamp, Timestamp, i128, usize);

/// Adds the stats of `b` to `acc`.
pub fn add_stats(acc: &mut TsStats, b: TsStats) {
    *acc = (acc.0.min(b.0), acc.1.max(b.1), acc.2 + b.2, acc.3 + b.3);
}

/// A source node's state across batches.
pub struct SourceState {
    name: String,
    kind: Kind,
    ops: Arc<dyn CollectionOps>,
    watermark: Timestamp,
    /// This reader's share of the source: splits `i` with `i % count == index` ([`SourceState::share`]).
    share: (usize, usize),
    /// Whether reads of readers without a count are planned ([`SourceState::plan_reads_without_counts`]).
    without_counts: bool,
    /// Drained ([`SourceState::prepare_read`]): an unbounded source or TestStream reads nothing more
    /// and is at the end of time.
    drained: bool,
}

impl SourceState {
    /// The state of source `name` reading `spec`, whose output batches `ops` measures.
    pub fn of(name: &str, spec: &SourceSpec, ops: Arc<dyn CollectionOps>) -> Self {
        let kind = match spec {
            SourceSpec::Impulse => Kind::Impulse { done: false },
            SourceSpec::Bounded(source) => Kind::Bounded { source: source.clone(), splits: None, split_bytes: None },
            SourceSpec::Unbounded(source) => Kind::Unbounded { source: source.clone(), readers: None, desired: None },
            SourceSpec::TestStream(events) => {
                Kind::TestStream { events: events.clone(), next: 0, watermark: MIN_TIMESTAMP }
            }
        };
        Self::new(name, kind, ops)
    }
    fn new(name: &str, kind: Kind, ops: Arc<dyn CollectionOps>) -> Self {
        SourceState {
            name: name.to_string(),
            kind,
            ops,
            watermark: MIN_TIMESTAMP,
            share: (0, 1),
            without_counts: false,
            drained: false,
        }
    }

    /// Lets [`SourceState::next`] with `defer` plan reads of bounded readers that cannot say how
    /// much they have left, as reads of up to the batch's share: a fused chain then parses a
    /// file of lines piece by piece, in parallel over the partitions, instead of the planner
    /// reading it all first. The counts such a batch reports are the most it may have read, so
    /// only a runner that logs no offsets (no checkpoint, no retried batches) may ask for this.
    pub fn plan_reads_without_counts(&mut self, yes: bool) {
        self.without_counts = yes;
    }

    /// Makes this state read share `index` of `count` (a distributed runner's worker `index` of
    /// `count`): the source is split for `count` times the partitions asked for, and this state
    /// reads the splits `i` with `i % count == index`. Impulse and TestStream are read by share
    /// 0 alone; the others see them at the end of time at once. Every share's watermark is its
    /// own splits'; a runner takes the minimum over the shares.
    pub fn share(mut self, index: usize, count: usize) -> Self {
        let count = count.max(1);
        self.share = (index % count, count);
        if !index.is_multiple_of(count) {
            match &mut self.kind {
                Kind::Impulse { done } => *done = true,
                Kind::TestStream { events, next, .. } => *next = events.len(),
                _ => {}
            }
        }
        self
    }

    /// Whether the source is finite (Impulse, a bounded source, a TestStream): a runner may read
    /// it whole at once.
    pub fn is_bounded(&self) -> bool {
        !matches!(self.kind, Kind::Unbounded { .. })
    }

    /// Before each read, what a drain (Beam's) means for it: a drained unbounded source or
    /// TestStream reads nothing more and its watermark goes to the end of time, while a bounded
    /// source or an impulse is read to its end as before; the drain is part of the logged
    /// position, so a restart stays drained. Replaying a logged batch (`replayed_end` is
    /// the end position it logged for this source, `Value::Null` if none), the source is drained
    /// exactly when the batch was read drained, so the replay reads what the batch read; a new
    /// batch is drained once `drain_requested`. A drain requested during recovery thus applies
    /// only to the batches after the replays.
    pub fn prepare_read(&mut self, replayed_end: Option<&Value>, drain_requested: bool) {
        match replayed_end {
            Some(end) => self.drained |= end.get("drained").and_then(Value::as_bool) == Some(true),
            None => self.drained |= drain_requested,
        }
    }

    /// Whether the source is drained (as of its last [`SourceState::prepare_read`] or restore):
    /// runners tell operators so through [`crate::operator::OpContext::draining`].
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    /// Moves a fresh source to a logged position (restart from a checkpoint).
    pub fn restore(&mut self, pos: &Value, partitions: usize) -> Result<()> {
        self.drained = pos.get("drained").and_then(Value::as_bool).unwrap_or(false);
        let name = self.name.clone();
        let share = self.share;
        let bad = |what: &str| weir_sdk::Error::Execution {
            step: name.clone(),
            message: format!("offset log entry does not match the source: {what} in {pos}"),
        };
        match &mut self.kind {
            // Read by share 0 alone ([`SourceState::share`]): the other shares are done already.
            Kind::Impulse { .. } | Kind::TestStream { .. } if share.0 != 0 => {}
            Kind::Impulse { done } => *done = pos["emitted"].as_bool().ok_or_else(|| bad("no 'emitted'"))?,
            Kind::Bounded { source, splits, split_bytes } => {
                let logged = pos["splits"].as_array().ok_or_else(|| bad("no 'splits'"))?;
                // Not split yet (a share split into no splits logs its split size).
                if logged.is_empty() && pos.get("split_bytes").is_none_or(Value::is_null) {
                    return Ok(());
                }
                // Split as the run that logged the positions did, whatever the parallelism now.
                let bytes = match pos.get("split_bytes").and_then(Value::as_u64) {
                    Some(b) => b,
                    None => {
                        let size = guarded(&name, "estimate source size", || source.estimated_size_bytes())?;
                        (size / (4 * partitions * share.1) as u64).max(1)
                    }
                };
                *split_bytes = Some(bytes);
                let parts = of_share(guarded(&name, "split source", || source.split(bytes))?, share);
                if parts.len() != logged.len() {
                    return Err(bad(&format!("{} splits now, {} logged", parts.len(), logged.len())));
                }
                let mut restored = Vec::new();
                for (source, l) in parts.into_iter().zip(logged) {
                    let read = l["read"].as_u64().ok_or_else(|| bad("no 'read'"))?;
                    let done = l["done"].as_bool().ok_or_else(|| bad("no 'done'"))?;
                    let mut split = BoundedSplit { source, reader: None, read, done };
                    if !done && read > 0 {
                        let mut reader = guarded(&name, "open reader", || split.source.reader())?;
                        // Skip what earlier batches read.
                        let skipped = guarded(&name, "skip", || reader.skip(read))?;
                        if skipped < read {
                            return Err(bad(&format!("the split has {skipped} elements, {read} logged as read")));
                        }
                        let reader = shared(reader);
                        lock(&reader).delivered = read;
                        split.reader = Some(reader);
                    }
                    restored.push(split);
                }
                *splits = Some(restored);
            }
            Kind::Unbounded { source, readers, desired } => {
                let logged = pos["readers"].as_array().ok_or_else(|| bad("no 'readers'"))?;
                if logged.is_empty() && pos.get("desired").is_none_or(Value::is_null) {
                    return Ok(());
                }
                let n = pos.get("desired").and_then(Value::as_u64).map_or(partitions * share.1, |d| d as usize);
                *desired = Some(n);
                let parts = of_share(guarded(&name, "split source", || source.split(n))?, share);
                if parts.len() != logged.len() {
                    return Err(bad(&format!("{} readers now, {} logged", parts.len(), logged.len())));
                }
                let mut rs = Vec::new();
                for (s, l) in parts.into_iter().zip(logged) {
                    let hex = l.as_str().ok_or_else(|| bad("reader checkpoint is not a string"))?;
                    let bytes = (0..hex.len() / 2)
                        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
                        .collect::<std::result::Result<Vec<u8>, _>>()
                        .map_err(|_| bad("reader checkpoint is not hex"))?;
                    rs.push(guarded(&name, "open reader", || s.reader(Some(&bytes)))?);
                }
                *readers = Some(rs);
            }
            Kind::TestStream { next, watermark, .. } => {
                *next = pos["event"].as_u64().ok_or_else(|| bad("no 'event'"))? as usize;
                *watermark = pos["watermark"].as_i64().unwrap_or(MIN_TIMESTAMP);
            }
        }
        Ok(())
    }

    fn offsets(&self) -> Value {
        let mut pos = self.positions();
        if self.drained {
            pos["drained"] = json!(true);
        }
        pos
    }

    fn positions(&self) -> Value {
        match &self.kind {
            Kind::Impulse { done } => json!({ "emitted": done }),
            Kind::Bounded { splits, split_bytes, .. } => match splits {
                None => json!({ "splits": [] }),
                Some(s) => json!({
                    "splits": s.iter().map(|s| json!({"read": s.read, "done": s.done})).collect::<Vec<_>>(),
                    "split_bytes": split_bytes,
                }),
            },
            Kind::Unbounded { readers, desired, .. } => match readers {
                None => json!({ "readers": [] }),
                Some(rs) => json!({
                    "readers": rs.iter().map(|r| r.checkpoint().map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>()).unwrap_or_default()).collect::<Vec<_>>(),
                    "desired": desired,
                }),
            },
            Kind::TestStream { next, watermark, .. } => json!({ "event": next, "watermark": watermark }),
        }
    }

    /// Reads the next slice: about `max` records in all (`max` shared evenly among the splits
    /// that still have data, rounded up), spread over `partitions`; when replaying a logged
    /// batch, exactly the logged count of each split. Splits read now (not planned) are read on
    /// `workers` when given, one task per partition.
    pub fn next(
        &mut self,
        partitions: usize,
        max: usize,
        replay: Option<&[usize]>,
        clock: &mut Clock,
        defer: bool,
        workers: Option<&crate::exec::workers::Workers>,
    ) -> Result<SourceBatch> {
        let start_offset = self.offsets();
        let mut slice = Slice {
            bundles: (0..partitions).map(|_| Vec::new()).collect(),
            counts: Vec::new(),
            moved: false,
            read_stats: None,
            deferred_rows: 0,
            full: false,
            limit: Limit { replay, max },
        };
        let bounded = BoundedRead {
            name: &self.name,
            share: self.share,
            defer,
            without_counts: self.without_counts,
            ops: &self.ops,
            workers,
        };
        let watermark = match &mut self.kind {
            Kind::Impulse { done } => impulse(done, &mut slice),
            Kind::Bounded { source, splits, split_bytes } => bounded.read(source, splits, split_bytes, &mut slice)?,
            // A drained batch reads nothing, and logs as much: its replay reads nothing too.
            Kind::Unbounded { readers, .. } if self.drained => {
                slice.counts.extend(readers.iter().flatten().map(|_| 0));
                MAX_TIMESTAMP
            }
            Kind::TestStream { watermark, .. } if self.drained => {
                *watermark = MAX_TIMESTAMP;
                MAX_TIMESTAMP
            }
            Kind::Unbounded { source, readers, desired } => {
                read_unbounded(&self.name, source, (readers, desired), self.share, &mut slice)?
            }
            Kind::TestStream { events, next, watermark } => play(events, next, watermark, clock, &mut slice),
        };
        let Slice { bundles, counts, mut moved, read_stats, deferred_rows, full, .. } = slice;
        moved |= watermark != self.watermark;
        self.watermark = self.watermark.max(watermark);
        let rows: usize = bundles.iter().flatten().map(Batch::len).sum();
        moved |= rows > 0;
        let ts_stats = read_stats.unwrap_or_else(|| {
            let mut acc = (Timestamp::MAX, Timestamp::MIN, 0, 0);
            for b in bundles.iter().flatten().filter(|b| b.kind() != BatchKind::Planned) {
                add_stats(&mut acc, b.timestamp_stats());
            }
            acc
        });
        Ok(SourceBatch {
            ts_stats,
            bundles,
            rows,
            watermark: self.watermark,
            start_offset,
            end_offset: self.offsets(),
            moved,
            counts,
            deferred_rows,
            full,
        })
    }
}
