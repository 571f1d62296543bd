//! Splittable DoFns (Beam's SDF): a DoFn whose work for one element is a *restriction* that
//! the runner may split, checkpoint and resume.
//!
//! A [`SplittableDoFn`] gives each element an initial restriction (an [`OffsetRange`] of a
//! file's bytes, of a sequence's ticks, of a partition's offsets), optionally split at once
//! into several ([`SplittableDoFn::split_restriction`]), and processes one restriction at a
//! time through a [`RestrictionTracker`], claiming each position before it outputs what is
//! there. The runner may split the tracker's restriction between claims: the DoFn keeps the
//! *primary* and the rest, the *residual*, is processed later, after a restart if need be (it
//! is part of the operator's checkpointed state). A DoFn that has nothing to do yet returns
//! [`ProcessContinuation::resume`] with a delay (a poll), and the runner comes back to what is
//! left of its restriction then.
//!
//! Every pending restriction carries a [`WatermarkEstimator`]; the transform's output
//! watermark is the minimum of their estimates and its input watermark, so windows downstream
//! close as a source's event time moves, as with Beam's SDF-based sources.
//!
//! Apply one with [`SplittableParDo::of`]. Runners differ only in when they split: the
//! micro-batch and timely runners checkpoint a restriction once a batch (epoch) has claimed
//! its share, and resume the residual in the next; the direct runner also splits at random
//! claims, so a tracker that does not split honestly shows up as lost or duplicated output.
//!
//! ```
//! use weir_sdk::prelude::*;
//! use weir_sdk::splittable::*;
//!
//! /// Outputs 0..n for each n, as a restriction of offsets.
//! #[derive(Clone)]
//! struct CountTo;
//!
//! impl SplittableDoFn for CountTo {
//!     type In = i64;
//!     type Out = i64;
//!     type Restriction = OffsetRange;
//!     type Tracker = OffsetRangeTracker;
//!     fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
//!         Ok(OffsetRange::new(0, *n))
//!     }
//!     fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
//!         OffsetRangeTracker::new(r)
//!     }
//!     fn process(
//!         &mut self,
//!         _: &i64,
//!         tracker: &mut Claims<'_, OffsetRangeTracker>,
//!         ctx: &mut SdfContext<'_, i64>,
//!     ) -> UserResult<ProcessContinuation> {
//!         let mut i = tracker.current_restriction().from;
//!         while tracker.try_claim(i) {
//!             ctx.output(i);
//!             i += 1;
//!         }
//!         Ok(ProcessContinuation::stop())
//!     }
//! }
//!
//! let p = Pipeline::create();
//! let out = p.apply("Ns", Create::of(vec![3i64, 2])).apply("Count", SplittableParDo::of(CountTo));
//! assert_that(&out).contains_in_any_order(vec![0, 1, 2, 0, 1]);
//! assert!(p.validate().is_ok());
//! ```

use crate::coders::{Coder, Element, ElementCoder};
use crate::error::{UserError, UserResult};
use crate::graph::{Boundedness, Payload};
use crate::kernel::{Batch, Bundle};
use crate::pane::PaneInfo;
use crate::pipeline::{output_boundedness, PCollection, PTransform};
use crate::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use crate::transforms::par_do::ParDo;
use crate::transforms::reshuffle::Reshuffle;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use crate::{DoFn, ProcessContext};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// `OffsetRange.split(desired, min)`), for [`SplittableDoFn::split_restriction`].
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
    range: OffsetRange,
    last_claimed: Option<i64>,
    last_attempted: Option<i64>,
    /// Whether splits other than checkpoints (`try_split(0.0)`) are accepted.
    dynamic_splits: bool,
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
    inner: OffsetRangeTracker,
    end: Box<dyn RangeEndEstimator>,
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

/// What a splittable DoFn wants after processing a restriction (Beam's `ProcessContinuation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessContinuation {
    /// The restriction is done (every position claimed or attempted).
    Stop,
    /// Come back for the rest of the restriction after `delay` (a poll found nothing new).
    Resume {
        /// How long to wait.
        delay: Duration,
    },
    /// Come back for the rest of the restriction in the next run of the pipeline from its
    /// checkpoint, not in this one: an incremental batch run (available-now with a checkpoint)
    /// may end with the restriction waiting in the checkpoint. The restriction holds the
    /// watermark meanwhile. A run without a checkpoint has no next run, and waits.
    ResumeNextRun,
}

impl ProcessContinuation {
    /// Done.
    pub fn stop() -> Self {
        ProcessContinuation::Stop
    }
    /// Resume the rest at once.
    pub fn resume() -> Self {
        ProcessContinuation::Resume { delay: Duration::ZERO }
    }
    /// Resume the rest after `delay` (Beam's `withResumeDelay`).
    pub fn with_resume_delay(self, delay: Duration) -> Self {
        match self {
            ProcessContinuation::Resume { .. } => ProcessContinuation::Resume { delay },
            other => other,
        }
    }
    /// Resume the rest in the next run (see [`ProcessContinuation::ResumeNextRun`]).
    pub fn resume_next_run() -> Self {
        ProcessContinuation::ResumeNextRun
    }
}

