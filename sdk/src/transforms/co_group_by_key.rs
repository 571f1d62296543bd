//! CoGroupByKey: a relational join of several keyed PCollections.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::do_fn::{DoFn, ProcessContext, TupleTag};
use crate::error::UserResult;
use crate::kernel::{Batch, BatchKind, EncodedGroup, EncodedKvBatch, GroupKernel};
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

/// Reads one [`RawUnion`] in place from the front of `rest` (postcard's form: the index and
/// the length as varints, then the bytes): its index and bytes.
fn take_union<'a>(rest: &mut &'a [u8]) -> Result<(u32, &'a [u8]), CoderError> {
    let index = crate::coders::read_varint(rest)?;
    let index = u32::try_from(index).map_err(|_| CoderError::new(format!("union index {index} out of range")))?;
    let len = crate::coders::read_varint(rest)?;
    let len = usize::try_from(len).ok().filter(|&l| l <= rest.len()).ok_or_else(|| {
        CoderError::new(format!("a CoGroupByKey value of {len} bytes overruns its group's {} bytes", rest.len()))
    })?;
    let (bytes, tail) = rest.split_at(len);
    *rest = tail;
    Ok((index, bytes))
}

/// The values of one key from every input of a CoGroupByKey: the group's tagged, encoded
/// values in one buffer as grouping left them (no copy, and no index built, per value), read
/// in place when asked for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoGbkResult {
    tags: Arc<Vec<String>>,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
    /// Number of values in `data`.
    count: usize,
}

impl PartialEq for CoGbkResult {
    /// Equal when every input has the same values (however the buffers are laid out); a
    /// buffer that does not decode equals nothing.
    fn eq(&self, other: &Self) -> bool {
        fn values(r: &CoGbkResult, i: usize) -> Result<Vec<&[u8]>, CoderError> {
            r.decode_each(i, Ok)
        }
        self.tags == other.tags
            && (0..self.tags.len()).all(|i| matches!((values(self, i), values(other, i)), (Ok(a), Ok(b)) if a == b))
    }
}

impl Eq for CoGbkResult {}

impl CoGbkResult {
    /// Every value of input `i`, in order, each read from its encoded bytes by `decode`: one
    /// pass over the group's buffer, no iterator state per value, and one allocation (at most
    /// every value is this input's).
    fn decode_each<'a, T>(
        &'a self,
        i: usize,
        mut decode: impl FnMut(&'a [u8]) -> Result<T, CoderError>,
    ) -> Result<Vec<T>, CoderError> {
        let (mut rest, mut out) = (&self.data[..], Vec::with_capacity(self.count));
        for _ in 0..self.count {
            let (index, bytes) = take_union(&mut rest)
                .map_err(|e| CoderError::new(format!("cannot decode a CoGroupByKey value: {e}")))?;
            if index as usize == i {
                out.push(decode(bytes)?);
            } else if index as usize >= self.tags.len() {
                return Err(CoderError::new(format!(
                    "cannot decode a CoGroupByKey value: union index {index} out of range"
                )));
            }
        }
        Ok(out)
    }

