//! Sources as runners read them: a bounded slice per step (a batch, a round), with offsets for
//! logs and progress reports, and a watermark.
//!
//! One [`SourceState`] reads any source node of the plan: Impulse, a bounded source (split,
//! read split by split, its watermark at the beginning of time until every split is exhausted,
//! then at the end), an unbounded source (one reader per split, resumable from checkpoint
//! marks), and a TestStream (one event per step, moving the watermark or the test clock). A
//! replay after a restart reads exactly the counts the offset log recorded.

use crate::do_fn_runner::guarded;
use crate::exec::clock::Clock;
use crate::plan::SourceSpec;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use weir_sdk::batch::BatchKind;
use weir_sdk::kernel::{
    Batch, CollectionOps, ErasedBoundedReader, ErasedBoundedSource, ErasedUnboundedReader, ErasedUnboundedSource,
    TestStreamEvent,
};
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::{Result, WindowedValue};

/// The largest bundle a source hands to the plan.
const BUNDLE: usize = 65_536;

struct BoundedSplit {
    source: Arc<dyn ErasedBoundedSource>,
    reader: Option<SharedReader>,
    read: u64,
    done: bool,
}

/// A split's reader and how many elements it has delivered, shared with the [`DeferredRead`]s
/// that read from it during a batch.
type SharedReader = Arc<Mutex<ReaderSlot>>;

struct ReaderSlot {
    reader: Box<dyn ErasedBoundedReader>,
    delivered: u64,
    /// Whether a read of up to some count ([`DeferredRead`] of a reader that cannot say how
    /// much it has left) found the end.
    ended: bool,
}

fn shared(reader: Box<dyn ErasedBoundedReader>) -> SharedReader {
    Arc::new(Mutex::new(ReaderSlot { reader, delivered: 0, ended: false }))
}

fn lock(r: &SharedReader) -> std::sync::MutexGuard<'_, ReaderSlot> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// A planned read: `count` elements of a bounded split whose reader knows how many it has left
/// ([`ErasedBoundedReader::remaining`]). The batch logs the count before anything is read, and
/// the fused chain the source feeds reads the elements in pieces small enough to stay in cache
/// while the whole chain runs over them (Spark's lazy `getBatch`). A runner that logs no
/// offsets may also plan reads of readers that cannot say how much they have left (a file of
/// lines): those read up to `count` elements, and the split is done once one finds the end
/// ([`SourceState::plan_reads_without_counts`]).
pub struct DeferredRead {
    step: String,
    reader: SharedReader,
    /// Whether the reader said it has at least `count` elements left.
    exact: bool,
    count: usize,
    ops: Arc<dyn CollectionOps>,
}

impl DeferredRead {
    /// The number of elements planned.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing is planned.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The source step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Reads the planned elements in pieces of at most `piece`, handing each to `f` with the
    /// piece's timestamp stats added to `stats`; user code in the reader runs with `metrics`
    /// bound, and the source's output counts go there too.
    pub fn read(
        self,
        piece: usize,
        metrics: &Arc<crate::metrics::MetricsContainerImpl>,
        stats: &mut TsStats,
        mut f: impl FnMut(Batch) -> Result<()>,
    ) -> Result<()> {
        let mut left = self.count;
        while left > 0 {
            let (b, n) = {
                let _scope = weir_sdk::metrics::scoped_container(metrics.clone());
                let mut slot = lock(&self.reader);
                let b = guarded(&self.step, "read", || slot.reader.read_batch(left.min(piece)))?;
                let n = b.as_ref().map_or(0, |b| b.len());
                slot.delivered += n as u64;
                slot.ended |= n == 0 && !self.exact;
                (b.filter(|_| n > 0), n)
            };
            let Some(b) = b else {
                if !self.exact {
                    return Ok(());
                }
                return Err(weir_sdk::Error::execution(
                    &self.step,
                    format!("read failed: the reader ended {left} elements short of the count it reported remaining"),
                ));
            };
            left = left.saturating_sub(n);
            crate::system_metrics::count_batch(metrics, &*self.ops, &b, true);
            add_stats(stats, b.timestamp_stats());
            f(b)?;
        }
        Ok(())
    }
}