/// Estimates the event time a restriction has reached: the output watermark of a splittable
/// DoFn is the minimum over its pending restrictions (Beam's `WatermarkEstimators`). The
/// estimate is checkpointed with the residual, so a restart resumes from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatermarkEstimator {
    /// Set by the DoFn with [`SdfContext::set_watermark`] (Beam's `Manual`).
    Manual(Timestamp),
    /// The latest output timestamp (Beam's `MonotonicallyIncreasing`): outputs must come in
    /// timestamp order.
    MonotonicallyIncreasing(Timestamp),
    /// The processing time (Beam's `WallTime`).
    WallTime(Timestamp),
}

impl WatermarkEstimator {
    /// The current estimate.
    pub fn current(&self) -> Timestamp {
        match *self {
            WatermarkEstimator::Manual(t)
            | WatermarkEstimator::MonotonicallyIncreasing(t)
            | WatermarkEstimator::WallTime(t) => t,
        }
    }
    fn observe_output(&mut self, timestamp: Timestamp) {
        if let WatermarkEstimator::MonotonicallyIncreasing(t) = self {
            *t = (*t).max(timestamp);
        }
    }
    fn observe_time(&mut self, now: Timestamp) {
        if let WatermarkEstimator::WallTime(t) = self {
            *t = (*t).max(now);
        }
    }
}

/// The tracker of the restriction being processed, as the runner hands it to
/// [`SplittableDoFn::process`]: claims go through here, so the runner can checkpoint (or, on
/// the direct runner, split at random) between them.
pub struct Claims<'a, T: RestrictionTracker> {
    tracker: &'a mut T,
    /// Claims made in this call, and the most before the runner checkpoints.
    claimed: usize,
    budget: usize,
    checkpointed: bool,
    random: Option<&'a mut rand::rngs::SmallRng>,
    residuals: &'a mut Vec<T::Restriction>,
    /// Outputs made in this call: the budget bounds them too, so a claim that outputs much (a
    /// Parquet row group) checkpoints the rest before the output grows without bound.
    emitted: &'a std::cell::Cell<usize>,
    /// A replay: the budget is exactly the claims the logged run made, outputs aside.
    exact: bool,
}

impl<T: RestrictionTracker> Claims<'_, T> {
    /// Claims `position` (see [`RestrictionTracker::try_claim`]); `false` means stop.
    pub fn try_claim(&mut self, position: T::Position) -> bool {
        let spent = if self.exact { self.claimed } else { self.claimed.max(self.emitted.get()) };
        if !self.checkpointed && spent >= self.budget {
            // This call had its share: the rest waits for the next one.
            self.checkpointed = true;
            if let Some(r) = self.tracker.try_split(0.0) {
                self.residuals.push(r);
            }
        } else if let Some(rng) = self.random.as_deref_mut() {
            if rng.random_ratio(1, 4) {
                let fraction = rng.random::<f64>();
                if let Some(r) = self.tracker.try_split(fraction) {
                    self.residuals.push(r);
                }
            }
        }
        let ok = self.tracker.try_claim(position);
        self.claimed += usize::from(ok);
        ok
    }
    /// The restriction as it is now.
    pub fn current_restriction(&self) -> T::Restriction {
        self.tracker.current_restriction()
    }
    /// Work done and left.
    pub fn progress(&self) -> Progress {
        self.tracker.progress()
    }
    /// The tracker itself, to read.
    pub fn tracker(&self) -> &T {
        self.tracker
    }
}

/// What [`SplittableDoFn::process`] sees besides the element and its tracker: the element's
/// timestamp, window and pane, the time, the watermark estimator, and the output.
pub struct SdfContext<'a, O> {
    timestamp: Timestamp,
    window: Window,
    pane: PaneInfo,
    skew: i64,
    now: Timestamp,
    estimator: &'a mut WatermarkEstimator,
    out: &'a mut Chunks<O>,
    emitted: &'a std::cell::Cell<usize>,
    finalizers: &'a mut Vec<Finalizer>,
}

/// Work to do once the output of a call is committed (see [`SdfContext::after_commit`]).
pub type Finalizer = Box<dyn FnOnce() -> UserResult + Send>;

/// Outputs in chunks of at most [`CHUNK`] elements: a reader that outputs a lot in one call
/// (a Parquet row group) hands on batches of a size the allocator recycles, not one buffer
/// that grows by copying and is mapped afresh each time.
pub struct Chunks<O>(Vec<Vec<WindowedValue<O>>>);

/// The most elements in one output batch of a splittable DoFn.
pub const CHUNK: usize = 2048;

impl<O> Chunks<O> {
    fn push(&mut self, wv: WindowedValue<O>) {
        match self.0.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(wv),
            _ => {
                let mut next = Vec::with_capacity(CHUNK);
                next.push(wv);
                self.0.push(next);
            }
        }
    }
}

