//! The CombineFn contract, below everything that uses it (combining state, the Combine
//! transforms, combiners).

use crate::coders::Element;

/// An associative, commutative aggregation (Beam's `CombineFn`): inputs are added to
/// accumulators, accumulators merged in any grouping and order, and the output extracted.
pub trait CombineFn: Clone + Send + Sync + 'static {
    /// Input type.
    type In: Element;
    /// Accumulator type.
    type Accum: Element;
    /// Output type.
    type Out: Element;
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> Self::Accum;
    /// Adds one input to an accumulator.
    fn add_input(&self, acc: &mut Self::Accum, input: Self::In);
    /// Merges accumulators into one.
    fn merge_accumulators(&self, accs: Vec<Self::Accum>) -> Self::Accum;
    /// The output of an accumulator.
    fn extract_output(&self, acc: Self::Accum) -> Self::Out;
}
