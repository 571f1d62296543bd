//! The driver loop (DESIGN D6) and the `StreamingQuery` handle.
//!
//! One batch, [`Engine::run_batch`]: read a bounded slice of every source (latestOffset and
//! getBatch), run every node in topological order (addBatch) — side inputs first, then pending
//! bundles, then the node's watermark advance with the timers it releases, all partitions of a
//! node in parallel — then commit the batch's metrics and publish its progress. The trigger
//! decides the rhythm in [`run`].

use crate::checkpoint::{Checkpoint, CommitEntry, OffsetEntry, SourceOffsets};
use crate::options::{MicroBatchOptions, StreamingTrigger};
use crate::progress::{
    DurationMs, EventTimeStats, SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress,
};
use crate::state_store::{apply, read_file, FileKind, StoreVersion};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weir_runner_core::exec::chain::ChainTask;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::partition::{in_fired_bundles, PartitionTask};
use weir_runner_core::exec::sink::SinkWriter;
use weir_runner_core::exec::source::{add_stats, bundle_len, DeferredRead, SourceState, TsStats};
use weir_runner_core::exec::topology::{Slot, Topology};
use weir_runner_core::exec::workers::Workers;
use weir_runner_core::fingerprint::Fingerprint;
use weir_runner_core::group_also_by_window::StateChanges;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::{JobMetrics, MetricsContainerImpl};
use weir_runner_core::operator::Operator;
use weir_runner_core::plan::{PhysicalPlan, Role};
use weir_runner_core::system_metrics;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::metrics::MetricResults;
use weir_sdk::runner::{PipelineResult, PipelineState};
use weir_sdk::time::{iso8601, Timestamp, MAX_TIMESTAMP};
use weir_sdk::{Error, PipelineOptions, Result};

type Listener = Box<dyn Fn(&StreamingQueryProgress) + Send + Sync>;

/// State shared between the engine thread and the query handle.
struct Shared {
    recent: Mutex<VecDeque<StreamingQueryProgress>>,
    listeners: Mutex<Vec<Listener>>,
    /// Incremented whenever a trigger found no new data; with `changed`, for
    /// `process_all_available`.
    idle: Mutex<u64>,
    changed: Condvar,
    active: std::sync::atomic::AtomicBool,
}

const RECENT: usize = 100;

/// A running micro-batch query (Spark's `StreamingQuery`): progress, status, stop and wait.
pub struct StreamingQuery {
    result: Box<dyn PipelineResult>,
    shared: Arc<Shared>,
}

/// What the query is doing (Spark's `StreamingQueryStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryStatus {
    /// A readable description.
    pub message: String,
    /// Whether the last trigger found new data.
    pub is_data_available: bool,
    /// Whether a batch is running.
    pub is_trigger_active: bool,
}

impl StreamingQuery {
    pub(crate) fn start(graph: Arc<PipelineGraph>, plan: PhysicalPlan, options: PipelineOptions) -> Result<Self> {
        let shared = Arc::new(Shared {
            recent: Mutex::new(VecDeque::new()),
            listeners: Mutex::new(Vec::new()),
            idle: Mutex::new(0),
            changed: Condvar::new(),
            active: std::sync::atomic::AtomicBool::new(false),
        });
        let metrics = JobMetrics::with_committed();
        let (m, s) = (metrics.clone(), shared.clone());
        let opts = options.clone();
        let result = Job::spawn("weir-microbatch", metrics, &opts, move |job| {
            let mut engine = Engine::new(graph, plan, options, m, s.clone())?;
            let r = run(&mut engine, &job);
            engine.finish();
            // Wake anyone waiting in process_all_available.
            *s.idle.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            s.changed.notify_all();
            r
        })?;
        Ok(StreamingQuery { result, shared })
    }

    /// The progress of the most recent batch.
    pub fn last_progress(&self) -> Option<StreamingQueryProgress> {
        self.shared.recent.lock().unwrap_or_else(|e| e.into_inner()).back().cloned()
    }

    /// The progress of the most recent batches (up to 100), oldest first.
    pub fn recent_progress(&self) -> Vec<StreamingQueryProgress> {
        self.shared.recent.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Calls `listener` with the progress of every batch from now on.
    pub fn add_listener(&self, listener: impl Fn(&StreamingQueryProgress) + Send + Sync + 'static) {
        self.shared.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(listener));
    }

    /// What the query is doing.
    pub fn status(&self) -> QueryStatus {
        let active = self.shared.active.load(std::sync::atomic::Ordering::SeqCst);
        let state = self.result.state();
        let message = match state {
            PipelineState::Running if active => "Processing new data",
            PipelineState::Running => "Waiting for next trigger",
            _ => "Stopped",
        };
        let is_data_available = self.last_progress().is_some_and(|p| p.num_input_rows > 0);
        QueryStatus { message: message.to_string(), is_data_available, is_trigger_active: active }
    }

    /// Stops the query after the current batch has committed (Spark's `stop`).
    pub fn stop(&self) -> Result<PipelineState> {
        self.result.stop()
    }

    /// Waits until the query ends (or `timeout` passes).
    pub fn await_termination(&self, timeout: Option<Duration>) -> Result<PipelineState> {
        self.result.wait_until_finish(timeout)
    }

