//! TestStream: one event per batch, with a test clock.

use super::{internal, Builder};
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct TestStreamTranslator;

impl Translator<Builder> for TestStreamTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        match &node.payload {
            Payload::TestStream(events) => {
                b.push(node, OpSpec::TestStream(events.clone()), None);
                Ok(())
            }
            _ => Err(internal(node, "event")),
        }
    }
}
