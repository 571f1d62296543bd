//! One worker's share of one plan node, run epoch by epoch: what arrived for the epoch (batches
//! per input slot, and every upstream worker's progress), the runner-core operator over it at
//! the input watermark that progress gives, then the output routed to the consumers' workers
//! with this worker's progress after it.

use crate::checkpoint::{MemberState, RestoredMember};
use crate::process::Process;
use crate::wire::{Address, Body, Envelope, Routed, WireBatch, WireSlot};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use weir_runner_core::checkpoint::log::NodeJournal;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::node::{Input, MemberStats, NodeShare, ShareOptions, Unit, UnitMetrics};
use weir_runner_core::operator::Journal;
use weir_runner_core::plan::topology::Slot;
use weir_runner_core::plan::Role;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::{Error, Result};

/// Where one node's outputs go: per consumer input, the edge (the node's output stream number)
/// it travels on.
#[derive(Clone)]
pub(crate) struct OutEdge {
    /// The node's output port.
    pub(crate) port: usize,
    /// The consumer node.
    pub(crate) consumer: usize,
    /// The consumer's input.
    pub(crate) slot: Slot,
}

/// The out edges of every node of the plan, in the order their streams are made.
pub(crate) fn out_edges(process: &Process) -> Vec<Vec<OutEdge>> {
    let plan = &process.plan;
    plan.nodes
        .iter()
        .map(|n| {
            n.outputs
                .iter()
                .enumerate()
                .flat_map(|(port, &pc)| {
                    process.shape.topology.consumers(pc).iter().map(move |&(consumer, slot)| OutEdge {
                        port,
                        consumer,
                        slot,
                    })
                })
                .collect()
        })
        .collect()
}

/// Routes node `i`'s output on `port` (batches made by worker `me`) to the workers of its
/// consumers: a main input through the consumer's exchange for it, a side input to every worker.
/// Records go to `out` as `(edge, (target, envelope))`.
pub(crate) fn route(
    process: &Process,
    i: usize,
    port: usize,
    batches: Vec<Batch>,
    me: usize,
    out: &mut Vec<(u64, Routed)>,
) -> Result<()> {
    let batches: Vec<Batch> = batches.into_iter().filter(|b| !b.is_empty()).collect();
    if batches.is_empty() {
        return Ok(());
    }
    let edges = &process.shape.edges[i];
    let on_port: Vec<usize> = (0..edges.len()).filter(|&e| edges[e].port == port).collect();
    let peers = process.place.peers;
    let mut owned = Some(batches);
    for (n, &e) in on_port.iter().enumerate() {
        let data = if n + 1 == on_port.len() {
            owned.take().unwrap_or_default()
        } else {
            owned.as_ref().map(|bs| bs.to_vec()).unwrap_or_default()
        };
        let edge = &edges[e];
        let consumer = &process.plan.nodes[edge.consumer];
        let (per_target, ops, slot): (Vec<Vec<Batch>>, Arc<dyn CollectionOps>, WireSlot) = match edge.slot {
            Slot::Main(p) => {
                let exchange = &consumer.exchanges[p];
                let ops = exchange
                    .delivered_ops()
                    .unwrap_or_else(|| process.graph.pcollection(process.plan.nodes[i].outputs[port]).ops.clone());
                let gathers = matches!(&consumer.role, Role::Sink(f) if f.gathers());
                let per_target = match exchange.exchanger() {
                    // A sink that hands its input to one callback gets all of it on worker 0.
                    _ if gathers => all_to(data, 0, peers),
                    None => all_to(data, me, peers),
                    Some(x) => x.exchange(data, peers)?,
                };
                (per_target, ops, edge.slot.into())
            }
            Slot::Side(_) => {
                let ops = process.graph.pcollection(process.plan.nodes[i].outputs[port]).ops.clone();
                let per_target = (0..peers).map(|_| data.to_vec()).collect();
                (per_target, ops, edge.slot.into())
            }
        };
        let to = Address { producer: i as u32, from: me as u32, slot };
        for (target, bs) in per_target.into_iter().enumerate() {
            for b in bs.into_iter().filter(|b| !b.is_empty()) {
                let wire = if process.is_local(target) {
                    WireBatch::Local(b, ops.clone())
                } else {
                    let bytes = ops
                        .encode_batch(&b)
                        .map_err(|e| Error::Coder { step: process.plan.nodes[i].name.clone(), source: e })?;
                    WireBatch::Encoded(bytes)
                };
                out.push((e as u64, (target as u32, Envelope { to, body: Body::Data(wire) })));
            }
        }
    }
    Ok(())
}

