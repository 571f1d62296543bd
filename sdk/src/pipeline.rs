//! `Pipeline`, `PCollection` and `apply`.

use crate::coders::{CoderRef, Element, ElementCoder};
use crate::error::{Error, Result};
use crate::graph::{Boundedness, NodeId, PCollectionId, PCollectionNode, Payload, PipelineGraph};
use crate::kernel::TypedCollectionOps;
use crate::options::PipelineOptions;
use crate::runner::PipelineResult;
use crate::window_fn::WindowingStrategy;
use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};

struct PipelineInner {
    graph: PipelineGraph,
    /// The composite being expanded (innermost last).
    scope: Vec<NodeId>,
    names: HashSet<String>,
    errors: Vec<Error>,
    options: PipelineOptions,
    consumed: HashSet<PCollectionId>,
}

/// A pipeline under construction: a graph of transforms that a runner executes.
///
/// `Pipeline` is a cheap handle; clones refer to the same pipeline. Construction errors
/// (duplicate step names, invalid transforms) are collected as transforms are applied and
/// reported by [`Pipeline::validate`] and [`Pipeline::run`], each naming its step.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Mutex<PipelineInner>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pipeline")
    }
}

impl Pipeline {
    /// An empty pipeline with `options`.
    pub fn new(options: PipelineOptions) -> Self {
        Pipeline {
            inner: Arc::new(Mutex::new(PipelineInner {
                graph: PipelineGraph::new(),
                scope: vec![0],
                names: HashSet::new(),
                errors: vec![],
                options,
                consumed: HashSet::new(),
            })),
        }
    }

    /// An empty pipeline with default options.
    pub fn create() -> Self {
        Self::new(PipelineOptions::default())
    }

    fn lock(&self) -> MutexGuard<'_, PipelineInner> {
        // A panic while holding the lock can only come from a bug in this module; the data is
        // still consistent enough to report errors, so recover the guard.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pipeline's options.
    pub fn options(&self) -> PipelineOptions {
        self.lock().options.clone()
    }

    /// Replaces the pipeline's options.
    pub fn set_options(&self, options: PipelineOptions) {
        self.lock().options = options;
    }

    /// The root input, to apply root transforms (`Create`, `Read`, `Impulse`) to.
    pub fn begin(&self) -> PBegin {
        PBegin { pipeline: self.clone() }
    }

    /// Applies a root transform: `p.apply("Read", Create::of(...))`.
    pub fn apply<T: PTransform<PBegin>>(&self, name: &str, transform: T) -> T::Output {
        self.begin().apply(name, transform)
    }

    /// A snapshot of the graph as built so far.
    pub fn graph(&self) -> Arc<PipelineGraph> {
        Arc::new(self.lock().graph.clone())
    }

    /// Construction errors found so far, each naming its step.
    pub fn errors(&self) -> Vec<Error> {
        self.lock().errors.clone()
    }

