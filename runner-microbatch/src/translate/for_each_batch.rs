//! ForEachBatch (and Collect, Console), translated natively: the callback runs once per batch,
//! when the batch commits, with the batch id.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::{composite_payload, Translator};
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::io::for_each_batch::ForEachBatchPayload;
use weir_sdk::Result;

pub(crate) struct ForEachBatchTranslator;

impl Translator<Builder> for ForEachBatchTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<ForEachBatchPayload>(node).is_some()
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        if let Some(p) = composite_payload::<ForEachBatchPayload>(node) {
            b.push(node, OpSpec::BatchSink(p.clone()), None);
        }
        Ok(())
    }
}