impl weir_sdk::batch::BatchData for DeferredRead {
    fn kind(&self) -> BatchKind {
        BatchKind::Planned
    }
    fn len(&self) -> usize {
        self.count
    }
    fn clone_batch(&self) -> Batch {
        // A planned read is consumed once, by the chain it feeds; a source whose output is
        // used twice does not plan its reads (see the runner's choice of deferred sources).
        Batch::new(DeferredRead {
            step: self.step.clone(),
            reader: self.reader.clone(),
            exact: self.exact,
            count: self.count,
            ops: self.ops.clone(),
        })
    }
    fn split_batch(self: Box<Self>, _: usize) -> Vec<Batch> {
        // Read piece by piece by the chain anyway.
        vec![Batch::new(*self)]
    }
    fn shuffle(&mut self, _: u64) {}
    fn timestamp_stats(&self) -> weir_sdk::batch::TimestampStats {
        // Not known until read: the chain adds the stats of what it reads.
        weir_sdk::batch::NO_TIMESTAMPS
    }
}

/// What [`read_now`] read from one split.
struct EagerRead {
    bundles: Vec<Batch>,
    count: usize,
    stats: Option<TsStats>,
    /// Whether the split ended.
    ended: bool,
}

/// Reads up to `n` elements of a split now, in bundles of at most [`BUNDLE`] elements (which
/// keep allocations cache- and allocator-friendly however large the batch is).
fn read_now(name: &str, slot: &mut ReaderSlot, n: usize) -> Result<EagerRead> {
    let mut got = EagerRead { bundles: Vec::new(), count: 0, stats: None, ended: false };
    while got.count < n {
        let want = (n - got.count).min(BUNDLE);
        match guarded(name, "read", || slot.reader.read_batch(want))? {
            Some(b) => {
                let len = b.len();
                add_stats(got.stats.get_or_insert((Timestamp::MAX, Timestamp::MIN, 0, 0)), b.timestamp_stats());
                slot.delivered += len as u64;
                got.count += len;
                got.bundles.push(b);
                if len < want {
                    break;
                }
            }
            None => {
                got.ended = true;
                break;
            }
        }
    }
    Ok(got)
}

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

/// The splits of share `(index, count)` among `parts`: those at `i % count == index`.
fn of_share<T>(parts: Vec<T>, (index, count): (usize, usize)) -> Vec<T> {
    parts.into_iter().enumerate().filter(|(i, _)| i % count == index).map(|(_, p)| p).collect()
}

/// The one list that shares `0..shares.len()` of a list took their parts of, as [`of_share`]
/// deals them (element `i` to share `i % shares.len()`); `None` if the parts cannot come from
/// one list.
fn interleave<T: Clone>(shares: &[&[T]]) -> Option<Vec<T>> {
    let (w, n) = (shares.len(), shares.iter().map(|s| s.len()).sum::<usize>());
    if shares.iter().enumerate().any(|(k, s)| s.len() != (n + w - 1 - k) / w.max(1)) {
        return None;
    }
    Some((0..n).map(|i| shares[i % w][i / w].clone()).collect())
}

/// Records read per split, as share `share` reads them, from the counts that shares
/// `0..counts.len()` logged for one batch (a replay on another number of workers); `None` if
/// they do not fit together.
pub fn reshare_counts(counts: &[&[usize]], share: (usize, usize)) -> Option<Vec<usize>> {
    Some(of_share(interleave(counts)?, share))
}

