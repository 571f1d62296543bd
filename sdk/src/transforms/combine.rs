//! Combine: associative, commutative aggregation globally, per key, or over grouped values.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserError;
use crate::error::UserResult;
use crate::kernel::{Batch, CombineKernel, CombinePerKeyPayload, EncodedGroup, EncodedKvBatch};
use crate::kv::KV;
use crate::pipeline::{PCollection, PCollectionList, PTransform};
use crate::transforms::flatten::Flatten;
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::impulse::Impulse;
use crate::transforms::keys::Values;
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;

pub use crate::combine_fn::CombineFn;

mod table;

/// Entry points of the Combine family.
pub struct Combine;

impl Combine {
    /// Combines all elements of each window into one output (with the combine's default for an
    /// empty global window unless [`CombineGlobally::without_defaults`]).
    pub fn globally<F: CombineFn>(fn_: F) -> CombineGlobally<F> {
        CombineGlobally { fn_, with_defaults: true, fanout: 1 }
    }
    /// Combines the values of each key and window.
    pub fn per_key<K: Element, F: CombineFn>(fn_: F) -> CombinePerKey<K, F> {
        CombinePerKey { fn_, fanout: 1, _k: PhantomData }
    }
    /// `Combine.perKey` of a combine function that reads side inputs through its context (Beam's
    /// `CombineFnWithContext`); declare them with `with_side_inputs`.
    pub fn per_key_with_context<K: Element, F: crate::transforms::combine_with_context::CombineFnWithContext>(
        fn_: F,
    ) -> crate::transforms::combine_with_context::CombinePerKeyWithContext<K, F> {
        crate::transforms::combine_with_context::CombinePerKeyWithContext::of(fn_)
    }
    /// `Combine.globally` of a combine function that reads side inputs through its context.
    pub fn globally_with_context<F: crate::transforms::combine_with_context::CombineFnWithContext>(
        fn_: F,
    ) -> crate::transforms::combine_with_context::CombineGloballyWithContext<F> {
        crate::transforms::combine_with_context::CombineGloballyWithContext::of(fn_)
    }
    /// Combines the values of already grouped `KV<K, Vec<In>>`.
    pub fn grouped_values<K: Element, F: CombineFn>(fn_: F) -> CombineGroupedValues<K, F> {
        CombineGroupedValues { fn_, _k: PhantomData }
    }
}

/// See [`Combine::grouped_values`].
pub struct CombineGroupedValues<K, F> {
    fn_: F,
    _k: PhantomData<fn() -> K>,
}

#[derive(Clone)]
struct GroupedValuesFn<K, F> {
    fn_: F,
    _k: PhantomData<fn() -> K>,
}

impl<K: Element, F: CombineFn> DoFn for GroupedValuesFn<K, F> {
    type In = KV<K, Vec<F::In>>;
    type Out = KV<K, F::Out>;
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let mut acc = self.fn_.create_accumulator();
        for v in kv.value {
            self.fn_.add_input(&mut acc, v);
        }
        ctx.output(KV::new(kv.key, self.fn_.extract_output(acc)));
        Ok(())
    }
}

impl<K: Element, F: CombineFn> PTransform<PCollection<KV<K, Vec<F::In>>>> for CombineGroupedValues<K, F> {
    type Output = PCollection<KV<K, F::Out>>;
    fn expand(self, input: PCollection<KV<K, Vec<F::In>>>) -> Self::Output {
        input.apply("Combine", ParDo::of(GroupedValuesFn { fn_: self.fn_, _k: PhantomData }))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::COMBINE_GROUPED_VALUES)
    }
}

/// See [`Combine::per_key`].
pub struct CombinePerKey<K, F> {
    fn_: F,
    fanout: u32,
    _k: PhantomData<fn() -> K>,
}

impl<K, F> CombinePerKey<K, F> {
    /// Beam's `withHotKeyFanout(n)`: every key's inputs are spread over `n` sub-keys that are
    /// combined into accumulators first (in parallel), then merged per key, so that a hot key
    /// does not pin one worker. `n <= 1` combines directly.
    pub fn with_hot_key_fanout(self, n: u32) -> Self {
        CombinePerKey { fanout: n, ..self }
    }
}