    /// Blocks until every batch of data available so far has been processed: a trigger found no
    /// new data, or the query ended.
    pub fn process_all_available(&self) -> Result<()> {
        let mut idle = self.shared.idle.lock().unwrap_or_else(|e| e.into_inner());
        let start = *idle;
        while *idle == start && !self.result.state().is_terminal() {
            idle =
                self.shared.changed.wait_timeout(idle, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
        Ok(())
    }
}

impl PipelineResult for StreamingQuery {
    fn state(&self) -> PipelineState {
        self.result.state()
    }
    fn wait_until_finish(&self, timeout: Option<Duration>) -> Result<PipelineState> {
        self.result.wait_until_finish(timeout)
    }
    fn cancel(&self) -> Result<PipelineState> {
        self.result.cancel()
    }
    fn stop(&self) -> Result<PipelineState> {
        self.result.stop()
    }
    fn metrics(&self) -> MetricResults {
        self.result.metrics()
    }
}

/// Drives batches by the trigger until the query ends.
fn run(engine: &mut Engine, job: &Job) -> Result<()> {
    let trigger = engine.mb.trigger;
    let interval = Duration::from_millis(engine.mb.trigger_interval_ms);
    loop {
        // A stop takes effect here, between batches: the last one has committed.
        if job.is_stop_requested() {
            return Err(Error::Cancelled);
        }
        let start = Instant::now();
        let max = if trigger == StreamingTrigger::Once { usize::MAX } else { engine.mb.max_batch_size.max(1) };
        let ran = engine.run_batch(max, job)?;
        if trigger == StreamingTrigger::Once || engine.is_finished() {
            return Ok(());
        }
        if !ran {
            *engine.shared.idle.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            engine.shared.changed.notify_all();
            job.sleep_unless_stopped(Duration::from_millis(engine.idle_wait_ms()));
        } else if trigger == StreamingTrigger::ProcessingTime {
            // A batch that overran its interval is followed at once.
            if let Some(rest) = interval.checked_sub(start.elapsed()) {
                job.sleep_unless_stopped(rest);
            }
        }
    }
}

struct NodeRt {
    source: Option<SourceState>,
    ops: Vec<Box<dyn Operator>>,
    wm: Watermarks,
    /// Pending main-input bundles per partition.
    pending: Vec<Vec<Batch>>,
    /// Pending side-input bundles (broadcast to every partition).
    side_pending: Vec<(usize, Batch)>,
    /// For a sink: what its partitions staged in this batch, written at commit.
    sink: Option<Box<dyn SinkWriter>>,
    /// State rows and bytes of the operators as of their last watermark advance, measured
    /// once per batch for the metrics and the progress report (`None`: not measured yet).
    state_size: Option<(u64, u64)>,
}

impl NodeRt {
    /// State rows and bytes, measured now.
    fn measure_state(&self) -> (u64, u64) {
        self.ops.iter().fold((0, 0), |(r, b), o| (r + o.state_rows() as u64, b + o.state_bytes() as u64))
    }

    /// State rows and bytes as last measured (measured now if never).
    fn state_size(&self) -> (u64, u64) {
        self.state_size.unwrap_or_else(|| self.measure_state())
    }
}

/// What one node's batch did, for the progress report.
#[derive(Default)]
struct NodeStats {
    update_ms: u64,
    removal_ms: u64,
    input_rows: u64,
    dropped: u64,
    changes: StateChanges,
}

pub(crate) struct Engine {
    graph: Arc<PipelineGraph>,
    plan: PhysicalPlan,
    options: PipelineOptions,
    /// The runner's own options.
    mb: MicroBatchOptions,
    partitions: usize,
    nodes: Vec<NodeRt>,
    topology: Topology,
    /// The workers partitions run on.
    workers: Workers,
    clock: Clock,
    batch_id: u64,
    metrics: Arc<JobMetrics>,
    shared: Arc<Shared>,
    id: String,
    run_id: String,
    last_trigger: Option<Instant>,
    checkpoint: Option<Checkpoint>,
    /// A logged but uncommitted batch to re-run with exactly its offsets.
    replay: Option<OffsetEntry>,
    /// Per operator partition, what its state store committed last.
    stores: HashMap<(usize, usize), StoreVersion>,
    /// Per node, bytes of snapshot and delta files written by the last commit.
    state_bytes: HashMap<usize, (u64, u64)>,
    /// Whether the next batch starts from state read back from checkpoint files (a restart)
    /// rather than the state already in memory: Spark's state store cache miss.
    state_loaded_from_files: bool,
    /// With batch retries: the last committed state of every operator partition and every
    /// node's watermarks.
    retry_base: Option<RetryBase>,
    /// Fused chains of element-wise nodes ([`PhysicalPlan::fused_chains`]), the chain each head starts,
    /// and whether a node runs as part of an earlier node's chain.
    chains: Vec<Vec<usize>>,
    chain_at: Vec<Option<usize>>,
    fused_follower: Vec<bool>,
    /// Event-time stats of the elements planned reads delivered in this batch.
    deferred_stats: TsStats,
    /// Per node: a source whose reads are planned and left to the chain it feeds.
    defer_reads: Vec<bool>,
}

type RetryBase = (HashMap<(usize, usize), Vec<(Vec<u8>, Vec<u8>)>>, Vec<Watermarks>);

/// A batch's input as it stood before processing: per node, main bundles per partition and
/// side-input bundles.
type BatchInput = Vec<(Vec<Vec<Batch>>, Vec<(usize, Batch)>)>;

fn random_id() -> String {
    let a: u128 = rand::random();
    let h = format!("{a:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
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
        let partitions = mb.partitions().max(1);
        let topology = Topology::of(&plan);
        let mut nodes = Vec::with_capacity(plan.nodes.len());
        for spec in &plan.nodes {
            let source = match (&spec.role, spec.outputs.first()) {
                (Role::Source(s), Some(&o)) => Some(SourceState::of(&spec.name, s, graph.pcollection(o).ops.clone())),
                _ => None,
            };
            let ops = (0..partitions).filter_map(|_| spec.instantiate(&graph)).collect();
            nodes.push(NodeRt {
                source,
                ops,
                wm: Watermarks::new(),
                pending: (0..partitions).map(|_| Vec::new()).collect(),
                side_pending: Vec::new(),
                sink: None,
                state_size: None,
            });
        }
        let chains = plan.fused_chains();
        let mut chain_at = vec![None; plan.nodes.len()];
        let mut fused_follower = vec![false; plan.nodes.len()];
        for (c, chain) in chains.iter().enumerate() {
            chain_at[chain[0]] = Some(c);
            for &i in &chain[1..] {
                fused_follower[i] = true;
            }
        }
        let clock = Clock::for_plan(&plan);
        let mut engine = Engine {
            graph,
            plan,
            mb,
            options,
            partitions,
            nodes,
            topology,
            workers: Workers::new("weir-microbatch-worker", partitions)?,
            clock,
            batch_id: 0,
            metrics,
            shared,
            id: random_id(),
            run_id: random_id(),
            last_trigger: None,
            checkpoint: None,
            replay: None,
            stores: HashMap::new(),
            state_bytes: HashMap::new(),
            state_loaded_from_files: false,
            retry_base: None,
            chain_at,
            fused_follower,
            chains,
            deferred_stats: (Timestamp::MAX, Timestamp::MIN, 0, 0),
            defer_reads: Vec::new(),
        };
        engine.defer_reads = (0..engine.nodes.len()).map(|i| engine.defers_reads(i)).collect();
        if let Some(dir) = engine.mb.checkpoint_dir.clone() {
            engine.recover(&dir)?;
        }
        // Sinks open for this query (a resumed query writes on into its own output).
        let owner = format!("query {}", engine.id);
        for (i, spec) in engine.plan.nodes.iter().enumerate() {
            if let Role::Sink(factory) = &spec.role {
                engine.nodes[i].sink = Some(factory.open(&owner, partitions)?);
            }
        }
        Ok(engine)
    }

    /// What a checkpoint must have been written by to be resumed here: the pipeline's shape and
    /// parameters, the physical nodes this runner made of it, the partitioning and the state
    /// format.
    fn fingerprint(&self) -> Fingerprint {
        let mut f = Fingerprint::of_graph(&self.graph);
        for n in &self.plan.nodes {
            let native = n.native.as_deref().map(|u| format!(" (native {u})")).unwrap_or_default();
            f.push(format!("physical node '{}'", n.name), format!("{}{native}", n.kind));
        }
        f.push("state format", crate::state_store::FORMAT);
        f.with_partitioning(self.partitions)
    }

    /// Opens the checkpoint directory and restores the last committed batch: source positions,
    /// watermarks and operator state; a logged but uncommitted batch is re-run with its offsets.
    fn recover(&mut self, dir: &str) -> Result<()> {
        let (cp, rec) = Checkpoint::open(dir, self.fingerprint(), self.id.clone(), self.mb.min_batches_to_retain)?;
        self.id = rec.id;
        if let Some((offsets, commit)) = &rec.committed {
            self.restore_state(&cp, commit.batch_id)?;
            for (i, spec) in self.plan.nodes.iter().enumerate() {
                if let Some((_, input, output)) = commit.watermarks.iter().find(|(n, _, _)| *n == spec.name) {
                    self.nodes[i].wm = Watermarks::restored(*input, *output);
                }
            }
            self.batch_id = commit.batch_id + 1;
            if rec.uncommitted.is_none() {
                self.restore_sources(&offsets.sources, |s| &s.end)?;
                if let Some(c) = offsets.clock {
                    self.clock.set_test_time(c);
                }
            }
        }
        if let Some(entry) = rec.uncommitted {
            self.restore_sources(&entry.sources, |s| &s.start)?;
            if let Some(c) = entry.start_clock {
                self.clock.set_test_time(c);
            }
            self.batch_id = entry.batch_id;
            self.replay = Some(entry);
        }
        self.checkpoint = Some(cp);
        Ok(())
    }

    fn restore_sources(
        &mut self,
        logged: &[SourceOffsets],
        pos: impl Fn(&SourceOffsets) -> &serde_json::Value,
    ) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if let Some(src) = self.nodes[i].source.as_mut() {
                match logged.iter().find(|s| s.name == spec.name) {
                    Some(s) => src.restore(pos(s), self.partitions)?,
                    None => {
                        return Err(Error::Construction {
                            step: spec.name.clone(),
                            message: "the checkpoint's offset log has no entry for this source".into(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether source node `i` plans its reads and leaves the reading to the fused chain it
    /// feeds: it has one consumer, the head of a chain, and a failed batch is not retried (a
    /// retry needs the batch's input kept whole). Decided once, with the plan.
    fn defers_reads(&self, i: usize) -> bool {
        let Some(pc) = self.plan.nodes[i].outputs.first() else { return false };
        match self.topology.consumers(*pc) {
            &[(c, Slot::Main(_))] => self.chain_at[c].is_some() && self.mb.max_batch_retries == 0,
            _ => false,
        }
    }

    /// The input watermark of node `i`: the minimum output watermark of its main inputs'
    /// producers.
    fn upstream_watermark(&self, i: usize) -> Timestamp {
        self.topology.upstream_watermark(i, |p| self.nodes[p].wm.output())
    }

    /// Node `i`'s pending main-input bundles per partition, leaving it none.
    fn take_pending(&mut self, i: usize) -> Vec<Vec<Batch>> {
        std::mem::replace(&mut self.nodes[i].pending, (0..self.partitions).map(|_| Vec::new()).collect())
    }

    /// The operations on node `i`'s pending main-input batches: what its exchange delivers.
    fn main_ops(&self, i: usize) -> Option<Arc<dyn CollectionOps>> {
        self.plan.nodes[i].input_ops(&self.graph)
    }

    /// A copy of every node's pending input (the batch's data, before it is processed).
    fn clone_pending(&self) -> BatchInput {
        self.nodes
            .iter()
            .zip(&self.plan.nodes)
            .enumerate()
            .map(|(i, (n, spec))| {
                let main = self.main_ops(i);
                let pending = n
                    .pending
                    .iter()
                    .map(|bs| bs.iter().filter_map(|b| main.as_ref().map(|o| o.clone_batch(b))).collect())
                    .collect();
                let sides = n
                    .side_pending
                    .iter()
                    .map(|(k, b)| (*k, self.graph.pcollection(spec.side_inputs[*k]).ops.clone_batch(b)))
                    .collect();
                (pending, sides)
            })
            .collect()
    }

    /// Remembers the state just committed, for retrying the next batch.
    fn save_retry_base(&mut self) -> Result<()> {
        let mut entries = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for (p, op) in n.ops.iter().enumerate() {
                entries.insert((i, p), op.state_entries()?);
            }
        }
        self.retry_base = Some((entries, self.nodes.iter().map(|n| n.wm).collect()));
        Ok(())
    }

    /// Puts every operator back to the last committed state (fresh instances, restored state
    /// and watermarks) and the batch's input back in place.
    fn roll_back(&mut self, input: Option<&BatchInput>) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if self.nodes[i].source.is_some() {
                continue;
            }
            for op in &mut self.nodes[i].ops {
                op.finish();
            }
            self.nodes[i].ops = (0..self.partitions).filter_map(|_| spec.instantiate(&self.graph)).collect();
            if let Some(sink) = self.nodes[i].sink.as_mut() {
                sink.discard();
            }
            if let Some((entries, wms)) = &self.retry_base {
                for (p, op) in self.nodes[i].ops.iter_mut().enumerate() {
                    if let Some(e) = entries.get(&(i, p)) {
                        op.restore_entries(e.clone())?;
                    }
                }
                self.nodes[i].wm = wms[i];
            } else {
                self.nodes[i].wm = Watermarks::new();
            }
        }
        if let Some(input) = input {
            for (i, (pending, sides)) in input.iter().enumerate() {
                let main = self.main_ops(i);
                let spec = &self.plan.nodes[i];
                self.nodes[i].pending = pending
                    .iter()
                    .map(|bs| bs.iter().filter_map(|b| main.as_ref().map(|o| o.clone_batch(b))).collect())
                    .collect();
                self.nodes[i].side_pending = sides
                    .iter()
                    .map(|(k, b)| (*k, self.graph.pcollection(spec.side_inputs[*k]).ops.clone_batch(b)))
                    .collect();
            }
        }
        Ok(())
    }

    /// Commits a processed batch: state, then sinks, then the commit log.
    fn commit(&mut self) -> Result<u64> {
        let t = Instant::now();
        if self.checkpoint.is_none() {
            self.commit_sinks()?;
            return Ok(t.elapsed().as_millis() as u64);
        }
        self.write_state()?;
        weir_sdk::testing::fault::point("state-commit");
        self.commit_sinks()?;
        weir_sdk::testing::fault::point("sink-commit");
        let Some(cp) = &self.checkpoint else { return Ok(0) };
        let watermarks = self
            .plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(s, n)| (s.name.clone(), n.wm.input(), n.wm.output()))
            .collect();
        let latest_snapshot = self.batch_id - self.batch_id % self.snapshot_interval();
        cp.write_commit(&CommitEntry { batch_id: self.batch_id, watermarks }, latest_snapshot)?;
        weir_sdk::testing::fault::point("commit-log");
        Ok(t.elapsed().as_millis() as u64)
    }

    /// Writes every operator partition's state after this batch, with a manifest.
    fn write_state(&mut self) -> Result<()> {
        let Some(cp) = &self.checkpoint else { return Ok(()) };
        let dir = cp.state_dir(self.batch_id);
        let snapshot = self.batch_id.is_multiple_of(self.snapshot_interval());
        let mut files = Vec::new();
        self.state_bytes.clear();
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            for (p, op) in self.nodes[i].ops.iter().enumerate() {
                let entries = op.state_entries()?;
                let store = self.stores.entry((i, p)).or_default();
                if let Some(f) = store.commit(&dir, &spec.name, p, entries, snapshot)? {
                    let e = self.state_bytes.entry(i).or_insert((0, 0));
                    match f.kind {
                        FileKind::Snapshot => e.0 += f.bytes,
                        FileKind::Delta => e.1 += f.bytes,
                    }
                    files.push(f);
                }
            }
        }
        cp.write_manifest(self.batch_id, &files)
    }

    fn snapshot_interval(&self) -> u64 {
        self.mb.state_snapshot_interval.max(1)
    }

    /// Loads every operator partition's state as of committed batch `c`: the latest snapshot
    /// batch at or before it, then the deltas after it.
    fn restore_state(&mut self, cp: &Checkpoint, c: u64) -> Result<()> {
        let start = c - c % self.snapshot_interval();
        let mut maps: HashMap<(String, usize), HashMap<Vec<u8>, Vec<u8>>> = HashMap::new();
        for b in start..=c {
            for f in cp.read_manifest(b)? {
                let rows = read_file(&cp.state_dir(b), &f)?;
                apply(maps.entry((f.node.clone(), f.partition)).or_default(), f.kind, rows);
            }
        }
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            for (p, op) in self.nodes[i].ops.iter_mut().enumerate() {
                if let Some(map) = maps.remove(&(spec.name.clone(), p)) {
                    let entries: Vec<(Vec<u8>, Vec<u8>)> = map.into_iter().collect();
                    self.stores.insert((i, p), StoreVersion::from_entries(&entries));
                    op.restore_entries(entries)?;
                }
            }
            self.nodes[i].state_size = None;
        }
        self.state_loaded_from_files = true;
        Ok(())
    }

    fn finish(&mut self) {
        for n in &mut self.nodes {
            for op in &mut n.ops {
                op.finish();
            }
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.nodes.iter().all(|n| n.wm.is_done() && n.pending.iter().all(Vec::is_empty) && n.side_pending.is_empty())
    }

    fn idle_wait_ms(&self) -> u64 {
        let now = self.clock.now();
        let next = self.nodes.iter().flat_map(|n| n.ops.iter().filter_map(|o| o.next_processing_timer())).min();
        next.map(|t| (t - now + 1).clamp(1, 20) as u64).unwrap_or(10)
    }

    fn processing_timer_due(&self) -> bool {
        let now = self.clock.now();
        self.nodes.iter().any(|n| n.ops.iter().any(|o| o.next_processing_timer().is_some_and(|t| t < now)))
    }

    /// Runs one batch. Returns `false` when there was nothing to do (no new data, no watermark
    /// move, no timer due): the batch is skipped and takes no batch id.
    pub(crate) fn run_batch(&mut self, max: usize, job: &Job) -> Result<bool> {
        let trigger_start = Instant::now();
        weir_sdk::testing::fault::set_batch(self.batch_id);
        let replay = self.replay.take();
        let start_clock = self.clock.test_time();
        let mut logged_sources = Vec::new();
        let started_at = self.clock.now();
        let wall_start = Clock::Wall.now();
        let since_last = self.last_trigger.map(|t| t.elapsed().as_secs_f64());
        // latestOffset + getBatch: read the batch's slice of every source.
        let mut moved = false;
        let mut sources = Vec::new();
        let mut input_rows = 0u64;
        let mut ts_stats: TsStats = (Timestamp::MAX, Timestamp::MIN, 0, 0);
        self.deferred_stats = (Timestamp::MAX, Timestamp::MIN, 0, 0);
        for i in 0..self.nodes.len() {
            let Some(src) = self.nodes[i].source.as_mut() else { continue };
            // User code in sources runs with the step's metrics container bound.
            let container = MetricsContainerImpl::new();
            let name = self.plan.nodes[i].name.clone();
            let counts = replay
                .as_ref()
                .map(|r| r.sources.iter().find(|s| s.name == name).map(|s| s.counts.clone()).unwrap_or_default());
            let sb = {
                let _scope = weir_sdk::metrics::scoped_container(container.clone());
                src.next(self.partitions, max, counts.as_deref(), &mut self.clock, self.defer_reads[i])
            };
            if let (Ok(sb), Some(&pc)) = (&sb, self.plan.nodes[i].outputs.first()) {
                let ops = self.graph.pcollection(pc).ops.clone();
                // Planned reads are counted as the chain reads them.
                for b in sb.bundles.iter().flatten().filter(|b| !b.is::<DeferredRead>()) {
                    system_metrics::count_batch(&container, &*ops, b, true);
                }
            }
            self.metrics.record(Some(&self.plan.nodes[i].name), &container, sb.is_ok());
            let sb = sb?;
            moved |= sb.moved;
            input_rows += sb.rows as u64;
            add_stats(&mut ts_stats, sb.ts_stats);
            sources.push((i, sb.rows, sb.start_offset.clone(), sb.end_offset.clone()));
            logged_sources.push(SourceOffsets {
                name: self.plan.nodes[i].name.clone(),
                start: sb.start_offset.clone(),
                end: sb.end_offset.clone(),
                counts: sb.counts.clone(),
            });
            self.nodes[i].wm.advance(sb.watermark, None, None);
            self.route(i, 0, sb.bundles)?;
        }
        let read_ms = trigger_start.elapsed().as_millis() as u64;
        if replay.is_none() && !moved && !self.processing_timer_due() {
            return Ok(false);
        }
        // walCommit: the batch's offsets are logged before any of its data is processed.
        let wal_start = Instant::now();
        if let (Some(cp), None) = (&self.checkpoint, &replay) {
            let clock = self.clock.test_time();
            cp.write_offsets(&OffsetEntry { batch_id: self.batch_id, sources: logged_sources, start_clock, clock })?;
            weir_sdk::testing::fault::point("wal-commit");
        }
        let wal_ms = wal_start.elapsed().as_millis() as u64;
        self.last_trigger = Some(trigger_start);
        self.shared.active.store(true, std::sync::atomic::Ordering::SeqCst);
        // addBatch: every node in topological order.
        let add_start = Instant::now();
        // A failed batch is retried (up to --max-batch-retries) from the last committed state
        // with the same input: attempted metrics count every try, committed ones only the try
        // that committed.
        let saved_input = if self.mb.max_batch_retries > 0 { Some(self.clone_pending()) } else { None };
        let mut attempt = 0;
        let (stats, sink_rows, add_ms, commit_ms) = loop {
            let mut stats: Vec<NodeStats> = (0..self.nodes.len()).map(|_| NodeStats::default()).collect();
            let mut containers: Vec<(String, Arc<MetricsContainerImpl>)> = Vec::new();
            let mut sink_rows = 0i64;
            let result = (|| -> Result<()> {
                for i in 0..self.nodes.len() {
                    if self.nodes[i].source.is_some() || self.fused_follower[i] {
                        continue;
                    }
                    if job.is_cancelled() {
                        return Err(Error::Cancelled);
                    }
                    // A fused chain runs whole when its head's turn comes (its other members
                    // only consume what the chain before them produces).
                    let (out_rows, last) = match self.chain_at[i] {
                        Some(c) => {
                            let chain = self.chains[c].clone();
                            (self.run_chain(&chain, &mut stats, &mut containers)?, chain[chain.len() - 1])
                        }
                        None => (self.run_node(i, &mut stats[i], &mut containers)?, i),
                    };
                    if self.topology.is_leaf(last) {
                        sink_rows += out_rows as i64;
                    }
                }
                Ok(())
            })();
            let add_ms = add_start.elapsed().as_millis() as u64;
            weir_sdk::testing::fault::point("add-batch");
            // commit: state, sinks, commit log; then the batch's metrics count as committed.
            let commit_result = result.and_then(|_| self.commit());
            for (step, c) in &containers {
                self.metrics.record(Some(step), c, commit_result.is_ok());
            }
            match commit_result {
                Ok(commit_ms) => break (stats, sink_rows, add_ms, commit_ms),
                Err(e) if !matches!(e, Error::Cancelled) && attempt < self.mb.max_batch_retries => {
                    attempt += 1;
                    tracing::warn!(batch = self.batch_id, attempt, error = %e, "batch failed; retrying from the last commit");
                    self.roll_back(saved_input.as_ref())?;
                }
                Err(e) => {
                    self.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
                    return Err(e);
                }
            }
        };
        self.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
        if self.mb.max_batch_retries > 0 {
            self.save_retry_base()?;
        }
        add_stats(&mut ts_stats, self.deferred_stats);
        let progress = self.progress(ProgressInput {
            started_at: wall_start,
            since_last,
            input_rows,
            ts_stats,
            sources,
            stats,
            sink_rows,
            read_ms,
            wal_ms,
            add_ms,
            commit_ms,
            total_ms: trigger_start.elapsed().as_millis() as u64,
            event_clock: started_at,
        });
        self.state_loaded_from_files = false;
        {
            let mut recent = self.shared.recent.lock().unwrap_or_else(|e| e.into_inner());
            recent.push_back(progress.clone());
            while recent.len() > RECENT {
                recent.pop_front();
            }
        }
        for l in self.shared.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            l(&progress);
        }
        tracing::debug!(progress = %progress.json(), "batch committed");
        self.batch_id += 1;
        Ok(true)
    }

    /// Routes output bundles (one list per partition) of node `i`'s output `port` to its
    /// consumers: a main input through the consumer's exchange for that input, a side input to
    /// be broadcast to every partition.
    fn route(&mut self, i: usize, port: usize, per_partition: Vec<Vec<Batch>>) -> Result<()> {
        let Some(&pc) = self.plan.nodes[i].outputs.get(port) else { return Ok(()) };
        let ops = self.graph.pcollection(pc).ops.clone();
        let consumers = self.topology.consumers(pc).to_vec();
        if consumers.is_empty() {
            return Ok(());
        }
        let per_partition: Vec<Vec<Batch>> =
            per_partition.into_iter().map(|bs| bs.into_iter().filter(|b| bundle_len(&*ops, b) > 0).collect()).collect();
        let last = consumers.len() - 1;
        let mut owned = Some(per_partition);
        for (n, (c, slot)) in consumers.into_iter().enumerate() {
            let data = if n == last {
                owned.take().unwrap_or_default()
            } else {
                owned
                    .as_ref()
                    .map(|pp| pp.iter().map(|bs| bs.iter().map(|b| ops.clone_batch(b)).collect()).collect())
                    .unwrap_or_default()
            };
            match slot {
                Slot::Side(k) => {
                    for b in data.into_iter().flatten() {
                        self.nodes[c].side_pending.push((k, b));
                    }
                }
                Slot::Main(port) => {
                    let exchange = self.plan.nodes[c].exchanges[port].clone();
                    for (from, bundles) in data.into_iter().enumerate() {
                        if bundles.is_empty() {
                            continue;
                        }
                        for (q, part) in exchange.route(from, bundles, self.partitions)?.into_iter().enumerate() {
                            self.nodes[c].pending[q].extend(part);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Stages a sink node's pending input in its writer (written at commit).
    fn run_sink(&mut self, i: usize) -> Result<usize> {
        let upstream = self.upstream_watermark(i);
        let pending = self.take_pending(i);
        let node = &mut self.nodes[i];
        let mut rows = 0;
        if let Some(sink) = node.sink.as_mut() {
            for (p, bundles) in pending.into_iter().enumerate() {
                for b in bundles {
                    rows += sink.stage(p, b)?;
                }
            }
        }
        node.wm.advance(upstream, None, None);
        Ok(rows)
    }

    /// Commits the sinks' output of this batch under the batch id, so a replayed batch
    /// rewrites rather than duplicates it.
    fn commit_sinks(&mut self) -> Result<()> {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            let Some(sink) = self.nodes[i].sink.as_mut() else { continue };
            let container = MetricsContainerImpl::new();
            let result = {
                let _scope = weir_sdk::metrics::scoped_container(container.clone());
                sink.commit(self.batch_id)
            };
            self.metrics.record(Some(&spec.name), &container, result.is_ok());
            result?;
        }
        Ok(())
    }

    /// Runs node `i` for this batch on every partition in parallel. Returns the rows it output.
    fn run_node(
        &mut self,
        i: usize,
        stats: &mut NodeStats,
        containers: &mut Vec<(String, Arc<MetricsContainerImpl>)>,
    ) -> Result<usize> {
        if self.plan.nodes[i].is_sink() {
            return self.run_sink(i);
        }
        let spec = &self.plan.nodes[i];
        let name = spec.name.clone();
        let upstream = self.upstream_watermark(i);
        let side_wms = self.topology.side_watermarks(i, |p| self.nodes[p].wm.output());
        let in_ops = self.main_ops(i);
        let side_ops: Vec<_> = spec.side_inputs.iter().map(|&pc| self.graph.pcollection(pc).ops.clone()).collect();
        let n_outputs = spec.outputs.len();
        let now = self.clock.now();
        let pending = self.take_pending(i);
        let node = &mut self.nodes[i];
        let side_pending = std::mem::take(&mut node.side_pending);
        stats.input_rows = match &in_ops {
            Some(ops) => pending.iter().flatten().map(|b| ops.len(b) as u64).sum(),
            None => 0,
        };
        // Side-input data goes to every partition.
        let n_parts = node.ops.len();
        let mut sides_per_partition: Vec<Vec<(usize, Batch)>> = (0..n_parts).map(|_| Vec::new()).collect();
        for (k, b) in side_pending {
            let mut copies: Vec<Batch> = (1..n_parts).map(|_| side_ops[k].clone_batch(&b)).collect();
            copies.push(b);
            for (p, c) in copies.into_iter().enumerate() {
                sides_per_partition[p].push((k, c));
            }
        }
        let tasks: Vec<PartitionTask<'_>> = node
            .ops
            .iter_mut()
            .zip(pending)
            .zip(sides_per_partition)
            .map(|((op, bundles), sides)| PartitionTask {
                op: op.as_mut(),
                in_ops: in_ops.as_ref(),
                bundles,
                sides,
                side_wms: &side_wms,
            })
            .collect();
        let results = self.workers.run(tasks, |t| t.run(upstream, now, n_outputs));
        let mut outputs: Vec<Vec<Vec<Batch>>> = (0..n_outputs).map(|_| Vec::new()).collect();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(done) => {
                    stats.update_ms += done.update_ms;
                    stats.removal_ms += done.removal_ms;
                    stats.dropped += done.dropped;
                    stats.changes.updated += done.changes.updated;
                    stats.changes.removed += done.changes.removed;
                    containers.push((name.clone(), done.metrics));
                    for (port, bs) in done.outputs.into_iter().enumerate() {
                        outputs[port].push(bs);
                    }
                }
                Err((e, metrics)) => {
                    containers.push((name.clone(), metrics));
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let hold = self.nodes[i].ops.iter().filter_map(|o| o.hold()).min();
        self.nodes[i].wm.advance(upstream, None, hold);
        let system = MetricsContainerImpl::new();
        let wm = self.nodes[i].wm;
        system_metrics::watermarks(&system, wm.input(), wm.output(), now);
        let (rows, bytes) = self.nodes[i].measure_state();
        self.nodes[i].state_size = Some((rows, bytes));
        if rows > 0 || bytes > 0 {
            system_metrics::state(&system, rows as usize, bytes as usize, now);
        }
        let mut out_rows = 0;
        let grouping = self.plan.nodes[i].stateful;
        for (port, mut per_partition) in outputs.into_iter().enumerate() {
            if let Some(&pc) = self.plan.nodes[i].outputs.get(port) {
                let ops = self.graph.pcollection(pc).ops.clone();
                for b in per_partition.iter().flatten() {
                    out_rows += ops.len(b);
                    system_metrics::count_batch(&system, &*ops, b, true);
                }
                if grouping {
                    // What a stateful node fires (at the end of a bounded input: every window
                    // at once) goes on in bundles of groups, so what consumes it learns its
                    // fan-out on the first and sizes its output for the rest, and a chain
                    // after it reuses one bundle's buffers for the next.
                    per_partition = per_partition.into_iter().map(|bs| in_fired_bundles(&*ops, bs)).collect();
                }
            }
            self.route(i, port, per_partition)?;
        }
        containers.push((name, system));
        Ok(out_rows)
    }

    /// Runs a fused chain of element-wise nodes: per partition, each bundle of the head's input
    /// goes through every node of the chain before the next bundle, then every node's
    /// watermark moves in order. Metrics, element counts and stats are kept per node as
    /// [`Engine::run_node`] keeps them. Returns the rows the chain's last node output.
    fn run_chain(
        &mut self,
        chain: &[usize],
        stats: &mut [NodeStats],
        containers: &mut Vec<(String, Arc<MetricsContainerImpl>)>,
    ) -> Result<usize> {
        let (head, tail) = (chain[0], chain[chain.len() - 1]);
        // Element-wise nodes hold nothing back: every member's input watermark is the head's.
        let upstream = self.upstream_watermark(head);
        let now = self.clock.now();
        let names: Vec<String> = chain.iter().map(|&i| self.plan.nodes[i].name.clone()).collect();
        let in_ops: Vec<Arc<dyn CollectionOps>> =
            chain.iter().map(|&i| self.graph.pcollection(self.plan.nodes[i].inputs[0]).ops.clone()).collect();
        let out_ops: Vec<Vec<Arc<dyn CollectionOps>>> = chain
            .iter()
            .map(|&i| self.plan.nodes[i].outputs.iter().map(|&o| self.graph.pcollection(o).ops.clone()).collect())
            .collect();
        let pending = self.take_pending(head);
        let mut member_ops: Vec<Vec<Box<dyn Operator>>> =
            chain.iter().map(|&i| std::mem::take(&mut self.nodes[i].ops)).collect();
        let mut per_partition: Vec<Vec<&mut dyn Operator>> = (0..self.partitions).map(|_| Vec::new()).collect();
        for ops in member_ops.iter_mut() {
            for (p, op) in ops.iter_mut().enumerate() {
                per_partition[p].push(op.as_mut());
            }
        }
        let tasks: Vec<ChainTask<'_>> = per_partition
            .into_iter()
            .zip(pending)
            .map(|(ops, bundles)| ChainTask { ops, in_ops: &in_ops, out_ops: &out_ops, bundles })
            .collect();
        let results = self.workers.run(tasks, |t| t.run(upstream, now));
        for (&i, ops) in chain.iter().zip(member_ops) {
            self.nodes[i].ops = ops;
        }
        let mut outputs: Vec<Vec<Vec<Batch>>> = (0..out_ops[chain.len() - 1].len()).map(|_| Vec::new()).collect();
        let mut first_error = None;
        for (done, error) in results {
            containers.extend(done.sources);
            add_stats(&mut self.deferred_stats, done.read_stats);
            for (j, member) in done.members.into_iter().enumerate() {
                let st = &mut stats[chain[j]];
                st.input_rows += member.input_rows;
                st.update_ms += member.update.as_millis() as u64;
                st.removal_ms += member.removal.as_millis() as u64;
                st.dropped += member.dropped;
                containers.push((names[j].clone(), member.metrics));
            }
            for (port, bs) in done.outputs.into_iter().enumerate() {
                outputs[port].push(bs);
            }
            if let Some(e) = error {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for (j, &i) in chain.iter().enumerate() {
            let hold = self.nodes[i].ops.iter().filter_map(|o| o.hold()).min();
            self.nodes[i].wm.advance(upstream, None, hold);
            self.nodes[i].state_size = Some((0, 0));
            let system = MetricsContainerImpl::new();
            let wm = self.nodes[i].wm;
            system_metrics::watermarks(&system, wm.input(), wm.output(), now);
            containers.push((names[j].clone(), system));
        }
        let mut out_rows = 0;
        for (port, per_partition) in outputs.into_iter().enumerate() {
            out_rows += per_partition.iter().flatten().map(|b| out_ops[chain.len() - 1][port].len(b)).sum::<usize>();
            self.route(tail, port, per_partition)?;
        }
        Ok(out_rows)
    }

    fn progress(&self, p: ProgressInput) -> StreamingQueryProgress {
        let secs = (p.total_ms as f64 / 1000.0).max(1e-3);
        let since = p.since_last.unwrap_or(secs).max(1e-3);
        let (lo, hi, sum, n) = p.ts_stats;
        let event_time = EventTimeStats {
            min: (n > 0).then(|| iso8601(lo)),
            max: (n > 0).then(|| iso8601(hi)),
            avg: (n > 0).then(|| iso8601((sum / n as i128) as i64)),
            watermark: iso8601(self.query_watermark().min(MAX_TIMESTAMP)),
        };
        let mut state_operators = Vec::new();
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if !spec.stateful {
                continue;
            }
            let ops = &self.nodes[i].ops;
            let (total, memory_used_bytes) = self.nodes[i].state_size();
            let st = &p.stats[i];
            state_operators.push(StateOperatorProgress {
                operator_name: spec.name.clone(),
                num_rows_total: total,
                num_rows_updated: st.changes.updated,
                num_rows_removed: st.changes.removed,
                num_rows_dropped_by_watermark: st.dropped,
                all_updates_time_ms: st.update_ms,
                all_removals_time_ms: st.removal_ms,
                commit_time_ms: 0,
                memory_used_bytes,
                num_state_store_instances: ops.len() as u64,
                custom_metrics: {
                    let (snap, delta) = self.state_bytes.get(&i).copied().unwrap_or((0, 0));
                    // Each partition's state for this batch came from memory (a hit; a retried
                    // batch restores the copy kept in memory) or, after a restart, from the
                    // checkpoint's files (a miss).
                    let instances = ops.len() as u64;
                    let (hits, misses) = if self.state_loaded_from_files { (0, instances) } else { (instances, 0) };
                    BTreeMap::from([
                        ("snapshotBytes".to_string(), snap),
                        ("deltaBytes".to_string(), delta),
                        ("loadedMapCacheHitCount".to_string(), hits),
                        ("loadedMapCacheMissCount".to_string(), misses),
                    ])
                },
            });
        }
        let sources = p
            .sources
            .into_iter()
            .map(|(i, rows, start, end)| SourceProgress {
                description: self.plan.nodes[i].name.clone(),
                start_offset: start,
                end_offset: end,
                num_input_rows: rows as u64,
                input_rows_per_second: rows as f64 / since,
                processed_rows_per_second: rows as f64 / secs,
            })
            .collect();
        let leaves: Vec<String> = self
            .plan
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| !n.outputs.is_empty() && self.topology.is_leaf(*i))
            .map(|(_, n)| n.name.clone())
            .collect();
        let watermarks =
            self.plan.nodes.iter().zip(&self.nodes).map(|(s, n)| (s.name.clone(), iso8601(n.wm.output()))).collect();
        let _ = p.event_clock;
        StreamingQueryProgress {
            id: self.id.clone(),
            run_id: self.run_id.clone(),
            name: self.options.job_name.clone(),
            timestamp: iso8601(p.started_at),
            batch_id: self.batch_id,
            batch_duration: p.total_ms,
            num_input_rows: p.input_rows,
            input_rows_per_second: p.input_rows as f64 / since,
            processed_rows_per_second: p.input_rows as f64 / secs,
            duration_ms: DurationMs {
                latest_offset: p.read_ms,
                wal_commit: p.wal_ms,
                get_batch: 0,
                query_planning: 0,
                add_batch: p.add_ms,
                commit_offsets: p.commit_ms,
                trigger_execution: p.total_ms,
            },
            event_time,
            state_operators,
            sources,
            sink: SinkProgress { description: leaves.join(", "), num_output_rows: p.sink_rows },
            watermarks,
        }
    }

    /// The query's watermark: the minimum output watermark of its leaf nodes.
    fn query_watermark(&self) -> Timestamp {
        self.plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .enumerate()
            .filter(|(i, _)| self.topology.is_leaf(*i))
            .map(|(_, (_, n))| n.wm.output())
            .min()
            .unwrap_or(MAX_TIMESTAMP)
    }
}

struct ProgressInput {
    started_at: Timestamp,
    since_last: Option<f64>,
    input_rows: u64,
    ts_stats: TsStats,
    sources: Vec<(usize, usize, serde_json::Value, serde_json::Value)>,
    stats: Vec<NodeStats>,
    sink_rows: i64,
    read_ms: u64,
    wal_ms: u64,
    add_ms: u64,
    commit_ms: u64,
    total_ms: u64,
    event_clock: Timestamp,
}
