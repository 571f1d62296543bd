//! walCommit: the batch's offsets go to the offset log before any of its data is processed,
//! so a restart re-runs an uncommitted batch with exactly the same input.

use super::latest_offset::SourcesRead;
use super::Engine;
use crate::checkpoint::{OffsetEntry, SourceOffsets};
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

impl Engine {
    /// Logs the batch's source positions (and the test clock before and after reading).
    pub(super) fn wal_commit(&self, read: &SourcesRead, start_clock: Option<Timestamp>) -> Result<()> {
        let Some(cp) = &self.checkpoint else { return Ok(()) };
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
        let entry = OffsetEntry { batch_id: self.batch_id, sources, start_clock, clock: self.clock.test_time() };
        cp.write_offsets(&entry)?;
        weir_sdk::testing::fault::point("wal-commit");
        Ok(())
    }
}