/// `data` for worker `target` alone, among `peers`.
fn all_to(data: Vec<Batch>, target: usize, peers: usize) -> Vec<Vec<Batch>> {
    let mut v: Vec<Vec<Batch>> = (0..peers).map(|_| Vec::new()).collect();
    v[target] = data;
    v
}

/// Node `i`'s progress after an epoch on worker `me`, to every worker of every consumer.
pub(crate) fn progress(
    process: &Process,
    i: usize,
    me: usize,
    watermark: Timestamp,
    clock: Option<Timestamp>,
    out: &mut Vec<(u64, Routed)>,
) {
    for (e, edge) in process.shape.edges[i].iter().enumerate() {
        let to = Address { producer: i as u32, from: me as u32, slot: edge.slot.into() };
        for target in 0..process.place.peers {
            out.push((e as u64, (target as u32, Envelope { to, body: Body::Progress { watermark, clock } })));
        }
    }
}

/// What a node did in an epoch not reported yet: what its head did, and how long its checkpoint
/// took to take, encode and write its state files, and their bytes.
#[derive(Default)]
struct EpochState {
    stats: MemberStats,
    commit_time: std::time::Duration,
    writes: weir_runner_core::progress::StateWrites,
}

/// One worker's share of a transform or sink node (or of a fused chain) across epochs: the
/// runner-core node runtime ([`NodeShare`]) fed by what arrives for each epoch.
pub(crate) struct NodeWorker {
    process: Arc<Process>,
    i: usize,
    me: usize,
    share: NodeShare,
    /// The last epoch it ran.
    last_epoch: Option<u64>,
    /// The last epoch in which it received or sent data.
    last_active: Option<u64>,
    /// Per producer node, what each of its workers last said its output watermark was.
    upstream: HashMap<u32, Vec<Timestamp>>,
    /// The latest processing-time clock a producer sent (TestStream's test clock).
    clock: Option<Timestamp>,
    /// Per main input port, the operations on the batches it delivers.
    main_ops: Vec<Arc<dyn CollectionOps>>,
    /// Per side input, the operations on its batches.
    side_ops: Vec<Arc<dyn CollectionOps>>,
    /// With a checkpoint: the worker's account of what its nodes wrote per epoch, for its
    /// manifests.
    pending: Option<Pending>,
    /// Per replayed epoch, the journals logged for the members' source-reading operators (by
    /// member node): the epoch repeats their reads.
    replays: HashMap<u64, Vec<(usize, Journal)>>,
    /// Per epoch not reported yet, what the node's head did in it and how long its checkpoint
    /// took to take, encode and write its state files.
    epochs: BTreeMap<u64, EpochState>,
}

/// Per epoch, the members a worker's nodes checkpointed, until the epoch's manifest is written.
pub(crate) type Pending = Rc<RefCell<BTreeMap<u64, Vec<MemberState>>>>;

