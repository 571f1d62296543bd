//! The node runtime: what one partition of one plan node, or of a fused chain of element-wise
//! nodes, does in a unit of work (a micro-batch, a timely epoch, a direct round), whichever
//! runner schedules it.
//!
//! A runner decides where a [`NodeShare`] lives (a worker thread, a timely worker of some
//! process) and when it runs (which input it is handed, at which upstream watermark and
//! processing time). The share does the rest:
//!
//! - side inputs first, then the main input (all bundles at once, or one at a time for the direct
//!   runner's strictness), then the watermark advance and what it fires;
//! - a fused chain's input (batches, or planned source reads carried out piece by piece) through
//!   every member before the next bundle;
//! - each member's watermarks (its output held at its operator's hold), and a stateful node's
//!   firings cut into bundles of groups;
//! - metrics: the user's, counted drops, elements and bytes in and out, gathered in a
//!   [`UnitMetrics`] the runner records as attempted, then committed once the unit commits;
//! - the hooks runners call at their boundaries (commit, seal, finish), and its state for a
//!   checkpoint (snapshots or deltas through each member's store version).
//!
//! A new operator hook is wired here once; no runner changes for it.

use crate::checkpoint::state_files::{StateFile, StoreVersion};
use crate::exec::chain::ChainTask;
use crate::exec::partition::{in_fired_bundles, PartitionTask};
use crate::exec::source::{SourceBatch, TsStats};
use crate::group_also_by_window::StateChanges;
use crate::metrics::{JobMetrics, MetricsContainerImpl};
use crate::operator::Operator;
use crate::plan::PhysicalPlan;
use crate::system_metrics;
use crate::watermark::Watermarks;
use std::sync::Arc;
use weir_sdk::batch::BatchKind;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP};
use weir_sdk::Result;

/// The metrics of one unit of work, per step, until the runner knows whether it committed.
#[derive(Default)]
pub struct UnitMetrics {
    steps: Vec<(String, Arc<MetricsContainerImpl>)>,
}

impl UnitMetrics {
    /// Records everything into the job's metrics: attempted always, committed if `committed`.
    pub fn publish(self, job: &JobMetrics, committed: bool) {
        for (step, c) in &self.steps {
            job.record(Some(step), c, committed);
        }
    }

    /// Adds another unit's metrics.
    pub fn append(&mut self, other: UnitMetrics) {
        self.steps.extend(other.steps);
    }

    fn push(&mut self, step: &str, c: Arc<MetricsContainerImpl>) {
        self.steps.push((step.to_string(), c));
    }

    /// Runs `f` (user code of step `step`: a source's reader, a sink's commit) with a container
    /// of its own bound on this thread, kept among this unit's metrics.
    pub fn measure<T>(&mut self, step: &str, f: impl FnOnce() -> T) -> T {
        let container = MetricsContainerImpl::new();
        let out = {
            let _scope = weir_sdk::metrics::scoped_container(container.clone());
            f()
        };
        self.push(step, container);
        out
    }

    /// A source's read for step `step` (`read` runs with the step's container bound), with the
    /// elements and bytes it delivered counted (a planned read's are counted as it is carried
    /// out).
    pub fn read(
        &mut self,
        step: &str,
        ops: &dyn CollectionOps,
        read: impl FnOnce() -> Result<SourceBatch>,
    ) -> Result<SourceBatch> {
        let container = MetricsContainerImpl::new();
        let out = {
            let _scope = weir_sdk::metrics::scoped_container(container.clone());
            read()
        };
        if let Ok(sb) = &out {
            for b in sb.bundles.iter().flatten().filter(|b| b.kind() != BatchKind::Planned) {
                system_metrics::count_batch(&container, ops, b, true);
            }
        }
        self.push(step, container);
        out
    }

    /// Step `step`'s state gauges: `rows` keys and windows in `bytes`, over every share of the
    /// node the runner measured.
    pub fn state(&mut self, step: &str, rows: u64, bytes: u64, now: Timestamp) {
        if rows > 0 || bytes > 0 {
            let c = MetricsContainerImpl::new();
            system_metrics::state(&c, rows as usize, bytes as usize, now);
            self.push(step, c);
        }
    }

