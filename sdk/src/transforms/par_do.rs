//! ParDo: the element-wise primitive.

use crate::coders::Element;
use crate::coders::{Coder, ElementCoder};
use crate::do_fn::{DoFn, DoFnKernel, KeyOf, TupleTag};
use crate::graph::{Boundedness, NodeId, ParDoPayload, Payload};
use crate::kernel::{ErasedDoFn, SideInputSpec};
use crate::kv::KV;
use crate::pipeline::{output_boundedness, PCollection, PCollectionTuple, PTransform, Pipeline};
use crate::window_fn::WindowingStrategy;
use std::sync::{Arc, Mutex};

/// The id of a ParDo's main output tag.
pub const MAIN_TAG: &str = "main";

/// An output tag with its element type erased, to declare additional outputs.
#[derive(Clone, Debug)]
pub struct ErasedTupleTag {
    id: String,
    make: fn(&Pipeline, NodeId, &str, Boundedness, WindowingStrategy) -> usize,
}

fn make_output<T: Element>(p: &Pipeline, node: NodeId, tag: &str, b: Boundedness, w: WindowingStrategy) -> usize {
    p.new_output::<T>(node, tag, b, w).id()
}

impl<T: Element> From<&TupleTag<T>> for ErasedTupleTag {
    fn from(t: &TupleTag<T>) -> Self {
        ErasedTupleTag { id: t.id().to_string(), make: make_output::<T> }
    }
}

/// Applies a [`DoFn`] to every element: `pc.apply("Parse", ParDo::of(ParseFn))`.
pub struct ParDo<F: DoFn> {
    fn_: F,
    side_inputs: Vec<SideInputSpec>,
    key_of: Option<KeyFns<F::In>>,
}

/// How a stateful ParDo encodes its keys, the check that the encoding is deterministic, and
/// its key partitioner.
type KeyFns<I> = (KeyOf<I>, fn() -> Result<(), String>, fn() -> Arc<dyn crate::kernel::KeyPartitioner>);

fn kv_partitioner<K: Element, V: Element>() -> Arc<dyn crate::kernel::KeyPartitioner> {
    Arc::new(crate::kernel::KvPartitioner::<K, V>::default())
}

fn key_determinism<K: Element>() -> Result<(), String> {
    ElementCoder::<K>::new().verify_deterministic()
}

fn encode_key<K: Element, V>(kv: &KV<K, V>, out: &mut Vec<u8>) -> Result<(), crate::coders::CoderError> {
    ElementCoder::<K>::new().encode(&kv.key, out)
}

impl<F: DoFn> ParDo<F> {
    /// A ParDo running `fn_`.
    pub fn of(fn_: F) -> Self {
        ParDo { fn_, side_inputs: Vec::new(), key_of: None }
    }

    /// A stateful ParDo: `fn_` gets state and timers scoped to each element's key and window
    /// (its input must be `KV` with a deterministically encoded key).
    pub fn stateful<K: Element, V: Element>(fn_: F) -> Self
    where
        F: DoFn<In = KV<K, V>>,
    {
        ParDo {
            fn_,
            side_inputs: Vec::new(),
            key_of: Some((encode_key::<K, V>, key_determinism::<K>, kv_partitioner::<K, V>)),
        }
    }

    /// Declares side inputs the DoFn reads with `ProcessContext::side_input`. An element waits
    /// until the side inputs' windows it maps to are ready.
    pub fn with_side_inputs(mut self, views: Vec<SideInputSpec>) -> Self {
        self.side_inputs.extend(views);
        self
    }

    /// Declares additional outputs; the result is a [`PCollectionTuple`] holding the main output
    /// under `main` and each additional output under its tag.
    pub fn with_outputs(self, main: &TupleTag<F::Out>, additional: Vec<ErasedTupleTag>) -> ParDoMulti<F> {
        ParDoMulti {
            fn_: self.fn_,
            side_inputs: self.side_inputs,
            key_of: self.key_of,
            main: main.id().to_string(),
            additional,
        }
    }
}

