//! One batch as a dataflow over the partitions: each worker thread goes through the whole plan,
//! node after node in topological order, claims the node's partitions one at a time until none
//! is left, and pushes what each outputs straight to its consumers' partitions through their
//! exchanges, as a timely worker does. No node's output returns to the engine thread. With more
//! partitions than threads, a partition heavier than the others in a batch keeps one thread
//! while the others take the rest.
//!
//! A node's partition runs once every partition of every producer of its inputs has delivered
//! this batch's output to it (and said so, even when it had nothing), so it sees its whole
//! input at once and its input watermark is the minimum of its producers' output watermarks
//! after this batch. What arrives is ordered by producer node and partition before it runs, so
//! a batch's results do not depend on which thread got there first.
//!
//! If a partition fails (an error, a panic), every partition waiting on another stops, and the
//! batch fails with the first error; the engine retries it from the last commit or fails the
//! query.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use weir_runner_core::checkpoint::state_files::StateFile;
use weir_runner_core::exec::node::{Input, MemberStats, NodeShare, Unit, UnitMetrics};
use weir_runner_core::exec::sink::SinkWriter;
use weir_runner_core::exec::source::{add_stats, TsStats};
use weir_runner_core::plan::topology::{Slot, Topology};
use weir_runner_core::plan::PhysicalPlan;
use weir_sdk::kernel::Batch;
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// One partition's share of every node that has one (a node, or a fused chain at its head).
pub(super) type Partition = Vec<Option<NodeShare>>;

/// What producer a piece of input came from: its node and partition (the order it is taken in).
type From = (usize, usize);

/// What arrived for one partition of one node in this batch.
#[derive(Default)]
struct Inbox {
    main: Vec<(From, Batch)>,
    sides: Vec<(From, usize, Batch)>,
    /// Producer partitions still to deliver.
    remaining: usize,
}

/// A node's partition's inbox, and the signal that it is complete.
#[derive(Default)]
struct Mailbox {
    inbox: Mutex<Inbox>,
    complete: Condvar,
}

/// The sinks' writers, which every partition stages into.
pub(super) type Sinks = Arc<Vec<Option<Mutex<Box<dyn SinkWriter>>>>>;

/// What the partitions of one batch share.
pub(super) struct BatchFlow {
    plan: Arc<PhysicalPlan>,
    topology: Arc<Topology>,
    partitions: usize,
    /// Per node and partition.
    mail: Vec<Vec<Mailbox>>,
    /// Per node and partition: its output watermark after this batch (a source's as read).
    out_wms: Vec<Vec<AtomicI64>>,
    sinks: Sinks,
    now: Timestamp,
    draining: bool,
    failed: AtomicBool,
    /// With a checkpoint, whether its commit writes full snapshots (`Some(true)`) or deltas:
    /// each partition takes and encodes its state right after it runs, while it is still in
    /// the processor's caches, on the thread that ran it.
    checkpoint: Option<bool>,
}

/// A member's state file, taken and encoded after its partition ran: its node, the file and its
/// bytes, and the time taking and encoding it took.
pub(super) type EncodedState = (usize, (StateFile, Vec<u8>), std::time::Duration);

/// What the partitions one thread ran did in a batch.
pub(super) struct PartitionOutcome {
    pub(super) metrics: UnitMetrics,
    /// Per plan node, what its member did here.
    pub(super) stats: Vec<(usize, MemberStats)>,
    /// Event-time stats of the planned reads carried out here.
    pub(super) read_stats: TsStats,
    /// Rows that reached the plan's leaves here.
    pub(super) sink_rows: i64,
    /// The thread's partitions' own error; `None` when they succeeded or stopped for another's.
    pub(super) error: Option<Error>,
    /// The state files of the partitions it ran, with a checkpoint.
    pub(super) state: Vec<EncodedState>,
}