    /// Publishes every stateful step's state store gauges from a committed batch's (epoch's)
    /// progress into the job's metrics ([`system_metrics::state_operator`]), so every sink has
    /// them.
    pub fn publish_state_operators(job: &JobMetrics, ops: &[crate::progress::StateOperatorProgress], now: Timestamp) {
        let mut unit = UnitMetrics::default();
        for op in ops {
            let c = MetricsContainerImpl::new();
            system_metrics::state_operator(&c, op, now);
            unit.push(&op.operator_name, c);
        }
        unit.publish(job, true);
    }

    /// Step `step`'s watermark gauges.
    pub fn watermarks(&mut self, step: &str, wm: Watermarks, now: Timestamp) {
        let c = MetricsContainerImpl::new();
        system_metrics::watermarks(&c, wm.input(), wm.output(), now);
        self.push(step, c);
    }
}

/// When a share runs: what its runner says about this unit of work.
pub struct Unit<'a> {
    /// The input watermark: the minimum output watermark of the producers of its main inputs.
    pub upstream: Timestamp,
    /// Each side input's watermark.
    pub side_watermarks: &'a [Timestamp],
    /// Processing time.
    pub now: Timestamp,
    /// Whether the job is being drained (its sources were read drained).
    pub draining: bool,
}

/// What one member of a share did in a unit of work.
#[derive(Default, Clone, Copy)]
pub struct MemberStats {
    /// Elements it was given.
    pub input_rows: u64,
    /// Time spent processing input, ms.
    pub update_ms: u64,
    /// Time spent moving its watermark, ms.
    pub removal_ms: u64,
    /// Elements dropped (late, or for closed windows).
    pub dropped: u64,
    /// State rows updated and removed.
    pub changes: StateChanges,
}

impl MemberStats {
    /// Adds what `other` did (another partition, or another run in the same batch or epoch).
    pub fn add(&mut self, other: &MemberStats) {
        self.input_rows += other.input_rows;
        self.update_ms += other.update_ms;
        self.removal_ms += other.removal_ms;
        self.dropped += other.dropped;
        self.changes.updated += other.changes.updated;
        self.changes.removed += other.changes.removed;
    }
}

/// What a share did in a unit of work.
pub struct Done {
    /// Per output of the share's last member, what it produced, for the runner to route.
    pub outputs: Vec<Vec<Batch>>,
    /// For a sink: its input, for the runner to stage in its writer.
    pub staged: Vec<Batch>,
    /// Per member, what it did.
    pub members: Vec<MemberStats>,
    /// Event-time stats of the planned source reads the share carried out.
    pub read_stats: TsStats,
    /// Elements the last member output.
    pub out_rows: usize,
    /// Whether anything happened: input, output, or a watermark moved.
    pub moved: bool,
}

/// A transform's input operations, output operations, and whether it is stateful.
type TransformIo<'a> = (Option<Arc<dyn CollectionOps>>, &'a [Arc<dyn CollectionOps>], bool);

/// A share's input for a unit of work: main-input bundles, and side-input bundles by side
/// input.
pub type Input = (Vec<Batch>, Vec<(usize, Batch)>);

/// State entries of an operator: encoded keys and values.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// What the share does.
enum Body {
    /// A transform's operator.
    Transform { in_ops: Option<Arc<dyn CollectionOps>>, out_ops: Vec<Arc<dyn CollectionOps>>, stateful: bool },
    /// A fused chain's operators, head first.
    Chain { in_ops: Arc<[Arc<dyn CollectionOps>]>, out_ops: Arc<[Vec<Arc<dyn CollectionOps>>]> },
    /// A sink: its input goes to the runner's writer.
    Sink,
}

/// A member's state for a checkpoint.
pub struct MemberCheckpoint {
    /// The plan node.
    pub node: usize,
    /// Its watermarks.
    pub watermarks: Watermarks,
    /// Its state file (a snapshot or a delta) and the file's bytes, if it wrote one.
    pub file: Option<(StateFile, Vec<u8>)>,
    /// How long taking its state and encoding the file took (writing it is the runner's).
    pub encode_time: std::time::Duration,
}

