//! Reshuffle, translated natively: an exchange that spreads elements evenly over the partitions,
//! then the elements unchanged (timestamps, windows and panes kept) — no grouping, no state.

use super::Builder;
use crate::plan::OpSpec;
use std::sync::Arc;
use weir_runner_core::translate::Translator;
use weir_sdk::coders::CoderError;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::{Batch, CollectionOps, KeyPartitioner};
use weir_sdk::Result;

pub(crate) struct ReshuffleTranslator;

/// Splits a batch into `n` nearly equal parts.
struct Spread(Arc<dyn CollectionOps>);

impl KeyPartitioner for Spread {
    fn partition(&self, input: Batch, n: usize) -> std::result::Result<Vec<Batch>, CoderError> {
        let n = n.max(1);
        let len = self.0.len(&input);
        let mut parts = self.0.split(input, len.div_ceil(n).max(1));
        while parts.len() < n {
            parts.push(self.0.empty());
        }
        // Rotate so that small batches do not all land in partition 0.
        let shift = (len * 7919) % n;
        parts.rotate_left(shift);
        Ok(parts)
    }
}

impl Translator<Builder> for ReshuffleTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        node.inputs.len() == 1 && node.outputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, b: &mut Builder) -> Result<()> {
        let ops = graph.pcollection(node.inputs[0]).ops.clone();
        b.push(node, OpSpec::Flatten, Some(Arc::new(Spread(ops))));
        Ok(())
    }
}
