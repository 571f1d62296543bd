//! Flatten: no payload, executed by the direct runner's executor.

use super::{Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct FlattenTranslator;

impl Translator<Plan> for FlattenTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        plan.push(node, StepKind::Flatten);
        Ok(())
    }
}
