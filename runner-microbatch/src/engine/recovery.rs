//! Recovery: opening the checkpoint directory for this pipeline and restoring the last
//! committed batch (source positions, watermarks, operator state); a batch logged but not
//! committed is re-run with its logged offsets.

use super::Engine;
use crate::checkpoint::{Checkpoint, SourceOffsets};
use std::collections::HashMap;
use weir_runner_core::checkpoint::state_files::{Chain, Keep};
use weir_runner_core::exec::node::Entries;
use weir_runner_core::fingerprint::Fingerprint;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::{Error, Result};

impl Engine {
    /// What a checkpoint must have been written by to be resumed here: the pipeline's shape and
    /// parameters, the physical nodes this runner made of it, the partitioning and the state
    /// format.
    pub(super) fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_plan(&self.graph, &self.plan).with_key_groups()
    }

    /// Opens the checkpoint directory and restores the last committed batch: source positions,
    /// watermarks and operator state; a logged but uncommitted batch is re-run with its offsets.
    pub(super) fn recover(&mut self, dir: &str) -> Result<()> {
        let (cp, rec) =
            Checkpoint::open(dir, self.fingerprint(), self.report.id.clone(), self.streaming.min_batches_to_retain)?;
        self.report.id = rec.id;
        if let Some((offsets, commit)) = &rec.committed {
            // Older commit entries do not say where their snapshot is: then it is where the
            // interval put it.
            let c = commit.batch_id;
            let snapshot = commit.snapshot.unwrap_or(c - c % self.snapshot_interval());
            let written_by = commit.partitions.unwrap_or(self.partitions);
            self.restore_state(&cp, (snapshot, c), written_by)?;
            // State spread over another number of partitions is a new layout: the next commit
            // writes full snapshots of it, so no restart reads deltas of one layout onto another.
            self.ck.last_snapshot = (written_by == self.partitions).then_some(snapshot);
            for (i, spec) in self.plan.nodes.clone().iter().enumerate() {
                if let Some((_, input, output)) = commit.watermarks.iter().find(|(n, _, _)| *n == spec.name) {
                    self.set_watermarks(i, Watermarks::restored(*input, *output));
                }
            }
            self.batch_id = commit.batch_id + 1;
            if rec.uncommitted.is_none() {
                self.restore_sources(&offsets.sources, |s| &s.end)?;
                if let Some(c) = offsets.clock {
                    self.clock.set_test_time(c);
                }
            }
        }
        if let Some(entry) = rec.uncommitted {
            self.restore_sources(&entry.sources, |s| &s.start)?;
            if let Some(c) = entry.start_clock {
                self.clock.set_test_time(c);
            }
            self.batch_id = entry.batch_id;
            self.planner.logged = Some(entry.clone());
            self.planner.replay = Some(entry);
        }
        self.ck.checkpoint = Some(cp);
        Ok(())
    }

    /// Sets node `i`'s watermarks, and its partitions' (restored, or rolled back).
    pub(super) fn set_watermarks(&mut self, i: usize, wm: Watermarks) {
        self.nodes[i].wm = wm;
        for part in &mut self.flow.parts {
            for share in part.iter_mut().flatten() {
                if let Some(k) = share.members().iter().position(|&m| m == i) {
                    share.set_watermarks(k, wm);
                }
            }
        }
    }

    pub(super) fn restore_sources(
        &mut self,
        logged: &[SourceOffsets],
        pos: impl Fn(&SourceOffsets) -> &serde_json::Value,
    ) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if let Some(src) = self.nodes[i].source.as_mut() {
                match logged.iter().find(|s| s.name == spec.name) {
                    Some(s) => src.restore(pos(s), self.partitions)?,
                    None => {
                        return Err(Error::Construction {
                            step: spec.name.clone(),
                            message: "the checkpoint's offset log has no entry for this source".into(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Loads every operator partition's state as of committed batch `c`: the snapshot written
    /// by batch `start`, then the deltas after it, as `written_by` partitions wrote them; spread
    /// over this run's partitions, key group by key group, if that is another number. One
    /// step's partition is read and restored at a time (with a rescale, one step's partitions),
    /// so a restore holds at most that much state beside what the steps keep.
    pub(super) fn restore_state(&mut self, cp: &Checkpoint, (start, c): (u64, u64), written_by: usize) -> Result<()> {
        let mut chains: HashMap<(String, usize), Chain> = HashMap::new();
        let mut listed = Vec::new();
        for b in start..=c {
            let (folder, files) = cp.state_files(b, b == start)?;
            for f in &files {
                chains.entry((f.node.clone(), f.partition)).or_default().push((folder.clone(), f.clone()));
            }
            listed.push((b, files));
        }
        self.ck.snapshots.restored(listed);
        let plan = self.plan.clone();
        let n = self.partitions;
        // Each stage's steps, by the stage's plan node: what the state is restored into.
        let stages: Vec<(usize, Vec<usize>)> = (0..plan.nodes.len())
            .filter_map(|i| Some((i, self.flow.parts.first()?[i].as_ref()?.members().to_vec())))
            .collect();
        let restored = |name: &str| stages.iter().flat_map(|(_, ms)| ms).any(|&m| plan.nodes[m].name == name);
        if let Some((name, p)) = chains.keys().find(|(name, p)| *p >= written_by || !restored(name)) {
            return Err(Error::Checkpoint {
                path: cp.name(),
                message: format!("state of partition {p} of step {name}, which this pipeline's plan does not have"),
            });
        }
        let read = |chain: Option<&Chain>, keep: &mut Keep<'_>| -> Result<Entries> {
            chain.map_or(Ok(Vec::new()), |c| cp.read_chain_where(c, keep))
        };
        for (i, members) in stages {
            for (k, &m) in members.iter().enumerate() {
                let name = &plan.nodes[m].name;
                for p in 0..n {
                    let entries = match written_by == n {
                        true => read(chains.get(&(name.clone(), p)), &mut |_| Ok(true))?,
                        // Each new partition reads its keys of every old one.
                        false => match self.flow.parts[0][i].as_ref() {
                            Some(share) => share.rescaled(k, written_by, (p, n), |q, keep| {
                                read(chains.get(&(name.clone(), q)), keep)
                            })?,
                            None => Vec::new(),
                        },
                    };
                    if let Some(share) = self.flow.parts.get_mut(p).and_then(|part| part[i].as_mut()) {
                        share.restore(k, entries, None)?;
                    }
                }
            }
        }
        self.ck.state_loaded_from_files = true;
        Ok(())
    }
}
