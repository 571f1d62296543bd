//! TestStream: a source playing its events, one per step, moving the test clock.

use super::{internal, PlanBuilder};
use crate::plan::{PhysicalNode, Role, SourceSpec};
use crate::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct TestStreamTranslator;

impl Translator<PlanBuilder> for TestStreamTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        match &node.payload {
            Payload::TestStream(events) => {
                let role = Role::Source(SourceSpec::TestStream(events.clone()));
                b.push(PhysicalNode::of(node, role, "test-stream", "Scan[TestStream]"));
                Ok(())
            }
            _ => Err(internal(node, "event")),
        }
    }
}
