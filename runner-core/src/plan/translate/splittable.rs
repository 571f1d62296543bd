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
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = primitive_payload::<SplittablePayload>(node) else {
            return Err(internal(node, "splittable DoFn"));
        };
        let (step, payload, output) = (node.full_name.clone(), p.clone(), node.outputs[0]);
        let factory = Arc::new(move |g: &PipelineGraph| {
            Box::new(SplittableOperator::new(&step, &payload, g.pcollection(output).ops.clone())) as Box<dyn Operator>
        });
        let description = format!("SplittableParDo[{}]", short_type_name(p.fn_name));
        let finalizes = p.finalizes_bundles;
        b.push(
            PhysicalNode::of(node, Role::Transform(factory), "splittable-pardo", description)
                .stateful()
                .after_commit(finalizes),
        );
        Ok(())
    }
}