/// Combines inputs into accumulators (the first stage of a fanned-out combine).
#[derive(Clone)]
struct PreCombine<F>(F);

impl<F: CombineFn> CombineFn for PreCombine<F> {
    type In = F::In;
    type Accum = F::Accum;
    type Out = F::Accum;
    fn create_accumulator(&self) -> F::Accum {
        self.0.create_accumulator()
    }
    fn add_input(&self, acc: &mut F::Accum, input: F::In) {
        self.0.add_input(acc, input)
    }
    fn merge_accumulators(&self, accs: Vec<F::Accum>) -> F::Accum {
        self.0.merge_accumulators(accs)
    }
    fn extract_output(&self, acc: F::Accum) -> F::Accum {
        acc
    }
}

/// Merges accumulators and extracts the output (the second stage of a fanned-out combine).
#[derive(Clone)]
struct PostCombine<F>(F);

impl<F: CombineFn> CombineFn for PostCombine<F> {
    type In = F::Accum;
    type Accum = F::Accum;
    type Out = F::Out;
    fn create_accumulator(&self) -> F::Accum {
        self.0.create_accumulator()
    }
    fn add_input(&self, acc: &mut F::Accum, input: F::Accum) {
        let current = std::mem::replace(acc, self.0.create_accumulator());
        *acc = self.0.merge_accumulators(vec![current, input]);
    }
    fn merge_accumulators(&self, accs: Vec<F::Accum>) -> F::Accum {
        self.0.merge_accumulators(accs)
    }
    fn extract_output(&self, acc: F::Accum) -> F::Out {
        self.0.extract_output(acc)
    }
}

/// Spreads each key's inputs round-robin over `fanout` sub-keys.
#[derive(Clone)]
struct AddNonce<K, V> {
    fanout: u32,
    next: u32,
    _t: PhantomData<fn(K, V)>,
}

impl<K: Element, V: Element> DoFn for AddNonce<K, V> {
    type In = KV<K, V>;
    type Out = KV<(K, u32), V>;
    fn process(&mut self, kv: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        self.next = (self.next + 1) % self.fanout;
        ctx.output(KV::new((kv.key, self.next), kv.value));
        Ok(())
    }
}

impl<K: Element, F: CombineFn> CombinePerKey<K, F> {
    /// The fanned-out form: pre-combine per (key, nonce), then merge per key. Accumulating
    /// panes are pre-combined in discarding mode (each pre-combined pane holds only new inputs)
    /// and accumulated in the final combine, as Beam does.
    fn expand_with_fanout(self, input: PCollection<KV<K, F::In>>) -> PCollection<KV<K, F::Out>> {
        use crate::transforms::window_into::Window;
        use crate::trigger::AccumulationMode;
        let accumulating = input.windowing_strategy().accumulation_mode == AccumulationMode::Accumulating;
        let mut spread =
            input.apply("AddNonce", ParDo::of(AddNonce::<K, F::In> { fanout: self.fanout, next: 0, _t: PhantomData }));
        if accumulating {
            spread = spread.apply("PreCombineDiscarding", Window::configure().discarding_fired_panes());
        }
        let mut partial = spread
            .apply("PreCombine", DirectCombinePerKey(PreCombine(self.fn_.clone()), PhantomData))
            .apply("StripNonce", Map::new(|kv: KV<(K, u32), F::Accum>| KV::new(kv.key.0, kv.value)));
        if accumulating {
            partial = partial.apply("PostCombineAccumulating", Window::configure().accumulating_fired_panes());
        }
        partial.apply("PostCombine", DirectCombinePerKey(PostCombine(self.fn_), PhantomData))
    }
}

/// The combining kernel of `fn_` over `KV<K, F::In>`, as Combine.perKey's payload carries it.
pub fn kernel<K: Element, F: CombineFn>(fn_: F) -> std::sync::Arc<dyn CombineKernel> {
    std::sync::Arc::new(CombineKernelImpl::<K, F>::new(fn_))
}

/// The typed combining kernel of a `CombineFn` keyed by `K`.
pub(crate) struct CombineKernelImpl<K, F: CombineFn> {
    fn_: F,
    key: ElementCoder<K>,
    input: ElementCoder<F::In>,
    acc: ElementCoder<F::Accum>,
    /// How many groups the last partial combine made (see `combine_partially`).
    groups_hint: std::sync::atomic::AtomicUsize,
}

