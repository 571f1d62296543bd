//! The legacy sources as splittable DoFns, as Beam's `Read` expands: an impulse, then one
//! splittable DoFn whose restrictions are the source's splits.
//!
//! - A [`BoundedSource`] becomes [`BoundedSourceFn`]: the impulse's one element has the whole
//!   source as its restriction, split at once into the source's splits; each split's restriction
//!   is a range of element positions in its reader's order. A reader that knows how many
//!   elements it has ([`BoundedReader::remaining`]) gives an exact range, which the runner may
//!   split anywhere; otherwise the range is open-ended and ends where the reader does. A
//!   residual resumes with the reader the DoFn still has open at that position, or a new one
//!   that skips what was read (after a restart, or on another worker).
//! - An [`UnboundedSource`] becomes [`UnboundedSourceFn`]: one restriction per split, holding
//!   the checkpoint mark the split resumes from. Each claim reads one element; a checkpoint
//!   takes the open reader's mark into the residual, and the watermark estimator follows the
//!   reader's watermark. A reader with nothing to give resumes after a short poll; one whose
//!   watermark reached the end of time is done.
//!
//! Runners that read sources natively (a primitive read, with its own offsets) translate the
//! `Read` composite whole instead, as Beam's runners may; the expansion is what runners without
//! one execute, and it is held to the same exactly-once guarantees through the splittable
//! DoFn's checkpointed residuals.

use crate::coders::Element;
use crate::error::UserResult;
use crate::io::source::{BoundedReader, BoundedSource, UnboundedReader, UnboundedSource};
use crate::splittable::{
    Claims, OffsetRange, OffsetRangeTracker, ProcessContinuation, Progress, RestrictionTracker, SdfContext,
    SplittableDoFn, WatermarkEstimator,
};
use crate::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How many splits a source is asked for: enough to spread over a cluster's workers.
const SPLITS: u64 = 16;
/// How long an unbounded reader with nothing to give waits before it is polled again.
const POLL: Duration = Duration::from_millis(5);

/// Which part of a bounded source a restriction reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceRestriction {
    /// The whole source, before it is split.
    Whole,
    /// Elements `range` (positions in the reader's order) of split `split`.
    Split {
        /// The split's index among the source's splits.
        split: u32,
        /// The positions; `to` is `i64::MAX` when the reader cannot say how many it has.
        range: OffsetRange,
    },
}

/// Tracks a [`SourceRestriction`]: an [`OffsetRangeTracker`] of its positions.
pub struct SourceRangeTracker {
    split: Option<u32>,
    inner: OffsetRangeTracker,
}

impl RestrictionTracker for SourceRangeTracker {
    type Restriction = SourceRestriction;
    type Position = i64;
    fn try_claim(&mut self, position: i64) -> bool {
        self.split.is_some() && self.inner.try_claim(position)
    }
    fn current_restriction(&self) -> SourceRestriction {
        match self.split {
            Some(split) => SourceRestriction::Split { split, range: self.inner.current_restriction() },
            None => SourceRestriction::Whole,
        }
    }
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<SourceRestriction> {
        let split = self.split?;
        // An open-ended range splits only at checkpoints: a fraction of "up to i64::MAX" would
        // hand the residual positions the reader never reaches.
        if self.inner.current_restriction().to == i64::MAX && fraction_of_remainder > 0.0 {
            return None;
        }
        let range = self.inner.try_split(fraction_of_remainder)?;
        Some(SourceRestriction::Split { split, range })
    }
    fn check_done(&self) -> Result<(), String> {
        match self.split {
            Some(_) => self.inner.check_done(),
            None => Err("the whole source was processed before it was split".into()),
        }
    }
    fn progress(&self) -> Progress {
        self.inner.progress()
    }
}

/// A split's reader, positioned before element `next`.
struct OpenSplit<R> {
    next: i64,
    reader: R,
}

/// Reads a [`BoundedSource`] as a splittable DoFn over an impulse (Beam's
/// `BoundedSourceAsSDFWrapperFn`).
pub struct BoundedSourceFn<S: BoundedSource> {
    source: Arc<S>,
    splits: Arc<OnceLock<Vec<S>>>,
    /// The reader of each split this instance read, where it stopped: the runner interleaves
    /// splits, and a residual mostly starts where its split's reader stands.
    open: HashMap<u32, OpenSplit<S::Reader>>,
}

impl<S: BoundedSource> Clone for BoundedSourceFn<S> {
    /// A clone shares the source and its splits, not the open readers.
    fn clone(&self) -> Self {
        BoundedSourceFn { source: self.source.clone(), splits: self.splits.clone(), open: HashMap::new() }
    }
}