impl BatchFlow {
    /// A batch over `partitions` partitions, with every node's output watermark as it stands
    /// (`wms`: what the sources read; the others' before the batch), each node's partitions
    /// waiting for `deliveries` (see [`deliveries`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        plan: Arc<PhysicalPlan>,
        topology: Arc<Topology>,
        partitions: usize,
        deliveries: &[usize],
        wms: &[Timestamp],
        sinks: Sinks,
        now: Timestamp,
        draining: bool,
    ) -> Self {
        let mail = deliveries
            .iter()
            .map(|&expected| {
                (0..partitions)
                    .map(|_| Mailbox {
                        inbox: Mutex::new(Inbox { remaining: expected, ..Default::default() }),
                        complete: Condvar::new(),
                    })
                    .collect()
            })
            .collect();
        let out_wms = wms.iter().map(|&w| (0..partitions).map(|_| AtomicI64::new(w)).collect()).collect();
        let failed = AtomicBool::new(false);
        BatchFlow { plan, topology, partitions, mail, out_wms, sinks, now, draining, failed, checkpoint: None }
    }

    /// The batch with a checkpoint whose commit writes full snapshots when `snapshot`, else
    /// deltas ([`BatchFlow::checkpoint`]).
    pub(super) fn checkpointed(mut self, snapshot: bool) -> Self {
        self.checkpoint = Some(snapshot);
        self
    }

    /// Delivers input the engine read (the sources' slices) to node `c`'s partition `q`, ahead
    /// of what the batch's nodes deliver.
    pub(super) fn deliver_read(&self, c: usize, q: usize, main: Vec<Batch>, sides: Vec<(usize, Batch)>) {
        let mut inbox = self.mail[c][q].inbox.lock().unwrap_or_else(|e| e.into_inner());
        inbox.main.extend(main.into_iter().map(|b| ((0, 0), b)));
        inbox.sides.extend(sides.into_iter().map(|(k, b)| ((0, 0), k, b)));
    }

    /// Stops every partition waiting on another: the batch failed.
    fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        for m in self.mail.iter().flatten() {
            let _guard = m.inbox.lock().unwrap_or_else(|e| e.into_inner());
            m.complete.notify_all();
        }
    }

    /// Waits until every producer has delivered to node `i`'s partition `p`, and takes what
    /// they delivered, in producer order; `None` if the batch failed meanwhile.
    fn take_input(&self, i: usize, p: usize) -> Option<Input> {
        let m = &self.mail[i][p];
        let mut inbox = m.inbox.lock().unwrap_or_else(|e| e.into_inner());
        while inbox.remaining > 0 && !self.failed.load(Ordering::SeqCst) {
            inbox = m.complete.wait(inbox).unwrap_or_else(|e| e.into_inner());
        }
        if inbox.remaining > 0 {
            return None;
        }
        let mut main = std::mem::take(&mut inbox.main);
        let mut sides = std::mem::take(&mut inbox.sides);
        // Stable: one producer's pieces keep their order.
        main.sort_by_key(|(from, _)| *from);
        sides.sort_by_key(|(from, _, _)| *from);
        Some((main.into_iter().map(|(_, b)| b).collect(), sides.into_iter().map(|(_, k, b)| (k, b)).collect()))
    }

    /// The minimum over node `p`'s partitions of their output watermarks.
    fn output_of(&self, p: usize) -> Timestamp {
        self.out_wms[p].iter().map(|w| w.load(Ordering::SeqCst)).min().unwrap_or(Timestamp::MAX)
    }

    /// Node `tail`'s partition `p` output `batches` on `port`: each consumer's share goes to
    /// its partitions, a main input through the consumer's exchange, a side input to all.
    fn route(&self, tail: usize, p: usize, port: usize, batches: Vec<Batch>) -> Result<()> {
        let Some(&pc) = self.plan.nodes[tail].outputs.get(port) else { return Ok(()) };
        let batches: Vec<Batch> = batches.into_iter().filter(|b| !b.is_empty()).collect();
        let consumers = self.topology.consumers(pc);
        if batches.is_empty() || consumers.is_empty() {
            return Ok(());
        }
        let mut owned = Some(batches);
        for (n, &(c, slot)) in consumers.iter().enumerate() {
            let data = if n + 1 == consumers.len() {
                owned.take().unwrap_or_default()
            } else {
                owned.as_ref().map(|bs| bs.to_vec()).unwrap_or_default()
            };
            match slot {
                Slot::Main(k) => {
                    let per_target = match self.plan.nodes[c].exchanges[k].exchanger() {
                        None => {
                            let mut v: Vec<Vec<Batch>> = (0..self.partitions).map(|_| Vec::new()).collect();
                            v[p % self.partitions] = data;
                            v
                        }
                        Some(x) => x.exchange(data, self.partitions)?,
                    };
                    for (q, bs) in per_target.into_iter().enumerate().filter(|(_, bs)| !bs.is_empty()) {
                        let mut inbox = self.mail[c][q].inbox.lock().unwrap_or_else(|e| e.into_inner());
                        inbox.main.extend(bs.into_iter().map(|b| ((tail, p), b)));
                    }
                }
                Slot::Side(k) => {
                    for q in 0..self.partitions {
                        let mut inbox = self.mail[c][q].inbox.lock().unwrap_or_else(|e| e.into_inner());
                        inbox.sides.extend(data.iter().map(|b| ((tail, p), k, b.clone())));
                    }
                }
            }
        }
        Ok(())
    }

    /// Node `tail`'s partition `p` has delivered everything it will this batch: every consumer
    /// partition counts it.
    fn delivered(&self, tail: usize) {
        for &pc in &self.plan.nodes[tail].outputs {
            for &(c, _) in self.topology.consumers(pc) {
                for m in &self.mail[c] {
                    let mut inbox = m.inbox.lock().unwrap_or_else(|e| e.into_inner());
                    inbox.remaining = inbox.remaining.saturating_sub(1);
                    if inbox.remaining == 0 {
                        m.complete.notify_all();
                    }
                }
            }
        }
    }
}