/// A ParDo with several outputs (built by [`ParDo::with_outputs`]).
pub struct ParDoMulti<F: DoFn> {
    fn_: F,
    side_inputs: Vec<SideInputSpec>,
    key_of: Option<KeyFns<F::In>>,
    main: String,
    additional: Vec<ErasedTupleTag>,
}

fn factory<F: DoFn>(fn_: F, tag_ids: Vec<String>, key_of: Option<KeyOf<F::In>>) -> crate::kernel::DoFnFactory {
    let proto = Mutex::new(fn_);
    let tag_ids: Arc<[String]> = tag_ids.into();
    Arc::new(move || {
        let fn_ = proto.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::new(DoFnKernel { fn_, tag_ids: tag_ids.clone(), key_of, fan_out: 1.0 }) as Box<dyn ErasedDoFn>
    })
}

fn expand_par_do<F: DoFn>(
    fn_: F,
    input: &PCollection<F::In>,
    side_inputs: Vec<SideInputSpec>,
    key_of: Option<KeyFns<F::In>>,
    main: String,
    additional: Vec<ErasedTupleTag>,
) -> (PCollection<F::Out>, PCollectionTuple) {
    let p = input.pipeline().clone();
    let key_partitioner = key_of.map(|(_, _, make)| make());
    if let Some((_, check, _)) = key_of {
        if let Err(why) = check() {
            p.record_error(
                &p.current_step(),
                format!("the key of a stateful ParDo's KV input must be deterministically encoded (state and timers are keyed by it): {why}"),
            );
        }
    }
    let key_of = key_of.map(|(encode, _, _)| encode);
    for s in &side_inputs {
        if s.window_fn.is_merging() {
            p.record_error(
                &p.current_step(),
                format!(
                    "side input '{}' is windowed by merging windows ({:?}), which cannot map to side input windows",
                    s.view_id, s.window_fn
                ),
            );
        }
    }
    p.add_side_inputs(&side_inputs.iter().map(|s| s.pcollection).collect::<Vec<_>>());
    let additional_ids: Vec<String> = additional.iter().map(|t| t.id.clone()).collect();
    let mut seen = std::collections::HashSet::new();
    for id in std::iter::once(&main).chain(&additional_ids) {
        if !seen.insert(id.clone()) {
            p.record_error(&p.current_step(), format!("output tag '{id}' is declared twice"));
        }
    }
    let node = p.make_primitive(
        crate::urns::PAR_DO,
        Payload::ParDo(ParDoPayload {
            factory: factory(fn_, additional_ids.clone(), key_of),
            fn_name: std::any::type_name::<F>(),
            fn_description: String::new(),
            output_tags: std::iter::once(main.clone()).chain(additional_ids.iter().cloned()).collect(),
            side_inputs,
            stateful: key_of.is_some(),
            key_partitioner,
            after_commit: false,
        }),
    );
    let b = output_boundedness(&p, &[input.id()]);
    let w = input.windowing_strategy();
    let main_pc = p.new_output::<F::Out>(node, &main, b, w.clone());
    let mut tags = vec![main];
    let mut ids = vec![main_pc.id()];
    for t in additional {
        ids.push((t.make)(&p, node, &t.id, b, w.clone()));
        tags.push(t.id);
    }
    (main_pc, PCollectionTuple { pipeline: p, tags, ids })
}

impl<F: DoFn> PTransform<PCollection<F::In>> for ParDo<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<F::In>) -> Self::Output {
        expand_par_do(self.fn_, &input, self.side_inputs, self.key_of, MAIN_TAG.to_string(), vec![]).0
    }
}

impl<F: DoFn> PTransform<PCollection<F::In>> for ParDoMulti<F> {
    type Output = PCollectionTuple;
    fn expand(self, input: PCollection<F::In>) -> Self::Output {
        expand_par_do(self.fn_, &input, self.side_inputs, self.key_of, self.main, self.additional).1
    }
}