impl<S: BoundedSource> BoundedSourceFn<S> {
    /// Reads `source`.
    pub fn new(source: Arc<S>) -> Self {
        BoundedSourceFn { source, splits: Arc::new(OnceLock::new()), open: HashMap::new() }
    }

    /// The source's splits, the same in every instance and every process: a source splits
    /// deterministically.
    fn splits(&self) -> UserResult<&Vec<S>> {
        if let Some(s) = self.splits.get() {
            return Ok(s);
        }
        let size = self.source.estimated_size_bytes()?;
        let splits = self.source.split((size / SPLITS).max(1))?;
        Ok(self.splits.get_or_init(|| splits))
    }

    fn split(&self, split: u32) -> UserResult<&S> {
        let splits = self.splits()?;
        splits.get(split as usize).ok_or_else(|| {
            format!(
                "the source has {} splits, and a restriction names split {split}: it split differently",
                splits.len()
            )
            .into()
        })
    }

    /// A reader of `split` positioned before element `from`: the open one if it is there,
    /// else a new one that skips `from` elements.
    fn open(&mut self, split: u32, from: i64) -> UserResult<OpenSplit<S::Reader>> {
        if let Some(o) = self.open.remove(&split) {
            if o.next == from {
                return Ok(o);
            }
        }
        let mut reader = self.split(split)?.create_reader()?;
        let skipped = reader.skip(u64::try_from(from).unwrap_or(0))?;
        Ok(OpenSplit { next: i64::try_from(skipped).unwrap_or(i64::MAX), reader })
    }
}

impl<S: BoundedSource> SplittableDoFn for BoundedSourceFn<S> {
    type In = Vec<u8>;
    type Out = S::Output;
    type Restriction = SourceRestriction;
    type Tracker = SourceRangeTracker;

    fn initial_restriction(&self, _: &Vec<u8>) -> UserResult<SourceRestriction> {
        Ok(SourceRestriction::Whole)
    }

    /// One restriction per split of the source: its exact count of elements when its reader
    /// knows it, else open-ended.
    fn split_restriction(&self, _: &Vec<u8>, restriction: SourceRestriction) -> UserResult<Vec<SourceRestriction>> {
        if restriction != SourceRestriction::Whole {
            return Ok(vec![restriction]);
        }
        let mut parts = Vec::new();
        for (i, s) in self.splits()?.iter().enumerate() {
            let to = s.create_reader()?.remaining().map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
            if to > 0 {
                parts.push(SourceRestriction::Split { split: i as u32, range: OffsetRange::new(0, to) });
            }
        }
        Ok(parts)
    }

    fn new_tracker(&self, _: &Vec<u8>, restriction: SourceRestriction) -> SourceRangeTracker {
        match restriction {
            SourceRestriction::Whole => {
                SourceRangeTracker { split: None, inner: OffsetRangeTracker::new(OffsetRange::new(0, 0)) }
            }
            SourceRestriction::Split { split, range } => {
                SourceRangeTracker { split: Some(split), inner: OffsetRangeTracker::new(range) }
            }
        }
    }

    /// A bounded source's watermark stays at the beginning of time until it is all read, as
    /// with the primitive read: its elements come in no particular timestamp order.
    fn initial_watermark_estimator(&self, _: &Vec<u8>, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }

    fn process(
        &mut self,
        _: &Vec<u8>,
        claims: &mut Claims<'_, SourceRangeTracker>,
        ctx: &mut SdfContext<'_, S::Output>,
    ) -> UserResult<ProcessContinuation> {
        let SourceRestriction::Split { split, range } = claims.current_restriction() else {
            return Err("the whole source was processed before it was split".into());
        };
        let mut open = self.open(split, range.from)?;
        if open.next < range.from {
            // The split ended before this residual (split off as its reader found the end).
            claims.try_claim(i64::MAX);
            return Ok(ProcessContinuation::stop());
        }
        while claims.try_claim(open.next) {
            match open.reader.next()? {
                Some((v, ts)) => {
                    ctx.output_with_timestamp(v, ts)?;
                    open.next += 1;
                }
                None if range.to == i64::MAX => {
                    // The end of an open-ended split: claiming past it finishes the range.
                    claims.try_claim(i64::MAX);
                    return Ok(ProcessContinuation::stop());
                }
                None => {
                    return Err(format!(
                        "split {split}'s reader ended after {} elements, short of the {} it reported",
                        open.next, range.to
                    )
                    .into())
                }
            }
        }
        // Split off or done: keep the reader for the residual, which starts where it stands.
        self.open.insert(split, open);
        Ok(ProcessContinuation::stop())
    }
}