impl<K: Element, F: CombineFn> CombineKernelImpl<K, F> {
    pub(crate) fn new(fn_: F) -> Self {
        CombineKernelImpl {
            fn_,
            key: ElementCoder::new(),
            input: ElementCoder::new(),
            acc: ElementCoder::new(),
            groups_hint: Default::default(),
        }
    }
}

impl<K: Element, F: CombineFn> CombineKernel for CombineKernelImpl<K, F> {
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError> {
        out.append::<K, F::In>(input, &self.key, &self.input)
    }

    fn add_inputs(&self, acc: Option<&[u8]>, inputs: &mut dyn Iterator<Item = &[u8]>) -> Result<Vec<u8>, UserError> {
        let mut a = match acc {
            Some(bytes) => self.acc.decode_outer(bytes)?,
            None => self.fn_.create_accumulator(),
        };
        for bytes in inputs {
            self.fn_.add_input(&mut a, self.input.decode_outer(bytes)?);
        }
        let mut out = Vec::new();
        self.acc.encode(&a, &mut out)?;
        Ok(out)
    }

    fn merge_accumulators(&self, accs: &[&[u8]]) -> Result<Vec<u8>, UserError> {
        let decoded = accs.iter().map(|b| self.acc.decode_outer(b)).collect::<Result<Vec<_>, _>>()?;
        let mut out = Vec::new();
        self.acc.encode(&self.fn_.merge_accumulators(decoded), &mut out)?;
        Ok(out)
    }

    fn partial(&self, inputs: Vec<Batch>, out: &mut EncodedKvBatch) -> Result<(), UserError> {
        self.combine_partially(inputs, out)
    }

    fn table(&self) -> Box<dyn crate::kernel::CombineTable> {
        Box::new(table::Table::new(self))
    }

    fn extract(&self, groups: Vec<EncodedGroup>) -> Result<Batch, UserError> {
        let mut out: Vec<WindowedValue<KV<K, F::Out>>> = Vec::with_capacity(groups.len());
        for g in groups {
            let key = self.key.decode_outer(&g.key)?;
            let acc =
                if g.values.is_empty() { self.fn_.create_accumulator() } else { self.acc.decode_outer(&g.values)? };
            out.push(WindowedValue {
                value: KV::new(key, self.fn_.extract_output(acc)),
                timestamp: g.timestamp,
                window: g.window,
                pane: g.pane,
            });
        }
        Ok(Batch::new(out))
    }
}

