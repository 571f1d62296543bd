//! GroupByKey: group all bundles of the input with runner-core's grouper.

use super::{internal, Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct GroupByKeyTranslator;

impl Translator<Plan> for GroupByKeyTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        match &node.payload {
            Payload::GroupByKey(k, _) => {
                plan.push(node, StepKind::GroupByKey(k.clone()));
                Ok(())
            }
            _ => Err(internal(node, "grouping kernel")),
        }
    }
}