/// The position of share `share` of a source whose shares `0..positions.len()` logged
/// `positions` at one point (a restart on another number of workers): the splits (or readers)
/// of all shares, as one list again, dealt anew. An impulse's or TestStream's position is share
/// 0's. An error names `step` when the positions do not fit together.
pub fn reshare(step: &str, positions: &[&Value], share: (usize, usize)) -> Result<Value> {
    let bad = |what: &str| weir_sdk::Error::Execution {
        step: step.to_string(),
        message: format!("the offset log entries of {} workers do not fit together: {what}", positions.len()),
    };
    let Some(first) = positions.first() else { return Err(bad("there are none")) };
    let (list, size) = match () {
        _ if first.get("splits").is_some() => ("splits", "split_bytes"),
        _ if first.get("readers").is_some() => ("readers", "desired"),
        _ => return Ok((*first).clone()),
    };
    let lists = positions
        .iter()
        .map(|p| p[list].as_array().map(Vec::as_slice).ok_or_else(|| bad(&format!("no '{list}' in {p}"))))
        .collect::<Result<Vec<_>>>()?;
    let sizes: Vec<&Value> = positions.iter().filter_map(|p| p.get(size)).filter(|v| !v.is_null()).collect();
    let mut out = if sizes.is_empty() && lists.iter().all(|l| l.is_empty()) {
        json!({ list: [] })
    } else {
        if sizes.len() != positions.len() || sizes.iter().any(|s| *s != sizes[0]) {
            return Err(bad(&format!("the workers split the source differently ('{size}')")));
        }
        let all = interleave(&lists).ok_or_else(|| bad(&format!("their '{list}' are not shares of one list")))?;
        json!({ list: of_share(all, share), size: sizes[0] })
    };
    if positions.iter().any(|p| p.get("drained").and_then(Value::as_bool) == Some(true)) {
        out["drained"] = json!(true);
    }
    Ok(out)
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

/// How much a split or reader reads in one slice.
struct Limit<'a> {
    /// The counts a logged batch read, when replaying it.
    replay: Option<&'a [usize]>,
    /// The slice's records in all.
    max: usize,
}

impl Limit<'_> {
    /// What split `i` of `live` splits with data reads.
    fn of(&self, i: usize, live: usize) -> usize {
        self.replay.map(|r| r.get(i).copied().unwrap_or(0)).unwrap_or(self.max.div_ceil(live.max(1)))
    }
}

/// What one slice gathers as it reads.
struct Slice<'a> {
    /// Bundles per partition.
    bundles: Vec<Vec<Batch>>,
    /// Records read per split or reader.
    counts: Vec<usize>,
    moved: bool,
    /// Timestamp stats of bounded reads, taken per bundle as it is read (while it is in
    /// cache), not in a pass over the whole batch afterwards.
    read_stats: Option<TsStats>,
    deferred_rows: usize,
    full: bool,
    limit: Limit<'a>,
}

impl Slice<'_> {
    fn partitions(&self) -> usize {
        self.bundles.len().max(1)
    }
}

/// The impulse: one empty element, once.
fn impulse(done: &mut bool, slice: &mut Slice<'_>) -> Timestamp {
    if !*done {
        *done = true;
        slice.moved = true;
        let v = vec![WindowedValue {
            value: Vec::<u8>::new(),
            timestamp: MIN_TIMESTAMP,
            window: Window::Global,
            pane: PaneInfo::NO_FIRING,
        }];
        slice.bundles[0].push(Batch::new(v));
    }
    MAX_TIMESTAMP
}

/// A bounded source's read of one slice.
struct BoundedRead<'a> {
    name: &'a str,
    share: (usize, usize),
    defer: bool,
    without_counts: bool,
    ops: &'a Arc<dyn CollectionOps>,
    workers: Option<&'a crate::exec::workers::Workers>,
}

