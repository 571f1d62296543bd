//! View: side-input views made from PCollections (Beam's `View.asSingleton()`, `asList()`,
//! `asMap()`...), with the kernels that build a view's value from one window's elements.

use crate::coders::{Coder, Element, ElementCoder};
use crate::error::UserError;
use crate::kernel::{downcast_batch, Batch, SideInputSpec, ViewKernel};
use crate::kv::KV;
use crate::pipeline::PCollection;
use crate::view::{ListOf, MapOf, MultimapOf, PCollectionView, SideMap, SideMultimap, Singleton};
use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

static NEXT_VIEW: AtomicUsize = AtomicUsize::new(0);

fn view<T: Element, V>(pc: &PCollection<T>, kind: &str, kernel: Arc<dyn ViewKernel>) -> PCollectionView<V> {
    let id = format!("{kind}#{}@pc{}", NEXT_VIEW.fetch_add(1, Ordering::Relaxed), pc.id());
    let spec = SideInputSpec {
        view_id: id,
        pcollection: pc.id(),
        kernel,
        window_fn: pc.windowing_strategy().window_fn.clone(),
        ready_after_ms: 0,
        portable_semantics: false,
    };
    PCollectionView::of(spec)
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