    /// Fails with the first construction error, if any.
    pub fn validate(&self) -> Result<()> {
        match self.lock().errors.first() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Validates the pipeline and starts it on the runner named by the options.
    pub fn run(&self) -> Result<Box<dyn PipelineResult>> {
        self.validate()?;
        let options = self.options();
        let runner = crate::runner::find_runner(&options.runner)?;
        options.check_flags_for_runner()?;
        let graph = self.graph();
        if options.explain {
            // Asked for on the command line: the plan goes to standard output, like Spark's
            // `explain()`.
            println!("{}", runner.explain(&graph, &options)?);
        }
        runner.run(graph, &options)
    }

    /// The plan the configured runner would run this pipeline with, as text.
    pub fn explain(&self) -> Result<String> {
        self.validate()?;
        let options = self.options();
        let runner = crate::runner::find_runner(&options.runner)?;
        options.check_flags_for_runner()?;
        runner.explain(&self.graph(), &options)
    }

    /// Records a construction error at `step`.
    pub fn record_error(&self, step: &str, message: impl Into<String>) {
        self.lock().errors.push(Error::construction(step, message));
    }

    /// The full name of the transform being expanded (the innermost scope).
    pub fn current_step(&self) -> String {
        let inner = self.lock();
        let id = *inner.scope.last().unwrap_or(&0);
        inner.graph.nodes[id].full_name.clone()
    }

    /// Applies `transform` to `input` as a step named `name` under the current scope.
    pub fn apply_transform<In: PInput, T: PTransform<In>>(&self, name: &str, input: In, transform: T) -> T::Output {
        let node = {
            let mut inner = self.lock();
            let parent = *inner.scope.last().unwrap_or(&0);
            let parent_name = inner.graph.nodes[parent].full_name.clone();
            let mut full = if parent_name.is_empty() { name.to_string() } else { format!("{parent_name}/{name}") };
            if name.is_empty() {
                inner.errors.push(Error::construction(&full, "step names must not be empty"));
            }
            if !inner.names.insert(full.clone()) {
                inner.errors.push(Error::construction(
                    &full,
                    format!("duplicate step name '{full}': every applied transform needs a unique name"),
                ));
                let mut n = 2;
                while !inner.names.insert(format!("{full}#{n}")) {
                    n += 1;
                }
                full = format!("{full}#{n}");
            }
            let inputs = input.pcollection_ids();
            inner.consumed.extend(inputs.iter().copied());
            let id = inner.graph.add_node(parent, full, inputs);
            inner.scope.push(id);
            id
        };
        let output = transform.expand(input);
        let mut inner = self.lock();
        inner.scope.pop();
        inner.graph.nodes[node].outputs = output.pcollection_ids();
        if let Some(urn) = T::composite_urn() {
            if inner.graph.nodes[node].is_composite {
                inner.graph.nodes[node].urn = urn;
            }
        }
        output
    }

    /// Attaches a runner-visible payload to the composite being expanded (for native
    /// translation of composites such as Combine).
    pub fn set_composite_payload(&self, payload: Arc<dyn std::any::Any + Send + Sync>) {
        let mut inner = self.lock();
        let id = *inner.scope.last().unwrap_or(&0);
        inner.graph.nodes[id].payload = Payload::Composite(payload);
    }

    /// Sets the payload of the composite being expanded, for runners that translate it whole.
    pub(crate) fn set_scope_payload(&self, payload: Payload) {
        let mut inner = self.lock();
        let id = *inner.scope.last().unwrap_or(&0);
        inner.graph.nodes[id].payload = payload;
    }

    /// Declares side inputs of the transform being expanded (before `make_primitive`).
    pub(crate) fn add_side_inputs(&self, ids: &[PCollectionId]) {
        let mut inner = self.lock();
        let id = *inner.scope.last().unwrap_or(&0);
        inner.consumed.extend(ids.iter().copied());
        inner.graph.nodes[id].side_inputs.extend_from_slice(ids);
    }

    /// Turns the transform being expanded into a primitive with `urn` and `payload`.
    pub(crate) fn make_primitive(&self, urn: &'static str, payload: Payload) -> NodeId {
        let mut inner = self.lock();
        let id = *inner.scope.last().unwrap_or(&0);
        inner.graph.make_primitive(id, urn, payload);
        id
    }

    /// Adds an output PCollection of the primitive being expanded.
    pub(crate) fn new_output<T: Element>(
        &self,
        producer: NodeId,
        tag: &str,
        boundedness: Boundedness,
        windowing: WindowingStrategy,
    ) -> PCollection<T> {
        let coder: CoderRef<T> = Arc::new(ElementCoder::<T>::new());
        let mut inner = self.lock();
        let name = format!("{}.{tag}", inner.graph.nodes[producer].full_name);
        let id = inner.graph.add_pcollection(PCollectionNode {
            id: 0,
            name,
            producer,
            boundedness,
            windowing,
            ops: Arc::new(TypedCollectionOps::new(coder.clone())),
            coder_name: coder.name(),
            coder: Arc::new(coder),
        });
        PCollection { id, pipeline: self.clone(), _t: PhantomData }
    }

    fn with_pcollection<R>(&self, id: PCollectionId, f: impl FnOnce(&mut PCollectionNode) -> R) -> R {
        f(&mut self.lock().graph.pcollections[id])
    }

    fn is_consumed(&self, id: PCollectionId) -> bool {
        self.lock().consumed.contains(&id)
    }
}

/// The input of root transforms.
#[derive(Clone, Debug)]
pub struct PBegin {
    pipeline: Pipeline,
}

impl PBegin {
    /// The root input of `pipeline`.
    pub fn from_pipeline(pipeline: &Pipeline) -> Self {
        PBegin { pipeline: pipeline.clone() }
    }

