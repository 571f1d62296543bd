//! commit: the batch's state goes to the state stores (snapshots and deltas), its sinks commit
//! their output under the batch id, and the commit log records the batch with every node's
//! watermarks; only then do its metrics count as committed.

use super::Engine;
use crate::checkpoint::CommitEntry;
use std::time::Instant;
use weir_runner_core::checkpoint::state_files::FileKind;
use weir_runner_core::exec::node::UnitMetrics;
use weir_sdk::Result;

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
        let snapshot = self.is_snapshot_batch();
        self.write_state(snapshot)?;
        weir_sdk::testing::fault::point("state-commit");
        self.commit_sinks(metrics)?;
        weir_sdk::testing::fault::point("sink-commit");
        let Some(cp) = &self.ck.checkpoint else { return Ok(0) };
        let watermarks = self
            .plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(s, n)| (s.name.clone(), n.wm.input(), n.wm.output()))
            .collect();
        let latest_snapshot = if snapshot { self.batch_id } else { self.ck.last_snapshot.unwrap_or(0) };
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
        Ok(t.elapsed().as_millis() as u64)
    }

    /// Whether this batch writes full snapshots rather than deltas: every
    /// `--state-snapshot-interval` batches, and whenever the last snapshot is that far behind or
    /// unknown (the interval changed between runs, or nothing was committed yet).
    fn is_snapshot_batch(&self) -> bool {
        let interval = self.snapshot_interval();
        self.batch_id.is_multiple_of(interval) || self.ck.last_snapshot.is_none_or(|s| self.batch_id >= s + interval)
    }

    /// Writes every operator partition's state after this batch, with a manifest: full
    /// snapshots when `snapshot`, otherwise what changed since the last commit.
    pub(super) fn write_state(&mut self, snapshot: bool) -> Result<()> {
        let Some(cp) = &self.ck.checkpoint else { return Ok(()) };
        let mut files = Vec::new();
        self.ck.state_bytes.clear();
        self.ck.commit_time.clear();
        for part in &mut self.flow.parts {
            for share in part.iter_mut().flatten() {
                for m in share.checkpoint(snapshot)? {
                    let Some((f, bytes)) = m.file else { continue };
                    let began = Instant::now();
                    cp.write_state_file(self.batch_id, &f, bytes)?;
                    *self.ck.commit_time.entry(m.node).or_default() += m.encode_time + began.elapsed();
                    let e = self.ck.state_bytes.entry(m.node).or_insert((0, 0));
                    match f.kind {
                        FileKind::Snapshot => e.0 += f.bytes,
                        FileKind::Delta => e.1 += f.bytes,
                    }
                    files.push(f);
                }
            }
        }
        cp.write_manifest(self.batch_id, &files)
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
