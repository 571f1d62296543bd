//! WindowInto: assign windows bundle by bundle.

use super::{internal, Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct WindowIntoTranslator;

impl Translator<Plan> for WindowIntoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        match &node.payload {
            Payload::WindowInto(k) => {
                plan.push(node, StepKind::WindowInto(k.clone()));
                Ok(())
            }
            _ => Err(internal(node, "window assignment")),
        }
    }
}