    /// All values of the input tagged `tag` (empty if it had none for this key).
    pub fn get_all<V: Element>(&self, tag: &TupleTag<V>) -> Result<Vec<V>, CoderError> {
        let i = self.tag_index(tag.id())?;
        let coder = ElementCoder::<V>::new();
        self.decode_each(i, |b| coder.decode_outer(b))
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
        self.decode_each(i, |b| {
            postcard::from_bytes(b)
                .map_err(|e| CoderError::new(format!("cannot decode a value of tag '{}': {e}", tag.id())))
        })
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
    /// Appends a batch of this input's `KV<K, V>` to `parts`, each row to the part of its
    /// key (see [`EncodedKvBatch::append_split`]; one part takes every row).
    fn encode(&self, input: Batch, parts: &mut [EncodedKvBatch]) -> Result<(), CoderError>;
}

struct UnionEncoderImpl<K, V> {
    index: u32,
    _t: PhantomData<fn(K, V)>,
}

impl<K: Element, V: Element> UnionEncoder for UnionEncoderImpl<K, V> {
    fn encode(&self, input: Batch, parts: &mut [EncodedKvBatch]) -> Result<(), CoderError> {
        let value = ElementCoder::<V>::new();
        EncodedKvBatch::append_split::<K, V>(parts, input, &ElementCoder::<K>::new(), |v, data| {
            // RawUnion { index, bytes } as postcard writes it, without building one: the
            // index, the value's length, the value. The value is encoded in place after a
            // one-byte length, which widens (moving the value up) if the value is longer.
            crate::coders::write_varint(u64::from(self.index), data);
            let at = data.len();
            data.push(0);
            value.encode_outer(v, data)?;
            let len = data.len() - at - 1;
            let mut buf = [0u8; 16];
            let n = crate::coders::varint_into(len as u64, &mut buf);
            if n == 1 {
                data[at] = buf[0];
            } else {
                data.splice(at..at + 1, buf[..n].iter().copied());
            }
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
            true,
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
        if input.kind() == BatchKind::EncodedRows {
            if let Ok(encoded) = input.downcast::<EncodedKvBatch>() {
                out.extend(*encoded);
            }
            return Ok(());
        }
        out.append::<K, RawUnion>(input, &self.key, &ElementCoder::<RawUnion>::new())
    }

    fn decode_groups(&self, groups: Vec<EncodedGroup>) -> Result<Batch, CoderError> {
        let mut out: Vec<WindowedValue<KV<K, CoGbkResult>>> = Vec::with_capacity(groups.len());
        for g in groups {
            let key = self.key.decode_outer(&g.key)?;
            let result = CoGbkResult { tags: self.tags.clone(), data: g.values, count: g.count };
            out.push(WindowedValue {
                value: KV::new(key, result),
                timestamp: g.timestamp,
                window: g.window,
                pane: g.pane,
            });
        }
        Ok(Batch::new(out))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_encoder_writes_what_raw_union_encodes_and_groups_read_it_back() {
        // Lengths around each varint width: the value's length prefix widens in place.
        let values: Vec<String> =
            [0, 1, 120, 126, 127, 128, 300, 16_380, 16_384, 70_000].iter().map(|&n| "v".repeat(n)).collect();
        let input: Vec<WindowedValue<KV<i64, String>>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| WindowedValue::in_global_window(KV::new(i as i64, v.clone())))
            .collect();
        let mut out = EncodedKvBatch::default();
        UnionEncoderImpl::<i64, String> { index: 3, _t: PhantomData }
            .encode(Batch::new(input), std::slice::from_mut(&mut out))
            .unwrap();
        let coder = ElementCoder::<String>::new();
        let mut group = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let mut bytes = Vec::new();
            coder.encode_outer(v, &mut bytes).unwrap();
            let expected = postcard::to_allocvec(&RawUnion { index: 3, bytes }).unwrap();
            assert_eq!(out.value(i), &expected[..], "value of {} bytes", v.len());
            group.extend_from_slice(out.value(i));
        }
        // Read back in place, one after another.
        let mut rest = &group[..];
        for v in &values {
            let (index, bytes) = take_union(&mut rest).unwrap();
            assert_eq!(index, 3);
            assert_eq!(&coder.decode_outer(bytes).unwrap(), v);
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn results_read_each_tags_values_in_order_from_the_shared_buffer() {
        let (a, b) = (TupleTag::<i64>::new("a"), TupleTag::<String>::new("b"));
        let mut data = Vec::new();
        let union = |index: u32, bytes: Vec<u8>| postcard::to_allocvec(&RawUnion { index, bytes }).unwrap();
        let (ints, strs) = (ElementCoder::<i64>::new(), ElementCoder::<String>::new());
        let enc_i = |v: i64| {
            let mut out = Vec::new();
            ints.encode_outer(&v, &mut out).unwrap();
            out
        };
        let enc_s = |v: &str| {
            let mut out = Vec::new();
            strs.encode_outer(&v.to_string(), &mut out).unwrap();
            out
        };
        for part in [union(1, enc_s("x")), union(0, enc_i(5)), union(1, enc_s("y")), union(0, enc_i(-3))] {
            data.extend_from_slice(&part);
        }
        let tags = Arc::new(vec!["a".to_string(), "b".to_string()]);
        let result = CoGbkResult { tags: tags.clone(), data: data.clone(), count: 4 };
        assert_eq!(result.get_all(&a).unwrap(), vec![5, -3]);
        assert_eq!(result.get_all(&b).unwrap(), vec!["x".to_string(), "y".to_string()]);
        let borrowed: Vec<&str> = result.get_all_borrowed(&b).unwrap();
        assert_eq!(borrowed, vec!["x", "y"]);
        assert!(result.get_only(&a).unwrap_err().to_string().contains("2 values"));
        // Same values per tag, laid out differently: equal.
        let mut other = Vec::new();
        for part in [union(0, enc_i(5)), union(0, enc_i(-3)), union(1, enc_s("x")), union(1, enc_s("y"))] {
            other.extend_from_slice(&part);
        }
        assert_eq!(result, CoGbkResult { tags: tags.clone(), data: other, count: 4 });
        // A value tagged with an input that does not exist, or a cut buffer: an error.
        let mut bad = data.clone();
        bad.extend_from_slice(&union(7, enc_i(1)));
        let bad = CoGbkResult { tags: tags.clone(), data: bad, count: 5 };
        assert!(bad.get_all(&a).unwrap_err().to_string().contains("union index 7 out of range"));
        let cut = CoGbkResult { tags, data: data[..data.len() - 1].to_vec(), count: 4 };
        assert!(cut.get_all(&a).unwrap_err().to_string().contains("cannot decode a CoGroupByKey value"));
    }

    #[test]
    fn a_truncated_union_value_is_an_error_not_a_panic() {
        let encoded = postcard::to_allocvec(&RawUnion { index: 1, bytes: vec![7; 200] }).unwrap();
        for cut in 0..encoded.len() {
            let mut rest = &encoded[..cut];
            let err = take_union(&mut rest).unwrap_err().to_string();
            assert!(err.contains("varint") || err.contains("overruns") || err.contains("end"), "{err}");
        }
        let huge_index = [0xff, 0xff, 0xff, 0xff, 0x7f, 0];
        assert!(take_union(&mut &huge_index[..]).unwrap_err().to_string().contains("out of range"));
    }
}
