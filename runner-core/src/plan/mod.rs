//! The physical plan every runner schedules.
//!
//! Translation ([`translate`]) turns a pipeline into [`PhysicalNode`]s, one per primitive or
//! natively translated composite, in topological order. A node says everything a scheduler needs
//! without the scheduler knowing what the transform is:
//!
//! - its [`Role`]: a source ([`SourceSpec`], read by the execution layer's sources), a transform
//!   (an operator factory, one operator per partition), or a sink ([`SinkSpec`], whose
//!   commit-aware writer the execution layer opens);
//! - for each main input, the [`Exchange`] its data goes through on the way in: forward,
//!   hash by encoded key, round robin (side inputs are broadcast);
//! - whether it is element-wise (it may run fused with its neighbours) or keeps state per key.
//!
//! Who feeds whom, and the input watermarks that follow, is the plan's [`topology`]. The plan
//! describes; it imports nothing from the execution layer.
//!
//! A runner decides where the partitions of each node live and when they run: the direct runner
//! in strict rounds, the micro-batch runner in batches, a distributed runner across workers. None
//! of them matches on what a node is.

pub mod exchange;
pub mod topology;
pub mod translate;

pub use exchange::{Exchange, Exchanger};

use crate::operator::Operator;
use std::fmt::Write as _;
use std::sync::Arc;
use weir_sdk::graph::{NodeId, PCollectionId, PipelineGraph};
use weir_sdk::kernel::{CollectionOps, ErasedBoundedSource, ErasedUnboundedSource, TestStreamEvent};
use weir_sdk::runner_api::{CommitSinkPayload, FileSinkPayload, ForEachBatchPayload};

/// Makes one operator instance (one per partition) of a transform node.
pub type OperatorFactory = Arc<dyn Fn(&PipelineGraph) -> Box<dyn Operator> + Send + Sync>;

/// What a source node reads; [`crate::exec::source::SourceState`] reads it.
#[derive(Clone)]
pub enum SourceSpec {
    /// One empty element in the global window.
    Impulse,
    /// A bounded source.
    Bounded(Arc<dyn ErasedBoundedSource>),
    /// An unbounded source.
    Unbounded(Arc<dyn ErasedUnboundedSource>),
    /// A TestStream's events.
    TestStream(Arc<Vec<TestStreamEvent>>),
}

/// Where a sink node writes; [`crate::exec::sink`] opens its writer.
#[derive(Clone)]
pub enum SinkSpec {
    /// The exactly-once file sink (WriteFiles, WriteJsonLines) of a step.
    Files {
        /// The step.
        step: String,
        /// What and where it writes.
        payload: FileSinkPayload,
    },
    /// ForEachBatch (and Collect and Console built on it) of a step.
    ForEachBatch {
        /// The step.
        step: String,
        /// The callback.
        payload: ForEachBatchPayload,
    },
    /// A sink of an external system committing each batch exactly once (`WriteCommitted`:
    /// Kafka's transactional sink).
    Committed {
        /// The step.
        step: String,
        /// The sink.
        payload: CommitSinkPayload,
    },
}

/// What a node does in the plan.
#[derive(Clone)]
pub enum Role {
    /// Produces the pipeline's input.
    Source(SourceSpec),
    /// Transforms its input with one operator per partition.
    Transform(OperatorFactory),
    /// Writes its input out when the runner commits (the end of a batch).
    Sink(SinkSpec),
}

