//! commit: the batch's state goes to the state stores (snapshots and deltas), its sinks commit
//! their output under the batch id, and the commit log records the batch with every node's
//! watermarks; only then do its metrics count as committed.

use super::Engine;
use crate::checkpoint::CommitEntry;
use std::time::Instant;
use weir_runner_core::checkpoint::protocol::state_key;
use weir_runner_core::checkpoint::state_files::{pack, StateFile};
use weir_runner_core::exec::node::UnitMetrics;
use weir_sdk::Result;

/// Most threads writing a batch's state files at once. Not the engine's worker pool: that has
/// one thread per core, and these threads mostly wait for the disk, so more of them than cores
/// overlap the waits (a handful of thread starts per batch cost far less than one flush).
const STATE_WRITERS: usize = 8;

/// The error of a state writer thread that panicked.
fn panicked(p: Box<dyn std::any::Any + Send>) -> weir_sdk::Error {
    weir_sdk::Error::Internal {
        component: "checkpoint".into(),
        message: format!("a state writer panicked: {}", weir_sdk::panic::panic_message(&*p)),
    }
}

impl Engine {
    /// Commits a processed batch: state, then sinks, then the commit log. The sinks' metrics
    /// go to `metrics`.
    pub(super) fn commit(&mut self, metrics: &mut UnitMetrics) -> Result<u64> {
        let t = Instant::now();
        self.log_journals()?;
        if self.ck.checkpoint.is_none() {
            self.commit_sinks(metrics)?;
            return Ok(t.elapsed().as_millis() as u64);
        }
        let snapshot = self.ck.last_snapshot.is_none();
        let files = self.write_state(snapshot)?;
        self.ck.snapshots.wrote(self.batch_id, files, snapshot);
        weir_sdk::testing::fault::point("state-commit");
        self.commit_sinks(metrics)?;
        weir_sdk::testing::fault::point("sink-commit");
        self.take_snapshots();
        let Some(cp) = &self.ck.checkpoint else { return Ok(0) };
        let watermarks = self
            .plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(s, n)| (s.name.clone(), n.wm.input(), n.wm.output()))
            .collect();
        let latest_snapshot = if snapshot { self.batch_id } else { self.ck.last_snapshot.unwrap_or(0) };
        // Folders from the latest snapshot on are kept: a restart reads them.
        cp.write_commit(
            &CommitEntry {
                batch_id: self.batch_id,
                watermarks,
                snapshot: Some(latest_snapshot),
                partitions: Some(self.partitions),
            },
            latest_snapshot,
        )?;
        self.ck.last_snapshot = Some(latest_snapshot);
        weir_sdk::testing::fault::point("commit-log");
        // Only now, from committed folders only: a batch re-run after a crash rewrites its own.
        self.ask_snapshot()?;
        Ok(t.elapsed().as_millis() as u64)
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
        for (node, (bytes, took)) in self.ck.snapshots.finished() {
            if let Some(i) = self.plan.nodes.iter().position(|n| n.name == node) {
                self.ck.state_bytes.entry(i).or_default().snapshot_made(bytes, took);
            }
        }
        if let Some(latest) = self.ck.snapshots.latest() {
            self.ck.last_snapshot = Some(latest.max(self.ck.last_snapshot.unwrap_or(0)));
        }
    }

    /// Writes every operator partition's state after this batch, with a manifest: full
    /// snapshots when `snapshot`, otherwise what changed since the last commit. Partitions are
    /// taken on several threads at once, each packing its state files into one file
    /// (`delta-<n>.pack`, `snapshot-<n>.pack`): most of a small file's cost is waiting for the
    /// disk to confirm it, and a batch has one per stateful step and partition.
    pub(super) fn write_state(&mut self, snapshot: bool) -> Result<Vec<StateFile>> {
        let Some(cp) = &self.ck.checkpoint else { return Ok(Vec::new()) };
        let batch = self.batch_id;
        let parts = &mut self.flow.parts;
        let threads = parts.len().clamp(1, STATE_WRITERS);
        let per_thread = parts.len().div_ceil(threads).max(1);
        type Written = Vec<(usize, StateFile, std::time::Duration)>;
        let results: Vec<Result<Written>> = std::thread::scope(|scope| {
            let handles: Vec<_> = parts
                .chunks_mut(per_thread)
                .enumerate()
                .map(|(n, chunk)| {
                    scope.spawn(move || -> Result<Written> {
                        let (mut taken, mut files) = (Vec::new(), Vec::new());
                        for share in chunk.iter_mut().flatten().flatten() {
                            for m in share.checkpoint(snapshot)? {
                                if let Some(file) = m.file {
                                    taken.push((m.node, m.encode_time));
                                    files.push(file);
                                }
                            }
                        }
                        if files.is_empty() {
                            return Ok(Vec::new());
                        }
                        let began = Instant::now();
                        let name = format!("{}-{n}.pack", if snapshot { "snapshot" } else { "delta" });
                        cp.write_state_file(batch, &name, pack(&name, &mut files))?;
                        // The write is shared by the files in it, by their sizes.
                        let total = files.iter().map(|(f, _)| f.bytes).sum::<u64>().max(1);
                        let write = began.elapsed();
                        Ok(taken
                            .into_iter()
                            .zip(files)
                            .map(|((node, encode), (f, _))| {
                                let share = write.mul_f64(f.bytes as f64 / total as f64);
                                (node, f, encode + share)
                            })
                            .collect())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| Err(panicked(p)))).collect()
        });
        let mut files = Vec::new();
        self.ck.state_bytes.clear();
        self.ck.commit_time.clear();
        for written in results {
            for (node, f, took) in written? {
                *self.ck.commit_time.entry(node).or_default() += took;
                self.ck.state_bytes.entry(node).or_default().wrote(&f);
                files.push(f);
            }
        }
        // In partition order, whatever thread wrote them.
        files.sort_by(|a, b| (a.partition, &a.node).cmp(&(b.partition, &b.node)));
        cp.write_manifest(self.batch_id, &files)?;
        Ok(files)
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