impl<O: Element> SdfContext<'_, O> {
    /// The element's timestamp.
    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }
    /// The element's window.
    pub fn window(&self) -> &Window {
        &self.window
    }
    /// The pane that produced the element.
    pub fn pane(&self) -> &PaneInfo {
        &self.pane
    }
    /// The processing time of this call, in ms since the epoch (the runner's clock: the wall
    /// clock, or a TestStream's test clock).
    pub fn processing_time(&self) -> Timestamp {
        self.now
    }
    /// The watermark estimate of this restriction.
    pub fn watermark(&self) -> Timestamp {
        self.estimator.current()
    }
    /// Sets the watermark of a [`WatermarkEstimator::Manual`] estimator; an error for the others.
    /// A watermark lower than one set before leaves the estimate where it was.
    pub fn set_watermark(&mut self, watermark: Timestamp) -> UserResult {
        match &mut *self.estimator {
            WatermarkEstimator::Manual(t) => {
                // As Beam's `WatermarkEstimators.Manual`: the estimate keeps the highest
                // watermark set so far, so a lower one never moves it back.
                *t = (*t).max(watermark);
                Ok(())
            }
            other => Err(format!("set_watermark needs a manual watermark estimator, not {other:?}").into()),
        }
    }
    /// Runs `callback` once the runner has durably committed what this call output (Beam's
    /// `BundleFinalizer.afterBundleCommit`), even while the element still has residual work
    /// pending: to acknowledge the messages a call read, or archive a file once its last part
    /// is read. A call whose batch fails
    /// is retried, and its callbacks are dropped with it. It is best effort: a crash between the
    /// commit and the callback loses the callback. A DoFn that uses it says so with
    /// [`SplittableDoFn::finalizes_bundles`].
    pub fn after_commit(&mut self, callback: impl FnOnce() -> UserResult + Send + 'static) {
        self.finalizers.push(Box::new(callback));
    }
    /// Outputs `value` at the element's timestamp, in its window.
    pub fn output(&mut self, value: O) {
        self.estimator.observe_output(self.timestamp);
        self.emitted.set(self.emitted.get() + 1);
        self.out.push(WindowedValue { value, timestamp: self.timestamp, window: self.window, pane: self.pane });
    }
    /// Outputs `value` at `timestamp`, in the element's window. Fails if `timestamp` is
    /// earlier than the element's minus the DoFn's allowed skew.
    pub fn output_with_timestamp(&mut self, value: O, timestamp: Timestamp) -> UserResult {
        crate::do_fn::check_output_timestamp(timestamp, self.timestamp, self.skew)?;
        self.estimator.observe_output(timestamp);
        self.emitted.set(self.emitted.get() + 1);
        self.out.push(WindowedValue { value, timestamp, window: self.window, pane: self.pane });
        Ok(())
    }
}

/// A DoFn over restrictions (Beam's splittable DoFn); apply it with [`SplittableParDo::of`].
///
/// Instances are cloned from the one given, one per worker, as for [`DoFn`]. `process` is called
/// once per restriction (and again per residual after a split or a resume); it claims every
/// position through its tracker before outputting what is there, and returns
/// [`ProcessContinuation::stop`] once a claim fails or the restriction is done, or
/// [`ProcessContinuation::resume`] to be called again for the rest later. Errors and panics
/// fail the pipeline with the step's name.
pub trait SplittableDoFn: Clone + Send + 'static {
    /// Input element type.
    type In: Element;
    /// Output element type.
    type Out: Element;
    /// What one call works through (checkpointed with the operator's state).
    type Restriction: Element;
    /// Tracks claims in a restriction.
    type Tracker: RestrictionTracker<Restriction = Self::Restriction>;

    /// The whole work of an element (Beam's `@GetInitialRestriction`).
    fn initial_restriction(&self, element: &Self::In) -> UserResult<Self::Restriction>;
    /// Splits an element's initial restriction into parts processed independently, possibly
    /// on several workers (Beam's `@SplitRestriction`). The default keeps it whole.
    fn split_restriction(
        &self,
        _element: &Self::In,
        restriction: Self::Restriction,
    ) -> UserResult<Vec<Self::Restriction>> {
        Ok(vec![restriction])
    }
    /// A tracker of `restriction` (Beam's `@NewTracker`).
    fn new_tracker(&self, element: &Self::In, restriction: Self::Restriction) -> Self::Tracker;
    /// The watermark estimator a new element's restrictions start with (Beam's
    /// `@NewWatermarkEstimator` with its initial state). The default follows the output
    /// timestamps from the element's own.
    fn initial_watermark_estimator(&self, _element: &Self::In, timestamp: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::MonotonicallyIncreasing(timestamp)
    }
    /// Whether one element's work may never end (Beam's `@UnboundedPerElement`): the output is
    /// then unbounded, and the pipeline runs in streaming mode.
    fn unbounded_per_element(&self) -> bool {
        false
    }
    /// How far before the element's timestamp `output_with_timestamp` may go, ms.
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        0
    }
    /// Whether `process` registers callbacks with [`SdfContext::after_commit`]: a runner that
    /// cannot call them after its commits refuses the pipeline when it translates it.
    fn finalizes_bundles(&self) -> bool {
        false
    }
    /// Whether the DoFn is a source's reader (Kafka's partitions): a batch (epoch) of the
    /// micro-batch and timely runners then claims no more of its positions than
    /// `--max-batch-size` allows a source, as a Read's, and checkpoints the rest for the next
    /// (Spark's `maxOffsetsPerTrigger`). Otherwise a batch claims up to
    /// `weir_runner_core`'s budget per call, and runs residuals due at once in the same batch.
    fn reads_a_source(&self) -> bool {
        false
    }
    /// Called once per instance before any element.
    fn setup(&mut self) -> UserResult {
        Ok(())
    }
    /// Processes (what is left of) one restriction of `element`.
    fn process(
        &mut self,
        element: &Self::In,
        tracker: &mut Claims<'_, Self::Tracker>,
        ctx: &mut SdfContext<'_, Self::Out>,
    ) -> UserResult<ProcessContinuation>;
    /// Called once when the instance is discarded.
    fn teardown(&mut self) -> UserResult {
        Ok(())
    }
}

