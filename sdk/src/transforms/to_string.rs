//! ToString: render elements as strings.

use crate::coders::Element;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::map::Map;
use std::fmt::Display;
use std::marker::PhantomData;

/// Renders elements with `Display`.
pub struct ToString;

impl ToString {
    /// Each element as a string.
    pub fn elements<T: Element + Display>() -> ToStringElements<T> {
        ToStringElements(PhantomData)
    }
    /// Each `KV` as `key<delimiter>value`.
    pub fn kvs<K: Element + Display, V: Element + Display>(delimiter: &str) -> ToStringKvs<K, V> {
        ToStringKvs { delimiter: delimiter.to_string(), _t: PhantomData }
    }
    /// Each list as its items joined by `delimiter`.
    pub fn iterables<T: Element + Display>(delimiter: &str) -> ToStringIterables<T> {
        ToStringIterables { delimiter: delimiter.to_string(), _t: PhantomData }
    }
}

/// See [`ToString::elements`].
pub struct ToStringElements<T>(PhantomData<fn(T)>);

impl<T: Element + Display> PTransform<PCollection<T>> for ToStringElements<T> {
    type Output = PCollection<String>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input.apply("ToString", Map::new(|t: T| t.to_string()))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::TO_STRING)
    }
}

/// See [`ToString::kvs`].
pub struct ToStringKvs<K, V> {
    delimiter: String,
    _t: PhantomData<fn(K, V)>,
}

impl<K: Element + Display, V: Element + Display> PTransform<PCollection<KV<K, V>>> for ToStringKvs<K, V> {
    type Output = PCollection<String>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        let d = self.delimiter;
        input.apply("ToString", Map::new(move |kv: KV<K, V>| format!("{}{d}{}", kv.key, kv.value)))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::TO_STRING)
    }
}

/// See [`ToString::iterables`].
pub struct ToStringIterables<T> {
    delimiter: String,
    _t: PhantomData<fn(T)>,
}

impl<T: Element + Display> PTransform<PCollection<Vec<T>>> for ToStringIterables<T> {
    type Output = PCollection<String>;
    fn expand(self, input: PCollection<Vec<T>>) -> Self::Output {
        let d = self.delimiter;
        input.apply("ToString", Map::new(move |v: Vec<T>| v.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(&d)))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::TO_STRING)
    }
}
