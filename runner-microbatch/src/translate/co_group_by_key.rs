//! CoGroupByKey, translated natively: each input's elements are encoded with their input's tag
//! as they go to the exchange (no tagging ParDo, no union objects, no Flatten), then the
//! buffering GroupAlsoByWindow engine groups them and builds each key's result from its group
//! buffer.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::transforms::co_group_by_key::CoGroupByKeyPayload;
use weir_sdk::Result;

pub(crate) struct CoGroupByKeyTranslator;

fn payload(node: &TransformNode) -> Option<&CoGroupByKeyPayload> {
    weir_runner_core::translate::composite_payload::<CoGroupByKeyPayload>(node)
}

impl Translator<Builder> for CoGroupByKeyTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        // The same collection twice (joined with itself) keeps the expansion: routing tells
        // inputs apart by collection.
        let distinct = node.inputs.iter().enumerate().all(|(i, pc)| !node.inputs[..i].contains(pc));
        payload(node).is_some_and(|p| p.encoders.len() == node.inputs.len()) && node.outputs.len() == 1 && distinct
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        if let Some(p) = payload(node) {
            // No partitioner: the engine encodes and partitions each input by its encoder.
            b.push(node, OpSpec::CoGroupByKey(p.encoders.clone(), p.kernel.clone()), None);
        }
        Ok(())
    }
}