/// One partition of a node (or of a fused chain) across units of work.
pub struct NodeShare {
    /// The plan nodes it runs: one, or a chain's members, head first.
    members: Vec<usize>,
    names: Vec<String>,
    /// One operator per member; none for a sink.
    ops: Vec<Box<dyn Operator>>,
    wms: Vec<Watermarks>,
    stores: Vec<StoreVersion>,
    body: Body,
    /// The partition (or worker) this share is, among the node's shares.
    partition: usize,
    /// Main-input bundles are processed one at a time rather than together.
    one_at_a_time: bool,
}

/// How a runner builds its shares.
#[derive(Clone, Copy, Default)]
pub struct ShareOptions {
    /// Most positions a splittable DoFn claims per call (the runner's share of a batch).
    pub claims_per_call: Option<usize>,
    /// Process each main-input bundle on its own, as it arrived (the direct runner).
    pub one_at_a_time: bool,
    /// Split splittable DoFns at random claims, with this seed (the direct runner).
    pub split_randomly: Option<u64>,
    /// Source-reading operators keep a journal of each unit of work, which the runner takes
    /// after every unit ([`NodeShare::take_journals`]) to log it.
    pub journal: bool,
}

impl NodeShare {
    /// Partition `partition` of plan node `head`, or of the fused chain `chain` (head first)
    /// it heads. Sources have no share: runners read them.
    pub fn new(
        graph: &PipelineGraph,
        plan: &PhysicalPlan,
        head: usize,
        chain: Option<&[usize]>,
        partition: usize,
        o: ShareOptions,
    ) -> Self {
        let members = chain.map_or_else(|| vec![head], <[usize]>::to_vec);
        let nodes: Vec<_> = members.iter().map(|&m| &plan.nodes[m]).collect();
        let ops: Vec<Box<dyn Operator>> = nodes
            .iter()
            .filter_map(|n| {
                let mut op = n.instantiate(graph)?;
                if let Some(c) = o.claims_per_call {
                    op.limit_claims(c);
                }
                if let Some(seed) = o.split_randomly {
                    op.split_randomly(seed);
                }
                if o.journal {
                    op.keep_journal();
                }
                Some(op)
            })
            .collect();
        let out_ops = |n: &crate::plan::PhysicalNode| -> Vec<Arc<dyn CollectionOps>> {
            n.outputs.iter().map(|&pc| graph.pcollection(pc).ops.clone()).collect()
        };
        let body = if chain.is_some() {
            Body::Chain {
                in_ops: nodes.iter().map(|n| graph.pcollection(n.inputs[0]).ops.clone()).collect(),
                out_ops: nodes.iter().map(|n| out_ops(n)).collect(),
            }
        } else if nodes[0].is_sink() {
            Body::Sink
        } else {
            Body::Transform {
                in_ops: nodes[0].input_ops(graph),
                out_ops: out_ops(nodes[0]),
                stateful: nodes[0].stateful,
            }
        };
        NodeShare {
            names: nodes.iter().map(|n| n.name.clone()).collect(),
            wms: members.iter().map(|_| Watermarks::new()).collect(),
            stores: members.iter().map(|_| StoreVersion::default()).collect(),
            members,
            ops,
            body,
            partition,
            one_at_a_time: o.one_at_a_time,
        }
    }

    /// Marks the share as one that nothing ever reaches (a Flatten of no input, and what only
    /// such nodes feed): its empty output is complete from the start.
    pub fn set_inert(&mut self) {
        for wm in &mut self.wms {
            *wm = Watermarks::restored(MAX_TIMESTAMP, MAX_TIMESTAMP);
        }
    }

    /// The plan nodes it runs, head first.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Each member's watermarks.
    pub fn watermarks(&self) -> &[Watermarks] {
        &self.wms
    }

    /// The output watermark of the share (of a chain, its last member).
    pub fn output_watermark(&self) -> Timestamp {
        self.wms.last().map_or(MAX_TIMESTAMP, Watermarks::output)
    }

