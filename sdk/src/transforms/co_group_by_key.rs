//! CoGroupByKey: a relational join of several keyed PCollections.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::do_fn::{DoFn, ProcessContext, TupleTag};
use crate::error::UserResult;
use crate::kernel::{Batch, EncodedGroup, EncodedKvBatch, GroupKernel};
use crate::kv::KV;
use crate::pipeline::{PCollection, PCollectionList, PTransform, Pipeline};
use crate::transforms::flatten::Flatten;
use crate::transforms::group_by_key::group_by_key_primitive;
use crate::transforms::par_do::ParDo;
use crate::windowed_value::WindowedValue;
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

/// A [`RawUnion`] read in place from a group's buffer.
#[derive(Deserialize)]
struct RawUnionRef<'a> {
    index: u32,
    #[serde(borrow)]
    bytes: &'a [u8],
}

/// The values of one key from every input of a CoGroupByKey: the group's encoded values in one
/// buffer, and per input the ranges of its values (no copy per value).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoGbkResult {
    tags: Arc<Vec<String>>,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
    values: Vec<Vec<(usize, usize)>>,
}

impl PartialEq for CoGbkResult {
    /// Equal when every input has the same values (however the buffers are laid out).
    fn eq(&self, other: &Self) -> bool {
        self.tags == other.tags
            && self.values.len() == other.values.len()
            && (0..self.values.len()).all(|i| self.encoded(i).eq(other.encoded(i)))
    }
}

impl Eq for CoGbkResult {}

impl CoGbkResult {
    /// The encoded values of input `i`.
    fn encoded(&self, i: usize) -> impl Iterator<Item = &[u8]> + '_ {
        self.values[i].iter().map(move |&(a, b)| &self.data[a..b])
    }

    /// All values of the input tagged `tag` (empty if it had none for this key).
    pub fn get_all<V: Element>(&self, tag: &TupleTag<V>) -> Result<Vec<V>, CoderError> {
        let i = self.tag_index(tag.id())?;
        let coder = ElementCoder::<V>::new();
        self.encoded(i).map(|b| coder.decode_outer(b)).collect()
    }
    /// All values of the input tagged `tag`, each decoded as `B`: a type serialized as `V` is
    /// (the same fields in the same order) whose fields may borrow from this result, such as
    /// `&str` for a `String`. Looking at many large values then allocates and copies nothing
    /// per value; [`CoGbkResult::get_all`] decodes them whole.
    pub fn get_all_borrowed<'a, V: Element, B: serde::Deserialize<'a>>(
        &'a self,
        tag: &TupleTag<V>,
    ) -> Result<Vec<B>, CoderError> {
        let i = self.tag_index(tag.id())?;
        // Values are encoded by ElementCoder: postcard's serde form (integers included).
        self.encoded(i)
            .map(|b| {
                postcard::from_bytes(b)
                    .map_err(|e| CoderError::new(format!("cannot decode a value of tag '{}': {e}", tag.id())))
            })
            .collect()
    }
    fn tag_index(&self, id: &str) -> Result<usize, CoderError> {
        self.tags.iter().position(|t| t == id).ok_or_else(|| CoderError::new(format!("CoGbkResult has no tag '{id}'")))
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
    /// The keyed inputs as given, and how each is encoded by a native translation.
    ids: Vec<crate::graph::PCollectionId>,
    encoders: Vec<Arc<dyn UnionEncoder>>,
}

/// The inputs of a CoGroupByKey, for the graph: the composite consumes every keyed input.
#[derive(Clone)]
pub struct CoGbkInputs(Vec<crate::graph::PCollectionId>);

impl crate::pipeline::PInput for CoGbkInputs {
    fn pcollection_ids(&self) -> Vec<crate::graph::PCollectionId> {
        self.0.clone()
    }
}

/// Encodes one input of a CoGroupByKey for a native translation: keys as the key coder
/// encodes them, values tagged with the input's index exactly as the expansion's
/// GroupByKey encodes its `RawUnion`s, so one group buffer holds every input's values.
pub trait UnionEncoder: Send + Sync {
    /// Appends a batch of this input's `KV<K, V>` to `out`.
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError>;
}

struct UnionEncoderImpl<K, V> {
    index: u32,
    _t: PhantomData<fn(K, V)>,
}

impl<K: Element, V: Element> UnionEncoder for UnionEncoderImpl<K, V> {
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError> {
        let value = ElementCoder::<V>::new();
        let mut scratch = Vec::new();
        out.append_with::<K, V>(input, &ElementCoder::<K>::new(), |v, data| {
            scratch.clear();
            value.encode_outer(v, &mut scratch)?;
            // RawUnion { index, bytes } as postcard writes it, without building one.
            crate::coders::postcard_into(&(self.index, serde_bytes::Bytes::new(&scratch)), data)
                .map_err(|e| CoderError::new(format!("cannot encode a CoGroupByKey value: {e}")))?;
            Ok(())
        })
    }
}

