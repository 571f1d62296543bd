//! WindowInto: assigned partition by partition.

use super::{internal, Builder};
use crate::plan::OpSpec;
use weir_runner_core::translate::Translator;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct WindowIntoTranslator;

impl Translator<Builder> for WindowIntoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut Builder) -> Result<()> {
        match &node.payload {
            Payload::WindowInto(k) => {
                b.push(node, OpSpec::WindowInto(k.clone()), None);
                Ok(())
            }
            _ => Err(internal(node, "window assignment")),
        }
    }
}