/// Which part of an unbounded source a restriction reads, and where it resumes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound = "C: Element")]
pub enum StreamRestriction<C> {
    /// The whole source, before it is split.
    Whole,
    /// Split `split`, resuming after `checkpoint` (from the start when `None`); `read` counts
    /// the elements read before it, to match a residual with the reader left open for it.
    Split {
        /// The split's index among the source's splits.
        split: u32,
        /// The reader's checkpoint mark.
        checkpoint: Option<C>,
        /// Elements read before the checkpoint.
        read: u64,
    },
}

/// What a claim on a [`StreamTracker`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamPosition {
    /// Read one more element.
    Next,
    /// The reader is exhausted: the restriction is done.
    End,
}

/// The reader a split's restriction reads with, shared between the DoFn (which reads) and the
/// tracker (which takes its checkpoint mark when the runner checkpoints).
struct OpenStream<R> {
    split: u32,
    read: u64,
    reader: R,
}

type StreamSlot<R> = Arc<Mutex<Option<OpenStream<R>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tracks a [`StreamRestriction`]: claims go on until a checkpoint, which makes the open
/// reader's checkpoint mark the residual (Beam's `UnboundedSourceAsSDFRestrictionTracker`).
pub struct StreamTracker<S: UnboundedSource> {
    restriction: StreamRestriction<S::Checkpoint>,
    slot: StreamSlot<S::Reader>,
    stopped: bool,
    claimed: u64,
}

impl<S: UnboundedSource> RestrictionTracker for StreamTracker<S> {
    type Restriction = StreamRestriction<S::Checkpoint>;
    type Position = StreamPosition;
    fn try_claim(&mut self, position: StreamPosition) -> bool {
        if position == StreamPosition::End || matches!(self.restriction, StreamRestriction::Whole) {
            self.stopped = true;
        }
        if self.stopped {
            return false;
        }
        self.claimed += 1;
        true
    }
    fn current_restriction(&self) -> Self::Restriction {
        self.restriction.clone()
    }
    /// Only checkpoints (a fraction of 0) split an unbounded reader: the residual resumes from
    /// the open reader's mark.
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<Self::Restriction> {
        if self.stopped || fraction_of_remainder > 0.0 {
            return None;
        }
        let StreamRestriction::Split { split, .. } = self.restriction else { return None };
        self.stopped = true;
        let open = lock(&self.slot);
        Some(match open.as_ref() {
            Some(o) if o.split == split => {
                StreamRestriction::Split { split, checkpoint: Some(o.reader.checkpoint()), read: o.read }
            }
            // Not opened yet: the residual is all of it.
            _ => self.restriction.clone(),
        })
    }
    fn check_done(&self) -> Result<(), String> {
        if self.stopped {
            Ok(())
        } else {
            Err("the unbounded reader was neither checkpointed nor exhausted".into())
        }
    }
    fn progress(&self) -> Progress {
        Progress { work_completed: self.claimed as f64, work_remaining: f64::INFINITY }
    }
    fn is_bounded(&self) -> bool {
        false
    }
}

/// Reads an [`UnboundedSource`] as a splittable DoFn over an impulse (Beam's
/// `UnboundedSourceAsSDFWrapperFn`).
pub struct UnboundedSourceFn<S: UnboundedSource> {
    source: Arc<S>,
    splits: Arc<OnceLock<Vec<S>>>,
    /// The open reader of each split this instance read.
    open: Mutex<HashMap<u32, StreamSlot<S::Reader>>>,
}

impl<S: UnboundedSource> Clone for UnboundedSourceFn<S> {
    /// A clone shares the source and its splits, not the open readers.
    fn clone(&self) -> Self {
        UnboundedSourceFn { source: self.source.clone(), splits: self.splits.clone(), open: Mutex::default() }
    }
}

impl<S: UnboundedSource> UnboundedSourceFn<S> {
    /// Reads `source`.
    pub fn new(source: Arc<S>) -> Self {
        UnboundedSourceFn { source, splits: Arc::new(OnceLock::new()), open: Mutex::default() }
    }

    fn splits(&self) -> UserResult<&Vec<S>> {
        if let Some(s) = self.splits.get() {
            return Ok(s);
        }
        let splits = self.source.split(SPLITS as usize)?;
        Ok(self.splits.get_or_init(|| splits))
    }
}

impl<S: UnboundedSource> SplittableDoFn for UnboundedSourceFn<S> {
    type In = Vec<u8>;
    type Out = S::Output;
    type Restriction = StreamRestriction<S::Checkpoint>;
    type Tracker = StreamTracker<S>;

    fn initial_restriction(&self, _: &Vec<u8>) -> UserResult<Self::Restriction> {
        Ok(StreamRestriction::Whole)
    }

