//! The micro-batch engine (Spark Structured Streaming's micro-batch execution over the
//! physical plan): a query is a series of batches, each one pass through the phases, each phase
//! in its own file:
//!
//! 1. [`latest_offset`]: every source's slice of the batch;
//! 2. [`wal_commit`]: the slice's offsets logged before any data is processed;
//! 3. [`get_batch`]: the slices routed into the plan;
//! 4. [`add_batch`]: each worker takes one partition through the whole plan ([`dataflow`]),
//!    pushing each node's output to its consumers' partitions;
//! 5. [`commit`]: state, sinks and the commit log, then committed metrics;
//! 6. [`progress`]: the batch's progress report.
//!
//! [`driver`] runs batches by the trigger; [`recovery`] restores a checkpoint, [`retry`] puts a
//! failed batch back to the last commit, and [`query`] is the handle users hold.

mod add_batch;
mod commit;
mod dataflow;
mod driver;
mod get_batch;
mod latest_offset;
mod progress;
mod query;
mod recovery;
mod reporter;
mod retry;
mod wal_commit;

pub use query::{QueryStatus, StreamingQuery};

use crate::checkpoint::{Checkpoint, OffsetEntry};
use crate::options::MicroBatchOptions;
use dataflow::{Partition, Sinks};
use reporter::{Reporter, Shared};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::node::{NodeShare, ShareOptions};
use weir_runner_core::exec::source::{SourceState, TsStats};
use weir_runner_core::exec::workers::Workers;
use weir_runner_core::metrics::JobMetrics;
use weir_runner_core::plan::topology::Topology;
use weir_runner_core::plan::{PhysicalPlan, Role};
use weir_runner_core::streaming::StreamingOptions;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::kernel::Batch;
use weir_sdk::time::Timestamp;
use weir_sdk::{PipelineOptions, Result};

struct NodeRt {
    source: Option<SourceState>,
    /// The node's watermarks: a source's as read, another node's the minimum over its
    /// partitions' after the last batch.
    wm: Watermarks,
    /// Main-input bundles per partition read for the next batch (a source consumer's).
    pending: Vec<Vec<Batch>>,
    /// Side-input bundles read for the next batch (broadcast to every partition).
    side_pending: Vec<(usize, Batch)>,
    /// State rows and bytes of the node's partitions as of the last batch (`None`: not
    /// measured yet).
    state_size: Option<(u64, u64)>,
    /// The state backend's figures of the node's partitions as of the last batch.
    backend_metrics: std::collections::BTreeMap<String, u64>,
}

impl NodeRt {
    /// State rows and bytes as last measured.
    fn state_size(&self) -> (u64, u64) {
        self.state_size.unwrap_or((0, 0))
    }
}

/// What one node's batch did, over its partitions, for the progress report.
type NodeStats = weir_runner_core::exec::node::MemberStats;

/// A query's engine: the plan and options, and the owners of each phase's own state.
pub(crate) struct Engine {
    graph: Arc<PipelineGraph>,
    plan: Arc<PhysicalPlan>,
    options: PipelineOptions,
    /// The runner's own options.
    mb: MicroBatchOptions,
    /// The trigger, batch sizes and checkpoint.
    streaming: StreamingOptions,
    partitions: usize,
    nodes: Vec<NodeRt>,
    clock: Clock,
    batch_id: u64,
    /// Where batches run: partitions, sinks, workers.
    flow: Flow,
    /// What the next batch reads: the trigger's last firing, a replay, the logged entry.
    planner: Planner,
    /// The checkpoint and what its commits wrote.
    ck: CheckpointState,
    /// Progress reports and the job's metrics.
    report: Reporter,
    /// With batch retries: the last committed state of every share and every node's
    /// watermarks.
    retry_base: Option<RetryBase>,
}

/// Where a batch runs: the partitions' node shares, the sinks they stage into, and the
/// workers that take them through the plan.
struct Flow {
    /// Per partition, the share of every node that has one (runner-core's node runtime): a
    /// worker takes a partition through the whole plan in each batch.
    parts: Vec<Partition>,
    /// Per sink node, its writer, which every partition stages into.
    sinks: Sinks,
    topology: Arc<Topology>,
    /// The workers partitions run on.
    workers: Workers,
    /// Per node, the deliveries a partition of it waits for in a batch
    /// ([`dataflow::deliveries`]).
    deliveries: Vec<usize>,
    /// Fused chains of element-wise nodes ([`PhysicalPlan::fused_chains`]).
    chains: Vec<Vec<usize>>,
}

