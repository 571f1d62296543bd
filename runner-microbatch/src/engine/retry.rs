//! Batch retries: the state committed last is kept in memory, and a failed batch puts every
//! operator back to it, with the batch's input back in place, before trying again.

use super::{BatchInput, Engine};
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
        for (i, n) in self.nodes.iter().enumerate() {
            for (p, op) in n.ops.iter().enumerate() {
                entries.insert((i, p), op.state_entries()?);
            }
        }
        self.retry_base = Some((entries, self.nodes.iter().map(|n| n.wm).collect()));
        Ok(())
    }

    /// Puts every operator back to the last committed state (fresh instances, restored state
    /// and watermarks) and the batch's input back in place.
    pub(super) fn roll_back(&mut self, input: Option<&BatchInput>) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if self.nodes[i].source.is_some() {
                continue;
            }
            for op in &mut self.nodes[i].ops {
                op.finish();
            }
            let claims = self.mb.claims_per_call(&self.streaming);
            self.nodes[i].ops =
                (0..self.partitions).filter_map(|_| spec.instantiate_limited(&self.graph, claims)).collect();
            if let Some(sink) = self.nodes[i].sink.as_mut() {
                sink.discard();
            }
            if let Some((entries, wms)) = &self.retry_base {
                for (p, op) in self.nodes[i].ops.iter_mut().enumerate() {
                    if let Some(e) = entries.get(&(i, p)) {
                        op.restore_entries(e.clone())?;
                    }
                }
                self.nodes[i].wm = wms[i];
            } else {
                self.nodes[i].wm = Watermarks::new();
            }
        }
        if let Some(input) = input {
            for (i, (pending, sides)) in input.iter().enumerate() {
                self.nodes[i].pending = pending.clone();
                self.nodes[i].side_pending = sides.clone();
            }
        }
        Ok(())
    }
}
