//! GroupByKey: an exchange by key, then the buffering GroupAlsoByWindow engine per partition.

use super::{internal, Builder};
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct GroupByKeyTranslator;

impl Translator<Builder> for GroupByKeyTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        match &node.payload {
            Payload::GroupByKey(k, partitioner) => {
                b.push(node, OpSpec::GroupByKey(k.clone()), Some(partitioner.clone()));
                Ok(())
            }
            _ => Err(internal(node, "grouping kernel")),
        }
    }
}