    /// Runs a unit of work over `main` (main-input bundles, or a chain's planned reads) and
    /// `sides` (side-input bundles by side input), gathering metrics in `metrics`.
    pub fn run(
        &mut self,
        main: Vec<Batch>,
        sides: Vec<(usize, Batch)>,
        unit: &Unit<'_>,
        metrics: &mut UnitMetrics,
    ) -> Result<Done> {
        match &self.body {
            Body::Sink => {
                let moved = !main.is_empty() | self.wms[0].advance(unit.upstream, None, None);
                let members = vec![MemberStats::default()];
                let none = (Timestamp::MAX, Timestamp::MIN, 0, 0);
                Ok(Done { outputs: Vec::new(), staged: main, members, read_stats: none, out_rows: 0, moved })
            }
            Body::Transform { in_ops, out_ops, stateful } => {
                let (in_ops, out_ops, stateful) = (in_ops.clone(), out_ops.clone(), *stateful);
                self.run_transform(main, sides, unit, metrics, (in_ops, &out_ops, stateful))
            }
            Body::Chain { in_ops, out_ops } => {
                let (in_ops, out_ops) = (in_ops.clone(), out_ops.clone());
                self.run_chain(main, unit, metrics, in_ops, out_ops)
            }
        }
    }

    fn run_transform(
        &mut self,
        main: Vec<Batch>,
        sides: Vec<(usize, Batch)>,
        unit: &Unit<'_>,
        metrics: &mut UnitMetrics,
        (in_ops, out_ops, stateful): TransformIo<'_>,
    ) -> Result<Done> {
        let Some(op) = self.ops.pop() else {
            return Err(weir_sdk::Error::execution(&self.names[0], "the node has no operator"));
        };
        let input_rows = if in_ops.is_some() { main.iter().map(|b| b.len() as u64).sum() } else { 0 };
        let had_input = !main.is_empty() || !sides.is_empty();
        let task = PartitionTask {
            op,
            in_ops,
            bundles: main,
            sides,
            side_wms: unit.side_watermarks.into(),
            draining: unit.draining,
            one_at_a_time: self.one_at_a_time,
        };
        let (op, done) = task.run(unit.upstream, unit.now, out_ops.len());
        self.ops.push(op);
        let done = match done {
            Ok(done) => done,
            Err((e, m)) => {
                metrics.push(&self.names[0], m);
                return Err(e);
            }
        };
        metrics.push(&self.names[0], done.metrics);
        let hold = self.ops[0].hold();
        let moved_wm = self.wms[0].advance(unit.upstream, None, hold);
        let system = MetricsContainerImpl::new();
        let mut out_rows = 0;
        let mut outputs = Vec::with_capacity(done.outputs.len());
        for (port, batches) in done.outputs.into_iter().enumerate() {
            if let Some(ops) = out_ops.get(port) {
                for b in &batches {
                    out_rows += b.len();
                    system_metrics::count_batch(&system, &**ops, b, true);
                }
            }
            // What a stateful node fires (at the end of a bounded input: every window at once)
            // goes on in bundles of groups, so what consumes it learns its fan-out on the first
            // and sizes its output for the rest, and a chain after it reuses one bundle's
            // buffers for the next.
            outputs.push(if stateful { in_fired_bundles(batches) } else { batches });
        }
        metrics.push(&self.names[0], system);
        let stats = MemberStats {
            input_rows,
            update_ms: done.update_ms,
            removal_ms: done.removal_ms,
            dropped: done.dropped,
            changes: done.changes,
        };
        Ok(Done {
            outputs,
            staged: Vec::new(),
            members: vec![stats],
            read_stats: (Timestamp::MAX, Timestamp::MIN, 0, 0),
            out_rows,
            moved: had_input || out_rows > 0 || moved_wm,
        })
    }

    fn run_chain(
        &mut self,
        main: Vec<Batch>,
        unit: &Unit<'_>,
        metrics: &mut UnitMetrics,
        in_ops: Arc<[Arc<dyn CollectionOps>]>,
        out_ops: Arc<[Vec<Arc<dyn CollectionOps>>]>,
    ) -> Result<Done> {
        let had_input = !main.is_empty();
        let task = ChainTask { ops: std::mem::take(&mut self.ops), in_ops, out_ops, bundles: main };
        let (ops, done, error) = task.run(unit.upstream, unit.now);
        self.ops = ops;
        for (step, c) in done.sources {
            metrics.push(&step, c);
        }
        let mut members = Vec::with_capacity(done.members.len());
        for (name, m) in self.names.iter().zip(done.members) {
            metrics.push(name, m.metrics);
            members.push(MemberStats {
                input_rows: m.input_rows,
                update_ms: m.update.as_millis() as u64,
                removal_ms: m.removal.as_millis() as u64,
                dropped: m.dropped,
                changes: StateChanges::default(),
            });
        }
        if let Some(e) = error {
            return Err(e);
        }
        // Element-wise members hold nothing back: every member's input watermark is the head's.
        let mut moved = had_input;
        for (wm, op) in self.wms.iter_mut().zip(&self.ops) {
            moved |= wm.advance(unit.upstream, None, op.hold());
        }
        let out_rows = done.outputs.iter().flatten().map(Batch::len).sum::<usize>();
        Ok(Done {
            outputs: done.outputs,
            staged: Vec::new(),
            members,
            read_stats: done.read_stats,
            out_rows,
            moved: moved || out_rows > 0,
        })
    }

