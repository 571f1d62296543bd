//! Restrictions and their trackers: offset ranges, fixed and growable, and the progress they
//! report.

use crate::coders::Element;
use serde::{Deserialize, Serialize};

/// How much of a restriction is done and how much is left, in the tracker's own units (Beam's
/// `RestrictionTracker.Progress`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Work done.
    pub work_completed: f64,
    /// Work left.
    pub work_remaining: f64,
}

/// Tracks which part of a restriction a splittable DoFn has claimed (Beam's
/// `RestrictionTracker`). A DoFn claims every position before it outputs what is there, and
/// stops at the first claim that fails: the runner may have split the rest off.
pub trait RestrictionTracker: Send + 'static {
    /// The restriction tracked.
    type Restriction: Element;
    /// What a claim names (an offset).
    type Position;
    /// Claims `position`; `false` when it is beyond the restriction (the DoFn must then stop).
    fn try_claim(&mut self, position: Self::Position) -> bool;
    /// The restriction as it is now (after any split, the primary).
    fn current_restriction(&self) -> Self::Restriction;
    /// Splits off the part of the remaining work after `fraction_of_remainder` of it: the
    /// tracker keeps the primary, and the residual is returned; `None` when nothing can be
    /// split off. A fraction of 0 is a checkpoint: the primary ends at the last attempted
    /// claim.
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<Self::Restriction>;
    /// Whether all of the restriction was claimed or attempted; the error says what was not.
    fn check_done(&self) -> Result<(), String>;
    /// Work done and left.
    fn progress(&self) -> Progress;
    /// Whether the restriction is finite.
    fn is_bounded(&self) -> bool {
        true
    }
}

/// A range of offsets `[from, to)` (Beam's `OffsetRange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OffsetRange {
    /// The first offset.
    pub from: i64,
    /// One past the last offset.
    pub to: i64,
}

impl OffsetRange {
    /// `[from, to)`; an empty range when `to <= from`.
    pub fn new(from: i64, to: i64) -> Self {
        OffsetRange { from, to: to.max(from) }
    }
    /// The number of offsets.
    pub fn len(&self) -> i64 {
        self.to.saturating_sub(self.from)
    }
    /// Whether the range holds no offset.
    pub fn is_empty(&self) -> bool {
        self.to <= self.from
    }
    /// Ranges of about `size` offsets each, together this range (Beam's
    /// `OffsetRange.split(desired, min)`), for [`SplittableDoFn::split_restriction`](super::SplittableDoFn::split_restriction).
    pub fn split(&self, size: i64) -> Vec<OffsetRange> {
        let size = size.max(1);
        let mut out = Vec::new();
        let mut from = self.from;
        while from < self.to {
            let to = from.saturating_add(size).min(self.to);
            out.push(OffsetRange::new(from, to));
            from = to;
        }
        out
    }
}

/// The split point `cur + max(1, (end - cur) * fraction)` of Beam's offset trackers, computed
/// without overflow; `None` when it is not before `end`.
fn offset_split(cur: i128, end: i128, fraction: f64) -> Option<i64> {
    let step = ((end - cur) as f64 * fraction.clamp(0.0, 1.0)) as i128;
    let split = cur + step.max(1);
    (split < end).then_some(split as i64)
}

/// Claims offsets of an [`OffsetRange`] in increasing order (Beam's `OffsetRangeTracker`).
#[derive(Clone, Debug)]
pub struct OffsetRangeTracker {
    pub(super) range: OffsetRange,
    pub(super) last_claimed: Option<i64>,
    pub(super) last_attempted: Option<i64>,
    /// Whether splits other than checkpoints (`try_split(0.0)`) are accepted.
    pub(super) dynamic_splits: bool,
}

impl OffsetRangeTracker {
    /// Tracks `range`.
    pub fn new(range: OffsetRange) -> Self {
        OffsetRangeTracker { range, last_claimed: None, last_attempted: None, dynamic_splits: true }
    }
    /// Refuses splits at any point but the current one (checkpoints, `try_split(0.0)`): the
    /// range is then worked through in order, one part at a time, each part's residual the
    /// whole rest of the range (as a reader that must see a file's parts in order needs).
    pub fn checkpoints_only(self) -> Self {
        OffsetRangeTracker { dynamic_splits: false, ..self }
    }
    /// The last offset claimed successfully.
    pub fn last_claimed(&self) -> Option<i64> {
        self.last_claimed
    }
    /// The last offset a claim was attempted at, successful or not.
    pub fn last_attempted(&self) -> Option<i64> {
        self.last_attempted
    }
    fn cursor(&self) -> i128 {
        self.last_attempted.map_or(i128::from(self.range.from) - 1, i128::from)
    }
}

