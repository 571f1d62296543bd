//! Side-input views: a PCollection materialized per window and read by a DoFn. The views'
//! types live here, below the DoFn API that reads them; [`crate::transforms::view::View`] makes
//! them from PCollections.

use crate::coders::{Coder, Element, ElementCoder};
use crate::error::UserError;
use crate::kernel::SideInputSpec;
use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

/// What a view yields to a DoFn.
pub trait ViewValue: Send + Sync + 'static {
    /// The type `ProcessContext::side_input` returns.
    type Output;
    /// Recovers the typed value from what the runner materialized.
    fn from_any(any: Arc<dyn Any + Send + Sync>) -> Result<Self::Output, UserError>;
}

fn downcast<T: Send + Sync + 'static>(any: Arc<dyn Any + Send + Sync>) -> Result<Arc<T>, UserError> {
    any.downcast::<T>().map_err(|_| "internal error: side input of an unexpected type".into())
}

/// A singleton view's value.
pub struct Singleton<T>(PhantomData<fn() -> T>);
/// An iterable or list view's value.
pub struct ListOf<T>(PhantomData<fn() -> T>);
/// A map view's value.
pub struct MapOf<K, V>(PhantomData<fn() -> (K, V)>);
/// A multimap view's value.
pub struct MultimapOf<K, V>(PhantomData<fn() -> (K, V)>);

impl<T: Element> ViewValue for Singleton<T> {
    type Output = T;
    fn from_any(any: Arc<dyn Any + Send + Sync>) -> Result<T, UserError> {
        Ok((*downcast::<T>(any)?).clone())
    }
}

impl<T: Element> ViewValue for ListOf<T> {
    type Output = Arc<Vec<T>>;
    fn from_any(any: Arc<dyn Any + Send + Sync>) -> Result<Arc<Vec<T>>, UserError> {
        downcast(any)
    }
}

impl<K: Element, V: Element> ViewValue for MapOf<K, V> {
    type Output = Arc<SideMap<K, V>>;
    fn from_any(any: Arc<dyn Any + Send + Sync>) -> Result<Self::Output, UserError> {
        downcast(any)
    }
}

impl<K: Element, V: Element> ViewValue for MultimapOf<K, V> {
    type Output = Arc<SideMultimap<K, V>>;
    fn from_any(any: Arc<dyn Any + Send + Sync>) -> Result<Self::Output, UserError> {
        downcast(any)
    }
}

/// A map side input; keys are compared by their encoded bytes, as in a GroupByKey.
pub struct SideMap<K, V> {
    pub(crate) entries: HashMap<Vec<u8>, (K, V)>,
}

impl<K: Element, V: Element> SideMap<K, V> {
    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        let mut b = Vec::new();
        ElementCoder::<K>::new().encode(key, &mut b).ok()?;
        self.entries.get(&b).map(|(_, v)| v)
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.values().map(|(k, v)| (k, v))
    }
}

/// A multimap side input: every value of each key.
pub struct SideMultimap<K, V> {
    pub(crate) entries: HashMap<Vec<u8>, (K, Vec<V>)>,
}

impl<K: Element, V: Element> SideMultimap<K, V> {
    /// The values of `key` (empty if none).
    pub fn get(&self, key: &K) -> &[V] {
        let mut b = Vec::new();
        if ElementCoder::<K>::new().encode(key, &mut b).is_err() {
            return &[];
        }
        self.entries.get(&b).map(|(_, v)| v.as_slice()).unwrap_or(&[])
    }
    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// All keys with their values, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &[V])> {
        self.entries.values().map(|(k, v)| (k, v.as_slice()))
    }
}

/// A PCollection as a side input: pass it to `ParDo::with_side_inputs` and read it with
/// `ProcessContext::side_input`.
pub struct PCollectionView<V> {
    spec: SideInputSpec,
    _v: PhantomData<fn() -> V>,
}

impl<V> Clone for PCollectionView<V> {
    fn clone(&self) -> Self {
        PCollectionView { spec: self.spec.clone(), _v: PhantomData }
    }
}

impl<V> PCollectionView<V> {
    /// The view described by `spec` (built by [`crate::transforms::view::View`]).
    pub(crate) fn of(spec: SideInputSpec) -> Self {
        PCollectionView { spec, _v: PhantomData }
    }
    /// The view's id.
    pub fn id(&self) -> &str {
        &self.spec.view_id
    }
    /// The side input's description for ParDo.
    pub fn spec(&self) -> &SideInputSpec {
        &self.spec
    }
}
