//! Reshuffle, translated natively: an exchange that spreads elements evenly over the partitions,
//! then the elements unchanged (timestamps, windows and panes kept): no grouping, no state.

use super::PlanBuilder;
use crate::operator::{FlattenOperator, Operator};
use crate::plan::exchange::Spread;
use crate::plan::{PhysicalNode, Role};
use crate::translate::Translator;
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ReshuffleTranslator;

impl Translator<PlanBuilder> for ReshuffleTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        node.inputs.len() == 1 && node.outputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let factory = Arc::new(|_: &PipelineGraph| Box::new(FlattenOperator) as Box<dyn Operator>);
        let exchange = Spread::exchange();
        b.push(PhysicalNode::of(node, Role::Transform(factory), "flatten", "Redistribute").with_exchange(exchange));
        Ok(())
    }
}