/// An element with one of its restrictions: the input of the transform's processing step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ElementAndRestriction<I, R> {
    /// The element.
    pub element: I,
    /// One of its restrictions.
    pub restriction: R,
}

/// A pending restriction as checkpoints hold it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct WorkRecord<I, R> {
    element: I,
    restriction: R,
    estimator: WatermarkEstimator,
    timestamp: Timestamp,
    window: Window,
    pane: PaneInfo,
    resume_at: Timestamp,
}

/// A splittable DoFn's pending work, as the runner drives it (implemented by the SDK for a
/// typed [`SplittableDoFn`]; the runner-core operator schedules it). The work is a queue of
/// restrictions, each due at a processing time; running takes the due ones in order.
pub trait ErasedSplittable: Send {
    /// `setup` of the DoFn.
    fn setup(&mut self) -> UserResult;
    /// `teardown` of the DoFn.
    fn teardown(&mut self) -> UserResult;
    /// Queues the restrictions of a batch of [`ElementAndRestriction`]s, due at once.
    fn add(&mut self, input: Batch) -> UserResult;
    /// Processes the restrictions due at `now`, claiming at most about `budget` positions in
    /// all (a restriction that reaches it is checkpointed, its residual due at once); appends
    /// the output to `out` and returns the number of restrictions processed.
    /// Output goes to `out`, in batches of at most [`CHUNK`] elements.
    fn run(&mut self, now: Timestamp, budget: usize, out: &mut Vec<Batch>) -> Result<usize, UserError>;
    /// The minimum watermark estimate of the pending restrictions.
    fn hold(&self) -> Option<Timestamp>;
    /// When the earliest pending restriction is due.
    fn next_due(&self) -> Option<Timestamp>;
    /// How many restrictions are pending.
    fn pending(&self) -> usize;
    /// Approximate bytes the pending restrictions hold.
    fn pending_bytes(&self) -> usize;
    /// The pending restrictions, encoded (each with its queue position), for checkpoints.
    fn encode_pending(&self) -> Result<Vec<(u64, Vec<u8>)>, UserError>;
    /// Replaces the pending restrictions with those `encode_pending` wrote.
    fn restore_pending(&mut self, entries: Vec<(u64, Vec<u8>)>) -> UserResult;
    /// Splits restrictions at random claims from now on (seeded), to check trackers split
    /// honestly.
    fn split_randomly(&mut self, seed: u64);
    /// A drain (Beam's truncation): drops the pending restrictions whose work may never end
    /// (those of a DoFn unbounded per element, or whose tracker says they are unbounded);
    /// bounded ones are processed to their end, as bounded sources are read to theirs.
    /// Returns how many were dropped.
    fn truncate_for_drain(&mut self) -> usize;
    /// The callbacks the calls since the last take registered ([`SdfContext::after_commit`]):
    /// the runner runs them once it has committed the output of those calls.
    fn take_finalizers(&mut self) -> Vec<Finalizer>;
    /// Records from now on which restrictions the calls run and how much each claims, for
    /// [`ErasedSplittable::take_runs`]: a source's reads are decided at run time (what a Kafka
    /// partition holds when it is polled), so a runner logs them to replay a batch exactly.
    fn record_runs(&mut self);
    /// The runs recorded since the last take, in order.
    fn take_runs(&mut self) -> Vec<ClaimRun>;
    /// Makes the next calls repeat `runs` rather than schedule their own, until the next
    /// [`ErasedSplittable::take_runs`]: each logged run's restriction is found among the pending
    /// ones (by fingerprint) and claims exactly as many positions again, waiting up to
    /// [`REPLAY_PATIENCE`] for positions that are not there yet; no other restriction runs.
    /// Runs whose restriction is not (yet) pending are left for later calls: a call may come
    /// before the input that queues it, and a rescaled restart gives every partition the runs
    /// of all.
    fn replay_runs(&mut self, runs: Vec<ClaimRun>);
}

/// One run of one restriction in a call, as a replay repeats it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRun {
    /// A fingerprint of the element and restriction run (FNV-1a of their encoding).
    pub restriction: u64,
    /// The positions it claimed.
    pub claims: usize,
}

/// How long a replayed run waits for the positions its logged run claimed (a broker slow to
/// hand back records it holds) before the replay fails.
pub const REPLAY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// A replayed run that could not claim what its logged run did.
fn short_replay(claimed: usize, logged: usize) -> UserError {
    format!(
        "replaying a logged batch: the restriction claimed {claimed} positions where the logged run claimed \
         {logged} (the source no longer holds what it read, or gave it back too slowly)"
    )
    .into()
}

/// Makes fresh [`ErasedSplittable`]s (one per partition).
pub type SplittableFactory = Arc<dyn Fn() -> Box<dyn ErasedSplittable> + Send + Sync>;

/// The runner-visible payload of a splittable DoFn's processing step
/// ([`crate::urns::SPLITTABLE_PROCESS`]).
#[derive(Clone)]
pub struct SplittablePayload {
    /// Makes the typed work queues.
    pub factory: SplittableFactory,
    /// The DoFn's type, for plans.
    pub fn_name: &'static str,
    /// Whether the DoFn registers callbacks to run after commits.
    pub finalizes_bundles: bool,
    /// Whether the DoFn reads a source ([`SplittableDoFn::reads_a_source`]).
    pub reads_a_source: bool,
}