/// The batch planner's own state: what the next batch reads and how it was logged.
struct Planner {
    last_trigger: Option<Instant>,
    /// A logged but uncommitted batch to re-run with exactly its offsets.
    replay: Option<OffsetEntry>,
    /// The running batch's offset log entry as logged (with the journals of its
    /// source-reading operators once it has run, or as a replay found them).
    logged: Option<OffsetEntry>,
    /// Event-time stats of the elements planned reads delivered in this batch.
    deferred_stats: TsStats,
    /// Per node: a source whose reads are planned and left to the chain it feeds.
    defer_reads: Vec<bool>,
}

/// The checkpoint and what its commits wrote.
#[derive(Default)]
struct CheckpointState {
    checkpoint: Option<Checkpoint>,
    /// The latest batch with a whole snapshot of the state, written by its commit or by the
    /// snapshot thread (`None`: none yet in this layout).
    last_snapshot: Option<u64>,
    /// The batches whose state files make the state since `last_snapshot`, and the thread
    /// that folds them into snapshots, off the batch's path.
    snapshots: weir_runner_core::checkpoint::compaction::Snapshots,
    /// Per node, bytes of snapshot and delta files written by the last commit, and of
    /// background snapshots finished since the commit before, with their time.
    state_bytes: HashMap<usize, weir_runner_core::progress::StateWrites>,
    /// Per node, the time the last commit spent taking, encoding and writing its state files,
    /// over its partitions (Spark's `commitTimeMs`).
    commit_time: HashMap<usize, std::time::Duration>,
    /// Whether the next batch starts from state read back from checkpoint files (a restart)
    /// rather than the state already in memory: Spark's state store cache miss.
    state_loaded_from_files: bool,
    /// The state files the partitions encoded in the batch just run, for its commit, and
    /// whether they are full snapshots (decided once, when the batch started).
    encoded: (bool, Vec<dataflow::EncodedState>),
    /// The last batch's commit, while its state files are written and flushed.
    pending: Option<commit::PendingCommit>,
    /// The first batch a restart can need, as of the last commit: the next commit's flush
    /// thread drops the ones before it.
    retire_from: Option<u64>,
}

/// Per (node, partition) share, each member's state entries; and every node's watermarks.
type RetryBase = (HashMap<(usize, usize), Vec<weir_runner_core::exec::node::Entries>>, Vec<Watermarks>);

/// A batch's input as it stood before processing: per node, main bundles per partition and
/// side-input bundles.
type BatchInput = Vec<(Vec<Vec<Batch>>, Vec<(usize, Batch)>)>;

/// Each node's runtime: a source's state, watermarks, and bundles waiting for the next batch.
fn node_runtimes(graph: &PipelineGraph, plan: &PhysicalPlan, partitions: usize) -> Vec<NodeRt> {
    plan.nodes
        .iter()
        .map(|spec| NodeRt {
            source: match (&spec.role, spec.outputs.first()) {
                (Role::Source(s), Some(&o)) => Some(SourceState::of(&spec.name, s, graph.pcollection(o).ops.clone())),
                _ => None,
            },
            wm: Watermarks::new(),
            pending: (0..partitions).map(|_| Vec::new()).collect(),
            side_pending: Vec::new(),
            state_size: None,
            backend_metrics: Default::default(),
        })
        .collect()
}

impl Flow {
    fn new(
        graph: &PipelineGraph,
        plan: &PhysicalPlan,
        mb: &MicroBatchOptions,
        streaming: &StreamingOptions,
        partitions: usize,
    ) -> Result<Flow> {
        let topology = Arc::new(Topology::of(plan));
        let chains = plan.fused_chains();
        let claims = mb.claims_per_call(streaming);
        Ok(Flow {
            parts: (0..partitions).map(|p| new_partition(graph, plan, &chains, p, claims)).collect(),
            sinks: Arc::new(Vec::new()),
            deliveries: dataflow::deliveries(plan, &topology, partitions),
            topology,
            // More threads than cores only take turns on them: the partitions share the
            // threads instead.
            workers: Workers::new("weir-microbatch-worker", mb.running_threads().min(partitions))?,
            chains,
        })
    }
}

