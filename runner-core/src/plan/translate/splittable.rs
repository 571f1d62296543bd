//! A splittable DoFn's processing step: the queue of restrictions per partition
//! ([`crate::splittable::SplittableOperator`]). Its input comes spread over the partitions by
//! the reshuffle the SDK puts before it.

use super::{internal, PlanBuilder};
use crate::operator::Operator;
use crate::plan::{short_type_name, PhysicalNode, Role};
use crate::splittable::SplittableOperator;
use crate::translate::{primitive_payload, Translator};
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::splittable::SplittablePayload;
use weir_sdk::Result;

pub(crate) struct SplittableTranslator;

impl Translator<PlanBuilder> for SplittableTranslator {
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = primitive_payload::<SplittablePayload>(node) else {
            return Err(internal(node, "splittable DoFn"));
        };
        // The expansion of a Read reads under the Read's name, as a native read does: its
        // metrics and errors name the step the user applied.
        let read = read_of(node, graph);
        let step = read.unwrap_or(&node.full_name).to_string();
        let reads_a_source = read.is_some() || p.reads_a_source;
        let (payload, output, name) = (p.clone(), node.outputs[0], step.clone());
        let factory = Arc::new(move |g: &PipelineGraph| {
            Box::new(
                SplittableOperator::new(&step, &payload, g.pcollection(output).ops.clone())
                    .reading_a_source(reads_a_source),
            ) as Box<dyn Operator>
        });
        let description = format!("SplittableParDo[{}]", short_type_name(p.fn_name));
        let finalizes = p.finalizes_bundles;
        let mut physical = PhysicalNode::of(node, Role::Transform(factory), "splittable-pardo", description);
        physical.name = name;
        b.push(physical.stateful().after_commit(finalizes));
        Ok(())
    }
}

/// The full name of the Read whose expansion `node` is the processing step of: the composite
/// two levels up (Read, then its SplittableParDo), when it is a Read.
fn read_of<'g>(node: &TransformNode, graph: &'g PipelineGraph) -> Option<&'g str> {
    let parent = graph.node(node.parent?);
    let read = graph.node(parent.parent?);
    (read.urn == weir_sdk::urns::READ).then_some(read.full_name.as_str())
}