impl<K: Element, F: CombineFn> CombineKernelImpl<K, F> {
    /// [`CombineKernel::partial`]: groups by (encoded key, window). The hash table is small
    /// (4 bytes an entry: the group's index), so that it stays in cache;
    /// the groups sit in a vector in the order they were made, each with all it needs in one
    /// place: the hash, the window (an index into the few distinct windows), a key of up to 16
    /// bytes (any integer key) inline or else its place in an arena of longer keys, the input
    /// count, the earliest timestamp and the typed accumulator, encoded once at the end.
    fn combine_partially(&self, inputs: Vec<Batch>, out: &mut EncodedKvBatch) -> Result<(), UserError> {
        use crate::window::Window;
        use std::hash::BuildHasher;
        let hasher = hashbrown::DefaultHashBuilder::default();
        // Sized for as many groups as the previous call made: no rehashing as it fills.
        let hint = self.groups_hint.load(std::sync::atomic::Ordering::Relaxed);
        let mut table: hashbrown::HashTable<u32> = hashbrown::HashTable::with_capacity(hint);
        let mut groups: Vec<PartialGroup<F::Accum>> = Vec::with_capacity(hint);
        let (mut windows, mut window_ids): (Vec<Window>, hashbrown::HashMap<Window, u32>) = Default::default();
        let mut last_window: Option<(Window, u32)> = None;
        let (mut long_keys, mut scratch) = (Vec::new(), Vec::new());
        for input in inputs {
            crate::kernel::Bundle::<KV<K, F::In>>::from_batch(input)?.try_for_each(|wv| -> Result<(), UserError> {
                // A key of up to 16 bytes is encoded straight into its slot, and hashed and
                // compared as one 128-bit word; a longer one goes through `scratch`.
                let mut inline = [0u8; 16];
                let len = match self.key.encode_small(&wv.value.key, &mut inline) {
                    Some(len) => len,
                    None => {
                        inline = [0; 16];
                        scratch.clear();
                        self.key.encode(&wv.value.key, &mut scratch)?;
                        scratch.len()
                    }
                };
                let w = match last_window {
                    Some((last, id)) if last == wv.window => id,
                    _ => {
                        let id = *window_ids.entry(wv.window).or_insert_with(|| {
                            windows.push(wv.window);
                            (windows.len() - 1) as u32
                        });
                        last_window = Some((wv.window, id));
                        id
                    }
                };
                let short = len <= 16;
                let hash = if short {
                    hasher.hash_one((u128::from_le_bytes(inline), len as u32, w))
                } else {
                    hasher.hash_one((&scratch[..], w))
                };
                let same = |&g: &u32| {
                    let g = &groups[g as usize];
                    g.hash == hash
                        && g.window == w
                        && g.len == len as u32
                        && if short { g.key == inline } else { g.key(&long_keys) == &scratch[..] }
                };
                let group = match table.find(hash, same) {
                    Some(&g) => &mut groups[g as usize],
                    None => {
                        if !short {
                            inline[..8].copy_from_slice(&(long_keys.len() as u64).to_le_bytes());
                            long_keys.extend_from_slice(&scratch);
                        }
                        groups.push(PartialGroup {
                            hash,
                            window: w,
                            len: len as u32,
                            key: inline,
                            count: 0,
                            first: wv.timestamp,
                            acc: self.fn_.create_accumulator(),
                        });
                        let g = groups.len() - 1;
                        table.insert_unique(hash, g as u32, |&g| groups[g as usize].hash);
                        &mut groups[g]
                    }
                };
                self.fn_.add_input(&mut group.acc, wv.value.value);
                group.count += 1;
                group.first = group.first.min(wv.timestamp);
                Ok(())
            })?;
        }
        self.groups_hint.store(groups.len(), std::sync::atomic::Ordering::Relaxed);
        out.rows.reserve(groups.len());
        for g in groups {
            out.push_row(g.key(&long_keys), g.first, windows[g.window as usize], |data| {
                data.extend_from_slice(&g.count.to_le_bytes());
                self.acc.encode(&g.acc, data)
            })?;
        }
        Ok(())
    }
}

/// One group of [`CombineKernelImpl::combine_partially`].
struct PartialGroup<A> {
    hash: u64,
    window: u32,
    /// The encoded key's length.
    len: u32,
    /// The key itself when it has at most 16 bytes, else its start in the arena of long keys.
    key: [u8; 16],
    count: u64,
    first: crate::time::Timestamp,
    acc: A,
}

impl<A> PartialGroup<A> {
    fn key<'a>(&'a self, long_keys: &'a [u8]) -> &'a [u8] {
        held_key(&self.key, self.len, long_keys)
    }
}

/// An encoded key of `len` bytes held in a 16-byte slot: the key itself when it fits, else its
/// start (8 bytes, little-endian) in the arena `long_keys`.
fn held_key<'a>(slot: &'a [u8; 16], len: u32, long_keys: &'a [u8]) -> &'a [u8] {
    let len = len as usize;
    if len <= 16 {
        &slot[..len]
    } else {
        let start = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes")) as usize;
        &long_keys[start..start + len]
    }
}

impl<K: Element, F: CombineFn> PTransform<PCollection<KV<K, F::In>>> for CombinePerKey<K, F> {
    type Output = PCollection<KV<K, F::Out>>;
    fn expand(self, input: PCollection<KV<K, F::In>>) -> Self::Output {
        if self.fanout > 1 {
            // No payload: runners expand the two combines inside, each translated natively.
            return self.expand_with_fanout(input);
        }
        expand_direct(self.fn_, input)
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::COMBINE_PER_KEY)
    }
}