impl Engine {
    fn new(
        graph: Arc<PipelineGraph>,
        plan: PhysicalPlan,
        options: PipelineOptions,
        metrics: Arc<JobMetrics>,
        shared: Arc<Shared>,
    ) -> Result<Self> {
        let mb = options.get::<MicroBatchOptions>().into_owned();
        let streaming = options.get::<StreamingOptions>().into_owned();
        let partitions = mb.partitions().max(1);
        let plan = Arc::new(plan);
        let flow = Flow::new(&graph, &plan, &mb, &streaming, partitions)?;
        // A source feeding a fused chain plans its reads and leaves the reading to the chain,
        // unless a failed batch is retried (a retry needs the batch's input kept whole).
        let retries = mb.max_batch_retries > 0;
        let defer_reads =
            plan.reads_left_to_chains(&flow.topology, &flow.chains).into_iter().map(|d| d && !retries).collect();
        let mut engine = Engine {
            nodes: node_runtimes(&graph, &plan, partitions),
            clock: Clock::for_plan(&plan),
            graph,
            plan,
            mb,
            streaming,
            options,
            partitions,
            flow,
            batch_id: 0,
            report: Reporter::new(metrics, shared),
            planner: Planner {
                last_trigger: None,
                replay: None,
                logged: None,
                deferred_stats: (Timestamp::MAX, Timestamp::MIN, 0, 0),
                defer_reads,
            },
            ck: CheckpointState::default(),
            retry_base: None,
        };
        // Without an offset log, planned reads need no exact counts: a file of lines is parsed
        // by the chains, piece by piece and in parallel, not by the planner first.
        if engine.streaming.checkpoint_dir.is_none() {
            for (node, &defer) in engine.nodes.iter_mut().zip(&engine.planner.defer_reads) {
                if let Some(src) = node.source.as_mut() {
                    src.plan_reads_without_counts(defer);
                }
            }
        }
        if let Some(dir) = engine.streaming.checkpoint_dir.clone() {
            engine.recover(&dir)?;
        }
        engine.flow.sinks = engine.open_sinks()?;
        Ok(engine)
    }

    /// The plan's sinks, open for this query (a resumed query writes on into its own output).
    fn open_sinks(&self) -> Result<Sinks> {
        let owner = format!("query {}", self.report.id);
        let mut sinks = Vec::with_capacity(self.plan.nodes.len());
        for spec in &self.plan.nodes {
            sinks.push(match &spec.role {
                Role::Sink(factory) => {
                    let mut writer = factory.open(&owner, self.partitions)?;
                    // The replayed batch may have been written, before a restart, by another
                    // number of partitions.
                    writer.own_partitions(0..self.partitions, self.planner.replay.as_ref().map(|r| r.batch_id));
                    Some(Mutex::new(writer))
                }
                _ => None,
            });
        }
        Ok(Arc::new(sinks))
    }

    fn finish(&mut self) {
        self.shares_mut().for_each(NodeShare::finish);
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.nodes.iter().all(|n| n.wm.is_done() && n.pending.iter().all(Vec::is_empty) && n.side_pending.is_empty())
    }

    fn idle_wait_ms(&self) -> u64 {
        let now = self.clock.now();
        self.next_processing_timer().map(|t| (t - now + 1).clamp(1, 20) as u64).unwrap_or(10)
    }

    /// When any operator next has work of its own, if any has.
    pub(crate) fn next_processing_timer(&self) -> Option<Timestamp> {
        self.flow.parts.iter().flat_map(|part| part.iter().flatten()).filter_map(NodeShare::next_processing_timer).min()
    }

    /// Whether every source has been read to its end.
    pub(crate) fn sources_done(&self) -> bool {
        self.nodes.iter().filter(|n| n.source.is_some()).all(|n| n.wm.is_done())
    }

    /// Whether the query keeps a checkpoint (its runs resume where the last one stopped).
    pub(crate) fn checkpointed(&self) -> bool {
        self.ck.checkpoint.is_some()
    }

    pub(crate) fn processing_timer_due(&self) -> bool {
        self.next_processing_timer().is_some_and(|t| t < self.clock.now())
    }
}

/// Partition `p`'s shares: one per node that is not a source and not a fused chain's follower
/// (a chain runs in its head's share).
fn new_partition(
    graph: &PipelineGraph,
    plan: &PhysicalPlan,
    chains: &[Vec<usize>],
    p: usize,
    claims: usize,
) -> Partition {
    let options = ShareOptions { claims_per_call: Some(claims), journal: true, ..Default::default() };
    let mut part: Partition = (0..plan.nodes.len()).map(|_| None).collect();
    let followers: std::collections::HashSet<usize> = chains.iter().flat_map(|c| c[1..].iter().copied()).collect();
    for (i, spec) in plan.nodes.iter().enumerate() {
        if spec.is_source() || followers.contains(&i) {
            continue;
        }
        let chain = chains.iter().find(|c| c[0] == i).map(Vec::as_slice);
        part[i] = Some(NodeShare::new(graph, plan, i, chain, p, options));
    }
    part
}
