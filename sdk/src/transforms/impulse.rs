//! Impulse: the root primitive that emits a single empty byte array.

use crate::graph::{Boundedness, Payload};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::window_fn::WindowingStrategy;

/// Emits exactly one element: an empty byte array at the minimum timestamp in the global window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impulse;

impl PTransform<PBegin> for Impulse {
    type Output = PCollection<Vec<u8>>;
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input.pipeline_handle();
        let node = p.make_primitive(crate::urns::IMPULSE, Payload::Impulse);
        p.new_output(node, "out", Boundedness::Bounded, WindowingStrategy::global())
    }
}
