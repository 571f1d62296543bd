//! Batch retries: the state committed last is kept in memory, and a failed batch puts every
//! operator back to it, with the batch's input back in place, before trying again.

use super::{new_partition, BatchInput, Engine};
use std::collections::HashMap;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::Result;

impl Engine {
    /// A copy of every node's pending input (the batch's data, before it is processed).
    pub(super) fn clone_pending(&self) -> BatchInput {
        self.nodes
            .iter()
            .zip(&self.plan.nodes)
            .map(|(n, _)| {
                let pending = n.pending.iter().map(|bs| bs.to_vec()).collect();
                (pending, n.side_pending.clone())
            })
            .collect()
    }

    /// Remembers the state just committed, for retrying the next batch.
    pub(super) fn save_retry_base(&mut self) -> Result<()> {
        let mut entries = HashMap::new();
        for (p, part) in self.flow.parts.iter().enumerate() {
            for (i, share) in part.iter().enumerate() {
                if let Some(share) = share {
                    entries.insert((i, p), share.entries()?);
                }
            }
        }
        self.retry_base = Some((entries, self.nodes.iter().map(|n| n.wm).collect()));
        Ok(())
    }

    /// Puts every operator back to the last committed state (fresh instances, restored state
    /// and watermarks) and the batch's input back in place.
    pub(super) fn roll_back(&mut self, input: Option<&BatchInput>) -> Result<()> {
        self.finish();
        let claims = self.mb.claims_per_call(&self.streaming);
        self.flow.parts = (0..self.partitions)
            .map(|p| new_partition(&self.graph, &self.plan, &self.flow.chains, p, claims))
            .collect();
        for sink in self.flow.sinks.iter().flatten() {
            sink.lock().unwrap_or_else(|e| e.into_inner()).discard();
        }
        let base = self.retry_base.take();
        for i in 0..self.nodes.len() {
            if self.nodes[i].source.is_some() {
                continue;
            }
            let wm = base.as_ref().map_or_else(Watermarks::new, |(_, wms)| wms[i]);
            self.set_watermarks(i, wm);
        }
        if let Some((entries, _)) = &base {
            for (p, part) in self.flow.parts.iter_mut().enumerate() {
                for (i, share) in part.iter_mut().enumerate() {
                    let (Some(share), Some(e)) = (share, entries.get(&(i, p))) else { continue };
                    for (k, member) in e.iter().enumerate() {
                        share.restore(k, member.clone(), None)?;
                    }
                }
            }
        }
        self.retry_base = base;
        // A retry after the batch's reads were logged repeats them.
        self.replay_journals();
        if let Some(input) = input {
            for (i, (pending, sides)) in input.iter().enumerate() {
                self.nodes[i].pending = pending.clone();
                self.nodes[i].side_pending = sides.clone();
            }
        }
        Ok(())
    }
}
