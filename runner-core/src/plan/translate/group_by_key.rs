//! GroupByKey: an exchange by key, then the buffering GroupAlsoByWindow engine.

use super::{internal, PlanBuilder};
use crate::group_also_by_window::Values;
use crate::operator::{GroupOperator, Operator};
use crate::plan::{Exchange, PhysicalNode, Role};
use crate::translate::Translator;
use std::sync::Arc;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct GroupByKeyTranslator;

impl Translator<PlanBuilder> for GroupByKeyTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Payload::GroupByKey(kernel, partitioner) = &node.payload else {
            return Err(internal(node, "grouping kernel"));
        };
        let (id, kernel, state) = (node.id, kernel.clone(), b.state().clone());
        let factory = Arc::new(move |g: &PipelineGraph| {
            let op = GroupOperator::new(g.node(id), g, Values::Buffer(kernel.clone())).with_state(&state);
            Box::new(op) as Box<dyn Operator>
        });
        let exchange = Exchange::by_key(&node.full_name, partitioner.clone());
        b.push(
            PhysicalNode::of(node, Role::Transform(factory), "group-by-key", "GroupAlsoByWindow[buffering]")
                .with_exchange(exchange)
                .stateful(),
        );
        Ok(())
    }
}
