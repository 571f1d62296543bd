//! commit: the batch's sinks commit their output under the batch id, its state goes to the
//! state stores (snapshots and deltas), and the commit log records the batch with every node's
//! watermarks; only then do its metrics count as committed. Each partition encoded its state
//! as it finished running ([`super::dataflow`]); writing and flushing the files overlaps the
//! next batch's reading of its sources ([`PendingCommit`]).

use super::dataflow::EncodedState;
use super::Engine;
use crate::checkpoint::{flush_state, write_manifest, write_state_file, CommitEntry};
use crate::progress::StreamingQueryProgress;
use std::time::{Duration, Instant};
use weir_runner_core::checkpoint::protocol::{retire_before, state_key};
use weir_runner_core::checkpoint::state_files::{pack, StateFile};
use weir_runner_core::checkpoint::store::Location;
use weir_runner_core::exec::node::{NodeShare, UnitMetrics};
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

/// The error of the state thread, if it panicked.
fn panicked(p: Box<dyn std::any::Any + Send>) -> weir_sdk::Error {
    weir_sdk::Error::Internal {
        component: "checkpoint".into(),
        message: format!("the state writer panicked: {}", weir_sdk::panic::panic_message(&*p)),
    }
}

/// Each state file a batch wrote, with its node and the time taking, encoding, writing and
/// flushing it took (its share of its pack's write and flush, by its size).
type Written = Vec<(usize, StateFile, Duration)>;

/// A batch whose sinks have committed and whose state files a thread is writing and flushing:
/// the driver reads the next batch's sources meanwhile, and [`Engine::finish_commit`] then
/// writes the commit log entry, before the next batch logs its offsets. So at most one batch is
/// logged and not committed, as without the overlap, and a restart re-runs it.
pub(super) struct PendingCommit {
    batch: u64,
    /// Writes and flushes the state files; `None` once joined.
    state: Option<std::thread::JoinHandle<Result<Written>>>,
    /// Every node's input and output watermark after the batch.
    watermarks: Vec<(String, Timestamp, Timestamp)>,
    snapshot: bool,
    /// The batch's metrics, committed once the commit log records the batch.
    metrics: UnitMetrics,
    /// The batch's progress, published once the commit log records the batch.
    pub(super) progress: Option<StreamingQueryProgress>,
    /// Time the commit took on the batch's path so far.
    took: Duration,
}

