//! The pipeline graph: transform nodes with their composite hierarchy, and PCollections.
//!
//! Transforms form a tree (composites contain their parts, in application order); primitives
//! are also the nodes of a `petgraph` DAG whose edges are PCollections, which runners use for
//! topological order and consumer lookup.

use crate::kernel::{
    AssignKernel, CollectionOps, DoFnFactory, ErasedBoundedSource, ErasedUnboundedSource, GroupKernel, TestStreamEvent,
};
use crate::window_fn::WindowingStrategy;
use petgraph::graph::{DiGraph, NodeIndex};
use std::any::Any;
use std::sync::Arc;

/// Index of a transform node.
pub type NodeId = usize;
/// Index of a PCollection.
pub type PCollectionId = usize;

/// Whether a PCollection has a finite number of elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundedness {
    /// Finite.
    Bounded,
    /// Possibly infinite.
    Unbounded,
}

/// What a ParDo carries.
#[derive(Clone)]
pub struct ParDoPayload {
    /// Makes DoFn instances.
    pub factory: DoFnFactory,
    /// The DoFn's type, for messages and plans.
    pub fn_name: &'static str,
    /// What the DoFn does, for a DoFn whose type says too little (an erased DoFn running
    /// another SDK's code): part of the pipeline's fingerprint, so a checkpoint is resumed only
    /// by the same code. Empty for a typed DoFn.
    pub fn_description: String,
    /// Output tag ids, main output first, in the order of the node's outputs.
    pub output_tags: Vec<String>,
    /// Side inputs, in the order of the node's `side_inputs`.
    pub side_inputs: Vec<crate::kernel::SideInputSpec>,
    /// Whether the DoFn uses state and timers (its input is keyed; runners partition by key).
    pub stateful: bool,
    /// For stateful ParDos: splits the keyed input by key.
    pub key_partitioner: Option<Arc<dyn crate::kernel::KeyPartitioner>>,
    /// Whether its instances have work to run once the runner has committed their output
    /// (`ErasedDoFn::on_committed`).
    pub after_commit: bool,
}

/// What a Read carries.
#[derive(Clone)]
pub enum ReadPayload {
    /// A bounded source.
    Bounded(Arc<dyn ErasedBoundedSource>),
    /// An unbounded source.
    Unbounded(Arc<dyn ErasedUnboundedSource>),
}

/// The payload of a transform node: its kernels (ARCHITECTURE.md, "Typed at the surface, erased per batch").
#[derive(Clone)]
pub enum Payload {
    /// A composite with no runner-visible payload, or a node under construction.
    None,
    /// Impulse.
    Impulse,
    /// Read.
    Read(ReadPayload),
    /// ParDo.
    ParDo(ParDoPayload),
    /// GroupByKey: the grouping kernel and the key partitioner of its input.
    GroupByKey(Arc<dyn GroupKernel>, Arc<dyn crate::kernel::KeyPartitioner>),
    /// Flatten.
    Flatten,
    /// WindowInto.
    WindowInto(Arc<dyn AssignKernel>),
    /// TestStream: its events in order.
    TestStream(Arc<Vec<TestStreamEvent>>),
    /// A composite's payload for runners that translate it natively (e.g. a CombineFn kernel).
    Composite(Arc<dyn Any + Send + Sync>),
    /// The kernels of a primitive without a variant of its own: its translator takes them back
    /// by type, so a new primitive needs no change here.
    Primitive(Arc<dyn Any + Send + Sync>),
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Payload::None => "None",
            Payload::Impulse => "Impulse",
            Payload::Read(_) => "Read",
            Payload::ParDo(p) => return write!(f, "ParDo({})", p.fn_name),
            Payload::GroupByKey(..) => "GroupByKey",
            Payload::Flatten => "Flatten",
            Payload::WindowInto(_) => "WindowInto",
            Payload::TestStream(_) => "TestStream",
            Payload::Composite(_) => "Composite",
            Payload::Primitive(_) => "Primitive",
        };
        f.write_str(s)
    }
}

/// One applied transform.
#[derive(Clone, Debug)]
pub struct TransformNode {
    /// Index in the graph.
    pub id: NodeId,
    /// Full hierarchical name, e.g. `Count/Combine/GroupByKey`. Empty for the root.
    pub full_name: String,
    /// The enclosing composite (`None` for the root).
    pub parent: Option<NodeId>,
    /// Parts of a composite, in application order.
    pub children: Vec<NodeId>,
    /// The URN ([`crate::urns`]).
    pub urn: &'static str,
    /// Kernels and configuration.
    pub payload: Payload,
    /// Main inputs.
    pub inputs: Vec<PCollectionId>,
    /// Side inputs (read whole per window, not element by element).
    pub side_inputs: Vec<PCollectionId>,
    /// Outputs.
    pub outputs: Vec<PCollectionId>,
    /// Whether this is a composite (it has parts) rather than a primitive.
    pub is_composite: bool,
}

