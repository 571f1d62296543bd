//! Read: a bounded or unbounded source, read in slices.

use super::{internal, PlanBuilder};
use crate::plan::{PhysicalNode, Role, SourceSpec};
use crate::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, ReadPayload, TransformNode};
use weir_sdk::Result;

pub(crate) struct ReadTranslator;

impl Translator<PlanBuilder> for ReadTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let (spec, kind, description) = match &node.payload {
            Payload::Read(ReadPayload::Bounded(s)) => (SourceSpec::Bounded(s.clone()), "read", "Scan[bounded]"),
            Payload::Read(ReadPayload::Unbounded(s)) => {
                (SourceSpec::Unbounded(s.clone()), "read-unbounded", "Scan[unbounded]")
            }
            _ => return Err(internal(node, "source")),
        };
        b.push(PhysicalNode::of(node, Role::Source(spec), kind, description));
        Ok(())
    }
}