    fn split_restriction(&self, _: &Vec<u8>, restriction: Self::Restriction) -> UserResult<Vec<Self::Restriction>> {
        if !matches!(restriction, StreamRestriction::Whole) {
            return Ok(vec![restriction]);
        }
        Ok((0..self.splits()?.len())
            .map(|i| StreamRestriction::Split { split: i as u32, checkpoint: None, read: 0 })
            .collect())
    }

    fn new_tracker(&self, _: &Vec<u8>, restriction: Self::Restriction) -> StreamTracker<S> {
        let split = match restriction {
            StreamRestriction::Split { split, .. } => split,
            StreamRestriction::Whole => u32::MAX,
        };
        let slot = lock(&self.open).entry(split).or_default().clone();
        StreamTracker { restriction, slot, stopped: false, claimed: 0 }
    }

    /// The reader's watermark, which [`UnboundedSourceFn::process`] sets after every read.
    fn initial_watermark_estimator(&self, _: &Vec<u8>, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }

    fn unbounded_per_element(&self) -> bool {
        true
    }

    fn process(
        &mut self,
        _: &Vec<u8>,
        claims: &mut Claims<'_, StreamTracker<S>>,
        ctx: &mut SdfContext<'_, S::Output>,
    ) -> UserResult<ProcessContinuation> {
        let StreamRestriction::Split { split, checkpoint, read } = claims.current_restriction() else {
            return Err("the whole source was processed before it was split".into());
        };
        let slot = claims.tracker().slot.clone();
        {
            let mut open = lock(&slot);
            // The reader left open at exactly this residual's mark reads on; otherwise (a
            // restart, a retried batch) one resumes from the mark.
            if !open.as_ref().is_some_and(|o| o.split == split && o.read == read) {
                let splits = self.splits()?;
                let source = splits.get(split as usize).ok_or_else(|| {
                    format!("the source has {} splits, and a restriction names split {split}", splits.len())
                })?;
                *open = Some(OpenStream { split, read, reader: source.create_reader(checkpoint)? });
            }
        }
        loop {
            if !claims.try_claim(StreamPosition::Next) {
                // Checkpointed: the residual holds the reader's mark.
                let watermark = lock(&slot).as_ref().map_or(MIN_TIMESTAMP, |o| o.reader.watermark());
                ctx.set_watermark(watermark)?;
                return Ok(ProcessContinuation::stop());
            }
            let (next, watermark) = {
                let mut guard = lock(&slot);
                let Some(open) = guard.as_mut() else {
                    return Err("the split's reader was closed while it was read".into());
                };
                let next = open.reader.advance()?;
                open.read += u64::from(next.is_some());
                (next, open.reader.watermark())
            };
            match next {
                Some((v, ts)) => ctx.output_with_timestamp(v, ts)?,
                None if watermark >= MAX_TIMESTAMP => {
                    ctx.set_watermark(MAX_TIMESTAMP)?;
                    claims.try_claim(StreamPosition::End);
                    *lock(&slot) = None;
                    return Ok(ProcessContinuation::stop());
                }
                None => {
                    ctx.set_watermark(watermark)?;
                    return Ok(ProcessContinuation::resume().with_resume_delay(POLL));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splittable::process_restriction;

    use crate::testing::RangeSource as Numbers;

    #[test]
    fn a_bounded_source_reads_every_element_once_across_checkpoints() {
        for counted in [true, false] {
            let f = BoundedSourceFn::new(Arc::new(Numbers { from: 0, to: 100, counted }));
            let parts = f.split_restriction(&vec![], SourceRestriction::Whole).unwrap();
            assert_eq!(parts.len(), 17, "100 bytes in pieces of 6");
            let mut got = Vec::new();
            for r in parts {
                // Checkpoints every 4 claims: each residual resumes where its reader stands.
                got.extend(process_restriction(f.clone(), vec![], r, 4).unwrap());
            }
            got.sort();
            assert_eq!(got, (0..100).map(|i| (i, i)).collect::<Vec<_>>(), "counted: {counted}");
        }
    }

    #[test]
    fn an_open_ended_range_splits_only_at_checkpoints() {
        let mut t =
            SourceRangeTracker { split: Some(0), inner: OffsetRangeTracker::new(OffsetRange::new(0, i64::MAX)) };
        assert!(t.try_claim(0));
        assert_eq!(t.try_split(0.5), None);
        assert_eq!(t.try_split(0.0), Some(SourceRestriction::Split { split: 0, range: OffsetRange::new(1, i64::MAX) }));
        assert!(!t.try_claim(1));
        assert!(t.check_done().is_ok());
    }
}