struct Work<F: SplittableDoFn> {
    element: F::In,
    restriction: F::Restriction,
    estimator: WatermarkEstimator,
    timestamp: Timestamp,
    window: Window,
    pane: PaneInfo,
    resume_at: Timestamp,
    /// Its place in the queue, for checkpoints (kept across restarts).
    id: u64,
}

struct SplittableKernel<F: SplittableDoFn> {
    fn_: F,
    pending: std::collections::VecDeque<Work<F>>,
    next_id: u64,
    random: Option<rand::rngs::SmallRng>,
    /// Callbacks of the calls since the last commit.
    finalizers: Vec<Finalizer>,
    /// The runs since the last take, when recording ([`ErasedSplittable::record_runs`]).
    runs: Option<Vec<ClaimRun>>,
    /// Logged runs still to repeat, when replaying ([`ErasedSplittable::replay_runs`]).
    replay: Option<Vec<ClaimRun>>,
}

impl<F: SplittableDoFn> SplittableKernel<F> {
    fn new(fn_: F) -> Self {
        SplittableKernel {
            fn_,
            pending: Default::default(),
            next_id: 0,
            random: None,
            finalizers: Vec::new(),
            runs: None,
            replay: None,
        }
    }

    /// The fingerprint of a pending restriction, as runs are logged by.
    fn fingerprint_of(&self, w: &Work<F>) -> Result<u64, UserError> {
        let pair = ElementAndRestriction { element: w.element.clone(), restriction: w.restriction.clone() };
        let mut bytes = Vec::new();
        ElementCoder::<ElementAndRestriction<F::In, F::Restriction>>::new().encode(&pair, &mut bytes)?;
        Ok(crate::kernel::fnv1a(crate::kernel::FNV1A_BASIS, &bytes))
    }

    /// Repeats the logged runs whose restrictions are pending, in order, until none is left
    /// that can run; returns how many ran.
    fn replay(&mut self, now: Timestamp, out: &mut Vec<Batch>) -> Result<usize, UserError> {
        let mut ran = 0;
        loop {
            let Some(runs) = self.replay.as_ref().filter(|r| !r.is_empty()) else { return Ok(ran) };
            let mut prints = Vec::with_capacity(self.pending.len());
            for w in &self.pending {
                prints.push(self.fingerprint_of(w)?);
            }
            let found = runs
                .iter()
                .enumerate()
                .find_map(|(i, r)| prints.iter().position(|&p| p == r.restriction).map(|at| (i, at, *r)));
            let Some((i, at, run)) = found else { return Ok(ran) };
            if let Some(r) = self.replay.as_mut() {
                r.remove(i);
            }
            let Some(w) = self.pending.remove(at) else { return Ok(ran) };
            let mut rows = Chunks(Vec::new());
            let processed = self.process_one(w, now, &mut run.claims.clone(), &mut rows, Some(run));
            out.extend(rows.0.into_iter().map(Batch::new));
            processed?;
            ran += 1;
        }
    }

    fn push(&mut self, mut w: Work<F>) {
        w.id = self.next_id;
        self.next_id += 1;
        self.pending.push_back(w);
    }

    /// Processes one restriction, queueing its residuals. A replay (`exact`, the logged run)
    /// claims exactly as much as the logged run did: the DoFn is called again on what is left
    /// while it stops short to wait for more.
    fn process_one(
        &mut self,
        mut w: Work<F>,
        now: Timestamp,
        budget: &mut usize,
        out: &mut Chunks<F::Out>,
        exact: Option<ClaimRun>,
    ) -> UserResult {
        let print = match (&self.runs, exact) {
            (_, Some(run)) => Some(run.restriction),
            (Some(_), None) => Some(self.fingerprint_of(&w)?),
            (None, None) => None,
        };
        let deadline = std::time::Instant::now() + REPLAY_PATIENCE;
        let mut total = 0;
        loop {
            let (continuation, claimed, residuals, mut tracker) =
                self.call(&mut w, now, budget, out, exact.is_some())?;
            total += claimed;
            match exact {
                Some(run) if total < run.claims && !matches!(continuation, ProcessContinuation::Stop) => {
                    // Stopped short to wait for positions the logged run found: call again on
                    // the rest, after a pause.
                    if !residuals.is_empty() || std::time::Instant::now() > deadline {
                        return Err(short_replay(total, run.claims));
                    }
                    let Some(rest) = tracker.try_split(0.0) else { return Err(short_replay(total, run.claims)) };
                    w.restriction = rest;
                    *budget = run.claims - total;
                    std::thread::sleep(std::time::Duration::from_millis(if claimed == 0 { 20 } else { 0 }));
                    continue;
                }
                Some(run) if total < run.claims => return Err(short_replay(total, run.claims)),
                _ => {}
            }
            if let (Some(runs), Some(restriction)) = (self.runs.as_mut(), print) {
                runs.push(ClaimRun { restriction, claims: total });
            }
            return self.requeue(w, now, continuation, residuals, tracker);
        }
    }

