//! ForEachBatch (and Collect and Console built on it), translated natively: the callback runs
//! once per committed batch with all of the batch's elements (Spark's `foreachBatch`).

use super::PlanBuilder;
use crate::plan::{PhysicalNode, Role, SinkSpec};
use crate::translate::{composite_payload, Translator};
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::runner_api::{CommitSinkPayload, ForEachBatchPayload};
use weir_sdk::Result;

pub(crate) struct ForEachBatchTranslator;

impl Translator<PlanBuilder> for ForEachBatchTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<ForEachBatchPayload>(node).is_some() && node.inputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<ForEachBatchPayload>(node) else { return Ok(()) };
        let description = format!("BatchSink[{}]", p.description);
        let role = Role::Sink(SinkSpec::ForEachBatch { step: node.full_name.clone(), payload: p.clone() });
        b.push(PhysicalNode::of(node, role, "batch-sink", description));
        Ok(())
    }
}

/// A [`weir_sdk::io::WriteCommitted`] sink, translated natively: each committed batch's output,
/// with the batch's id.
pub(crate) struct CommitSinkTranslator;

impl Translator<PlanBuilder> for CommitSinkTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<CommitSinkPayload>(node).is_some() && node.inputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<CommitSinkPayload>(node) else { return Ok(()) };
        let description = format!("CommitSink[{}]", p.sink.describe());
        let role = Role::Sink(SinkSpec::Committed { step: node.full_name.clone(), payload: p.clone() });
        b.push(PhysicalNode::of(node, role, "commit-sink", description));
        Ok(())
    }
}
