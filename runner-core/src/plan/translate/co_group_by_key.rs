//! CoGroupByKey, translated natively: each input's elements are encoded with their input's tag
//! as they go to the exchange (no tagging ParDo, no union objects, no Flatten), then the
//! buffering GroupAlsoByWindow engine groups them and builds each key's result from its group
//! buffer.

use super::PlanBuilder;
use crate::group_also_by_window::Values;
use crate::operator::{GroupOperator, Operator};
use crate::plan::{Exchange, PhysicalNode, Role};
use crate::translate::{composite_payload, Translator};
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::runner_api::CoGroupByKeyPayload;
use weir_sdk::Result;

pub(crate) struct CoGroupByKeyTranslator;

impl Translator<PlanBuilder> for CoGroupByKeyTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        // The same collection twice (joined with itself) keeps the expansion: a runner routes
        // a collection to a node once per input, and both would carry the first input's tag.
        let distinct = node.inputs.iter().enumerate().all(|(i, pc)| !node.inputs[..i].contains(pc));
        composite_payload::<CoGroupByKeyPayload>(node).is_some_and(|p| p.encoders.len() == node.inputs.len())
            && node.outputs.len() == 1
            && distinct
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<CoGroupByKeyPayload>(node) else { return Ok(()) };
        let (id, kernel, state) = (node.id, p.kernel.clone(), b.state().clone());
        let factory = Arc::new(move |g: &PipelineGraph| {
            let op = GroupOperator::new(g.node(id), g, Values::Buffer(kernel.clone())).with_state(&state);
            Box::new(op) as Box<dyn Operator>
        });
        let exchanges = p.encoders.iter().map(|e| Exchange::encoding(&node.full_name, e.clone())).collect();
        let description = format!("GroupAlsoByWindow[co-group of {} inputs]", p.encoders.len());
        b.push(
            PhysicalNode::of(node, Role::Transform(factory), "co-group-by-key", description)
                .with_exchanges(exchanges)
                .stateful(),
        );
        Ok(())
    }
}
