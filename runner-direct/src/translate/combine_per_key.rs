//! Combine.perKey: translated natively onto the combining GroupAlsoByWindow engine, which keeps
//! one accumulator per key and window instead of buffering values.

use super::{Plan, StepKind};
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::CombinePerKeyPayload;
use weir_sdk::Result;

pub(crate) struct CombinePerKeyTranslator;

fn payload(node: &TransformNode) -> Option<&CombinePerKeyPayload> {
    weir_runner_core::translate::composite_payload::<CombinePerKeyPayload>(node)
}

impl Translator<Plan> for CombinePerKeyTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        payload(node).is_some()
    }
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, plan: &mut Plan) -> Result<()> {
        if let Some(p) = payload(node) {
            plan.push(node, StepKind::CombinePerKey(p.kernel.clone()));
        }
        Ok(())
    }
}
