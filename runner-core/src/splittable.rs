//! A splittable DoFn's processing step as runners execute it: a queue of pending restrictions
//! per partition, each processed when it is due, its residuals queued again.
//!
//! Every call (a bundle of new restrictions, or a move of the watermark or the clock) runs the
//! restrictions due at the current processing time, claiming at most [`BUDGET`] positions in
//! all: a restriction that reaches the budget is checkpointed, and its residual is due at once,
//! in the runner's next batch (epoch, round). A restriction whose DoFn asked to resume later is
//! due then, and the operator reports it as its next processing-time timer, so runners wake up
//! for it. The queue is the operator's state: runners checkpoint it with every batch, so the
//! residuals resume where they were after a restart. The output watermark is held at the
//! minimum watermark estimate of the pending restrictions. A drain drops the restrictions whose
//! work may never end (Beam's truncation), and finishes the others.

use crate::do_fn_runner::guarded;
use crate::operator::{OpContext, Operator};
use std::sync::Arc;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::metrics::scoped_container;
use weir_sdk::splittable::{ErasedSplittable, SplittablePayload};
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// The most positions one call claims over all its restrictions before checkpointing them
/// (less when the runner says so: [`Operator::limit_claims`]).
pub const BUDGET: usize = 1 << 16;

/// One partition of a splittable DoFn's processing step.
pub struct SplittableOperator {
    step: String,
    work: Box<dyn ErasedSplittable>,
    output: Arc<dyn CollectionOps>,
    set_up: bool,
    torn_down: bool,
    /// Whether the open-ended restrictions were dropped for a drain.
    truncated: bool,
    /// The most positions one call claims.
    budget: usize,
    /// Whether this is a Read's expansion, which reads per batch what a native read would
    /// ([`Operator::limit_claims`]).
    reads_a_source: bool,
    /// `after_commit` callbacks sealed with an epoch ([`Operator::seal`]), waiting for its
    /// commit, in epoch order.
    sealed: std::collections::VecDeque<(u64, Vec<weir_sdk::splittable::Finalizer>)>,
    /// A replay's logged hold: the operator holds exactly there until the unit ends, whatever
    /// its restrictions' estimates now say (a partition found since holds no lower).
    replay_hold: Option<Option<Timestamp>>,
}

impl SplittableOperator {
    /// A fresh operator of step `step` whose output batches `output` makes.
    pub fn new(step: &str, payload: &SplittablePayload, output: Arc<dyn CollectionOps>) -> Self {
        SplittableOperator {
            step: step.to_string(),
            work: (payload.factory)(),
            output,
            set_up: false,
            torn_down: false,
            truncated: false,
            budget: BUDGET,
            reads_a_source: false,
            sealed: Default::default(),
            replay_hold: None,
        }
    }

    /// Runs callbacks whose output is committed; a failure (an archive that cannot be written)
    /// is logged with the step, and the pipeline goes on, as Beam's bundle finalization does.
    fn finalize(&self, callbacks: Vec<weir_sdk::splittable::Finalizer>) {
        for f in callbacks {
            if let Err(e) = guarded(&self.step, "bundle finalization", f) {
                tracing::warn!(step = %self.step, "after a commit: {e}");
            }
        }
    }

    /// An operator that reads a legacy source for a Read: the runner's batch size bounds it.
    pub fn reading_a_source(mut self, yes: bool) -> Self {
        self.reads_a_source = yes;
        self
    }

    fn set_up(&mut self) -> Result<()> {
        if !self.set_up {
            guarded(&self.step, "setup", || self.work.setup())?;
            self.set_up = true;
        }
        Ok(())
    }

    /// Runs what is due, with user code bound to the call's metrics container: the output, in
    /// bundles of at most `weir_sdk::splittable::CHUNK` elements.
    fn run(&mut self, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.set_up()?;
        if ctx.draining && !self.truncated {
            self.truncated = true;
            let dropped = self.work.truncate_for_drain();
            if dropped > 0 {
                tracing::info!(step = %self.step, dropped, "drain: open-ended restrictions dropped");
            }
        }
        let mut out = Vec::new();
        let _scope = scoped_container(ctx.metrics.clone());
        let work = &mut self.work;
        guarded(&self.step, "process", || work.run(ctx.processing_time, self.budget, &mut out))?;
        Ok(out)
    }

    /// The output as one batch.
    fn one(&self, parts: Vec<Batch>) -> Vec<Batch> {
        vec![if parts.is_empty() { self.output.empty() } else { self.output.concat(parts) }]
    }

