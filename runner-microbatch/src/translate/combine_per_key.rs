//! Combine.perKey, translated natively: an exchange by key, then the combining
//! GroupAlsoByWindow engine, which keeps one accumulator per key and window. Where lifting
//! changes nothing observable ([`weir_runner_core::operator::can_lift_combine`]), the
//! combiner is lifted: each batch's inputs are combined per key and window on their way to
//! the exchange, and only the partial accumulators are encoded and exchanged.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::CombinePerKeyPayload;
use weir_sdk::Result;

pub(crate) struct CombinePerKeyTranslator;

fn payload(node: &TransformNode) -> Option<&CombinePerKeyPayload> {
    weir_runner_core::translate::composite_payload::<CombinePerKeyPayload>(node)
}

impl Translator<Builder> for CombinePerKeyTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        payload(node).is_some()
    }
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, b: &mut Builder) -> Result<()> {
        if let Some(p) = payload(node) {
            let lifted = node
                .inputs
                .first()
                .is_some_and(|&pc| weir_runner_core::operator::can_lift_combine(&graph.pcollection(pc).windowing));
            b.push(node, OpSpec::CombinePerKey(p.kernel.clone(), lifted), Some(p.partitioner.clone()));
        }
        Ok(())
    }
}
