//! Deduplicate, translated natively: an exchange by key, then the streaming deduplicate
//! operator, which remembers each key and window in a hash map until its expiry.

use super::PlanBuilder;
use crate::dedup::DedupOperator;
use crate::operator::Operator;
use crate::plan::{Exchange, PhysicalNode, Role};
use crate::translate::{composite_payload, Translator};
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::runner_api::DeduplicatePayload;
use weir_sdk::Result;

pub(crate) struct DeduplicateTranslator;

impl Translator<PlanBuilder> for DeduplicateTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<DeduplicatePayload>(node).is_some() && node.inputs.len() == 1 && node.outputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<DeduplicatePayload>(node) else { return Ok(()) };
        let input = graph.pcollection(node.inputs[0]);
        let (step, strategy, kernel, ms) =
            (node.full_name.clone(), input.windowing.clone(), p.kernel.clone(), p.duration_ms);
        let state = b.state().clone();
        let factory = Arc::new(move |_: &PipelineGraph| {
            Box::new(DedupOperator::new(&step, strategy.clone(), kernel.clone(), ms).with_state(&state))
                as Box<dyn Operator>
        });
        let description = format!("StreamingDeduplicate[within {ms} ms]");
        b.push(
            PhysicalNode::of(node, Role::Transform(factory), "deduplicate", description)
                .with_exchange(Exchange::by_key(&node.full_name, p.partitioner.clone()))
                .stateful(),
        );
        Ok(())
    }
}
