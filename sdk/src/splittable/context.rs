//! What a splittable DoFn's `process` works through: its claims on the tracker, and the
//! context it outputs, sets its watermark and registers finalizers through.

use super::*;
use crate::coders::Element;
use crate::error::UserResult;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use rand::Rng;

/// The tracker of the restriction being processed, as the runner hands it to
/// [`SplittableDoFn::process`]: claims go through here, so the runner can checkpoint (or, on
/// the direct runner, split at random) between them.
pub struct Claims<'a, T: RestrictionTracker> {
    pub(super) tracker: &'a mut T,
    /// Claims made in this call, and the most before the runner checkpoints.
    pub(super) claimed: usize,
    pub(super) budget: usize,
    pub(super) checkpointed: bool,
    pub(super) random: Option<&'a mut rand::rngs::SmallRng>,
    pub(super) residuals: &'a mut Vec<T::Restriction>,
    /// Outputs made in this call: the budget bounds them too, so a claim that outputs much (a
    /// Parquet row group) checkpoints the rest before the output grows without bound.
    pub(super) emitted: &'a std::cell::Cell<usize>,
    /// A replay: the budget is exactly the claims the logged run made, outputs aside.
    pub(super) exact: bool,
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
    pub(super) timestamp: Timestamp,
    pub(super) window: Window,
    pub(super) pane: PaneInfo,
    pub(super) skew: i64,
    pub(super) now: Timestamp,
    pub(super) estimator: &'a mut WatermarkEstimator,
    pub(super) out: &'a mut Chunks<O>,
    pub(super) emitted: &'a std::cell::Cell<usize>,
    pub(super) finalizers: &'a mut Vec<Finalizer>,
}

/// Work to do once the output of a call is committed (see [`SdfContext::after_commit`]).
pub type Finalizer = Box<dyn FnOnce() -> UserResult + Send>;

/// Outputs in chunks of at most [`CHUNK`] elements: a reader that outputs a lot in one call
/// (a Parquet row group) hands on batches of a size the allocator recycles, not one buffer
/// that grows by copying and is mapped afresh each time.
pub struct Chunks<O>(pub(super) Vec<Vec<WindowedValue<O>>>);

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