/// One node of the physical plan.
#[derive(Clone)]
pub struct PhysicalNode {
    /// The transform it executes.
    pub node: NodeId,
    /// The transform's full name.
    pub name: String,
    /// Main inputs.
    pub inputs: Vec<PCollectionId>,
    /// Side inputs (broadcast to every partition).
    pub side_inputs: Vec<PCollectionId>,
    /// Outputs.
    pub outputs: Vec<PCollectionId>,
    /// Source, transform or sink.
    pub role: Role,
    /// How each main input (in `inputs` order) reaches the node's partitions.
    pub exchanges: Vec<Exchange>,
    /// A short name of the node's kind, for checkpoint fingerprints (`group-by-key`).
    pub kind: &'static str,
    /// What the node does, for plans (`GroupAlsoByWindow[buffering]`).
    pub description: String,
    /// The URN of the composite this node translates natively, if any.
    pub native: Option<String>,
    /// Whether the node transforms elements one by one with nothing but its input (no state,
    /// no side inputs): chains of these run fused.
    pub element_wise: bool,
    /// Whether the node keeps state per key (reported among the state operators).
    pub stateful: bool,
    /// Whether the node has work to run once the runner has committed its output
    /// ([`crate::operator::Operator::on_committed`]); a runner that cannot call it refuses it.
    pub after_commit: bool,
}

impl PhysicalNode {
    /// A fresh operator for one partition; `None` for sources and sinks.
    pub fn instantiate(&self, graph: &PipelineGraph) -> Option<Box<dyn Operator>> {
        match &self.role {
            Role::Transform(factory) => Some(factory(graph)),
            _ => None,
        }
    }

    /// A fresh operator for one partition of a runner that bounds how much a batch reads: a
    /// splittable DoFn claims at most `claims_per_call` positions per call
    /// ([`Operator::limit_claims`]).
    pub fn instantiate_limited(&self, graph: &PipelineGraph, claims_per_call: usize) -> Option<Box<dyn Operator>> {
        let mut op = self.instantiate(graph)?;
        op.limit_claims(claims_per_call);
        Some(op)
    }

    /// Whether the node is a source.
    pub fn is_source(&self) -> bool {
        matches!(self.role, Role::Source(_))
    }

    /// Whether the node is a sink.
    pub fn is_sink(&self) -> bool {
        matches!(self.role, Role::Sink(_))
    }

    /// The operations on the batches the node's partitions receive: what its exchange
    /// delivers (encoded rows, for a co-group or a lifted combine), or its input's.
    pub fn input_ops(&self, graph: &PipelineGraph) -> Option<Arc<dyn CollectionOps>> {
        if let Some(ops) = self.exchanges.iter().find_map(Exchange::delivered_ops) {
            return Some(ops);
        }
        self.inputs.first().map(|&pc| graph.pcollection(pc).ops.clone())
    }

    /// Whether data reaches this node through an exchange that moves it between partitions.
    pub fn exchanged(&self) -> bool {
        self.exchanges.iter().any(|e| !matches!(e, Exchange::Forward))
    }
}

/// The physical plan: nodes in topological order.
#[derive(Clone, Default)]
pub struct PhysicalPlan {
    /// The nodes, producers before consumers.
    pub nodes: Vec<PhysicalNode>,
}