    /// The watermark gauges of every member, and the state gauges of a single node, over
    /// `shares` (every share of one node the runner measures together), into `metrics`.
    pub fn gauges(shares: &[&NodeShare], now: Timestamp, metrics: &mut UnitMetrics) {
        let Some(first) = shares.first() else { return };
        for (k, name) in first.names.iter().enumerate() {
            let mut wm = first.wms[k];
            for s in &shares[1..] {
                wm = Watermarks::restored(wm.input().min(s.wms[k].input()), wm.output().min(s.wms[k].output()));
            }
            metrics.watermarks(name, wm, now);
        }
        if let Body::Transform { .. } = first.body {
            let (rows, bytes) = shares.iter().fold((0, 0), |(r, b), s| {
                let (sr, sb) = s.state_size();
                (r + sr, b + sb)
            });
            metrics.state(&first.names[0], rows, bytes, now);
        }
    }

    /// Keys and windows the share's operators hold, and their bytes.
    pub fn state_size(&self) -> (u64, u64) {
        self.ops.iter().fold((0, 0), |(r, b), o| (r + o.state_rows() as u64, b + o.state_bytes() as u64))
    }

    /// The state backend's figures of the share's operators, summed by name.
    pub fn state_backend_metrics(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for (name, v) in self.ops.iter().flat_map(|o| o.state_backend_metrics()) {
            *out.entry(name.to_string()).or_default() += v;
        }
        out
    }

    /// The earliest output the share's operators may still produce.
    pub fn hold(&self) -> Option<Timestamp> {
        self.ops.iter().filter_map(|o| o.hold()).min()
    }

    /// When the share next has work of its own (a splittable DoFn's pending restrictions, a
    /// processing-time timer), if it has any.
    pub fn next_processing_timer(&self) -> Option<Timestamp> {
        self.ops.iter().filter_map(|o| o.next_processing_timer()).min()
    }

    /// The runner has committed everything the share output so far.
    pub fn on_committed(&mut self) {
        self.ops.iter_mut().for_each(|op| op.on_committed());
    }

    /// What the share output so far belongs to `epoch` (runners whose units overlap).
    pub fn seal(&mut self, epoch: u64) {
        self.ops.iter_mut().for_each(|op| op.seal(epoch));
    }

    /// Every epoch before `epoch` is committed.
    pub fn on_committed_through(&mut self, epoch: u64) {
        self.ops.iter_mut().for_each(|op| op.on_committed_through(epoch));
    }

    /// Ends the share's operators (closes what they hold open).
    pub fn finish(&mut self) {
        self.ops.iter_mut().for_each(|op| op.finish());
    }

    /// Every member's state after a unit of work: a state file (a full snapshot when
    /// `snapshot`, otherwise what changed since the last), and its watermarks.
    pub fn checkpoint(&mut self, snapshot: bool) -> Result<Vec<MemberCheckpoint>> {
        let mut out = Vec::with_capacity(self.members.len());
        for k in 0..self.members.len() {
            let began = std::time::Instant::now();
            let (name, partition) = (&self.names[k], self.partition);
            let file = match self.ops.get_mut(k) {
                // An operator that tracks its changes writes only those between snapshots.
                Some(op) => match (snapshot, op.take_changed_entries()?) {
                    (false, Some(changed)) => {
                        let file = self.stores[k].commit_changes(name, partition, changed)?;
                        #[cfg(debug_assertions)]
                        self.stores[k].check_changes(name, op.state_entries()?);
                        file
                    }
                    _ => self.stores[k].commit(name, partition, op.state_entries()?, snapshot)?,
                },
                None => None,
            };
            let encode_time = began.elapsed();
            out.push(MemberCheckpoint { node: self.members[k], watermarks: self.wms[k], file, encode_time });
        }
        Ok(out)
    }

