//! ForEachBatch (and Collect and Console built on it), translated natively: the callback runs
//! once per committed batch with all of the batch's elements (Spark's `foreachBatch`).

use super::PlanBuilder;
use crate::exec::sink::ForEachBatchSinkFactory;
use crate::plan::{PhysicalNode, Role};
use crate::translate::{composite_payload, Translator};
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::io::for_each_batch::ForEachBatchPayload;
use weir_sdk::Result;

pub(crate) struct ForEachBatchTranslator;

impl Translator<PlanBuilder> for ForEachBatchTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<ForEachBatchPayload>(node).is_some() && node.inputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<ForEachBatchPayload>(node) else { return Ok(()) };
        let description = format!("BatchSink[{}]", p.description);
        let role = Role::Sink(Arc::new(ForEachBatchSinkFactory::new(&node.full_name, p.clone())));
        b.push(PhysicalNode::of(node, role, "batch-sink", description));
        Ok(())
    }
}
