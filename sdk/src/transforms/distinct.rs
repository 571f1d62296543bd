//! Distinct: one of each distinct element per window.

use crate::coders::Element;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::combine::{Combine, CombineFn};
use crate::transforms::keys::Keys;
use crate::transforms::map::Map;
use std::marker::PhantomData;

/// Removes duplicates (compared by encoded bytes, so the element coder must be deterministic).
pub struct Distinct<T>(PhantomData<fn(T)>);

impl<T: Element> Distinct<T> {
    /// Distinct elements.
    pub fn create() -> Self {
        Distinct(PhantomData)
    }
}

/// Combines nothing: each key's presence is all that matters.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitFn;

impl CombineFn for UnitFn {
    type In = ();
    type Accum = ();
    type Out = ();
    fn create_accumulator(&self) {}
    fn add_input(&self, _: &mut (), _: ()) {}
    fn merge_accumulators(&self, _: Vec<()>) {}
    fn extract_output(&self, _: ()) {}
}

impl<T: Element> PTransform<PCollection<T>> for Distinct<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input
            .apply("KeyByElement", Map::new(|t: T| KV::new(t, ())))
            .apply("Combine.perKey", Combine::per_key(UnitFn))
            .apply("Keys", Keys::create())
    }
}
