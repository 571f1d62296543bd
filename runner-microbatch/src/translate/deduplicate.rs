//! Deduplicate, translated natively: an exchange by key, then the streaming deduplicate
//! operator, which remembers each key and window in a hash map until its expiry.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::transforms::deduplicate::DeduplicatePayload;
use weir_sdk::Result;

pub(crate) struct DeduplicateTranslator;

fn payload(node: &TransformNode) -> Option<&DeduplicatePayload> {
    weir_runner_core::translate::composite_payload::<DeduplicatePayload>(node)
}

impl Translator<Builder> for DeduplicateTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        payload(node).is_some() && node.inputs.len() == 1 && node.outputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        if let Some(p) = payload(node) {
            b.push(node, OpSpec::Deduplicate(p.kernel.clone(), p.duration_ms), Some(p.partitioner.clone()));
        }
        Ok(())
    }
}