    pub(crate) fn pipeline_handle(&self) -> Pipeline {
        self.pipeline.clone()
    }

    /// The pipeline (for a root transform that records a construction error).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Applies a root transform.
    pub fn apply<T: PTransform<PBegin>>(&self, name: &str, transform: T) -> T::Output {
        self.pipeline.apply_transform(name, self.clone(), transform)
    }
}

/// A typed, immutable collection of elements of `T` in a pipeline.
pub struct PCollection<T> {
    id: PCollectionId,
    pipeline: Pipeline,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for PCollection<T> {
    fn clone(&self) -> Self {
        PCollection { id: self.id, pipeline: self.pipeline.clone(), _t: PhantomData }
    }
}

impl<T> std::fmt::Debug for PCollection<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PCollection#{}<{}>", self.id, std::any::type_name::<T>())
    }
}

impl<T: Element> PCollection<T> {
    /// Applies a transform to this collection: `words.apply("Count", Count::per_element())`.
    pub fn apply<X: PTransform<PCollection<T>>>(&self, name: &str, transform: X) -> X::Output {
        self.pipeline.apply_transform(name, self.clone(), transform)
    }

    /// The graph id.
    pub fn id(&self) -> PCollectionId {
        self.id
    }

    /// The pipeline it belongs to.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Whether it is bounded.
    pub fn boundedness(&self) -> Boundedness {
        self.pipeline.with_pcollection(self.id, |n| n.boundedness)
    }

    /// Its windowing strategy.
    pub fn windowing_strategy(&self) -> WindowingStrategy {
        self.pipeline.with_pcollection(self.id, |n| n.windowing.clone())
    }

    /// Its coder.
    pub fn coder(&self) -> CoderRef<T> {
        self.pipeline.with_pcollection(self.id, |n| {
            n.coder.downcast_ref::<CoderRef<T>>().cloned().unwrap_or_else(|| Arc::new(ElementCoder::new()))
        })
    }

    /// Replaces the default coder. Must be called before the collection is consumed.
    pub fn set_coder(&self, coder: CoderRef<T>) -> &Self {
        if self.pipeline.is_consumed(self.id) {
            let name = self.pipeline.with_pcollection(self.id, |n| n.name.clone());
            self.pipeline.record_error(&name, "set_coder must be called before the PCollection is consumed");
            return self;
        }
        self.pipeline.with_pcollection(self.id, |n| {
            n.ops = Arc::new(TypedCollectionOps::new(coder.clone()));
            n.coder_name = coder.name();
            n.coder = Arc::new(coder);
        });
        self
    }

    pub(crate) fn set_windowing(&self, windowing: WindowingStrategy) {
        self.pipeline.with_pcollection(self.id, |n| n.windowing = windowing);
    }

    /// Declares the windowing strategy of elements whose windows were assigned elsewhere
    /// (Beam's `setWindowingStrategyInternal`): no window is assigned again, so the elements
    /// must already be in windows of `windowing`'s function. For runners of other SDKs'
    /// pipelines, whose harness assigned the windows; a Rust pipeline uses `Window::into`.
    pub fn set_windowing_strategy_internal(&self, windowing: WindowingStrategy) -> &Self {
        self.set_windowing(windowing);
        self
    }
}

/// A list of PCollections of one type (the input of Flatten, the output of Partition).
#[derive(Clone, Debug)]
pub struct PCollectionList<T> {
    pipeline: Pipeline,
    items: Vec<PCollection<T>>,
}