impl NodeWorker {
    /// Worker `me`'s share of node `i`, or of the fused chain `chain` it heads.
    pub(crate) fn new(
        process: Arc<Process>,
        i: usize,
        me: usize,
        chain: Option<&[usize]>,
        pending: Option<Pending>,
    ) -> Self {
        let node = &process.plan.nodes[i];
        let options = ShareOptions {
            claims_per_call: Some(process.claims_per_call()),
            journal: process.checkpoint.is_some(),
            ..Default::default()
        };
        let mut share = NodeShare::new(&process.graph, &process.plan, i, chain, me, options);
        if share.members().iter().all(|&m| process.shape.inert[m]) {
            share.set_inert();
        }
        let main_ops = node
            .inputs
            .iter()
            .zip(&node.exchanges)
            .map(|(&pc, x)| x.delivered_ops().unwrap_or_else(|| process.graph.pcollection(pc).ops.clone()))
            .collect();
        let side_ops = node.side_inputs.iter().map(|&pc| process.graph.pcollection(pc).ops.clone()).collect();
        let mut upstream = HashMap::new();
        for &pc in node.inputs.iter().chain(&node.side_inputs) {
            let producer = process.shape.topology.producer(pc);
            // An inert producer never runs: its empty output is complete from the start.
            let at = if process.shape.inert[producer] { MAX_TIMESTAMP } else { MIN_TIMESTAMP };
            upstream.insert(producer as u32, vec![at; process.place.peers]);
        }
        NodeWorker {
            process,
            i,
            me,
            share,
            last_epoch: None,
            last_active: None,
            upstream,
            clock: None,
            main_ops,
            side_ops,
            pending,
            replays: HashMap::new(),
            epochs: BTreeMap::new(),
        }
    }

    /// Restores the members' state and watermarks from a checkpoint (taking them out of
    /// `members`): this worker's own, or, written by `written_by` workers of another run, this
    /// worker's key groups of all of theirs, at the lowest of their watermarks.
    pub(crate) fn restore(
        &mut self,
        members: &mut HashMap<String, Vec<RestoredMember>>,
        written_by: usize,
    ) -> Result<()> {
        let peers = self.process.place.peers;
        for (k, m) in self.share.members().to_vec().into_iter().enumerate() {
            let Some(mut old) = members.remove(&self.process.plan.nodes[m].name) else { continue };
            let input = old.iter().map(|r| r.input).min().unwrap_or(MIN_TIMESTAMP);
            let output = old.iter().map(|r| r.output).min().unwrap_or(MIN_TIMESTAMP);
            let Some(log) = self.process.checkpoint.as_ref() else { continue };
            let entries = if written_by == peers {
                old.pop().map(|r| log.entries(&r)).transpose()?.unwrap_or_default()
            } else {
                // This worker's keys of every old worker's state, one old worker at a time.
                self.share.rescaled(k, old.len(), (self.me, peers), |w, keep| log.entries_where(&old[w], keep))?
            };
            self.share.restore(k, entries, Some(Watermarks::restored(input, output)))?;
        }
        Ok(())
    }

    /// Takes the journals logged for the members in the epochs to replay.
    pub(crate) fn replay_journals(&mut self, journals: &mut HashMap<(u64, String), Journal>) {
        let members = self.share.members().to_vec();
        let names: Vec<String> = members.iter().map(|&m| self.process.plan.nodes[m].name.clone()).collect();
        let mine: Vec<(u64, String)> = journals.keys().filter(|(_, n)| names.contains(n)).cloned().collect();
        for key in mine {
            if let Some(j) = journals.remove(&key) {
                let m = members[names.iter().position(|n| *n == key.1).unwrap_or(0)];
                self.replays.entry(key.0).or_default().push((m, j));
            }
        }
    }

    /// Logs the journals of the epoch just run (a replay's were logged by the run it repeats).
    fn log_journals(&mut self, epoch: u64, replayed: bool) -> Result<()> {
        let journals = self.share.take_journals();
        let Some(log) = self.process.checkpoint.as_ref().filter(|_| !replayed && !journals.is_empty()) else {
            return Ok(());
        };
        let named: Vec<NodeJournal> = journals
            .into_iter()
            .map(|(m, journal)| NodeJournal { name: self.process.plan.nodes[m].name.clone(), journal })
            .collect();
        log.write_journals(epoch, self.me, self.i, &named)
    }