/// One PCollection.
#[derive(Clone)]
pub struct PCollectionNode {
    /// Index in the graph.
    pub id: PCollectionId,
    /// A readable name: producer's full name plus the output tag.
    pub name: String,
    /// The producing transform.
    pub producer: NodeId,
    /// Finite or not.
    pub boundedness: Boundedness,
    /// How it is windowed.
    pub windowing: WindowingStrategy,
    /// Batch operations for its element type.
    pub ops: Arc<dyn CollectionOps>,
    /// The typed coder (`CoderRef<T>`), for kernels built downstream.
    pub coder: Arc<dyn Any + Send + Sync>,
    /// The coder's name.
    pub coder_name: String,
}

/// The whole pipeline: transform tree, PCollections and the primitive DAG.
#[derive(Clone)]
pub struct PipelineGraph {
    /// All nodes; index 0 is the root.
    pub nodes: Vec<TransformNode>,
    /// All PCollections.
    pub pcollections: Vec<PCollectionNode>,
    dag: DiGraph<NodeId, PCollectionId>,
    dag_index: Vec<Option<NodeIndex>>,
}

impl Default for PipelineGraph {
    fn default() -> Self {
        Self::new()
    }
}

impl PipelineGraph {
    /// A graph holding only the root.
    pub fn new() -> Self {
        let root = TransformNode {
            id: 0,
            full_name: String::new(),
            parent: None,
            children: vec![],
            urn: crate::urns::COMPOSITE,
            payload: Payload::None,
            inputs: vec![],
            side_inputs: vec![],
            outputs: vec![],
            is_composite: true,
        };
        PipelineGraph { nodes: vec![root], pcollections: vec![], dag: DiGraph::new(), dag_index: vec![None] }
    }

    /// The root node's id.
    pub fn root(&self) -> NodeId {
        0
    }

    /// A node.
    pub fn node(&self, id: NodeId) -> &TransformNode {
        &self.nodes[id]
    }

    /// A PCollection.
    pub fn pcollection(&self, id: PCollectionId) -> &PCollectionNode {
        &self.pcollections[id]
    }

    pub(crate) fn add_node(&mut self, parent: NodeId, full_name: String, inputs: Vec<PCollectionId>) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(TransformNode {
            id,
            full_name,
            parent: Some(parent),
            children: vec![],
            urn: crate::urns::COMPOSITE,
            payload: Payload::None,
            inputs,
            side_inputs: vec![],
            outputs: vec![],
            is_composite: true,
        });
        self.dag_index.push(None);
        self.nodes[parent].children.push(id);
        id
    }

    pub(crate) fn add_pcollection(&mut self, mut pc: PCollectionNode) -> PCollectionId {
        pc.id = self.pcollections.len();
        self.pcollections.push(pc);
        self.pcollections.len() - 1
    }

    /// Marks `id` as a primitive and links it into the DAG.
    pub(crate) fn make_primitive(&mut self, id: NodeId, urn: &'static str, payload: Payload) {
        let node = &mut self.nodes[id];
        node.urn = urn;
        node.payload = payload;
        node.is_composite = false;
        let idx = self.dag.add_node(id);
        self.dag_index[id] = Some(idx);
        let node = &self.nodes[id];
        let all: Vec<PCollectionId> = node.inputs.iter().chain(&node.side_inputs).copied().collect();
        for &input in &all {
            let producer = self.pcollections[input].producer;
            if let Some(pidx) = self.dag_index[producer] {
                self.dag.add_edge(pidx, idx, input);
            }
        }
    }

    /// Primitive transforms in a topological order (producers before consumers).
    pub fn primitives_in_topological_order(&self) -> Vec<NodeId> {
        match petgraph::algo::toposort(&self.dag, None) {
            Ok(order) => order.into_iter().map(|i| self.dag[i]).collect(),
            // The graph is built by application order, which cannot form a cycle.
            Err(_) => unreachable!("pipeline graphs are acyclic by construction"),
        }
    }

    /// The primitive transforms that consume `pc` as a main or side input.
    pub fn consumers(&self, pc: PCollectionId) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| !n.is_composite && (n.inputs.contains(&pc) || n.side_inputs.contains(&pc)))
            .map(|n| n.id)
            .collect()
    }

    /// Nodes of the subtree under `id` (inclusive), in application order.
    pub fn subtree(&self, id: NodeId) -> Vec<NodeId> {
        let mut out = vec![id];
        let mut i = 0;
        while i < out.len() {
            out.extend(self.nodes[out[i]].children.iter().copied());
            i += 1;
        }
        out
    }
}