    /// One call of the DoFn's `process` on `w`: its continuation, its claims, the residuals
    /// split off, and the tracker as it left it. Output goes to `out`; the budget is spent.
    #[allow(clippy::type_complexity)]
    fn call(
        &mut self,
        w: &mut Work<F>,
        now: Timestamp,
        budget: &mut usize,
        out: &mut Chunks<F::Out>,
        exact: bool,
    ) -> Result<(ProcessContinuation, usize, Vec<F::Restriction>, F::Tracker), UserError> {
        let mut tracker = self.fn_.new_tracker(&w.element, w.restriction.clone());
        let mut residuals = Vec::new();
        w.estimator.observe_time(now);
        let skew = self.fn_.allowed_timestamp_skew_millis();
        let emitted = std::cell::Cell::new(0);
        let mut registered = Vec::new();
        let (continuation, claimed) = {
            let mut claims = Claims {
                tracker: &mut tracker,
                claimed: 0,
                budget: *budget,
                checkpointed: false,
                random: if exact { None } else { self.random.as_mut() },
                residuals: &mut residuals,
                emitted: &emitted,
                exact,
            };
            let mut ctx = SdfContext {
                timestamp: w.timestamp,
                window: w.window,
                pane: w.pane,
                skew,
                now,
                estimator: &mut w.estimator,
                out,
                emitted: &emitted,
                finalizers: &mut registered,
            };
            let c = self.fn_.process(&w.element, &mut claims, &mut ctx)?;
            (c, claims.claimed)
        };
        *budget = budget.saturating_sub(claimed.max(emitted.get()).max(1));
        self.finalizers.append(&mut registered);
        Ok((continuation, claimed, residuals, tracker))
    }

    /// Queues what is left of `w` after its last call: the residuals, due at once or after the
    /// delay asked for.
    fn requeue(
        &mut self,
        mut w: Work<F>,
        now: Timestamp,
        continuation: ProcessContinuation,
        mut residuals: Vec<F::Restriction>,
        mut tracker: F::Tracker,
    ) -> UserResult {
        // Residuals are due at once (the earliest time there is), or after the delay asked for.
        let resume_at = match continuation {
            ProcessContinuation::Stop => MIN_TIMESTAMP,
            ProcessContinuation::Resume { delay } => {
                // What is left of the primary resumes after the delay.
                if let Some(r) = tracker.try_split(0.0) {
                    residuals.push(r);
                }
                match crate::time::duration_millis(delay) {
                    0 => MIN_TIMESTAMP,
                    ms => now.saturating_add(ms),
                }
            }
            // Never due in this run; a restored run makes it due at once.
            ProcessContinuation::ResumeNextRun => {
                if let Some(r) = tracker.try_split(0.0) {
                    residuals.push(r);
                }
                MAX_TIMESTAMP
            }
        };
        tracker.check_done().map_err(|e| -> UserError {
            format!("the restriction tracker is not done after process returned {continuation:?}: {e}").into()
        })?;
        w.estimator.observe_time(now);
        // Residuals go before the rest of the queue's later work, in the order split off
        // (each a later part than the one before it).
        for restriction in residuals.into_iter().rev() {
            self.push(Work {
                element: w.element.clone(),
                restriction,
                estimator: w.estimator,
                timestamp: w.timestamp,
                window: w.window,
                pane: w.pane,
                resume_at,
                id: 0,
            });
        }
        Ok(())
    }
}

/// Runs a splittable DoFn over one restriction of one element with no runner (Beam's
/// `DoFnTester` for splittable DoFns), to test a DoFn or a [`RestrictionTracker`]: `process` is
/// called again for every residual it leaves, checkpointed every `budget` claims, with resume
/// delays skipped, and each tracker's `check_done` is enforced. The element is at
/// `MIN_TIMESTAMP` in the global window. Returns the outputs with their timestamps, in order.
pub fn process_restriction<F: SplittableDoFn>(
    fn_: F,
    element: F::In,
    restriction: F::Restriction,
    budget: usize,
) -> UserResult<Vec<(F::Out, Timestamp)>> {
    let mut kernel = SplittableKernel::<F>::new(fn_);
    kernel.fn_.setup()?;
    let estimator = kernel.fn_.initial_watermark_estimator(&element, MIN_TIMESTAMP);
    kernel.push(Work {
        element,
        restriction,
        estimator,
        timestamp: MIN_TIMESTAMP,
        window: Window::Global,
        pane: PaneInfo::NO_FIRING,
        resume_at: MIN_TIMESTAMP,
        id: 0,
    });
    let mut out = Chunks(Vec::new());
    while let Some(w) = kernel.pending.pop_front() {
        let mut left = budget.max(1);
        kernel.process_one(w, MIN_TIMESTAMP, &mut left, &mut out, None)?;
        for w in &mut kernel.pending {
            w.resume_at = MIN_TIMESTAMP;
        }
    }
    // Nothing to commit here: the callbacks run as if the outputs had been.
    for f in kernel.take_finalizers() {
        f()?;
    }
    kernel.fn_.teardown()?;
    Ok(out.0.into_iter().flatten().map(|wv| (wv.value, wv.timestamp)).collect())
}

