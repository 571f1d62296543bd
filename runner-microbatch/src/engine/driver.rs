//! The driver: batches by the trigger until the query ends, each batch one pass through the
//! phases of Spark's micro-batch execution, each in the file named for it.

use super::Engine;
use std::time::{Duration, Instant};
use weir_runner_core::job::Job;
use weir_runner_core::streaming::StreamingTrigger;
use weir_sdk::{Error, Result};

/// Drives batches by the trigger until the query ends. The last batch's commit finishes
/// however the run ends: the batch was processed and its sinks committed.
pub(super) fn run(engine: &mut Engine, job: &Job) -> Result<()> {
    let ran = run_batches(engine, job);
    let finished = engine.finish_commit().and_then(|()| engine.retire());
    ran.and(finished)
}

fn run_batches(engine: &mut Engine, job: &Job) -> Result<()> {
    let trigger = engine.streaming.trigger;
    let interval = Duration::from_millis(engine.streaming.trigger_interval_ms);
    loop {
        // A stop takes effect here, between batches: the last one has committed.
        if job.is_stop_requested() {
            return Err(Error::Cancelled);
        }
        let start = Instant::now();
        let max = engine.streaming.batch_limit();
        let ran = engine.run_batch(max, job)?;
        let ran_behind = ran == Ran::Behind;
        let ran = ran != Ran::Skipped;
        // The next batch's reading overlaps this one's commit only when it follows at once
        // because a source has more; otherwise the commit finishes now (a skipped batch
        // finished the last one already).
        if !ran_behind || trigger == StreamingTrigger::Once {
            engine.finish_commit()?;
        }
        // Once: one batch of what is available, and then what it left due at once (a
        // splittable DoFn's checkpointed restrictions), as Spark's Trigger.Once reads all.
        if engine.is_finished() || (trigger == StreamingTrigger::Once && !engine.processing_timer_due()) {
            return Ok(());
        }
        // Available-now with a checkpoint is Spark's incremental batch: a run ends once what is
        // available now is processed (its sources read to their end and no work due at any
        // time of this run), though work may wait for the next run (a watched directory's next
        // poll): the checkpoint keeps it.
        let incremental = trigger == StreamingTrigger::AvailableNow && engine.checkpointed();
        if !ran && incremental && engine.sources_done() && engine.next_processing_timer().is_none() {
            return Ok(());
        }
        if !ran {
            *engine.report.shared.idle.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            engine.report.shared.changed.notify_all();
            job.sleep_unless_stopped(Duration::from_millis(engine.idle_wait_ms()));
        } else if trigger == StreamingTrigger::ProcessingTime && !ran_behind {
            // A batch that overran its interval is followed at once, and so is one that read
            // all it may of a source that has more: the trigger paces a source that keeps up,
            // it does not hold back one that has fallen behind.
            if let Some(rest) = interval.checked_sub(start.elapsed()) {
                job.sleep_unless_stopped(rest);
            }
        }
    }
}

/// What [`Engine::run_batch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// Nothing to do (no new data, no watermark move, no timer due): the batch was skipped and
    /// took no batch id.
    Skipped,
    /// A batch ran, and read less than it may of every source (or of none unbounded).
    CaughtUp,
    /// A batch ran and read all it may of an unbounded source that may have more.
    Behind,
}

impl Engine {
    /// Runs one batch.
    pub(crate) fn run_batch(&mut self, max: usize, job: &Job) -> Result<Ran> {
        let started = Instant::now();
        weir_sdk::testing::fault::set_batch(self.batch_id);
        let replay = self.planner.replay.take();
        let mut report = super::progress::BatchReport::begin(self);
        // latestOffset: every source's slice of this batch (exactly the logged one on a replay).
        let read = self.latest_offset(max, replay.as_ref(), job.is_drain_requested());
        report.read_ms = started.elapsed().as_millis() as u64;
        // The last batch's commit, whose flush overlapped this reading, finishes before this
        // batch logs its offsets (or before it is skipped).
        self.finish_commit()?;
        let mut read = read?;
        if replay.is_none() && !read.moved && !self.processing_timer_due() {
            return Ok(Ran::Skipped);
        }
        let behind = read.reads.iter().any(|(_, r)| r.full);
        // walCommit: the batch's offsets are logged before any of its data is processed.
        let t = Instant::now();
        if replay.is_none() {
            self.wal_commit(&read, report.start_clock)?;
        } else {
            self.replay_journals();
        }
        report.wal_ms = t.elapsed().as_millis() as u64;
        self.planner.last_trigger = Some(started);
        // getBatch: the slices enter the plan's inputs.
        self.get_batch(&mut read)?;
        // addBatch, then commit (state, sinks, commit log); a failed batch is retried from the
        // last commit.
        let added = self.add_batch(job)?;
        // progress: the batch's StreamingQueryProgress, to the handle and its listeners.
        self.publish_progress(report, read, added, started);
        self.batch_id += 1;
        Ok(if behind { Ran::Behind } else { Ran::CaughtUp })
    }
}