    /// Every member's journal of the unit of work just run ([`Operator::take_journal`]), by
    /// plan node.
    pub fn take_journals(&mut self) -> Vec<(usize, crate::checkpoint::log::Journal)> {
        let members = &self.members;
        self.ops.iter_mut().enumerate().filter_map(|(k, op)| Some((members[k], op.take_journal()?))).collect()
    }

    /// Makes plan node `node`'s operator (if the share runs it) repeat `journal` in the next
    /// unit of work.
    pub fn replay_journal(&mut self, node: usize, journal: &crate::checkpoint::log::Journal) {
        if let Some(k) = self.members.iter().position(|&m| m == node) {
            if let Some(op) = self.ops.get_mut(k) {
                op.replay_journal(journal);
            }
        }
    }

    /// Every member's state entries now (for a retry from the last commit).
    pub fn entries(&self) -> Result<Vec<Entries>> {
        (0..self.members.len()).map(|k| self.op_of(k).map_or(Ok(Vec::new()), |op| op.state_entries())).collect()
    }

    /// Restores member `k`'s state entries, and its watermarks if given.
    pub fn restore(
        &mut self,
        k: usize,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        watermarks: Option<Watermarks>,
    ) -> Result<()> {
        if let Some(wm) = watermarks {
            self.wms[k] = wm;
        }
        let Some(op) = self.ops.get_mut(k) else {
            self.stores[k] = StoreVersion::from_entries(&entries);
            return Ok(());
        };
        // An operator reporting its changes from the restore on is never diffed: keeping a hash
        // of every restored entry would cost memory in proportion to the whole state.
        let store = match op.restore_keeps_changes() {
            true => StoreVersion::restored_tracked(&entries),
            false => StoreVersion::from_entries(&entries),
        };
        op.restore_entries(entries)?;
        self.stores[k] = store;
        Ok(())
    }

    /// Member `k`'s state entries as `old.len()` partitions wrote them, spread over `n` (a
    /// restart at another parallelism); an error names the step when its state cannot move.
    pub fn rescale(&self, k: usize, old: Vec<Entries>, n: usize) -> Result<Vec<Entries>> {
        let from = old.len();
        match self.op_of(k) {
            Some(op) => op.rescale(old, n).map_err(|e| {
                weir_sdk::Error::NotSupported(format!(
                    "the checkpoint was written by {from} partitions, and step {}'s state cannot be spread over \
                     {n}: {e}",
                    self.names[k]
                ))
            }),
            None => Ok((0..n).map(|_| Vec::new()).collect()),
        }
    }

    /// Member `k`'s state for new partition `p` of `n`, from what `from` old partitions wrote:
    /// `read(q, keep)` reads old partition `q`'s entries whose keys `keep` accepts, and only
    /// the entries partition `p` gets, or that the operator places by what they hold, are kept
    /// ([`crate::operator::Operator::rescale_partition`]). A restart at another parallelism so
    /// holds one new partition's state at a time, not all of the step's.
    pub fn rescaled(
        &self,
        k: usize,
        from: usize,
        (p, n): (usize, usize),
        mut read: impl FnMut(usize, &mut crate::checkpoint::state_files::Keep<'_>) -> Result<Entries>,
    ) -> Result<Entries> {
        let Some(op) = self.op_of(k) else { return Ok(Vec::new()) };
        let mut keep = |entry: &[u8]| Ok(op.rescale_partition(entry, n)?.is_none_or(|to| to == p));
        let old = (0..from).map(|q| read(q, &mut keep)).collect::<Result<Vec<_>>>()?;
        Ok(self.rescale(k, old, n)?.into_iter().nth(p).unwrap_or_default())
    }

    /// Sets member `k`'s watermarks (restored from a checkpoint, or rolled back).
    pub fn set_watermarks(&mut self, k: usize, wm: Watermarks) {
        self.wms[k] = wm;
    }

    /// Member `k`'s operator (a sink has none).
    fn op_of(&self, k: usize) -> Option<&dyn Operator> {
        self.ops.get(k).map(|o| &**o)
    }
}
