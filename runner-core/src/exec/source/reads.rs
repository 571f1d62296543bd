//! One step's slice of a source: an impulse, a bounded read within the step's limit, an
//! unbounded read, a TestStream's next event.

use super::*;
use crate::do_fn_runner::guarded;
use crate::exec::clock::Clock;
use std::sync::Arc;
use weir_sdk::kernel::{
    Batch, CollectionOps, ErasedBoundedSource, ErasedUnboundedReader, ErasedUnboundedSource, TestStreamEvent,
};
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::{Result, WindowedValue};

/// How much a split or reader reads in one slice.
pub(super) struct Limit<'a> {
    /// The counts a logged batch read, when replaying it.
    pub(super) replay: Option<&'a [usize]>,
    /// The slice's records in all.
    pub(super) max: usize,
}

impl Limit<'_> {
    /// What split `i` of `live` splits with data reads.
    fn of(&self, i: usize, live: usize) -> usize {
        self.replay.map(|r| r.get(i).copied().unwrap_or(0)).unwrap_or(self.max.div_ceil(live.max(1)))
    }
}

/// What one slice gathers as it reads.
pub(super) struct Slice<'a> {
    /// Bundles per partition.
    pub(super) bundles: Vec<Vec<Batch>>,
    /// Records read per split or reader.
    pub(super) counts: Vec<usize>,
    pub(super) moved: bool,
    /// Timestamp stats of bounded reads, taken per bundle as it is read (while it is in
    /// cache), not in a pass over the whole batch afterwards.
    pub(super) read_stats: Option<TsStats>,
    pub(super) deferred_rows: usize,
    pub(super) full: bool,
    pub(super) limit: Limit<'a>,
}

impl Slice<'_> {
    fn partitions(&self) -> usize {
        self.bundles.len().max(1)
    }
}

/// The impulse: one empty element, once.
pub(super) fn impulse(done: &mut bool, slice: &mut Slice<'_>) -> Timestamp {
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
pub(super) struct BoundedRead<'a> {
    pub(super) name: &'a str,
    pub(super) share: (usize, usize),
    pub(super) defer: bool,
    pub(super) without_counts: bool,
    pub(super) ops: &'a Arc<dyn CollectionOps>,
    pub(super) workers: Option<&'a crate::exec::workers::Workers>,
}

impl BoundedRead<'_> {
    /// Reads (or plans) every split's part of the slice; returns the source's watermark, at the
    /// beginning of time until every split is exhausted.
    pub(super) fn read(
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
pub(super) fn read_unbounded(
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
pub(super) type Readers = Vec<Box<dyn ErasedUnboundedReader>>;

/// A TestStream's next event: elements, a watermark, or a move of the test clock.
pub(super) fn play(
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
