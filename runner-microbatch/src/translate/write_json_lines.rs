//! WriteJsonLines, translated natively into an exactly-once sink: one file per batch and
//! partition, written at commit under a name derived from the batch id.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::io::json_lines::JsonLinesPayload;
use weir_sdk::Result;

pub(crate) struct WriteJsonLinesTranslator;

fn payload(node: &TransformNode) -> Option<&JsonLinesPayload> {
    weir_runner_core::translate::composite_payload::<JsonLinesPayload>(node)
}

impl Translator<Builder> for WriteJsonLinesTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        payload(node).is_some()
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        if let Some(p) = payload(node) {
            b.push(node, OpSpec::JsonLinesSink(p.clone()), None);
        }
        Ok(())
    }
}
