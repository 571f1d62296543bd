//! TestStream: played one event per round, with a test clock.

use super::{internal, Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct TestStreamTranslator;

impl Translator<Plan> for TestStreamTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        match &node.payload {
            Payload::TestStream(events) => {
                plan.push(node, StepKind::TestStream(events.clone()));
                Ok(())
            }
            _ => Err(internal(node, "event")),
        }
    }
}
