//! The physical plan: one node per primitive (or natively translated composite), in
//! topological order, each run as `partitions` parallel instances; an exchange (hash
//! partitioning by encoded key) precedes every keyed node.

use std::fmt::Write as _;
use std::sync::Arc;
use weir_runner_core::dedup::DedupOperator;
use weir_runner_core::group_also_by_window::Values;
use weir_runner_core::operator::{AssignOperator, FlattenOperator, GroupOperator, Operator, ParDoOperator};
use weir_runner_core::stateful::StatefulParDoOperator;
use weir_sdk::graph::{NodeId, PCollectionId, ParDoPayload, PipelineGraph};
use weir_sdk::kernel::{
    AssignKernel, CombineKernel, ErasedBoundedSource, ErasedUnboundedSource, GroupKernel, KeyPartitioner,
    TestStreamEvent,
};
use weir_sdk::transforms::co_group_by_key::UnionEncoder;
use weir_sdk::transforms::deduplicate::DedupKernel;

/// What a node does.
pub(crate) enum OpSpec {
    Impulse,
    Read(Arc<dyn ErasedBoundedSource>),
    ReadUnbounded(Arc<dyn ErasedUnboundedSource>),
    TestStream(Arc<Vec<TestStreamEvent>>),
    ParDo(ParDoPayload),
    GroupByKey(Arc<dyn GroupKernel>),
    /// Combine.perKey; when lifted (the flag), inputs are combined partially on their way to
    /// the exchange and the engine merges the partial accumulators.
    CombinePerKey(Arc<dyn CombineKernel>, bool),
    /// CoGroupByKey: every input encoded (and tagged) on its way to the exchange, grouped by
    /// the buffering engine, each key's result built from its group buffer.
    CoGroupByKey(Vec<Arc<dyn UnionEncoder>>, Arc<dyn GroupKernel>),
    /// Streaming deduplicate: first element per key and window, keys remembered for a duration.
    Deduplicate(Arc<dyn DedupKernel>, i64),
    Flatten,
    WindowInto(Arc<dyn AssignKernel>),
    /// An exactly-once JSON-lines file sink.
    JsonLinesSink(weir_sdk::io::json_lines::JsonLinesPayload),
    /// A callback per batch.
    BatchSink(weir_sdk::io::for_each_batch::ForEachBatchPayload),
}

impl OpSpec {
    /// Whether the node is a batch-aware sink, written when its batch commits.
    pub(crate) fn is_sink(&self) -> bool {
        matches!(self, OpSpec::JsonLinesSink(_) | OpSpec::BatchSink(_))
    }

    /// Whether the node transforms elements one by one, with nothing but its input: a stateless
    /// ParDo without side inputs, or window assignment. Chains of these run fused.
    pub(crate) fn is_element_wise(&self) -> bool {
        matches!(self, OpSpec::ParDo(p) if !p.stateful) || matches!(self, OpSpec::WindowInto(_))
    }

    /// Whether the node keeps state per key (and is reported among the state operators).
    pub(crate) fn is_stateful(&self) -> bool {
        matches!(
            self,
            OpSpec::GroupByKey(_) | OpSpec::CombinePerKey(..) | OpSpec::CoGroupByKey(..) | OpSpec::Deduplicate(..)
        ) || matches!(self, OpSpec::ParDo(p) if p.stateful)
    }
}

/// One node of the plan.
pub(crate) struct NodeSpec {
    pub node: NodeId,
    pub name: String,
    pub op: OpSpec,
    pub inputs: Vec<PCollectionId>,
    pub side_inputs: Vec<PCollectionId>,
    pub outputs: Vec<PCollectionId>,
    /// The exchange before this node, for keyed nodes.
    pub partitioner: Option<Arc<dyn KeyPartitioner>>,
    /// The composite this node translates natively, if any.
    pub native: Option<String>,
}

impl NodeSpec {
    /// A fresh operator instance for one partition.
    pub(crate) fn instantiate(&self, graph: &PipelineGraph) -> Option<Box<dyn Operator>> {
        let node = graph.node(self.node);
        Some(match &self.op {
            OpSpec::ParDo(p) if p.stateful => Box::new(StatefulParDoOperator::new(node, p, graph)),
            OpSpec::ParDo(p) => Box::new(ParDoOperator::new(node, p, graph)),
            OpSpec::GroupByKey(k) => Box::new(GroupOperator::new(node, graph, Values::Buffer(k.clone()))),
            OpSpec::CombinePerKey(k, false) => Box::new(GroupOperator::new(node, graph, Values::Combine(k.clone()))),
            OpSpec::CombinePerKey(k, true) => {
                Box::new(GroupOperator::new(node, graph, Values::Combine(k.clone())).lifted())
            }
            OpSpec::CoGroupByKey(_, k) => Box::new(GroupOperator::new(node, graph, Values::Buffer(k.clone()))),
            OpSpec::Deduplicate(k, duration_ms) => Box::new(DedupOperator::new(
                &node.full_name,
                graph.pcollection(node.inputs[0]).windowing.clone(),
                k.clone(),
                *duration_ms,
            )),
            OpSpec::Flatten => Box::new(FlattenOperator),
            OpSpec::WindowInto(k) => Box::new(AssignOperator::new(node, k.clone())),
            _ => return None,
        })
    }

