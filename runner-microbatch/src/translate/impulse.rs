//! Impulse: a source emitting one element in the first batch.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ImpulseTranslator;

impl Translator<Builder> for ImpulseTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        b.push(node, OpSpec::Impulse, None);
        Ok(())
    }
}
