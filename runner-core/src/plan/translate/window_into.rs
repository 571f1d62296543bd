//! WindowInto: window assignment, element by element.

use super::{internal, PlanBuilder};
use crate::operator::{AssignOperator, Operator};
use crate::plan::{PhysicalNode, Role};
use crate::translate::Translator;
use std::sync::Arc;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct WindowIntoTranslator;

impl Translator<PlanBuilder> for WindowIntoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Payload::WindowInto(kernel) = &node.payload else { return Err(internal(node, "window assignment")) };
        let (id, kernel) = (node.id, kernel.clone());
        let factory = Arc::new(move |g: &PipelineGraph| {
            Box::new(AssignOperator::new(g.node(id), kernel.clone())) as Box<dyn Operator>
        });
        b.push(PhysicalNode::of(node, Role::Transform(factory), "window-into", "AssignWindows").element_wise());
        Ok(())
    }
}