    /// Checkpoints every member after `epoch`: its state file (a snapshot or what changed)
    /// written now, and its watermarks and file kept for the worker's manifest of the epoch.
    fn checkpoint(&mut self, epoch: u64) -> Result<()> {
        let Some(pending) = self.pending.clone() else { return Ok(()) };
        let process = self.process.clone();
        let Some(log) = process.checkpoint.as_ref() else { return Ok(()) };
        let mut states = Vec::new();
        let mut commit_time = std::time::Duration::ZERO;
        for m in self.share.checkpoint(log.is_snapshot(epoch))? {
            let file = match m.file {
                Some((f, bytes)) => {
                    let began = std::time::Instant::now();
                    log.write_state_file(epoch, self.me, &f, bytes)?;
                    commit_time += m.encode_time + began.elapsed();
                    Some(f)
                }
                None => None,
            };
            let node = process.plan.nodes[m.node].name.clone();
            states.push(MemberState { node, input: m.watermarks.input(), output: m.watermarks.output(), file });
        }
        let e = self.epochs.entry(epoch).or_default();
        e.commit_time += commit_time;
        states.iter().filter_map(|m| m.file.as_ref()).for_each(|f| e.writes.wrote(f));
        pending.borrow_mut().entry(epoch).or_default().extend(states);
        Ok(())
    }

    /// The minimum watermark the workers of the producers of `inputs` last reported.
    fn watermark_of(&self, inputs: &[weir_sdk::graph::PCollectionId]) -> Timestamp {
        inputs
            .iter()
            .map(|&pc| {
                let p = self.process.shape.topology.producer(pc) as u32;
                self.upstream.get(&p).and_then(|ws| ws.iter().min().copied()).unwrap_or(MIN_TIMESTAMP)
            })
            .min()
            .unwrap_or(weir_sdk::time::MAX_TIMESTAMP)
    }

    /// Takes in what arrived for an epoch: producers' progress, and batches for the main and
    /// side inputs.
    fn receive(&mut self, envelopes: Vec<Envelope>) -> Result<Input> {
        let name = &self.process.plan.nodes[self.i].name;
        let mut main = Vec::new();
        let mut sides = Vec::new();
        for env in envelopes {
            match env.body {
                Body::Progress { watermark, clock } => {
                    if let Some(ws) = self.upstream.get_mut(&env.to.producer) {
                        let w = &mut ws[env.to.from as usize];
                        *w = (*w).max(watermark);
                    }
                    if let Some(c) = clock {
                        self.clock = Some(self.clock.map_or(c, |old| old.max(c)));
                    }
                }
                Body::Data(wire) => {
                    let ops = match env.to.slot {
                        WireSlot::Main(p) => &self.main_ops[p as usize],
                        WireSlot::Side(k) => &self.side_ops[k as usize],
                    };
                    let batch = wire.into_batch(&**ops).map_err(|e| {
                        Error::execution(name, format!("cannot decode a batch from worker {}: {e}", env.to.from))
                    })?;
                    match env.to.slot {
                        WireSlot::Main(_) => main.push(batch),
                        WireSlot::Side(k) => sides.push((k as usize, batch)),
                    }
                }
            }
        }
        Ok((main, sides))
    }

    /// Runs one epoch over what arrived for it, appending what goes downstream to `out`.
    pub(crate) fn run_epoch(
        &mut self,
        epoch: u64,
        envelopes: Vec<Envelope>,
        out: &mut Vec<(u64, Routed)>,
    ) -> Result<()> {
        self.last_epoch = Some(epoch);
        let (main, sides) = self.receive(envelopes)?;
        let mut active = main.iter().chain(sides.iter().map(|(_, b)| b)).any(|b| !b.is_empty());
        let process = self.process.clone();
        let node = &process.plan.nodes[self.i];
        let side_watermarks: Vec<Timestamp> = node.side_inputs.iter().map(|&pc| self.watermark_of(&[pc])).collect();
        let now = self.clock.unwrap_or_else(|| Clock::Wall.now());
        let unit = Unit {
            upstream: self.watermark_of(&node.inputs),
            side_watermarks: &side_watermarks,
            now,
            draining: process.drained.load(std::sync::atomic::Ordering::SeqCst),
        };
        let mut metrics = UnitMetrics::default();
        let replay = self.replays.remove(&epoch);
        for (m, j) in replay.iter().flatten() {
            self.share.replay_journal(*m, j);
        }
        let done = self.share.run(main, sides, &unit, &mut metrics);
        let done = done.and_then(|d| self.log_journals(epoch, replay.is_some()).map(|()| d));
        if done.is_ok() {
            NodeShare::gauges(&[&self.share], now, &mut metrics);
        }
        // An epoch's metrics count as committed as it runs: timely does not retry epochs.
        metrics.publish(&process.metrics, done.is_ok());
        let done = done?;
        if let Some(head) = done.members.first() {
            self.epochs.entry(epoch).or_default().stats.add(head);
        }
        active |= done.staged.iter().chain(done.outputs.iter().flatten()).any(|b| !b.is_empty());
        if active {
            self.last_active = Some(epoch);
        }
        if let Some(sink) = &process.sinks[self.i] {
            let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
            sink.ran(epoch);
            for b in done.staged {
                sink.stage(epoch, self.me, b);
            }
        }
        let tail = *self.share.members().last().unwrap_or(&self.i);
        for (port, batches) in done.outputs.into_iter().enumerate() {
            route(&process, tail, port, batches, self.me, out)?;
        }
        progress(&process, tail, self.me, self.share.output_watermark(), self.clock, out);
        // What the operators output belongs to this epoch (work waiting for its commit waits
        // for it), and the members are checkpointed.
        self.share.seal(epoch);
        self.checkpoint(epoch)
    }