impl BoundedRead<'_> {
    /// Reads (or plans) every split's part of the slice; returns the source's watermark, at the
    /// beginning of time until every split is exhausted.
    fn read(
        &self,
        source: &Arc<dyn ErasedBoundedSource>,
        splits: &mut Option<Vec<BoundedSplit>>,
        split_bytes: &mut Option<u64>,
        slice: &mut Slice<'_>,
    ) -> Result<Timestamp> {
        let name = self.name;
        if splits.is_none() {
            let size = guarded(name, "estimate source size", || source.estimated_size_bytes())?;
            let wanted = (4 * slice.partitions() * self.share.1) as u64;
            let bytes = (size / wanted).max(1);
            *split_bytes = Some(bytes);
            let parts = guarded(name, "split source", || source.split(bytes))?;
            let parts = of_share(parts, self.share);
            *splits = Some(
                parts.into_iter().map(|source| BoundedSplit { source, reader: None, read: 0, done: false }).collect(),
            );
        }
        let Some(splits) = splits.as_mut() else { return Ok(MAX_TIMESTAMP) };
        let eager = self.plan(splits, slice)?;
        self.read_eager(splits, eager, slice)?;
        Ok(if splits.iter().all(|s| s.done) { MAX_TIMESTAMP } else { MIN_TIMESTAMP })
    }

    /// Plans each live split's part: left to the chain as a [`DeferredRead`] when it can be, or
    /// returned to be read now.
    fn plan(&self, splits: &mut [BoundedSplit], slice: &mut Slice<'_>) -> Result<Vec<(usize, SharedReader, usize)>> {
        let name = self.name;
        let partitions = slice.partitions();
        let live = splits.iter().filter(|s| !s.done).count();
        let mut eager = Vec::new();
        for (i, s) in splits.iter_mut().enumerate() {
            slice.counts.push(0);
            if s.done {
                continue;
            }
            if s.reader.is_none() {
                s.reader = Some(shared(guarded(name, "open reader", || s.source.reader())?));
            }
            let Some(shared_reader) = s.reader.clone() else { continue };
            let slot = lock(&shared_reader);
            if slot.ended {
                // A read of up to a count found the end: the split is done.
                s.read = slot.delivered;
                drop(slot);
                s.done = true;
                s.reader = None;
                continue;
            }
            if slot.delivered != s.read {
                // A planned read of an earlier batch was not carried out: reading on would skip
                // or repeat elements.
                return Err(weir_sdk::Error::execution(
                    name,
                    format!(
                        "internal error: split {i} delivered {} elements, but {} were planned",
                        slot.delivered, s.read
                    ),
                ));
            }
            let n = slice.limit.of(i, live).max(1);
            slice.moved = true;
            let remaining = slot.reader.remaining();
            if self.defer && (remaining.is_some() || self.without_counts) {
                // Planned now, read while the chain runs.
                let n = remaining.map_or(n, |r| n.min(r as usize));
                if n == 0 {
                    s.done = true;
                    s.reader = None;
                    continue;
                }
                s.read += n as u64;
                slice.counts[i] = n;
                slice.deferred_rows += n;
                slice.bundles[i % partitions].push(Batch::new(DeferredRead {
                    step: name.to_string(),
                    reader: shared_reader.clone(),
                    exact: remaining.is_some(),
                    count: n,
                    ops: self.ops.clone(),
                }));
                continue;
            }
            drop(slot);
            eager.push((i, shared_reader, n));
        }
        Ok(eager)
    }

    /// Reads the splits to be read now, in parallel on the workers, one task per partition,
    /// each reading the splits its partition gets: a reader that cannot say how much it has
    /// left (a file of lines) is not read by one thread while the others wait.
    fn read_eager(
        &self,
        splits: &mut [BoundedSplit],
        eager: Vec<(usize, SharedReader, usize)>,
        slice: &mut Slice<'_>,
    ) -> Result<()> {
        let partitions = slice.partitions();
        let mut jobs: Vec<Vec<(usize, SharedReader, usize)>> = (0..partitions).map(|_| Vec::new()).collect();
        for job in eager {
            jobs[job.0 % partitions].push(job);
        }
        jobs.retain(|j| !j.is_empty());
        let step = self.name.to_string();
        let done_reads = crate::exec::workers::run_in_step(self.workers, jobs, move |jobs| {
            jobs.into_iter()
                .map(|(i, r, n)| read_now(&step, &mut lock(&r), n).map(|got| (i, got)))
                .collect::<Result<Vec<_>>>()
        })
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
        for (i, got) in done_reads.into_iter().flatten() {
            let s = &mut splits[i];
            s.read += got.count as u64;
            slice.counts[i] = got.count;
            if let Some(stats) = got.stats {
                add_stats(slice.read_stats.get_or_insert((Timestamp::MAX, Timestamp::MIN, 0, 0)), stats);
            }
            slice.bundles[i % partitions].extend(got.bundles);
            if got.ended {
                s.done = true;
                s.reader = None;
            }
        }
        Ok(())
    }
}

