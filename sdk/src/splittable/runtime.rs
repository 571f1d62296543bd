//! The erased kernel a runner drives: restrictions paired, split, processed, checkpointed into
//! residuals, and replayed exactly as recorded.

use super::*;
use crate::coders::{Coder, ElementCoder};
use crate::error::{UserError, UserResult};
use crate::kernel::{Batch, Bundle};
use crate::pane::PaneInfo;
use crate::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use crate::window::Window;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
pub(super) struct WorkRecord<I, R> {
    pub(super) element: I,
    pub(super) restriction: R,
    pub(super) estimator: WatermarkEstimator,
    pub(super) timestamp: Timestamp,
    pub(super) window: Window,
    pub(super) pane: PaneInfo,
    pub(super) resume_at: Timestamp,
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

pub(super) struct Work<F: SplittableDoFn> {
    pub(super) element: F::In,
    pub(super) restriction: F::Restriction,
    pub(super) estimator: WatermarkEstimator,
    pub(super) timestamp: Timestamp,
    pub(super) window: Window,
    pub(super) pane: PaneInfo,
    pub(super) resume_at: Timestamp,
    /// Its place in the queue, for checkpoints (kept across restarts).
    pub(super) id: u64,
}

pub(super) struct SplittableKernel<F: SplittableDoFn> {
    pub(super) fn_: F,
    pub(super) pending: std::collections::VecDeque<Work<F>>,
    pub(super) next_id: u64,
    pub(super) random: Option<rand::rngs::SmallRng>,
    /// Callbacks of the calls since the last commit.
    pub(super) finalizers: Vec<Finalizer>,
    /// The runs since the last take, when recording ([`ErasedSplittable::record_runs`]).
    pub(super) runs: Option<Vec<ClaimRun>>,
    /// Logged runs still to repeat, when replaying ([`ErasedSplittable::replay_runs`]).
    pub(super) replay: Option<Vec<ClaimRun>>,
}

impl<F: SplittableDoFn> SplittableKernel<F> {
    pub(super) fn new(fn_: F) -> Self {
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