    /// Every epoch before `epoch` is committed: the operators run the work that waited for it.
    pub(crate) fn committed_through(&mut self, epoch: u64) {
        self.share.on_committed_through(epoch);
    }

    /// The last epoch in which this worker's share of the node received or sent data.
    pub(crate) fn last_active(&self) -> Option<u64> {
        self.last_active
    }

    /// The plan node this is a share of (a chain's head).
    pub(crate) fn index(&self) -> usize {
        self.i
    }

    /// When this worker's share of the node next has work of its own (a splittable DoFn's
    /// pending restrictions, a processing-time timer), if it has any.
    pub(crate) fn next_work(&self) -> Option<Timestamp> {
        self.share.next_processing_timer()
    }

    /// The output watermark of this worker's share of the node (of a chain, its last member).
    pub(crate) fn output_watermark(&self) -> Timestamp {
        self.share.output_watermark()
    }

    /// The last epoch the node ran.
    pub(crate) fn last_epoch(&self) -> Option<u64> {
        self.last_epoch
    }

    /// A stateful node's state on this worker as `epoch` left it, and what the epoch did to
    /// it (taken: each epoch is reported once).
    pub(crate) fn operator_state(&mut self, epoch: u64) -> Option<crate::progress::OperatorState> {
        let EpochState { stats, commit_time, writes } = self.epochs.remove(&epoch).unwrap_or_default();
        // Epochs before it that were never reported (none are, in order) are dropped.
        self.epochs.retain(|&e, _| e > epoch);
        let node = &self.process.plan.nodes[self.i];
        if !node.stateful {
            return None;
        }
        let (rows, bytes) = self.share.state_size();
        Some(crate::progress::OperatorState {
            operator_name: node.name.clone(),
            num_rows_total: rows,
            memory_used_bytes: bytes,
            num_rows_updated: stats.changes.updated,
            num_rows_removed: stats.changes.removed,
            num_rows_dropped_by_watermark: stats.dropped,
            all_updates_time_ms: stats.update_ms,
            all_removals_time_ms: stats.removal_ms,
            commit_time_ms: weir_runner_core::progress::millis_rounded_up(commit_time),
            custom_metrics: {
                let mut custom = writes.custom_metrics();
                custom.extend(self.share.state_backend_metrics());
                custom
            },
        })
    }

    /// The output watermark of a leaf (a node, or a chain, whose output goes nowhere).
    pub(crate) fn leaf_watermark(&self) -> Option<Timestamp> {
        let tail = *self.share.members().last().unwrap_or(&self.i);
        self.process.shape.edges[tail].is_empty().then(|| self.share.output_watermark())
    }

    /// Keys and windows the node's operators hold, and their bytes.
    pub(crate) fn state(&self) -> (u64, u64) {
        self.share.state_size()
    }

    /// Ends the node's operators (closes what they hold open).
    pub(crate) fn finish(&mut self) {
        self.share.finish();
    }
}
