//! File sinks (WriteFiles, WriteJsonLines), translated natively into an exactly-once sink: files
//! per batch and partition, written at commit under names derived from the batch id, and listed
//! in the sink's metadata log.

use super::PlanBuilder;
use crate::plan::{PhysicalNode, Role, SinkSpec};
use crate::translate::{composite_payload, Translator};
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::runner_api::FileSinkPayload;
use weir_sdk::Result;

pub(crate) struct WriteJsonLinesTranslator;

impl Translator<PlanBuilder> for WriteJsonLinesTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<FileSinkPayload>(node).is_some()
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<FileSinkPayload>(node) else { return Ok(()) };
        let windowed = if p.windowed { ", windowed" } else { "" };
        let description = format!("FileSink[{}{windowed} -> {}]", p.format.extension(), p.dir);
        let role = Role::Sink(SinkSpec::Files { step: node.full_name.clone(), payload: p.clone() });
        b.push(PhysicalNode::of(node, role, "file-sink", description));
        Ok(())
    }
}
