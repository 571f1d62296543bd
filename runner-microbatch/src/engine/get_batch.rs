//! getBatch: the sources' slices enter the plan, routed to their consumers' partitions, and
//! the sources' watermarks move.

use super::latest_offset::SourcesRead;
use super::Engine;
use weir_sdk::Result;

impl Engine {
    /// Hands every source's bundles to its consumers.
    pub(super) fn get_batch(&mut self, read: &mut SourcesRead) -> Result<()> {
        for (i, sb) in &mut read.reads {
            self.nodes[*i].wm.advance(sb.watermark, None, None);
            let bundles = std::mem::take(&mut sb.bundles);
            self.route(*i, 0, bundles)?;
        }
        Ok(())
    }
}