/// What runners need to run a CoGroupByKey natively: per input an encoder, and the grouping
/// kernel that builds each key's [`CoGbkResult`] from its group (it also accepts
/// [`EncodedKvBatch`]es the encoders made).
pub struct CoGroupByKeyPayload {
    /// One encoder per input, in the composite's input order.
    pub encoders: Vec<Arc<dyn UnionEncoder>>,
    /// Groups tagged values into results.
    pub kernel: Arc<dyn GroupKernel>,
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
        KeyedPCollectionTuple {
            pipeline: pc.pipeline().clone(),
            tags: vec![],
            inputs: vec![],
            pending: vec![],
            ids: vec![],
            encoders: vec![],
        }
        .and(tag, pc)
    }
    /// Adds an input.
    pub fn and<V: Element>(mut self, tag: &TupleTag<V>, pc: &PCollection<KV<K, V>>) -> Self {
        let index = self.tags.len() as u32;
        self.tags.push(tag.id().to_string());
        self.ids.push(pc.id());
        self.encoders.push(Arc::new(UnionEncoderImpl::<K, V> { index, _t: PhantomData }));
        let pc = pc.clone();
        self.pending
            .push(Box::new(move |name: &str| pc.apply(name, ParDo::of(ToUnionFn::<K, V> { index, _t: PhantomData }))));
        self
    }
    /// Applies CoGroupByKey: `KeyedPCollectionTuple::of(&a, &pa).and(&b, &pb).apply("Join", CoGroupByKey)`.
    pub fn apply(self, name: &str, t: CoGroupByKey) -> PCollection<KV<K, CoGbkResult>> {
        let p = self.pipeline.clone();
        let inputs = CoGbkInputs(self.ids.clone());
        p.apply_transform(name, inputs, CoGbkApplied { tuple: self, _t: t })
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

/// Groups the tagged values by key and window and builds each key's [`CoGbkResult`] straight
/// from the group's buffer (the GroupByKey primitive with its own output kernel).
struct GroupIntoResults<K> {
    tags: Arc<Vec<String>>,
    _k: PhantomData<fn(K)>,
}

impl<K: Element> PTransform<PCollection<KV<K, RawUnion>>> for GroupIntoResults<K> {
    type Output = PCollection<KV<K, CoGbkResult>>;
    fn expand(self, input: PCollection<KV<K, RawUnion>>) -> Self::Output {
        group_by_key_primitive::<K, RawUnion, KV<K, CoGbkResult>>(
            input,
            Arc::new(CoGbkKernel::<K> { tags: self.tags, key: ElementCoder::new() }),
        )
    }
}

struct CoGbkKernel<K> {
    tags: Arc<Vec<String>>,
    key: ElementCoder<K>,
}

impl<K: Element> GroupKernel for CoGbkKernel<K> {
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError> {
        // Natively translated, the batch was encoded by the inputs' `UnionEncoder`s already.
        match input.downcast::<EncodedKvBatch>() {
            Ok(encoded) => {
                out.extend(*encoded);
                Ok(())
            }
            Err(input) => out.append::<K, RawUnion>(input, &self.key, &ElementCoder::<RawUnion>::new()),
        }
    }

    fn decode_groups(&self, groups: Vec<EncodedGroup>) -> Result<Batch, CoderError> {
        let mut out: Vec<WindowedValue<KV<K, CoGbkResult>>> = Vec::with_capacity(groups.len());
        for g in groups {
            let key = self.key.decode_outer(&g.key)?;
            let mut values = vec![Vec::new(); self.tags.len()];
            let base = g.values.as_ptr() as usize;
            let mut rest = g.values.as_slice();
            for _ in 0..g.count {
                let (u, tail) = postcard::take_from_bytes::<RawUnionRef<'_>>(rest)
                    .map_err(|e| CoderError::new(format!("cannot decode a CoGroupByKey value: {e}")))?;
                let start = u.bytes.as_ptr() as usize - base;
                values
                    .get_mut(u.index as usize)
                    .ok_or_else(|| CoderError::new(format!("union index {} out of range", u.index)))?
                    .push((start, start + u.bytes.len()));
                rest = tail;
            }
            let result = CoGbkResult { tags: self.tags.clone(), data: g.values, values };
            out.push(WindowedValue {
                value: KV::new(key, result),
                timestamp: g.timestamp,
                window: g.window,
                pane: g.pane,
            });
        }
        Ok(Box::new(out))
    }
}

impl<K: Element> PTransform<CoGbkInputs> for CoGbkApplied<K> {
    type Output = PCollection<KV<K, CoGbkResult>>;
    fn expand(self, _: CoGbkInputs) -> Self::Output {
        let mut tuple = self.tuple;
        let p = tuple.pipeline.clone();
        let tags = Arc::new(tuple.tags.clone());
        p.set_composite_payload(Arc::new(CoGroupByKeyPayload {
            encoders: std::mem::take(&mut tuple.encoders),
            kernel: Arc::new(CoGbkKernel::<K> { tags: tags.clone(), key: ElementCoder::new() }),
        }));
        for (i, make) in std::mem::take(&mut tuple.pending).into_iter().enumerate() {
            tuple.inputs.push(make(&format!("MakeUnion{i}")));
        }
        PCollectionList::of(&p, tuple.inputs)
            .apply("Flatten", Flatten::pcollections())
            .apply("GroupByKey", GroupIntoResults::<K> { tags, _k: PhantomData })
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::CO_GROUP_BY_KEY)
    }
}
