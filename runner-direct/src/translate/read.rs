//! Read: bounded sources are split into bundles; unbounded sources are polled.

use super::{internal, Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, ReadPayload, TransformNode};
use weir_sdk::Result;

pub(crate) struct ReadTranslator;

impl Translator<Plan> for ReadTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        match &node.payload {
            Payload::Read(ReadPayload::Bounded(source)) => plan.push(node, StepKind::Read(source.clone())),
            Payload::Read(ReadPayload::Unbounded(source)) => plan.push(node, StepKind::ReadUnbounded(source.clone())),
            _ => return Err(internal(node, "source")),
        }
        Ok(())
    }
}
