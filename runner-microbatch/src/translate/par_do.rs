//! ParDo: fused with its producer's partitioning; stateful ParDos get an exchange by key.

use super::{internal, Builder};
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ParDoTranslator;

impl Translator<Builder> for ParDoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        match &node.payload {
            Payload::ParDo(p) => {
                b.push(node, OpSpec::ParDo(p.clone()), p.key_partitioner.clone());
                Ok(())
            }
            _ => Err(internal(node, "DoFn")),
        }
    }
}
