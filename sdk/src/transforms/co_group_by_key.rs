//! CoGroupByKey: a relational join of several keyed PCollections.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::do_fn::{DoFn, ProcessContext, TupleTag};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pipeline::{PCollection, PCollectionList, PTransform, Pipeline};
use crate::transforms::flatten::Flatten;
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::par_do::ParDo;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::sync::Arc;

/// One value of a CoGroupByKey input, tagged with the input's index and encoded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RawUnion {
    /// Index of the input.
    pub index: u32,
    /// The encoded value (serialized as one byte string, not a sequence of bytes).
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// The values of one key from every input of a CoGroupByKey.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CoGbkResult {
    tags: Arc<Vec<String>>,
    values: Vec<Vec<Vec<u8>>>,
}

impl CoGbkResult {
    /// All values of the input tagged `tag` (empty if it had none for this key).
    pub fn get_all<V: Element>(&self, tag: &TupleTag<V>) -> Result<Vec<V>, CoderError> {
        let i = self
            .tags
            .iter()
            .position(|t| t == tag.id())
            .ok_or_else(|| CoderError::new(format!("CoGbkResult has no tag '{}'", tag.id())))?;
        let coder = ElementCoder::<V>::new();
        self.values[i].iter().map(|b| coder.decode_outer(b)).collect()
    }
    /// The single value of `tag`, `None` if there is none, an error if there are several.
    pub fn get_only<V: Element>(&self, tag: &TupleTag<V>) -> Result<Option<V>, CoderError> {
        let mut all = self.get_all(tag)?;
        match all.len() {
            0 => Ok(None),
            1 => Ok(all.pop()),
            n => Err(CoderError::new(format!("tag '{}' has {n} values, expected at most one", tag.id()))),
        }
    }
}

/// Applies the tagging ParDo of one input when the CoGroupByKey expands.
type UnionMaker<K> = Box<dyn FnOnce(&str) -> PCollection<KV<K, RawUnion>>>;

/// Keyed inputs of a CoGroupByKey, each with a tag.
pub struct KeyedPCollectionTuple<K> {
    pipeline: Pipeline,
    tags: Vec<String>,
    inputs: Vec<PCollection<KV<K, RawUnion>>>,
    pending: Vec<UnionMaker<K>>,
}

#[derive(Clone)]
struct ToUnionFn<K, V> {
    index: u32,
    _t: PhantomData<fn(K, V)>,
}

impl<K: Element, V: Element> DoFn for ToUnionFn<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, RawUnion>;
    fn process(&mut self, kv: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let mut bytes = Vec::new();
        ElementCoder::<V>::new().encode_outer(&kv.value, &mut bytes)?;
        ctx.output(KV::new(kv.key, RawUnion { index: self.index, bytes }));
        Ok(())
    }
}

impl<K: Element> KeyedPCollectionTuple<K> {
    /// A tuple with one input.
    pub fn of<V: Element>(tag: &TupleTag<V>, pc: &PCollection<KV<K, V>>) -> Self {
        KeyedPCollectionTuple { pipeline: pc.pipeline().clone(), tags: vec![], inputs: vec![], pending: vec![] }
            .and(tag, pc)
    }
    /// Adds an input.
    pub fn and<V: Element>(mut self, tag: &TupleTag<V>, pc: &PCollection<KV<K, V>>) -> Self {
        let index = self.tags.len() as u32;
        self.tags.push(tag.id().to_string());
        let pc = pc.clone();
        self.pending
            .push(Box::new(move |name: &str| pc.apply(name, ParDo::of(ToUnionFn::<K, V> { index, _t: PhantomData }))));
        self
    }
    /// Applies CoGroupByKey: `KeyedPCollectionTuple::of(&a, &pa).and(&b, &pb).apply("Join", CoGroupByKey)`.
    pub fn apply(self, name: &str, t: CoGroupByKey) -> PCollection<KV<K, CoGbkResult>> {
        let p = self.pipeline.clone();
        p.apply_transform(name, crate::pipeline::PBegin::from_pipeline(&p), CoGbkApplied { tuple: self, _t: t })
    }
}

/// Groups several keyed inputs by key: the output holds, per key and window, every input's
/// values.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoGroupByKey;

struct CoGbkApplied<K> {
    tuple: KeyedPCollectionTuple<K>,
    _t: CoGroupByKey,
}

#[derive(Clone)]
struct BuildResultFn<K> {
    tags: Arc<Vec<String>>,
    _k: PhantomData<fn(K)>,
}

impl<K: Element> DoFn for BuildResultFn<K> {
    type In = KV<K, Vec<RawUnion>>;
    type Out = KV<K, CoGbkResult>;
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let mut values = vec![Vec::new(); self.tags.len()];
        for u in kv.value {
            values
                .get_mut(u.index as usize)
                .ok_or_else(|| format!("union index {} out of range", u.index))?
                .push(u.bytes);
        }
        ctx.output(KV::new(kv.key, CoGbkResult { tags: self.tags.clone(), values }));
        Ok(())
    }
}

impl<K: Element> PTransform<crate::pipeline::PBegin> for CoGbkApplied<K> {
    type Output = PCollection<KV<K, CoGbkResult>>;
    fn expand(self, _: crate::pipeline::PBegin) -> Self::Output {
        let mut tuple = self.tuple;
        let p = tuple.pipeline.clone();
        let tags = Arc::new(tuple.tags.clone());
        for (i, make) in std::mem::take(&mut tuple.pending).into_iter().enumerate() {
            tuple.inputs.push(make(&format!("MakeUnion{i}")));
        }
        PCollectionList::of(&p, tuple.inputs)
            .apply("Flatten", Flatten::pcollections())
            .apply("GroupByKey", GroupByKey::create())
            .apply("ConstructCoGbkResult", ParDo::of(BuildResultFn { tags, _k: PhantomData }))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::CO_GROUP_BY_KEY)
    }
}