/// An unbounded source's read of one slice: each reader its share (a replay exactly the logged
/// count, which the source re-delivers); returns the minimum of the readers' watermarks.
fn read_unbounded(
    name: &str,
    source: &Arc<dyn ErasedUnboundedSource>,
    (readers, desired): (&mut Option<Readers>, &mut Option<usize>),
    share: (usize, usize),
    slice: &mut Slice<'_>,
) -> Result<Timestamp> {
    let partitions = slice.partitions();
    if readers.is_none() {
        let n = partitions * share.1;
        *desired = Some(n);
        let splits = guarded(name, "split source", || source.split(n))?;
        let splits = of_share(splits, share);
        let mut rs = Vec::with_capacity(splits.len());
        for s in splits {
            rs.push(guarded(name, "open reader", || s.reader(None))?);
        }
        *readers = Some(rs);
    }
    let Some(rs) = readers.as_mut() else { return Ok(MAX_TIMESTAMP) };
    let live = rs.len();
    let replaying = slice.limit.replay.is_some();
    for (i, r) in rs.iter_mut().enumerate() {
        let want = slice.limit.of(i, live);
        let mut got = 0;
        let mut parts = Vec::new();
        loop {
            let b = guarded(name, "read", || r.read_batch(want - got))?;
            let n = b.len();
            got += n;
            if n > 0 {
                parts.push(b);
            }
            if !replaying || got >= want || n == 0 {
                break;
            }
        }
        slice.counts.push(got);
        slice.full |= !replaying && want > 0 && got >= want;
        if got > 0 {
            slice.moved = true;
            slice.bundles[i % partitions].extend(parts);
        }
    }
    Ok(rs.iter().map(|r| r.watermark()).min().unwrap_or(MAX_TIMESTAMP))
}

/// An unbounded source's open readers.
type Readers = Vec<Box<dyn ErasedUnboundedReader>>;