impl RestrictionTracker for OffsetRangeTracker {
    type Restriction = OffsetRange;
    type Position = i64;
    /// Claims `offset`, which must be after the last one attempted and not before the range
    /// (a DoFn that claims out of order fails its bundle: it would read data twice).
    fn try_claim(&mut self, offset: i64) -> bool {
        if let Some(last) = self.last_attempted {
            assert!(offset > last, "Trying to claim offset {offset} while last attempted was {last}");
        }
        assert!(offset >= self.range.from, "Trying to claim offset {offset} before the start of {:?}", self.range);
        self.last_attempted = Some(offset);
        if offset >= self.range.to {
            return false;
        }
        self.last_claimed = Some(offset);
        true
    }
    fn current_restriction(&self) -> OffsetRange {
        self.range
    }
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<OffsetRange> {
        if fraction_of_remainder > 0.0 && !self.dynamic_splits {
            return None;
        }
        let split = offset_split(self.cursor(), i128::from(self.range.to), fraction_of_remainder)?;
        let residual = OffsetRange::new(split, self.range.to);
        self.range = OffsetRange::new(self.range.from, split);
        Some(residual)
    }
    fn check_done(&self) -> Result<(), String> {
        if self.range.is_empty() {
            return Ok(());
        }
        match self.last_attempted {
            None => Err(format!("no work was claimed in the non-empty range {:?}", self.range)),
            Some(last) if last < self.range.to - 1 => Err(format!(
                "last attempted offset was {last} in range {:?}: claiming work in [{}, {}) was not attempted",
                self.range,
                last + 1,
                self.range.to
            )),
            Some(_) => Ok(()),
        }
    }
    fn progress(&self) -> Progress {
        let total = self.range.len() as f64;
        let remaining = match self.last_attempted {
            None => total,
            Some(last) => (self.range.to as f64 - last as f64).max(0.0),
        };
        Progress { work_completed: total - remaining, work_remaining: remaining }
    }
}

/// Estimates where a growing range ends, for [`GrowableOffsetRangeTracker`] (Beam's
/// `RangeEndEstimator`): a file's current size, a partition's latest offset.
pub trait RangeEndEstimator: Send + 'static {
    /// The estimated end, exclusive.
    fn estimate(&self) -> i64;
}

impl<F: Fn() -> i64 + Send + 'static> RangeEndEstimator for F {
    fn estimate(&self) -> i64 {
        self()
    }
}

/// Claims offsets of a range whose end is not known yet: `[from, i64::MAX)` until a split gives
/// it an end (Beam's `GrowableOffsetRangeTracker`). Splits are placed by the estimated end.
pub struct GrowableOffsetRangeTracker {
    pub(super) inner: OffsetRangeTracker,
    pub(super) end: Box<dyn RangeEndEstimator>,
}

impl GrowableOffsetRangeTracker {
    /// Tracks offsets from `from` on, splitting by `end`'s estimates.
    pub fn new(from: i64, end: impl RangeEndEstimator) -> Self {
        Self::of(OffsetRange::new(from, i64::MAX), end)
    }
    /// Tracks `range` (`to == i64::MAX` while it grows), splitting by `end`'s estimates.
    pub fn of(range: OffsetRange, end: impl RangeEndEstimator) -> Self {
        GrowableOffsetRangeTracker { inner: OffsetRangeTracker::new(range), end: Box::new(end) }
    }
    fn growing(&self) -> bool {
        self.inner.range.to == i64::MAX
    }
    fn estimated_end(&self) -> i128 {
        i128::from(self.end.estimate()).max(self.inner.cursor() + 1)
    }
}

impl RestrictionTracker for GrowableOffsetRangeTracker {
    type Restriction = OffsetRange;
    type Position = i64;
    fn try_claim(&mut self, offset: i64) -> bool {
        self.inner.try_claim(offset)
    }
    fn current_restriction(&self) -> OffsetRange {
        self.inner.range
    }
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<OffsetRange> {
        if !self.growing() || self.inner.range.is_empty() {
            return self.inner.try_split(fraction_of_remainder);
        }
        // Where the split goes follows the estimate; the residual keeps growing.
        let split = offset_split(self.inner.cursor(), self.estimated_end(), fraction_of_remainder)
            .or_else(|| (fraction_of_remainder == 0.0).then(|| (self.inner.cursor() + 1) as i64))?;
        let residual = OffsetRange::new(split, i64::MAX);
        self.inner.range = OffsetRange::new(self.inner.range.from, split);
        Some(residual)
    }
    /// A range that still grows is done only once a claim at `i64::MAX` was attempted (the
    /// DoFn found the source's end); one that was split checks as a fixed range.
    fn check_done(&self) -> Result<(), String> {
        if self.growing() && self.inner.last_attempted != Some(i64::MAX) {
            return Err(format!(
                "the growing range {:?} was neither split nor claimed to its end (a claim at i64::MAX)",
                self.inner.range
            ));
        }
        self.inner.check_done()
    }
    fn progress(&self) -> Progress {
        if !self.growing() {
            return self.inner.progress();
        }
        let from = i128::from(self.inner.range.from);
        let end = self.estimated_end();
        let done = (self.inner.cursor() + 1 - from).max(0);
        Progress { work_completed: done as f64, work_remaining: (end - from - done).max(0) as f64 }
    }
    fn is_bounded(&self) -> bool {
        !self.growing()
    }
}
