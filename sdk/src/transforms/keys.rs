//! WithKeys, Keys, Values and KvSwap.

use crate::coders::Element;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::map::Map;
use std::marker::PhantomData;

/// Keys every element by a function of it: `WithKeys::of(|w: &String| w.len())`.
pub struct WithKeys<F, K, V> {
    f: F,
    _t: PhantomData<fn(V) -> K>,
}

impl<F, K, V> WithKeys<F, K, V> {
    /// Keys by `f(element)`.
    pub fn of(f: F) -> Self {
        WithKeys { f, _t: PhantomData }
    }
}

impl<K: Element, V: Element, F: Fn(&V) -> K + Clone + Send + Sync + 'static> PTransform<PCollection<V>>
    for WithKeys<F, K, V>
{
    type Output = PCollection<KV<K, V>>;
    fn expand(self, input: PCollection<V>) -> Self::Output {
        let f = self.f;
        input.apply("AddKeys", Map::new(move |v: V| KV::new(f(&v), v)))
    }
}

/// Keys every element by a constant: `WithKeys::constant(key)`.
pub fn with_constant_key<K: Element, V: Element>(
    key: K,
) -> WithKeys<impl Fn(&V) -> K + Clone + Send + Sync + 'static, K, V> {
    WithKeys::of(move |_: &V| key.clone())
}

/// The keys of a `PCollection<KV<K, V>>`.
pub struct Keys<K, V>(PhantomData<fn() -> (K, V)>);

impl<K: Element, V: Element> Keys<K, V> {
    /// Extracts keys.
    pub fn create() -> Self {
        Keys(PhantomData)
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for Keys<K, V> {
    type Output = PCollection<K>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input.apply("Keys", Map::new(|kv: KV<K, V>| kv.key))
    }
}

/// The values of a `PCollection<KV<K, V>>`.
pub struct Values<K, V>(PhantomData<fn() -> (K, V)>);

impl<K: Element, V: Element> Values<K, V> {
    /// Extracts values.
    pub fn create() -> Self {
        Values(PhantomData)
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for Values<K, V> {
    type Output = PCollection<V>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input.apply("Values", Map::new(|kv: KV<K, V>| kv.value))
    }
}

/// Swaps keys and values.
pub struct KvSwap<K, V>(PhantomData<fn() -> (K, V)>);

impl<K: Element, V: Element> KvSwap<K, V> {
    /// Swaps.
    pub fn create() -> Self {
        KvSwap(PhantomData)
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for KvSwap<K, V> {
    type Output = PCollection<KV<V, K>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input.apply("KvSwap", Map::new(|kv: KV<K, V>| KV::new(kv.value, kv.key)))
    }
}