/// Per node, how many deliveries a partition of it waits for in a batch: one from each
/// partition of each producer of its inputs that runs in the batch (every producer but a
/// source, whose data the engine delivers first). The plan's, so computed once.
pub(super) fn deliveries(plan: &PhysicalPlan, topology: &Topology, partitions: usize) -> Vec<usize> {
    plan.nodes
        .iter()
        .map(|node| {
            let producers = node.inputs.iter().chain(&node.side_inputs).map(|&pc| topology.producer(pc));
            producers.filter(|&p| !plan.nodes[p].is_source()).count() * partitions
        })
        .collect()
}

/// Marks the batch failed if the partition's thread unwinds, so that no other waits for it.
struct FailOnPanic<'a>(&'a BatchFlow);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail();
        }
    }
}

/// Every partition's shares, each behind its own lock, for the threads of a batch to claim
/// node by node: a thread runs one node's partitions as they come, rather than a fixed group
/// of them, so that a partition heavier than the others in a batch (a hot key) is balanced by
/// the others going to the other threads.
pub(super) struct Shares {
    /// Per partition, per node.
    shares: Vec<Vec<Mutex<Option<NodeShare>>>>,
    /// Per node: the next of its partitions to claim.
    next: Vec<AtomicUsize>,
}

impl Shares {
    pub(super) fn new(parts: Vec<Partition>) -> Self {
        let nodes = parts.first().map_or(0, Vec::len);
        let shares = parts.into_iter().map(|part| part.into_iter().map(Mutex::new).collect()).collect();
        Shares { shares, next: (0..nodes).map(|_| Default::default()).collect() }
    }

    /// The partitions back, as the batch left them (once every thread is done with them).
    pub(super) fn take_parts(&self) -> Vec<Partition> {
        let take = |m: &Mutex<Option<NodeShare>>| m.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.shares.iter().map(|part| part.iter().map(take).collect()).collect()
    }
}

/// One thread's work in a batch: for every node in turn, claims its partitions one at a time
/// and runs each once its input is complete, until none is left to claim. Every partition of a
/// node is claimed before any thread moves past it, and a node's input comes from nodes before
/// it, so a claimed partition's input always arrives.
pub(super) fn run_partitions(flow: &BatchFlow, shares: &Shares) -> PartitionOutcome {
    let _guard = FailOnPanic(flow);
    let mut out = PartitionOutcome {
        metrics: UnitMetrics::default(),
        stats: Vec::new(),
        read_stats: (Timestamp::MAX, Timestamp::MIN, 0, 0),
        sink_rows: 0,
        error: None,
        state: Vec::new(),
    };
    'nodes: for (i, next) in shares.next.iter().enumerate() {
        loop {
            let p = next.fetch_add(1, Ordering::SeqCst);
            let Some(part) = shares.shares.get(p) else { break };
            let mut share = part[i].lock().unwrap_or_else(|e| e.into_inner());
            let Some(share) = share.as_mut() else { continue };
            if let Err(e) = run_node(flow, p, i, share, &mut out) {
                if !matches!(e, Error::Cancelled) || !flow.failed.load(Ordering::SeqCst) {
                    out.error = Some(e);
                }
                flow.fail();
                break 'nodes;
            }
        }
    }
    out
}

/// Runs node `i`'s share on partition `p` once its input is complete, and delivers its output.
fn run_node(flow: &BatchFlow, p: usize, i: usize, share: &mut NodeShare, out: &mut PartitionOutcome) -> Result<()> {
    let Some((main, sides)) = flow.take_input(i, p) else { return Err(Error::Cancelled) };
    let topology = &flow.topology;
    let side_watermarks = topology.side_watermarks(i, |n| flow.output_of(n));
    let unit = Unit {
        upstream: topology.upstream_watermark(i, |n| flow.output_of(n)),
        side_watermarks: &side_watermarks,
        now: flow.now,
        draining: flow.draining,
    };
    let done = share.run(main, sides, &unit, &mut out.metrics)?;
    let members = share.members();
    let tail = *members.last().unwrap_or(&i);
    for (&m, stats) in members.iter().zip(&done.members) {
        out.stats.push((m, *stats));
    }
    add_stats(&mut out.read_stats, done.read_stats);
    if !done.staged.is_empty() {
        if let Some(sink) = flow.sinks[i].as_ref() {
            let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
            for b in done.staged {
                out.sink_rows += sink.stage(p, b)? as i64;
            }
        }
    } else if topology.is_leaf(tail) {
        out.sink_rows += done.out_rows as i64;
    }
    for (&m, wm) in members.iter().zip(share.watermarks()) {
        flow.out_wms[m][p].store(wm.output(), Ordering::SeqCst);
    }
    for (port, batches) in done.outputs.into_iter().enumerate() {
        flow.route(tail, p, port, batches)?;
    }
    flow.delivered(tail);
    // The consumers have their input; now the state this run left, while it is still hot.
    if let Some(snapshot) = flow.checkpoint {
        for m in share.checkpoint(snapshot)? {
            if let Some(file) = m.file {
                out.state.push((m.node, file, m.encode_time));
            }
        }
    }
    Ok(())
}
