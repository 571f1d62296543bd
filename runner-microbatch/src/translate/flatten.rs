//! Flatten: a union, partition by partition.

use super::Builder;
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct FlattenTranslator;

impl Translator<Builder> for FlattenTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        b.push(node, OpSpec::Flatten, None);
        Ok(())
    }
}
