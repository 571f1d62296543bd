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
//!
//! The files: [`trackers`] (restrictions and their trackers: offset ranges, growable ones),
//! [`context`] (what `process` claims and outputs through), and [`runtime`] (the erased kernel a
//! runner drives: split, checkpoint, resume, replay). This file holds the trait and the
//! transforms.

pub mod context;
pub mod runtime;
#[cfg(test)]
mod tests;
pub mod trackers;

use crate::error::UserResult;
use crate::graph::{Boundedness, Payload};
use crate::pipeline::{output_boundedness, PCollection, PTransform};
use crate::time::Timestamp;
use crate::transforms::par_do::ParDo;
use crate::transforms::reshuffle::Reshuffle;
use crate::{DoFn, ProcessContext};
pub use context::*;
pub use runtime::*;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
pub use trackers::*;

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