impl PhysicalPlan {
    /// Chains of element-wise nodes to run fused, each as node indexes from head to tail: a
    /// node joins its producer's chain when it is element-wise without side inputs or exchange,
    /// and is the only consumer of its producer's only output. Each bundle then runs through
    /// the whole chain before the next one (it stays in cache), instead of every node running
    /// over the whole batch in turn.
    pub fn fused_chains(&self) -> Vec<Vec<usize>> {
        use std::collections::HashMap;
        let mut producer = HashMap::new();
        let mut uses: HashMap<PCollectionId, usize> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for &o in &n.outputs {
                producer.insert(o, i);
            }
            for &pc in n.inputs.iter().chain(&n.side_inputs) {
                *uses.entry(pc).or_default() += 1;
            }
        }
        let follows = |i: usize| -> Option<usize> {
            let n = &self.nodes[i];
            if !n.element_wise || n.exchanged() || n.inputs.len() != 1 || !n.side_inputs.is_empty() {
                return None;
            }
            let pc = n.inputs[0];
            let j = *producer.get(&pc)?;
            let prev = &self.nodes[j];
            (prev.element_wise && prev.side_inputs.is_empty() && prev.outputs.len() == 1 && uses.get(&pc) == Some(&1))
                .then_some(j)
        };
        let mut chain_of: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut chains: Vec<Vec<usize>> = Vec::new();
        for i in 0..self.nodes.len() {
            if let Some(j) = follows(i) {
                let c = match chain_of[j] {
                    Some(c) => c,
                    None => {
                        chains.push(vec![j]);
                        chains.len() - 1
                    }
                };
                chains[c].push(i);
                chain_of[i] = Some(c);
                chain_of[j] = Some(c);
            }
        }
        chains
    }

    /// Per node, whether it is a source that may plan its reads and leave the reading to the
    /// fused chain it feeds: its one consumer is the head of a chain in `chains`
    /// ([`PhysicalPlan::fused_chains`]) and takes it forward, in the same partition.
    pub fn reads_left_to_chains(&self, topology: &topology::Topology, chains: &[Vec<usize>]) -> Vec<bool> {
        use topology::Slot;
        self.nodes
            .iter()
            .map(|n| {
                let Some(&pc) = n.outputs.first().filter(|_| n.is_source()) else { return false };
                match topology.consumers(pc) {
                    &[(c, Slot::Main(port))] => {
                        chains.iter().any(|chain| chain[0] == c)
                            && matches!(self.nodes[c].exchanges.get(port), Some(Exchange::Forward))
                    }
                    _ => false,
                }
            })
            .collect()
    }

    /// Whether the plan plays a TestStream, whose events move processing time (a test clock).
    pub fn has_test_stream(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.role, Role::Source(SourceSpec::TestStream(_))))
    }

    /// The plan as text, for `partitions` partitions per node: stages separated by exchanges,
    /// stateful operators, side inputs and fused chains marked.
    pub fn explain(&self, partitions: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== Physical plan: {} nodes, {partitions} partitions ==", self.nodes.len());
        let mut stage = 0;
        let mut fused = vec![None; self.nodes.len()];
        for chain in self.fused_chains() {
            for &i in &chain[1..] {
                fused[i] = Some(chain[0]);
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(e) = n.exchanges.iter().find(|e| !matches!(e, Exchange::Forward)) {
                stage += 1;
                let _ = writeln!(out, "  Exchange {}", e.describe(partitions));
            }
            let marker = if n.stateful { " [stateful]" } else { "" };
            let sides = if n.side_inputs.is_empty() {
                String::new()
            } else {
                format!(" [{} side inputs, broadcast]", n.side_inputs.len())
            };
            // Element-wise chains run fused: each bundle through the whole chain at once.
            let fusion = fused[i].map(|h| format!(" [fused into '{}']", self.nodes[h].name)).unwrap_or_default();
            let native = n.native.as_ref().map(|u| format!(" (native {u})")).unwrap_or_default();
            let _ = writeln!(out, "Stage {stage}: {} '{}'{native}{marker}{sides}{fusion}", n.description, n.name);
        }
        out
    }
}

/// The last segment of a type's path, without generics: `MapFn` for `weir_sdk::...::MapFn<F>`.
pub fn short_type_name(type_name: &str) -> &str {
    let base = type_name.split('<').next().unwrap_or(type_name);
    base.rsplit("::").next().unwrap_or(base)
}

use crate::fingerprint::Fingerprint;

impl Fingerprint {
    /// What a checkpoint of `graph` run as `plan` must have been written by to be resumed: the
    /// pipeline's shape and parameters, the physical nodes and the state format. The runner
    /// adds the key partitioning ([`Fingerprint::with_key_groups`]).
    pub fn of_plan(graph: &PipelineGraph, plan: &PhysicalPlan) -> Self {
        let mut f = Fingerprint::of_graph(graph);
        for n in &plan.nodes {
            let native = n.native.as_deref().map(|u| format!(" (native {u})")).unwrap_or_default();
            f.push(format!("physical node '{}'", n.name), format!("{}{native}", n.kind));
        }
        f.push("state format", crate::checkpoint::state_files::FORMAT);
        f
    }
}