impl<F: SplittableDoFn> ErasedSplittable for SplittableKernel<F> {
    fn setup(&mut self) -> UserResult {
        self.fn_.setup()
    }
    fn teardown(&mut self) -> UserResult {
        self.fn_.teardown()
    }
    fn add(&mut self, input: Batch) -> UserResult {
        Bundle::<ElementAndRestriction<F::In, F::Restriction>>::from_batch(input)?.try_for_each(|wv| {
            let estimator = self.fn_.initial_watermark_estimator(&wv.value.element, wv.timestamp);
            self.push(Work {
                element: wv.value.element,
                restriction: wv.value.restriction,
                estimator,
                timestamp: wv.timestamp,
                window: wv.window,
                pane: wv.pane,
                resume_at: MIN_TIMESTAMP,
                id: 0,
            });
            Ok::<(), UserError>(())
        })
    }
    fn run(&mut self, now: Timestamp, budget: usize, out: &mut Vec<Batch>) -> Result<usize, UserError> {
        if self.replay.is_some() {
            return self.replay(now, out);
        }
        let mut rows = Chunks(Vec::new());
        let mut budget = budget.max(1);
        let mut ran = 0;
        // Each restriction queued before this call is looked at once, in queue order: the due
        // ones run while the budget lasts, the others go round to the back (as do residuals,
        // which wait for the next call).
        for _ in 0..self.pending.len() {
            let Some(w) = self.pending.pop_front() else { break };
            if w.resume_at > now || budget == 0 {
                self.pending.push_back(w);
                continue;
            }
            ran += 1;
            let processed = self.process_one(w, now, &mut budget, &mut rows, None);
            out.extend(std::mem::take(&mut rows.0).into_iter().map(Batch::new));
            processed?;
        }
        Ok(ran)
    }
    fn hold(&self) -> Option<Timestamp> {
        self.pending.iter().map(|w| w.estimator.current()).min()
    }
    /// Restrictions waiting for the next run are due at no time of this one.
    fn next_due(&self) -> Option<Timestamp> {
        self.pending.iter().map(|w| w.resume_at).filter(|&t| t < MAX_TIMESTAMP).min()
    }
    fn pending(&self) -> usize {
        self.pending.len()
    }
    fn pending_bytes(&self) -> usize {
        let coder = ElementCoder::<ElementAndRestriction<F::In, F::Restriction>>::new();
        self.pending
            .iter()
            .take(16)
            .map(|w| {
                let pair = ElementAndRestriction { element: w.element.clone(), restriction: w.restriction.clone() };
                coder.encoded_len(&pair).unwrap_or(0) + 64
            })
            .sum::<usize>()
            * self.pending.len()
            / self.pending.len().clamp(1, 16)
    }
    fn encode_pending(&self) -> Result<Vec<(u64, Vec<u8>)>, UserError> {
        let coder = ElementCoder::<WorkRecord<F::In, F::Restriction>>::new();
        self.pending
            .iter()
            .map(|w| {
                let record = WorkRecord {
                    element: w.element.clone(),
                    restriction: w.restriction.clone(),
                    estimator: w.estimator,
                    timestamp: w.timestamp,
                    window: w.window,
                    pane: w.pane,
                    resume_at: w.resume_at,
                };
                let mut bytes = Vec::new();
                coder.encode(&record, &mut bytes)?;
                Ok((w.id, bytes))
            })
            .collect()
    }
    fn restore_pending(&mut self, mut entries: Vec<(u64, Vec<u8>)>) -> UserResult {
        let coder = ElementCoder::<WorkRecord<F::In, F::Restriction>>::new();
        entries.sort_by_key(|(id, _)| *id);
        self.pending.clear();
        // A rollback: what the calls since the commit registered is undone with them.
        self.finalizers.clear();
        self.next_id = 0;
        for (id, bytes) in entries {
            let r = coder.decode_outer(&bytes)?;
            self.pending.push_back(Work {
                element: r.element,
                restriction: r.restriction,
                estimator: r.estimator,
                timestamp: r.timestamp,
                window: r.window,
                pane: r.pane,
                // A restored run does not wait for delays asked before it: a resume delay is a
                // hint (as in Beam), and a watch restored in a new run polls as the run starts.
                resume_at: MIN_TIMESTAMP,
                id,
            });
            self.next_id = self.next_id.max(id + 1);
        }
        Ok(())
    }
    fn split_randomly(&mut self, seed: u64) {
        self.random = Some(rand::rngs::SmallRng::seed_from_u64(seed));
    }
    fn take_finalizers(&mut self) -> Vec<Finalizer> {
        std::mem::take(&mut self.finalizers)
    }
    fn record_runs(&mut self) {
        self.runs.get_or_insert_with(Vec::new);
    }
    fn take_runs(&mut self) -> Vec<ClaimRun> {
        self.replay = None;
        self.runs.as_mut().map(std::mem::take).unwrap_or_default()
    }
    fn replay_runs(&mut self, runs: Vec<ClaimRun>) {
        self.replay = Some(runs);
    }
    fn truncate_for_drain(&mut self) -> usize {
        let before = self.pending.len();
        if self.fn_.unbounded_per_element() {
            self.pending.clear();
        } else {
            let fn_ = &self.fn_;
            self.pending.retain(|w| fn_.new_tracker(&w.element, w.restriction.clone()).is_bounded());
        }
        before - self.pending.len()
    }
}

/// Pairs each element with its initial restriction's parts.
#[derive(Clone)]
struct PairWithRestrictions<F>(F);

impl<F: SplittableDoFn> DoFn for PairWithRestrictions<F> {
    type In = F::In;
    type Out = ElementAndRestriction<F::In, F::Restriction>;
    /// As in Beam, every instance of the DoFn is set up before any other method is called on
    /// it, the one that computes initial restrictions included.
    fn setup(&mut self) -> UserResult {
        self.0.setup()
    }
    fn teardown(&mut self) -> UserResult {
        self.0.teardown()
    }
    fn process(&mut self, element: F::In, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let initial = self.0.initial_restriction(&element)?;
        for restriction in self.0.split_restriction(&element, initial)? {
            ctx.output(ElementAndRestriction { element: element.clone(), restriction });
        }
        Ok(())
    }
}

