//! Distinct: one of each distinct element per window, output once, on the first pane that holds
//! it (as Beam's `Distinct`, triggered or not).

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::combine::{Combine, CombineFn};
use crate::transforms::keys::WithKeys;
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use std::marker::PhantomData;

/// Removes duplicates (compared by encoded bytes, so the element coder must be deterministic;
/// the pipeline is refused at validation otherwise).
///
/// Each distinct element is output once per window, in the first pane that holds it: under a
/// trigger that fires several times, a later pane of the same element's window (accumulating
/// or discarding) outputs nothing for it again, as Beam's Distinct checks `pane.is_first`.
///
/// ```
/// use weir_sdk::prelude::*;
/// let p = Pipeline::create();
/// let words = p.apply("Words", Create::of(vec!["a".to_string(), "b".into(), "a".into()]));
/// let distinct: PCollection<String> = words.apply("Distinct", Distinct::create());
/// assert!(p.validate().is_ok());
/// ```
pub struct Distinct<T>(PhantomData<fn(T)>);

impl<T: Element> Distinct<T> {
    /// Distinct elements.
    pub fn create() -> Self {
        Distinct(PhantomData)
    }

    /// Beam's `Distinct.withRepresentativeValueFn`: elements are distinct by `f(element)`, and
    /// one element of each (the first combined; which one is arbitrary, as in Beam) stands for
    /// all with the same derived key, once per window, in the first pane that holds it.
    ///
    /// The derived key's type is known from `f`, so Beam's `withRepresentativeType` has no
    /// counterpart; its coder must be deterministic (checked at validation).
    ///
    /// ```
    /// use weir_sdk::prelude::*;
    /// let p = Pipeline::create();
    /// let words = p.apply("Words", Create::of(vec!["apple".to_string(), "avocado".into(), "banana".into()]));
    /// // One word per initial: "apple" or "avocado", and "banana".
    /// let by_initial: PCollection<String> =
    ///     words.apply("ByInitial", Distinct::with_representative_value_fn(|w: &String| w.chars().next()));
    /// assert!(p.validate().is_ok());
    /// ```
    pub fn with_representative_value_fn<Id, F>(f: F) -> DistinctWithRepresentative<T, Id, F>
    where
        Id: Element,
        F: Fn(&T) -> Id + Clone + Send + Sync + 'static,
    {
        DistinctWithRepresentative { f, _t: PhantomData }
    }
}

/// See [`Distinct::with_representative_value_fn`].
pub struct DistinctWithRepresentative<T, Id, F> {
    f: F,
    _t: PhantomData<fn(T) -> Id>,
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

/// Keeps the first value combined (Beam's binary combine `(left, right) -> left`).
#[derive(Clone, Copy, Debug)]
pub struct FirstFn<T>(PhantomData<fn(T)>);

impl<T: Element> CombineFn for FirstFn<T> {
    type In = T;
    type Accum = Option<T>;
    type Out = Option<T>;
    fn create_accumulator(&self) -> Option<T> {
        None
    }
    fn add_input(&self, acc: &mut Option<T>, input: T) {
        acc.get_or_insert(input);
    }
    fn merge_accumulators(&self, accs: Vec<Option<T>>) -> Option<T> {
        accs.into_iter().flatten().next()
    }
    fn extract_output(&self, acc: Option<T>) -> Option<T> {
        acc
    }
}

/// Passes on the representatives of first panes only: each key once per window.
#[derive(Clone)]
struct FirstPaneValues<K, V>(PhantomData<fn(K, V)>);

impl<K: Element, V: Element> DoFn for FirstPaneValues<K, V> {
    type In = KV<K, Option<V>>;
    type Out = V;
    fn process(&mut self, kv: KV<K, Option<V>>, ctx: &mut ProcessContext<'_, V>) -> UserResult {
        // A key is combined only with an input, so its representative is always there.
        if let (true, Some(v)) = (ctx.pane().is_first, kv.value) {
            ctx.output(v);
        }
        Ok(())
    }
}

/// Passes on the keys of first panes only.
#[derive(Clone)]
struct FirstPaneKeys<K>(PhantomData<fn(K)>);

impl<K: Element> DoFn for FirstPaneKeys<K> {
    type In = KV<K, ()>;
    type Out = K;
    fn process(&mut self, kv: KV<K, ()>, ctx: &mut ProcessContext<'_, K>) -> UserResult {
        if ctx.pane().is_first {
            ctx.output(kv.key);
        }
        Ok(())
    }
}

impl<T: Element> PTransform<PCollection<T>> for Distinct<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input
            .apply("KeyByElement", Map::new(|t: T| KV::new(t, ())))
            .apply("Combine.perKey", Combine::per_key(UnitFn))
            .apply("KeepFirstPane", ParDo::of(FirstPaneKeys(PhantomData)))
    }
}

impl<T, Id, F> PTransform<PCollection<T>> for DistinctWithRepresentative<T, Id, F>
where
    T: Element,
    Id: Element,
    F: Fn(&T) -> Id + Clone + Send + Sync + 'static,
{
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input
            .apply("WithKeys", WithKeys::of(self.f))
            .apply("Combine.perKey", Combine::per_key(FirstFn::<T>(PhantomData)))
            .apply("KeepFirstPane", ParDo::of(FirstPaneValues(PhantomData)))
    }
}