impl<T: Element> PCollectionList<T> {
    /// An empty list in `pipeline` (flattening it gives an empty PCollection).
    pub fn empty(pipeline: &Pipeline) -> Self {
        PCollectionList { pipeline: pipeline.clone(), items: vec![] }
    }
    /// A list of `items` (all from `pipeline`).
    pub fn of(pipeline: &Pipeline, items: Vec<PCollection<T>>) -> Self {
        PCollectionList { pipeline: pipeline.clone(), items }
    }
    /// Appends a collection.
    pub fn and(mut self, pc: PCollection<T>) -> Self {
        self.items.push(pc);
        self
    }
    /// The collections.
    pub fn all(&self) -> &[PCollection<T>] {
        &self.items
    }
    /// The `i`-th collection.
    pub fn get(&self, i: usize) -> Option<&PCollection<T>> {
        self.items.get(i)
    }
    /// Number of collections.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }
    /// Applies a transform to the whole list.
    pub fn apply<X: PTransform<PCollectionList<T>>>(&self, name: &str, transform: X) -> X::Output {
        self.pipeline.apply_transform(name, self.clone(), transform)
    }
}

/// The output of a multi-output ParDo: one PCollection per tag.
#[derive(Clone, Debug)]
pub struct PCollectionTuple {
    pub(crate) pipeline: Pipeline,
    pub(crate) tags: Vec<String>,
    pub(crate) ids: Vec<PCollectionId>,
}

impl PCollectionTuple {
    /// The collection of `tag`, or `None` if the ParDo declared no such tag.
    pub fn get<T: Element>(&self, tag: &crate::do_fn::TupleTag<T>) -> Option<PCollection<T>> {
        let i = self.tags.iter().position(|t| t == tag.id())?;
        Some(PCollection { id: self.ids[i], pipeline: self.pipeline.clone(), _t: PhantomData })
    }
}

/// The output of a transform that produces nothing (a sink).
#[derive(Clone, Debug)]
pub struct PDone;

/// Anything a transform can be applied to.
pub trait PInput: Clone {
    /// The PCollections it consists of.
    fn pcollection_ids(&self) -> Vec<PCollectionId>;
}

/// Anything a transform can produce.
pub trait POutput {
    /// The PCollections it consists of.
    fn pcollection_ids(&self) -> Vec<PCollectionId>;
}

impl PInput for PBegin {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        vec![]
    }
}

impl<T> PInput for PCollection<T> {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        vec![self.id]
    }
}

impl<T: Clone> PInput for PCollectionList<T> {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        self.items.iter().map(|p| p.id).collect()
    }
}

impl<T> POutput for PCollection<T> {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        vec![self.id]
    }
}

impl<T> POutput for PCollectionList<T> {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        self.items.iter().map(|p| p.id).collect()
    }
}

impl POutput for PCollectionTuple {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        self.ids.clone()
    }
}

impl POutput for PDone {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        vec![]
    }
}

impl<A: POutput, B: POutput> POutput for (A, B) {
    fn pcollection_ids(&self) -> Vec<PCollectionId> {
        let mut v = self.0.pcollection_ids();
        v.extend(self.1.pcollection_ids());
        v
    }
}

/// A transform: primitives declare themselves to the pipeline in `expand`; composites apply
/// other transforms there.
pub trait PTransform<In: PInput> {
    /// What it produces.
    type Output: POutput;
    /// Builds the transform's part of the graph. Called once, inside the transform's scope.
    fn expand(self, input: In) -> Self::Output;
    /// A URN for composites that runners may translate natively ([`crate::urns`]).
    fn composite_urn() -> Option<&'static str> {
        None
    }
}

/// Boundedness of a primitive's outputs: unbounded if any input is.
pub(crate) fn output_boundedness(p: &Pipeline, inputs: &[PCollectionId]) -> Boundedness {
    let inner = p.lock();
    if inputs.iter().any(|&i| inner.graph.pcollections[i].boundedness == Boundedness::Unbounded) {
        Boundedness::Unbounded
    } else {
        Boundedness::Bounded
    }
}