impl Engine {
    /// Commits a processed batch: sinks, then state, then the commit log. The sinks' metrics go
    /// to `metrics`. With a checkpoint, the state files' writing and the commit log entry are
    /// left pending ([`PendingCommit`]), and the batch's metrics with them; with batch retries,
    /// the files are written before this returns, so that a failure retries the batch. Returns
    /// the time taken.
    pub(super) fn commit(&mut self, metrics: &mut UnitMetrics) -> Result<u64> {
        let t = Instant::now();
        self.log_journals()?;
        self.commit_sinks(metrics)?;
        weir_sdk::testing::fault::point("sink-commit");
        let Some(cp) = &self.ck.checkpoint else { return Ok(t.elapsed().as_millis() as u64) };
        let (loc, batch, retire) = (cp.location(), self.batch_id, self.ck.retire_from.take());
        let (snapshot, encoded) = std::mem::take(&mut self.ck.encoded);
        let spawned = std::thread::Builder::new().name("weir-state-commit".into()).spawn(move || {
            let written = write_state(encoded, &loc, batch, snapshot)?;
            weir_sdk::testing::fault::point_at("state-commit", batch);
            // Batches the last commit made unneeded go now, off the batch's path.
            if let Some(keep_from) = retire {
                retire_before(&loc, keep_from)?;
            }
            Ok(written)
        });
        let state = spawned.map_err(|e| weir_sdk::Error::Internal {
            component: "checkpoint".into(),
            message: format!("cannot start the state commit thread: {e}"),
        })?;
        let watermarks = self
            .plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(s, n)| (s.name.clone(), n.wm.input(), n.wm.output()))
            .collect();
        self.ck.pending = Some(PendingCommit {
            batch,
            state: Some(state),
            watermarks,
            snapshot,
            metrics: std::mem::take(metrics),
            progress: None,
            took: t.elapsed(),
        });
        if self.mb.max_batch_retries > 0 {
            self.join_state()?;
        }
        Ok(t.elapsed().as_millis() as u64)
    }

    /// Waits for the pending commit's state thread; what it wrote goes to the batch's state
    /// figures. A failure drops the pending commit: the batch is not committed.
    fn join_state(&mut self) -> Result<()> {
        let Some(p) = self.ck.pending.as_mut() else { return Ok(()) };
        let Some(state) = p.state.take() else { return Ok(()) };
        let (batch, snapshot) = (p.batch, p.snapshot);
        let written = state.join().unwrap_or_else(|panic| Err(panicked(panic)));
        let written = written.inspect_err(|_| self.ck.pending = None)?;
        self.ck.state_bytes.clear();
        self.ck.commit_time.clear();
        let mut files = Vec::with_capacity(written.len());
        for (node, f, took) in written {
            *self.ck.commit_time.entry(node).or_default() += took;
            self.ck.state_bytes.entry(node).or_default().wrote(&f);
            files.push(f);
        }
        self.ck.snapshots.wrote(batch, files, snapshot);
        Ok(())
    }

    /// Finishes the pending commit, if any: takes its state thread's work back, writes the
    /// commit log entry, then counts the batch's metrics as committed, runs what waited for the
    /// batch to be durable (bundle finalization) and publishes its progress, whose commit time
    /// gains what this took. Called once the next batch has read its sources, before it logs
    /// its offsets, and whenever the driver does not start the next batch at once.
    pub(super) fn finish_commit(&mut self) -> Result<()> {
        let t = Instant::now();
        self.join_state()?;
        let Some(p) = self.ck.pending.take() else { return Ok(()) };
        self.take_snapshots();
        let Some(cp) = &self.ck.checkpoint else { return Ok(()) };
        let latest_snapshot = if p.snapshot { p.batch } else { self.ck.last_snapshot.unwrap_or(0) };
        // Folders from the latest snapshot on are kept: a restart reads them.
        let entry = CommitEntry {
            batch_id: p.batch,
            watermarks: p.watermarks,
            snapshot: Some(latest_snapshot),
            partitions: Some(self.partitions),
        };
        self.ck.retire_from = Some(cp.write_commit(&entry, latest_snapshot)?);
        self.ck.last_snapshot = Some(latest_snapshot);
        weir_sdk::testing::fault::point_at("commit-log", p.batch);
        // Only now, from committed folders only: a batch re-run after a crash rewrites its own.
        self.ask_snapshot()?;
        p.metrics.publish(&self.report.metrics, true);
        // The batch is durable: what waited for that runs (bundle finalization).
        self.shares_mut().for_each(NodeShare::on_committed);
        if let Some(mut progress) = p.progress {
            let waited = t.elapsed();
            let ms = |d: Duration| d.as_millis() as u64;
            progress.duration_ms.commit_offsets = ms(p.took + waited);
            progress.duration_ms.trigger_execution += ms(waited);
            progress.batch_duration += ms(waited);
            self.add_state_writes(&mut progress);
            self.publish(progress);
        }
        Ok(())
    }

    /// Drops the batches the last commit made unneeded, when no later commit did.
    pub(super) fn retire(&mut self) -> Result<()> {
        match (self.ck.retire_from.take(), &self.ck.checkpoint) {
            (Some(keep_from), Some(cp)) => retire_before(&cp.location(), keep_from),
            _ => Ok(()),
        }
    }

    /// Asks the snapshot thread for a snapshot at this batch once `--state-snapshot-interval`
    /// deltas follow the latest snapshot, if it is not making one already.
    fn ask_snapshot(&mut self) -> Result<()> {
        let Some(cp) = &self.ck.checkpoint else { return Ok(()) };
        let interval = self.snapshot_interval();
        self.ck.snapshots.ask(&cp.location(), interval, state_key)
    }

    /// Takes the snapshots the snapshot thread finished: the latest becomes the one commits
    /// name, and their bytes and time count in the batch's `backgroundSnapshotBytes` and
    /// `backgroundSnapshotTimeMs`.
    fn take_snapshots(&mut self) {
        for (node, made) in self.ck.snapshots.finished() {
            if let Some(i) = self.plan.nodes.iter().position(|n| n.name == node) {
                self.ck.state_bytes.entry(i).or_default().add_snapshots(&made);
            }
        }
        if let Some(latest) = self.ck.snapshots.latest() {
            self.ck.last_snapshot = Some(latest.max(self.ck.last_snapshot.unwrap_or(0)));
        }
    }

    pub(super) fn snapshot_interval(&self) -> u64 {
        self.streaming.state_snapshot_interval.max(1)
    }

    /// Commits the sinks' output of this batch under the batch id, so a replayed batch
    /// rewrites rather than duplicates it.
    pub(super) fn commit_sinks(&mut self, metrics: &mut UnitMetrics) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            let Some(sink) = self.flow.sinks[i].as_ref() else { continue };
            let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
            metrics.measure(&spec.name, || sink.commit(self.batch_id, Some(&self.flow.workers)))?;
        }
        Ok(())
    }
}

/// Most bytes of state files packed into one file.
const PACK_BYTES: usize = 64 << 20;

/// Writes the state files the partitions encoded after batch `batch` at `loc`, with a
/// manifest, then flushes them: packed, in partition order, into files of about
/// [`PACK_BYTES`] (`delta-<n>.pack`, or `snapshot-<n>.pack` for full snapshots): a few files to
/// flush, and no copy of the whole state at once.
fn write_state(mut encoded: Vec<EncodedState>, loc: &Location, batch: u64, snapshot: bool) -> Result<Written> {
    encoded.sort_by(|a, b| (a.1 .0.partition, &a.1 .0.node).cmp(&(b.1 .0.partition, &b.1 .0.node)));
    let began = Instant::now();
    let (mut written, mut files) = (Vec::with_capacity(encoded.len()), Vec::with_capacity(encoded.len()));
    let (mut unflushed, mut packing, mut packs) = (Vec::new(), Vec::new(), 0);
    let mut packed_bytes = 0;
    let mut encoded = encoded.into_iter().peekable();
    while let Some((node, (f, bytes), took)) = encoded.next() {
        packed_bytes += bytes.len();
        packing.push((f, bytes));
        written.push((node, took));
        if packed_bytes >= PACK_BYTES || encoded.peek().is_none() {
            let name = format!("{}-{packs}.pack", if snapshot { "snapshot" } else { "delta" });
            let data = pack(&name, &mut packing);
            unflushed.extend(write_state_file(loc, batch, &name, data)?);
            files.extend(packing.drain(..).map(|(f, _)| f));
            (packs, packed_bytes) = (packs + 1, 0);
        }
    }
    unflushed.extend(write_manifest(loc, batch, &files)?);
    flush_state(loc, batch, unflushed)?;
    // The writing and the flush are shared by the files, by their sizes.
    let io = began.elapsed();
    let total = files.iter().map(|f| f.bytes).sum::<u64>().max(1);
    Ok(written
        .into_iter()
        .zip(files)
        .map(|((node, took), f)| {
            let share = io.mul_f64(f.bytes as f64 / total as f64);
            (node, f, took + share)
        })
        .collect())
}
