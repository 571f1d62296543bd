//! Flatten: every input's bundles go to the output unchanged.

use super::PlanBuilder;
use crate::operator::{FlattenOperator, Operator};
use crate::plan::{PhysicalNode, Role};
use crate::translate::Translator;
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct FlattenTranslator;

impl Translator<PlanBuilder> for FlattenTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let factory = Arc::new(|_: &PipelineGraph| Box::new(FlattenOperator) as Box<dyn Operator>);
        b.push(PhysicalNode::of(node, Role::Transform(factory), "flatten", "Union"));
        Ok(())
    }
}
