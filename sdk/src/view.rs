//! Side-input views: a PCollection materialized per window and read by a DoFn (spec §6).

use crate::coders::{Coder, Element, ElementCoder};
use crate::error::UserError;
use crate::kernel::{downcast_batch, Batch, SideInputSpec, ViewKernel};
use crate::kv::KV;
use crate::pipeline::PCollection;
use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    entries: HashMap<Vec<u8>, (K, V)>,
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
    entries: HashMap<Vec<u8>, (K, Vec<V>)>,
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
    /// The view's id.
    pub fn id(&self) -> &str {
        &self.spec.view_id
    }
    /// The side input's description for ParDo.
    pub fn spec(&self) -> &SideInputSpec {
        &self.spec
    }
}

static NEXT_VIEW: AtomicUsize = AtomicUsize::new(0);

fn view<T: Element, V>(pc: &PCollection<T>, kind: &str, kernel: Arc<dyn ViewKernel>) -> PCollectionView<V> {
    let id = format!("{kind}#{}@pc{}", NEXT_VIEW.fetch_add(1, Ordering::Relaxed), pc.id());
    let spec = SideInputSpec {
        view_id: id,
        pcollection: pc.id(),
        kernel,
        window_fn: pc.windowing_strategy().window_fn.clone(),
    };
    PCollectionView { spec, _v: PhantomData }
}

fn elements<T: Element>(batches: Vec<Batch>) -> Result<Vec<T>, UserError> {
    let mut out = Vec::new();
    for b in batches {
        out.extend(downcast_batch::<T>(b)?.into_iter().map(|wv| wv.value));
    }
    Ok(out)
}

struct SingletonKernel<T> {
    default: Option<T>,
}

impl<T: Element> ViewKernel for SingletonKernel<T> {
    fn build(&self, batches: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        let mut all = elements::<T>(batches)?;
        match all.len() {
            1 => Ok(Arc::new(all.pop().expect("one element"))),
            0 => match &self.default {
                Some(d) => Ok(Arc::new(d.clone())),
                None => {
                    Err("Empty PCollection accessed as a singleton view. Consider setting with_default to provide a \
                             default value"
                        .into())
                }
            },
            n => Err(format!(
                "PCollection with more than one element accessed as a singleton view ({n} elements, e.g. {:?}). \
                 Consider using Combine.globally().as_singleton_view() to combine the PCollection into a single value",
                &all[..2]
            )
            .into()),
        }
    }
}

struct ListKernel<T>(PhantomData<fn() -> T>);

impl<T: Element> ViewKernel for ListKernel<T> {
    fn build(&self, batches: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        Ok(Arc::new(elements::<T>(batches)?))
    }
}

struct MapKernel<K, V>(PhantomData<fn() -> (K, V)>);

impl<K: Element, V: Element> ViewKernel for MapKernel<K, V> {
    fn build(&self, batches: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        let coder = ElementCoder::<K>::new();
        let mut entries = HashMap::new();
        for kv in elements::<KV<K, V>>(batches)? {
            let mut b = Vec::new();
            coder.encode(&kv.key, &mut b)?;
            if entries.contains_key(&b) {
                return Err(format!("Multiple values for key {:?} in a map side input; use as_multimap", kv.key).into());
            }
            entries.insert(b, (kv.key, kv.value));
        }
        Ok(Arc::new(SideMap { entries }))
    }
}

struct MultimapKernel<K, V>(PhantomData<fn() -> (K, V)>);

impl<K: Element, V: Element> ViewKernel for MultimapKernel<K, V> {
    fn build(&self, batches: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        let coder = ElementCoder::<K>::new();
        let mut entries: HashMap<Vec<u8>, (K, Vec<V>)> = HashMap::new();
        for kv in elements::<KV<K, V>>(batches)? {
            let mut b = Vec::new();
            coder.encode(&kv.key, &mut b)?;
            entries.entry(b).or_insert_with(|| (kv.key, Vec::new())).1.push(kv.value);
        }
        Ok(Arc::new(SideMultimap { entries }))
    }
}

/// Constructors of side-input views.
pub struct View;

impl View {
    /// The single element of each window; reading an empty window or one with several elements
    /// fails (see [`View::as_singleton_with_default`]).
    pub fn as_singleton<T: Element>(pc: &PCollection<T>) -> PCollectionView<Singleton<T>> {
        view(pc, "singleton", Arc::new(SingletonKernel::<T> { default: None }))
    }
    /// The single element of each window, or `default` for an empty window.
    pub fn as_singleton_with_default<T: Element>(pc: &PCollection<T>, default: T) -> PCollectionView<Singleton<T>> {
        view(pc, "singleton", Arc::new(SingletonKernel::<T> { default: Some(default) }))
    }
    /// All elements of each window.
    pub fn as_iterable<T: Element>(pc: &PCollection<T>) -> PCollectionView<ListOf<T>> {
        view(pc, "iterable", Arc::new(ListKernel::<T>(PhantomData)))
    }
    /// All elements of each window, with random access.
    pub fn as_list<T: Element>(pc: &PCollection<T>) -> PCollectionView<ListOf<T>> {
        view(pc, "list", Arc::new(ListKernel::<T>(PhantomData)))
    }
    /// A map per window; a key with several values fails when read.
    pub fn as_map<K: Element, V: Element>(pc: &PCollection<KV<K, V>>) -> PCollectionView<MapOf<K, V>> {
        view(pc, "map", Arc::new(MapKernel::<K, V>(PhantomData)))
    }
    /// A multimap per window.
    pub fn as_multimap<K: Element, V: Element>(pc: &PCollection<KV<K, V>>) -> PCollectionView<MultimapOf<K, V>> {
        view(pc, "multimap", Arc::new(MultimapKernel::<K, V>(PhantomData)))
    }
}