    /// A short name of the node's kind, for checkpoint fingerprints.
    pub(crate) fn kind_name(&self) -> &'static str {
        match &self.op {
            OpSpec::Impulse => "impulse",
            OpSpec::Read(_) => "read",
            OpSpec::ReadUnbounded(_) => "read-unbounded",
            OpSpec::TestStream(_) => "test-stream",
            OpSpec::ParDo(p) if p.stateful => "stateful-pardo",
            OpSpec::ParDo(_) => "pardo",
            OpSpec::GroupByKey(_) => "group-by-key",
            OpSpec::CombinePerKey(..) => "combine-per-key",
            OpSpec::Deduplicate(..) => "deduplicate",
            OpSpec::CoGroupByKey(..) => "co-group-by-key",
            OpSpec::Flatten => "flatten",
            OpSpec::WindowInto(_) => "window-into",
            OpSpec::JsonLinesSink(_) => "json-lines-sink",
            OpSpec::BatchSink(_) => "batch-sink",
        }
    }

    fn describe(&self) -> String {
        let kind = match &self.op {
            OpSpec::Impulse => "Impulse".to_string(),
            OpSpec::Read(_) => "Scan[bounded]".to_string(),
            OpSpec::ReadUnbounded(_) => "Scan[unbounded]".to_string(),
            OpSpec::TestStream(_) => "Scan[TestStream]".to_string(),
            OpSpec::ParDo(p) if p.stateful => format!("StatefulParDo[{}]", short(p.fn_name)),
            OpSpec::ParDo(p) => format!("ParDo[{}]", short(p.fn_name)),
            OpSpec::GroupByKey(_) => "GroupAlsoByWindow[buffering]".to_string(),
            OpSpec::CombinePerKey(_, false) => "GroupAlsoByWindow[combining]".to_string(),
            OpSpec::CombinePerKey(_, true) => {
                "GroupAlsoByWindow[combining partial accumulators, combined before the exchange]".to_string()
            }
            OpSpec::Deduplicate(_, ms) => format!("StreamingDeduplicate[within {ms} ms]"),
            OpSpec::CoGroupByKey(inputs, _) => format!("GroupAlsoByWindow[co-group of {} inputs]", inputs.len()),
            OpSpec::Flatten if self.native.is_some() => "Redistribute".to_string(),
            OpSpec::Flatten => "Union".to_string(),
            OpSpec::WindowInto(_) => "AssignWindows".to_string(),
            OpSpec::JsonLinesSink(p) => format!("FileSink[json lines -> {}]", p.dir),
            OpSpec::BatchSink(p) => format!("BatchSink[{}]", p.description),
        };
        let native = self.native.as_ref().map(|u| format!(" (native {u})")).unwrap_or_default();
        format!("{kind} '{}'{native}", self.name)
    }
}

fn short(type_name: &str) -> &str {
    let base = type_name.split('<').next().unwrap_or(type_name);
    base.rsplit("::").next().unwrap_or(base)
}

/// The physical plan.
pub(crate) struct Plan {
    pub nodes: Vec<NodeSpec>,
    pub partitions: usize,
}

impl Plan {
    /// Chains of element-wise nodes to run fused, each as node indexes from head to tail: a
    /// node joins its producer's chain when it is element-wise without side inputs or exchange,
    /// and is the only consumer of its producer's only output. Each bundle then runs through
    /// the whole chain before the next one (it stays in cache), instead of every node running
    /// over the whole batch in turn.
    pub(crate) fn fused_chains(&self) -> Vec<Vec<usize>> {
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
            if !n.op.is_element_wise() || n.partitioner.is_some() || n.inputs.len() != 1 || !n.side_inputs.is_empty() {
                return None;
            }
            let pc = n.inputs[0];
            let j = *producer.get(&pc)?;
            let prev = &self.nodes[j];
            (prev.op.is_element_wise()
                && prev.side_inputs.is_empty()
                && prev.outputs.len() == 1
                && uses.get(&pc) == Some(&1))
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

    /// The plan as text: stages separated by exchanges, stateful operators marked.
    pub(crate) fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== Physical plan: {} nodes, {} partitions ==", self.nodes.len(), self.partitions);
        let mut stage = 0;
        let mut fused = vec![None; self.nodes.len()];
        for chain in self.fused_chains() {
            for &i in &chain[1..] {
                fused[i] = Some(chain[0]);
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.partitioner.is_some() || matches!(n.op, OpSpec::CoGroupByKey(..)) {
                stage += 1;
                let how = if matches!(n.op, OpSpec::Flatten) {
                    "roundrobinpartitioning"
                } else {
                    "hashpartitioning(encoded key"
                };
                if how.starts_with("round") {
                    let _ = writeln!(out, "  Exchange {how}({})", self.partitions);
                } else {
                    let _ = writeln!(out, "  Exchange {how}, {})", self.partitions);
                }
            }
            let marker = if n.op.is_stateful() { " [stateful]" } else { "" };
            let sides = if n.side_inputs.is_empty() {
                String::new()
            } else {
                format!(" [{} side inputs, broadcast]", n.side_inputs.len())
            };
            // Element-wise chains run fused: each bundle through the whole chain at once.
            let fusion = fused[i].map(|h| format!(" [fused into '{}']", self.nodes[h].name)).unwrap_or_default();
            let _ = writeln!(out, "Stage {stage}: {}{marker}{sides}{fusion}", n.describe());
        }
        out
    }
}
