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
use weir_sdk::transforms::deduplicate::DedupKernel;

/// What a node does.
pub(crate) enum OpSpec {
    Impulse,
    Read(Arc<dyn ErasedBoundedSource>),
    ReadUnbounded(Arc<dyn ErasedUnboundedSource>),
    TestStream(Arc<Vec<TestStreamEvent>>),
    ParDo(ParDoPayload),
    GroupByKey(Arc<dyn GroupKernel>),
    CombinePerKey(Arc<dyn CombineKernel>),
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

    /// Whether the node keeps state per key (and is reported among the state operators).
    pub(crate) fn is_stateful(&self) -> bool {
        matches!(self, OpSpec::GroupByKey(_) | OpSpec::CombinePerKey(_) | OpSpec::Deduplicate(..))
            || matches!(self, OpSpec::ParDo(p) if p.stateful)
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
            OpSpec::CombinePerKey(k) => Box::new(GroupOperator::new(node, graph, Values::Combine(k.clone()))),
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
            OpSpec::CombinePerKey(_) => "combine-per-key",
            OpSpec::Deduplicate(..) => "deduplicate",
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
            OpSpec::CombinePerKey(_) => "GroupAlsoByWindow[combining]".to_string(),
            OpSpec::Deduplicate(_, ms) => format!("StreamingDeduplicate[within {ms} ms]"),
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
    /// The plan as text: stages separated by exchanges, stateful operators marked.
    pub(crate) fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== Physical plan: {} nodes, {} partitions ==", self.nodes.len(), self.partitions);
        let mut stage = 0;
        for n in &self.nodes {
            if n.partitioner.is_some() {
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
            let _ = writeln!(out, "Stage {stage}: {}{marker}{sides}", n.describe());
        }
        out
    }
}