/// Combine.perKey as GroupByKey then Combine.GroupedValues, with the payload runners use to
/// translate it natively.
fn expand_direct<K: Element, F: CombineFn>(fn_: F, input: PCollection<KV<K, F::In>>) -> PCollection<KV<K, F::Out>> {
    input.pipeline().set_composite_payload(std::sync::Arc::new(CombinePerKeyPayload {
        kernel: std::sync::Arc::new(CombineKernelImpl::<K, F>::new(fn_.clone())),
        partitioner: std::sync::Arc::new(crate::kernel::KvPartitioner::<K, F::In>::default()),
    }));
    input.apply("GroupByKey", GroupByKey::create()).apply("Combine.GroupedValues", Combine::grouped_values(fn_))
}

/// The stages of a fanned-out Combine.perKey (never fanned out again).
struct DirectCombinePerKey<K, F>(F, PhantomData<fn() -> K>);

impl<K: Element, F: CombineFn> PTransform<PCollection<KV<K, F::In>>> for DirectCombinePerKey<K, F> {
    type Output = PCollection<KV<K, F::Out>>;
    fn expand(self, input: PCollection<KV<K, F::In>>) -> Self::Output {
        expand_direct(self.0, input)
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::COMBINE_PER_KEY)
    }
}

/// Why Combine.globally with defaults is refused outside the global window, and what to use.
pub(crate) const DEFAULTS_NEED_THE_GLOBAL_WINDOW: &str =
    "Default values are not supported in Combine.globally() (and Top, which is one) if the input \
                 PCollection is not windowed by GlobalWindows. Instead, use Combine.globally().without_defaults() \
                 to output an empty PCollection if the input PCollection is empty, or \
                 Combine.globally().as_singleton_view(..) to read the CombineFn's default output for an empty \
                 window as a side input";

/// See [`Combine::globally`].
pub struct CombineGlobally<F> {
    fn_: F,
    with_defaults: bool,
    fanout: u32,
}

impl<F: CombineFn> CombineGlobally<F> {
    /// Emits nothing for an empty input instead of the combine's default. Required when the
    /// input is not in the global window.
    pub fn without_defaults(self) -> Self {
        CombineGlobally { with_defaults: false, ..self }
    }

    /// Beam's `withFanout(n)`: inputs are pre-combined in `n` groups (in parallel), then the
    /// partial results are merged into one. `n <= 1` combines directly.
    pub fn with_fanout(self, n: u32) -> Self {
        CombineGlobally { fanout: n, ..self }
    }

    /// Combines `input` and returns the result as a singleton side input whose empty windows
    /// read as the combine's default (`extract_output(create_accumulator())`), in any windowing.
    pub fn as_singleton_view(
        self,
        name: &str,
        input: &PCollection<F::In>,
    ) -> crate::view::PCollectionView<crate::view::Singleton<F::Out>> {
        let default = self.fn_.extract_output(self.fn_.create_accumulator());
        let combined = input.apply(name, self.without_defaults());
        crate::transforms::view::View::as_singleton_with_default(&combined, default)
    }
}

/// Emits the combine's default for the impulse when the combined collection's (global) window
/// is empty: Beam's `insertDefaultValueIfEmpty`. The view is ready once the combine fired a pane
/// (then it is not empty and nothing is emitted) or its watermark passed the end of the window.
#[derive(Clone)]
struct ProduceDefaultFn<F: CombineFn> {
    fn_: F,
    combined: crate::view::PCollectionView<crate::view::ListOf<F::Out>>,
}

impl<F: CombineFn> DoFn for ProduceDefaultFn<F> {
    type In = Vec<u8>;
    type Out = F::Out;
    fn process(&mut self, _: Vec<u8>, ctx: &mut ProcessContext<'_, F::Out>) -> UserResult {
        if ctx.side_input(&self.combined)?.is_empty() {
            ctx.output(self.fn_.extract_output(self.fn_.create_accumulator()));
        }
        Ok(())
    }
}

impl<F: CombineFn> PTransform<PCollection<F::In>> for CombineGlobally<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<F::In>) -> Self::Output {
        let combined = input
            .apply("WithKeys", Map::new(|v: F::In| KV::new((), v)))
            .apply("Combine.perKey", Combine::per_key(self.fn_.clone()).with_hot_key_fanout(self.fanout))
            .apply("Values", Values::create());
        if !self.with_defaults {
            return combined;
        }
        let fn_ = self.fn_;
        insert_default_if_empty(&input, combined, |view| {
            let sides = vec![view.spec().clone()];
            (ProduceDefaultFn { fn_, combined: view }, sides)
        })
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::COMBINE_GLOBALLY)
    }
}