    fn add(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<()> {
        self.set_up()?;
        let work = &mut self.work;
        let _scope = scoped_container(ctx.metrics.clone());
        guarded(&self.step, "pair with restriction", || work.add(input))
    }

    fn idle(&self, ctx: &OpContext<'_>) -> bool {
        self.work.pending() == 0 && (self.truncated || !ctx.draining)
    }
}

impl Operator for SplittableOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.add(input, ctx)?;
        let out = self.run(ctx)?;
        Ok(self.one(out))
    }

    /// Every bundle's restrictions are queued, then run once: the output comes in bundles.
    fn process_bundles(&mut self, bundles: Vec<Batch>, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        for b in bundles {
            self.add(b, ctx)?;
        }
        Ok(vec![self.run(ctx)?])
    }

    fn advance(&mut self, _input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        if self.idle(ctx) {
            return Ok(vec![self.output.empty()]);
        }
        let out = self.run(ctx)?;
        Ok(self.one(out))
    }

    fn advance_bundles(&mut self, _input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        if self.idle(ctx) {
            return Ok(vec![Vec::new()]);
        }
        Ok(vec![self.run(ctx)?])
    }

    fn hold(&self) -> Option<Timestamp> {
        match self.replay_hold {
            Some(logged) => logged,
            None => self.work.hold(),
        }
    }

    /// A source's runs are journaled: what it holds when polled changes, so a replay repeats
    /// the logged reads rather than read again.
    fn keep_journal(&mut self) {
        if self.reads_a_source {
            self.work.record_runs();
        }
    }

    fn take_journal(&mut self) -> Option<crate::checkpoint::log::Journal> {
        if !self.reads_a_source {
            return None;
        }
        let hold = self.hold();
        self.replay_hold = None;
        Some(crate::checkpoint::log::Journal { runs: self.work.take_runs(), hold })
    }

    fn replay_journal(&mut self, journal: &crate::checkpoint::log::Journal) {
        if self.reads_a_source {
            self.work.replay_runs(journal.runs.clone());
            self.replay_hold = Some(journal.hold);
        }
    }

    /// Every `after_commit` callback registered so far runs.
    fn on_committed(&mut self) {
        let mut callbacks: Vec<_> = std::mem::take(&mut self.sealed).into_iter().flat_map(|(_, f)| f).collect();
        callbacks.extend(self.work.take_finalizers());
        self.finalize(callbacks);
    }

    fn seal(&mut self, epoch: u64) {
        let callbacks = self.work.take_finalizers();
        if !callbacks.is_empty() {
            self.sealed.push_back((epoch, callbacks));
        }
    }

    fn on_committed_through(&mut self, epoch: u64) {
        while self.sealed.front().is_some_and(|(e, _)| *e < epoch) {
            if let Some((_, callbacks)) = self.sealed.pop_front() {
                self.finalize(callbacks);
            }
        }
    }

    fn next_processing_timer(&self) -> Option<Timestamp> {
        self.work.next_due()
    }

    fn finish(&mut self) {
        if self.set_up && !self.torn_down {
            self.torn_down = true;
            if let Err(e) = guarded(&self.step, "teardown", || self.work.teardown()) {
                tracing::warn!("{e}");
            }
        }
    }

    fn split_randomly(&mut self, seed: u64) {
        self.work.split_randomly(seed);
    }

    /// Only a Read's expansion takes the limit: it reads what the native read of its source
    /// would per batch. At least two, so a call may always claim its work and then the end of
    /// its restriction, or it could be checkpointed before every end.
    fn limit_claims(&mut self, per_call: usize) {
        if self.reads_a_source {
            self.budget = per_call.clamp(2, BUDGET);
        }
    }

    /// One entry per pending restriction, keyed by its place in the queue.
    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let entries = self.work.encode_pending().map_err(|e| Error::execution(&self.step, e.to_string()))?;
        Ok(entries.into_iter().map(|(id, bytes)| (id.to_be_bytes().to_vec(), bytes)).collect())
    }

    /// Pending restrictions are not keyed: they are dealt round the new partitions, renumbered
    /// so that those from different old partitions stay apart (a queue keeps its order).
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        let n = n.max(1);
        let parts = old.len() as u64;
        let mut out: Vec<crate::checkpoint::Entries> = (0..n).map(|_| Vec::new()).collect();
        let mut all = Vec::new();
        for (p, entries) in old.into_iter().enumerate() {
            for (key, bytes) in entries {
                let id: [u8; 8] = key.as_slice().try_into().map_err(|_| Error::Execution {
                    step: self.step.clone(),
                    message: format!(
                        "corrupt state snapshot: a pending restriction's key has {} bytes, not 8",
                        key.len()
                    ),
                })?;
                all.push((u64::from_be_bytes(id) * parts + p as u64, bytes));
            }
        }
        all.sort_by_key(|(id, _)| *id);
        for (k, (id, bytes)) in all.into_iter().enumerate() {
            out[k % n].push((id.to_be_bytes().to_vec(), bytes));
        }
        Ok(out)
    }

    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let mut pending = Vec::with_capacity(entries.len());
        for (key, bytes) in entries {
            let id: [u8; 8] = key.as_slice().try_into().map_err(|_| Error::Execution {
                step: self.step.clone(),
                message: format!("corrupt state snapshot: a pending restriction's key has {} bytes, not 8", key.len()),
            })?;
            pending.push((u64::from_be_bytes(id), bytes));
        }
        // A rollback: the callbacks of calls since the commit are undone with them.
        self.sealed.clear();
        self.work
            .restore_pending(pending)
            .map_err(|e| Error::execution(&self.step, format!("corrupt state snapshot: {e}")))
    }

    fn state_rows(&self) -> usize {
        self.work.pending()
    }

    fn state_bytes(&self) -> usize {
        self.work.pending_bytes()
    }
}
