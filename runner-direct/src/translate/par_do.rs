//! ParDo: run the DoFn over each bundle.

use super::{internal, Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ParDoTranslator;

impl Translator<Plan> for ParDoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        match &node.payload {
            Payload::ParDo(p) => {
                plan.push(node, StepKind::ParDo(p.clone()));
                Ok(())
            }
            _ => Err(internal(node, "DoFn")),
        }
    }
}