/// A ParDo whose function is not a Rust [`DoFn`] but erased instances made by `factory`: for
/// code a runner calls out to, such as the stages of another SDK's pipeline that Weir's
/// portable runner sends to that SDK's harness. The function assigns its outputs' windows
/// itself, so each output takes the windowing strategy given, not its input's; every output
/// has element type `O`.
pub struct ErasedParDo<I, O> {
    fn_name: &'static str,
    factory: crate::kernel::DoFnFactory,
    outputs: Vec<(String, WindowingStrategy)>,
    side_inputs: Vec<SideInputSpec>,
    key_partitioner: Option<Arc<dyn crate::kernel::KeyPartitioner>>,
    fn_description: String,
    after_commit: bool,
    _t: std::marker::PhantomData<fn(I) -> O>,
}

impl<I: Element, O: Element> ErasedParDo<I, O> {
    /// A ParDo of `factory`'s instances (named `fn_name` in messages and plans), with one output
    /// per `(tag, windowing)`, in the order of the batches the instances fill.
    pub fn new(
        fn_name: &'static str,
        factory: crate::kernel::DoFnFactory,
        outputs: Vec<(String, WindowingStrategy)>,
    ) -> Self {
        ErasedParDo {
            fn_name,
            factory,
            outputs,
            side_inputs: Vec::new(),
            key_partitioner: None,
            fn_description: String::new(),
            after_commit: false,
            _t: std::marker::PhantomData,
        }
    }

    /// Says what its instances run (another SDK's transforms, say), as a checkpoint's
    /// fingerprint records it: a checkpoint is resumed only by a pipeline whose ParDos run the
    /// same.
    pub fn describing(mut self, description: impl Into<String>) -> Self {
        self.fn_description = description.into();
        self
    }

    /// Declares that its instances have work to run once the runner has durably committed
    /// their output (`ErasedDoFn::on_committed`, `seal`, `on_committed_through`).
    pub fn finalizes_after_commit(mut self) -> Self {
        self.after_commit = true;
        self
    }

    /// Makes it a stateful ParDo: its input is keyed as `partitioner` finds each element's
    /// key, runners route each key to one instance, and the instances get each key and
    /// window's state and timers (`ErasedDoFn::process_keyed` and `on_timer`).
    pub fn stateful(mut self, partitioner: Arc<dyn crate::kernel::KeyPartitioner>) -> Self {
        self.key_partitioner = Some(partitioner);
        self
    }

    /// Adds side inputs, read through the `SideInputReader` the instances are given.
    pub fn with_side_inputs(mut self, views: Vec<SideInputSpec>) -> Self {
        self.side_inputs.extend(views);
        self
    }
}

impl<I: Element, O: Element> PTransform<PCollection<I>> for ErasedParDo<I, O> {
    type Output = crate::pipeline::PCollectionList<O>;
    fn expand(self, input: PCollection<I>) -> Self::Output {
        let p = input.pipeline().clone();
        if self.outputs.is_empty() {
            p.record_error(&p.current_step(), "a ParDo needs at least one output");
        }
        p.add_side_inputs(&self.side_inputs.iter().map(|s| s.pcollection).collect::<Vec<_>>());
        let node = p.make_primitive(
            crate::urns::PAR_DO,
            Payload::ParDo(ParDoPayload {
                factory: self.factory,
                fn_name: self.fn_name,
                fn_description: self.fn_description,
                output_tags: self.outputs.iter().map(|(t, _)| t.clone()).collect(),
                side_inputs: self.side_inputs,
                stateful: self.key_partitioner.is_some(),
                key_partitioner: self.key_partitioner,
                after_commit: self.after_commit,
            }),
        );
        let b = output_boundedness(&p, &[input.id()]);
        let outputs = self.outputs.into_iter().map(|(tag, w)| p.new_output::<O>(node, &tag, b, w)).collect();
        crate::pipeline::PCollectionList::of(&p, outputs)
    }
}
