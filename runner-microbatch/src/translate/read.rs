//! Read: bounded and unbounded sources, scanned a bounded slice per batch.

use super::{internal, Builder};
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, ReadPayload, TransformNode};
use weir_sdk::Result;

pub(crate) struct ReadTranslator;

impl Translator<Builder> for ReadTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        let op = match &node.payload {
            Payload::Read(ReadPayload::Bounded(s)) => OpSpec::Read(s.clone()),
            Payload::Read(ReadPayload::Unbounded(s)) => OpSpec::ReadUnbounded(s.clone()),
            _ => return Err(internal(node, "source")),
        };
        b.push(node, op, None);
        Ok(())
    }
}
