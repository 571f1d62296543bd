//! WriteJsonLines, translated natively into an exactly-once sink: one file per batch and
//! partition, written at commit under a name derived from the batch id.

use super::PlanBuilder;
use crate::exec::sink::JsonLinesSinkFactory;
use crate::plan::{PhysicalNode, Role};
use crate::translate::{composite_payload, Translator};
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::io::json_lines::JsonLinesPayload;
use weir_sdk::Result;

pub(crate) struct WriteJsonLinesTranslator;

impl Translator<PlanBuilder> for WriteJsonLinesTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<JsonLinesPayload>(node).is_some()
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<JsonLinesPayload>(node) else { return Ok(()) };
        let description = format!("FileSink[json lines -> {}]", p.dir);
        let role = Role::Sink(Arc::new(JsonLinesSinkFactory::new(&node.full_name, p.clone())));
        b.push(PhysicalNode::of(node, role, "json-lines-sink", description));
        Ok(())
    }
}
