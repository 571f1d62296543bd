//! getBatch: the sources' slices enter the plan, routed to their consumers' partitions, and
//! the sources' watermarks move.

use super::latest_offset::SourcesRead;
use super::Engine;
use weir_runner_core::exec::exchange;
use weir_runner_core::plan::topology::Slot;
use weir_sdk::kernel::Batch;
use weir_sdk::Result;

impl Engine {
    /// Hands every source's bundles to its consumers.
    pub(super) fn get_batch(&mut self, read: &mut SourcesRead) -> Result<()> {
        for (i, sb) in &mut read.reads {
            self.nodes[*i].wm.advance(sb.watermark, None, None);
            let bundles = std::mem::take(&mut sb.bundles);
            self.route_read(*i, bundles)?;
        }
        Ok(())
    }

    /// Routes source `i`'s bundles (one list per partition) to its consumers: a main input
    /// through the consumer's exchange for that input, a side input to be broadcast to every
    /// partition.
    fn route_read(&mut self, i: usize, per_partition: Vec<Vec<Batch>>) -> Result<()> {
        let Some(&pc) = self.plan.nodes[i].outputs.first() else { return Ok(()) };
        let consumers = self.flow.topology.consumers(pc).to_vec();
        let per_partition: Vec<Vec<Batch>> =
            per_partition.into_iter().map(|bs| bs.into_iter().filter(|b| !b.is_empty()).collect()).collect();
        let last = consumers.len().saturating_sub(1);
        let mut owned = Some(per_partition);
        for (n, (c, slot)) in consumers.into_iter().enumerate() {
            let data = if n == last {
                owned.take().unwrap_or_default()
            } else {
                owned.as_ref().map(|pp| pp.iter().map(|bs| bs.to_vec()).collect()).unwrap_or_default()
            };
            match slot {
                Slot::Side(k) => self.nodes[c].side_pending.extend(data.into_iter().flatten().map(|b| (k, b))),
                Slot::Main(port) => {
                    let routed = exchange::route(
                        &self.plan.nodes[c].exchanges[port],
                        data,
                        self.partitions,
                        &self.flow.workers,
                    )?;
                    for (q, part) in routed.into_iter().enumerate() {
                        self.nodes[c].pending[q].extend(part);
                    }
                }
            }
        }
        Ok(())
    }
}