/// A TestStream's next event: elements, a watermark, or a move of the test clock.
fn play(
    events: &[TestStreamEvent],
    next: &mut usize,
    watermark: &mut Timestamp,
    clock: &mut Clock,
    slice: &mut Slice<'_>,
) -> Timestamp {
    match events.get(*next) {
        None => *watermark = MAX_TIMESTAMP,
        Some(event) => {
            *next += 1;
            match event {
                TestStreamEvent::Elements(make) => slice.bundles[0].push(make()),
                TestStreamEvent::Watermark(t) => *watermark = (*watermark).max(*t),
                TestStreamEvent::ProcessingTime(d) => {
                    if let Clock::Test(now) = clock {
                        *now += d;
                        // Moving the clock is progress: timers may now be due.
                        slice.moved = true;
                    }
                }
            }
        }
    }
    *watermark
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::translate::{translate, Natives, Translation};
    use crate::plan::Role;
    use weir_sdk::prelude::*;

    #[test]
    fn positions_logged_by_some_shares_are_dealt_to_any_other_number() {
        // Seven splits, dealt to 2 shares (0, 2, 4, 6 and 1, 3, 5), then to 3.
        let split = |i: u64| json!({ "read": i * 10, "done": i == 3 });
        let logged = |share: (usize, usize)| {
            let mine = of_share((0..7).map(split).collect(), share);
            json!({ "splits": mine, "split_bytes": 64 })
        };
        let (a, b) = (logged((0, 2)), logged((1, 2)));
        for k in 0..3 {
            assert_eq!(reshare("Read", &[&a, &b], (k, 3)).unwrap(), logged((k, 3)));
        }
        // Back to one share, drained where any share was.
        let mut c = logged((1, 2));
        c["drained"] = json!(true);
        let one = reshare("Read", &[&a, &c], (0, 1)).unwrap();
        assert_eq!(one["splits"].as_array().unwrap().len(), 7);
        assert_eq!(one["drained"], json!(true));
        // More shares than splits: the last ones have none, and say the split size.
        assert_eq!(reshare("Read", &[&a, &b], (8, 9)).unwrap(), json!({ "splits": [], "split_bytes": 64 }));
        assert_eq!(reshare_counts(&[&[1, 2, 3, 4], &[5, 6, 7]], (0, 3)).unwrap(), vec![1, 6, 4]);
        // Parts that cannot come from one list, or another split size, are refused.
        let short = json!({ "splits": [], "split_bytes": 64 });
        assert!(reshare("Read", &[&a, &short], (0, 1)).unwrap_err().to_string().contains("Read"));
        let other = json!({ "splits": b["splits"], "split_bytes": 32 });
        assert!(reshare("Read", &[&a, &other], (0, 1))
            .unwrap_err()
            .to_string()
            .contains("split the source differently"));
        // Not split yet anywhere: still not split.
        let none = json!({ "splits": [] });
        assert_eq!(reshare("Read", &[&none, &none], (0, 3)).unwrap(), json!({ "splits": [] }));
    }

    /// A TestStream source of two bundles around a watermark move, as the plan reads it.
    fn stream() -> SourceState {
        let p = Pipeline::create();
        p.apply(
            "Stream",
            TestStream::create()
                .add_elements(vec![TimestampedValue::new(1i64, 1)])
                .advance_watermark_to(5)
                .add_elements(vec![TimestampedValue::new(2i64, 6)]),
        );
        let graph = p.graph();
        let plan = translate(
            &graph,
            &Translation {
                runner: "test",
                natives: Natives::All,
                lift_combines: false,
                window_aggregation: true,
                partitions: 1,
            },
        )
        .unwrap();
        let node = plan.nodes.iter().find(|n| matches!(n.role, Role::Source(_))).unwrap();
        let Role::Source(spec) = &node.role else { unreachable!("found above") };
        SourceState::of(&node.name, spec, graph.pcollection(node.outputs[0]).ops.clone())
    }

    #[test]
    fn a_drained_batch_replays_drained_and_a_restart_stays_drained() {
        let mut clock = Clock::Test(0);
        let mut live = stream();
        let first = live.next(1, 10, None, &mut clock, false, None).unwrap();
        assert_eq!(first.rows, 1);
        live.prepare_read(None, true);
        let drained = live.next(1, 10, None, &mut clock, false, None).unwrap();
        assert_eq!((drained.rows, drained.watermark), (0, MAX_TIMESTAMP));
        assert_eq!(drained.end_offset["drained"], json!(true));
        // A replay of the drained batch from the end of the one before reads what it read once
        // the logged drain is applied, and would read on without it.
        let mut replayed = stream();
        replayed.restore(&first.end_offset, 1).unwrap();
        replayed.prepare_read(Some(&drained.end_offset), true);
        let again = replayed.next(1, 10, Some(&drained.counts), &mut clock, false, None).unwrap();
        assert_eq!((again.rows, again.watermark), (0, MAX_TIMESTAMP));
        let mut undrained = stream();
        undrained.restore(&first.end_offset, 1).unwrap();
        undrained.prepare_read(Some(&first.end_offset), true);
        assert_eq!(undrained.next(1, 10, Some(&drained.counts), &mut clock, false, None).unwrap().watermark, 5);
        // A restart after the drained batch stays drained.
        let mut restarted = stream();
        restarted.restore(&drained.end_offset, 1).unwrap();
        let after = restarted.next(1, 10, None, &mut clock, false, None).unwrap();
        assert_eq!((after.rows, after.watermark), (0, MAX_TIMESTAMP));
    }
}
