//! walCommit: the batch's offsets go to the offset log before any of its data is processed,
//! so a restart re-runs an uncommitted batch with exactly the same input.

use super::latest_offset::SourcesRead;
use super::Engine;
use crate::checkpoint::{OffsetEntry, SourceOffsets};
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

impl Engine {
    /// Logs the batch's source positions (and the test clock before and after reading).
    pub(super) fn wal_commit(&mut self, read: &SourcesRead, start_clock: Option<Timestamp>) -> Result<()> {
        let Some(cp) = &self.ck.checkpoint else { return Ok(()) };
        let sources = read
            .reads
            .iter()
            .map(|(i, sb)| SourceOffsets {
                name: self.plan.nodes[*i].name.clone(),
                start: sb.start_offset.clone(),
                end: sb.end_offset.clone(),
                counts: sb.counts.clone(),
            })
            .collect();
        let entry = OffsetEntry {
            batch_id: self.batch_id,
            sources,
            start_clock,
            clock: self.clock.test_time(),
            journals: Vec::new(),
        };
        cp.write_offsets(&entry)?;
        self.planner.logged = Some(entry);
        weir_sdk::testing::fault::point("wal-commit");
        Ok(())
    }

    /// Makes the source-reading operators repeat the journals the running batch's entry holds
    /// (a replay, or a retry after they were logged).
    pub(super) fn replay_journals(&mut self) {
        let Some(logged) = &self.planner.logged else { return };
        for j in &logged.journals {
            let Some(i) = self.plan.nodes.iter().position(|n| n.name == j.name) else {
                tracing::warn!(node = %j.name, "the offset log has a journal for a node this plan lacks");
                continue;
            };
            for part in &mut self.flow.parts {
                for share in part.iter_mut().flatten() {
                    share.replay_journal(i, &j.journal);
                }
            }
        }
    }

    /// Takes every source-reading operator's journal of the batch just run and, the first time
    /// the batch runs, adds them to its offset log entry: before any sink commits the batch,
    /// so a replay repeats exactly these reads (Spark logs a batch's Kafka offsets before it
    /// runs; a splittable read knows its offsets only once it has read them).
    pub(super) fn log_journals(&mut self) -> Result<()> {
        let mut by_node: std::collections::BTreeMap<usize, Vec<weir_runner_core::checkpoint::log::Journal>> =
            Default::default();
        for part in &mut self.flow.parts {
            for share in part.iter_mut().flatten() {
                for (node, j) in share.take_journals() {
                    by_node.entry(node).or_default().push(j);
                }
            }
        }
        let (Some(cp), Some(logged)) = (&self.ck.checkpoint, &mut self.planner.logged) else { return Ok(()) };
        if !logged.journals.is_empty() || by_node.is_empty() {
            return Ok(());
        }
        logged.journals = by_node
            .into_iter()
            .map(|(i, parts)| weir_runner_core::checkpoint::log::NodeJournal {
                name: self.plan.nodes[i].name.clone(),
                journal: weir_runner_core::checkpoint::log::Journal::merge(parts),
            })
            .collect();
        cp.write_offsets(logged)?;
        weir_sdk::testing::fault::point("journal");
        Ok(())
    }
}