/// The processing step: every restriction through the DoFn, with its residuals.
struct ProcessRestrictions<F>(F);

impl<F: SplittableDoFn> PTransform<PCollection<ElementAndRestriction<F::In, F::Restriction>>>
    for ProcessRestrictions<F>
{
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<ElementAndRestriction<F::In, F::Restriction>>) -> PCollection<F::Out> {
        let p = input.pipeline().clone();
        let unbounded = self.0.unbounded_per_element();
        let finalizes_bundles = self.0.finalizes_bundles();
        let reads_a_source = self.0.reads_a_source();
        let proto = Mutex::new(self.0);
        let factory: SplittableFactory = Arc::new(move || {
            let fn_ = proto.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Box::new(SplittableKernel::<F>::new(fn_)) as Box<dyn ErasedSplittable>
        });
        let node = p.make_primitive(
            crate::urns::SPLITTABLE_PROCESS,
            Payload::Primitive(Arc::new(SplittablePayload {
                factory,
                fn_name: std::any::type_name::<F>(),
                finalizes_bundles,
                reads_a_source,
            })),
        );
        let b = if unbounded { Boundedness::Unbounded } else { output_boundedness(&p, &[input.id()]) };
        p.new_output::<F::Out>(node, "out", b, input.windowing_strategy())
    }
}

/// Applies a [`SplittableDoFn`]: `pc.apply("Read", SplittableParDo::of(ReadFn))`.
///
/// It expands as Beam's does: each element is paired with the parts of its initial
/// restriction, the pairs are spread over the workers (a reshuffle), and each part is
/// processed with its residuals by the splittable processing step.
pub struct SplittableParDo<F> {
    fn_: F,
}

impl<F: SplittableDoFn> SplittableParDo<F> {
    /// Runs `fn_` over every element's restrictions.
    pub fn of(fn_: F) -> Self {
        SplittableParDo { fn_ }
    }
}

impl<F: SplittableDoFn> PTransform<PCollection<F::In>> for SplittableParDo<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<F::In>) -> PCollection<F::Out> {
        input
            .apply("PairWithRestriction", ParDo::of(PairWithRestrictions(self.fn_.clone())))
            .apply("SpreadRestrictions", Reshuffle::via_random_key())
            .apply("ProcessRestrictions", ProcessRestrictions(self.fn_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_tracker_claims_splits_and_checks_as_beam() {
        let mut t = OffsetRangeTracker::new(OffsetRange::new(100, 200));
        assert_eq!(t.progress(), Progress { work_completed: 0.0, work_remaining: 100.0 });
        assert!(t.try_claim(100));
        assert!(t.try_claim(110));
        // Half of what is left after the last attempt: [110 + 45, 200).
        assert_eq!(t.try_split(0.5), Some(OffsetRange::new(155, 200)));
        assert_eq!(t.current_restriction(), OffsetRange::new(100, 155));
        assert!(t.try_claim(154));
        assert!(!t.try_claim(155));
        assert!(t.check_done().is_ok());
        // A checkpoint ends the primary right after the last attempt.
        let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
        assert!(t.try_claim(3));
        assert_eq!(t.try_split(0.0), Some(OffsetRange::new(4, 10)));
        assert!(t.check_done().is_ok());
        // Nothing to split off at the end; an unfinished range is reported.
        let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
        assert!(t.try_claim(9));
        assert_eq!(t.try_split(0.0), None);
        let t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
        assert!(t.check_done().unwrap_err().contains("no work was claimed"));
        let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
        t.try_claim(4);
        assert!(t.check_done().unwrap_err().contains("[5, 10) was not attempted"));
        // Huge ranges do not overflow.
        let mut t = OffsetRangeTracker::new(OffsetRange::new(i64::MIN, i64::MAX));
        let r = t.try_split(0.5).unwrap();
        assert!(r.from > i64::MIN && r.to == i64::MAX);
    }

    #[test]
    fn a_growable_tracker_splits_by_its_estimate_and_ends_only_when_split() {
        let mut t = GrowableOffsetRangeTracker::new(0, || 100i64);
        assert!(!t.is_bounded());
        assert!(t.try_claim(9));
        assert_eq!(t.progress(), Progress { work_completed: 10.0, work_remaining: 90.0 });
        assert!(t.check_done().unwrap_err().contains("neither split nor claimed to its end"));
        // Half of the estimated rest: the residual grows on.
        assert_eq!(t.try_split(0.5), Some(OffsetRange::new(54, i64::MAX)));
        assert!(t.is_bounded());
        assert!(t.try_claim(53));
        assert!(t.check_done().is_ok());
        // Past the estimate, a checkpoint still splits right after the last claim.
        let mut t = GrowableOffsetRangeTracker::new(0, || 5i64);
        assert!(t.try_claim(7));
        assert_eq!(t.try_split(0.0), Some(OffsetRange::new(8, i64::MAX)));
        assert_eq!(t.current_restriction(), OffsetRange::new(0, 8));
    }

    #[test]
    fn offset_ranges_split_into_parts_of_a_size() {
        assert_eq!(
            OffsetRange::new(0, 10).split(4),
            vec![OffsetRange::new(0, 4), OffsetRange::new(4, 8), OffsetRange::new(8, 10)]
        );
        assert!(OffsetRange::new(5, 5).split(4).is_empty());
        assert_eq!(OffsetRange::new(5, 3), OffsetRange::new(5, 5));
    }
}
