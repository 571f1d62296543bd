//! Impulse: a source of one empty element.

use super::PlanBuilder;
use crate::plan::{PhysicalNode, Role, SourceSpec};
use crate::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ImpulseTranslator;

impl Translator<PlanBuilder> for ImpulseTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        b.push(PhysicalNode::of(node, Role::Source(SourceSpec::Impulse), "impulse", "Impulse"));
        Ok(())
    }
}