/// Combine.globally's default for an empty input, as Beam's `insertDefaultValueIfEmpty`: an
/// empty input produces no pane, so the combined values pass on as they are (their panes
/// unchanged, under any trigger), flattened with what an impulse's DoFn (`make` builds it and
/// its side inputs from a view of the combined values) emits only if the combined window turns
/// out empty: at its end, once. Refused outside the global window.
pub(crate) fn insert_default_if_empty<I: Element, O: Element, D: DoFn<In = Vec<u8>, Out = O>>(
    input: &PCollection<I>,
    combined: PCollection<O>,
    make: impl FnOnce(crate::view::PCollectionView<crate::view::ListOf<O>>) -> (D, Vec<crate::kernel::SideInputSpec>),
) -> PCollection<O> {
    let p = input.pipeline().clone();
    if !input.windowing_strategy().is_global() {
        p.record_error(&p.current_step(), DEFAULTS_NEED_THE_GLOBAL_WINDOW);
        return combined;
    }
    let (fn_, sides) = make(crate::transforms::view::View::as_iterable(&combined));
    let default = p.begin().apply("Impulse", Impulse).apply("ProduceDefault", ParDo::of(fn_).with_side_inputs(sides));
    PCollectionList::of(&p, vec![combined, default]).apply("Flatten", Flatten::pcollections())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coders::Coder;
    use crate::kernel::{lifted_value, CombineKernel};
    use crate::transforms::combiners::SumFn;
    use crate::window::{IntervalWindow, Window};
    use crate::windowed_value::WindowedValue;
    use std::collections::BTreeMap;

    #[test]
    fn partial_combine_groups_short_and_long_keys_per_window() {
        let kernel = CombineKernelImpl::<String, SumFn<i64>>::new(SumFn::default());
        let (w1, w2) = (Window::Interval(IntervalWindow::new(0, 10)), Window::Interval(IntervalWindow::new(10, 20)));
        // Keys of 1 and 40 bytes, and two long keys that differ only in their last byte.
        let long_a = format!("{}a", "k".repeat(39));
        let long_b = format!("{}b", "k".repeat(39));
        let input = |items: &[(&str, i64, i64, Window)]| -> Batch {
            let v: Vec<WindowedValue<KV<String, i64>>> = items
                .iter()
                .map(|(k, v, ts, w)| WindowedValue {
                    value: KV::new(k.to_string(), *v),
                    timestamp: *ts,
                    window: *w,
                    pane: crate::pane::PaneInfo::NO_FIRING,
                })
                .collect();
            Batch::new(v)
        };
        let inputs = vec![
            input(&[("x", 1, 5, w1), (&long_a, 2, 4, w1), (&long_b, 4, 3, w1), ("x", 8, 2, w1)]),
            input(&[(&long_a, 16, 12, w2), (&long_a, 32, 1, w1), ("x", 64, 11, w2)]),
        ];
        let mut out = EncodedKvBatch::default();
        kernel.partial(inputs, &mut out).unwrap();
        let key_coder = ElementCoder::<String>::new();
        let acc_coder = ElementCoder::<i64>::new();
        let mut got = BTreeMap::new();
        for i in 0..out.rows.len() {
            let key = key_coder.decode(&mut out.key(i)).unwrap();
            let (count, mut acc) = lifted_value(out.value(i)).unwrap();
            let row = &out.rows[i];
            got.insert((key, row.window), (count, acc_coder.decode(&mut acc).unwrap(), row.timestamp));
        }
        let want = BTreeMap::from([
            (("x".to_string(), w1), (2, 9, 2)),
            (("x".to_string(), w2), (1, 64, 11)),
            ((long_a.clone(), w1), (2, 34, 1)),
            ((long_a, w2), (1, 16, 12)),
            ((long_b, w1), (1, 4, 3)),
        ]);
        assert_eq!(got, want);
    }
}
