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
use weir_runner_core::checkpoint::state_files::StoreVersion;
use weir_runner_core::exec::chain::ChainTask;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::partition::{in_fired_bundles, PartitionTask};
use weir_runner_core::exec::topology::Slot;
use weir_runner_core::metrics::MetricsContainerImpl;
use weir_runner_core::operator::Operator;
use weir_runner_core::plan::Role;
use weir_runner_core::system_metrics;
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
                    process.topology.consumers(pc).iter().map(move |&(consumer, slot)| OutEdge { port, consumer, slot })
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
    let edges = &process.edges[i];
    let on_port: Vec<usize> = (0..edges.len()).filter(|&e| edges[e].port == port).collect();
    let peers = process.peers;
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
    for (e, edge) in process.edges[i].iter().enumerate() {
        let to = Address { producer: i as u32, from: me as u32, slot: edge.slot.into() };
        for target in 0..process.peers {
            out.push((e as u64, (target as u32, Envelope { to, body: Body::Progress { watermark, clock } })));
        }
    }
}

/// A fused chain of element-wise nodes run as one ([`PhysicalPlan::fused_chains`]): each of
/// the head's bundles runs through every member before the next.
///
/// [`PhysicalPlan::fused_chains`]: weir_runner_core::plan::PhysicalPlan::fused_chains
struct Chain {
    /// The members, head first.
    members: Vec<usize>,
    /// Their operators, handed to a [`ChainTask`] each epoch and back.
    ops: Vec<Box<dyn Operator>>,
    /// Their watermarks (the last is the chain's output watermark).
    wms: Vec<Watermarks>,
    in_ops: Arc<[Arc<dyn CollectionOps>]>,
    out_ops: Arc<[Vec<Arc<dyn CollectionOps>>]>,
}

/// One worker's share of a transform or sink node (or of a fused chain) across epochs.
pub(crate) struct NodeWorker {
    process: Arc<Process>,
    i: usize,
    me: usize,
    /// The node's operator; `None` for a sink or a chain.
    op: Option<Box<dyn Operator>>,
    /// The chain this node heads.
    chain: Option<Chain>,
    /// The last epoch it ran.
    last_epoch: Option<u64>,
    wm: Watermarks,
    /// Per producer node, what each of its workers last said its output watermark was.
    upstream: HashMap<u32, Vec<Timestamp>>,
    /// The latest processing-time clock a producer sent (TestStream's test clock).
    clock: Option<Timestamp>,
    /// Per main input port, the operations on the batches it delivers.
    main_ops: Vec<Arc<dyn CollectionOps>>,
    /// Per side input, the operations on its batches.
    side_ops: Vec<Arc<dyn CollectionOps>>,
    /// With a checkpoint: per member (the node, or the chain's members), what it last wrote.
    stores: Vec<StoreVersion>,
    /// With a checkpoint: the worker's account of what its nodes wrote per epoch, for its
    /// manifests.
    pending: Option<Pending>,
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
        let graph = &process.graph;
        let claims = process.claims_per_call();
        let (op, chain) = match chain {
            Some(members) => {
                let nodes = members.iter().map(|&m| &process.plan.nodes[m]);
                let chain = Chain {
                    members: members.to_vec(),
                    ops: nodes.clone().filter_map(|n| n.instantiate_limited(graph, claims)).collect(),
                    wms: members
                        .iter()
                        .map(|&m| {
                            if process.inert[m] {
                                Watermarks::restored(MAX_TIMESTAMP, MAX_TIMESTAMP)
                            } else {
                                Watermarks::new()
                            }
                        })
                        .collect(),
                    in_ops: nodes.clone().map(|n| graph.pcollection(n.inputs[0]).ops.clone()).collect(),
                    out_ops: nodes
                        .map(|n| n.outputs.iter().map(|&o| graph.pcollection(o).ops.clone()).collect())
                        .collect(),
                };
                (None, Some(chain))
            }
            None => (node.instantiate_limited(graph, claims), None),
        };
        let main_ops = node
            .inputs
            .iter()
            .zip(&node.exchanges)
            .map(|(&pc, x)| x.delivered_ops().unwrap_or_else(|| process.graph.pcollection(pc).ops.clone()))
            .collect();
        let side_ops = node.side_inputs.iter().map(|&pc| process.graph.pcollection(pc).ops.clone()).collect();
        let mut upstream = HashMap::new();
        for &pc in node.inputs.iter().chain(&node.side_inputs) {
            let producer = process.topology.producer(pc);
            // An inert producer never runs: its empty output is complete from the start.
            let at = if process.inert[producer] { MAX_TIMESTAMP } else { MIN_TIMESTAMP };
            upstream.insert(producer as u32, vec![at; process.peers]);
        }
        let chain_len = chain.as_ref().map_or(1, |c| c.members.len());
        let wm = if process.inert[i] { Watermarks::restored(MAX_TIMESTAMP, MAX_TIMESTAMP) } else { Watermarks::new() };
        NodeWorker {
            process,
            i,
            me,
            op,
            chain,
            last_epoch: None,
            wm,
            upstream,
            clock: None,
            main_ops,
            side_ops,
            // One per member: the node, or its chain's members.
            stores: (0..chain_len).map(|_| StoreVersion::default()).collect(),
            pending,
        }
    }

    /// The nodes this worker's share runs: the node, or its chain's members.
    fn members(&self) -> Vec<usize> {
        self.chain.as_ref().map_or_else(|| vec![self.i], |c| c.members.clone())
    }

    /// Each member's operator, where it has one (a sink has none).
    fn member_ops(&mut self) -> Vec<Option<&mut Box<dyn Operator>>> {
        let n = self.members().len();
        match self.chain.as_mut() {
            // Chain members are element-wise: every one has an operator.
            Some(c) if c.ops.len() == n => c.ops.iter_mut().map(Some).collect(),
            Some(_) => (0..n).map(|_| None).collect(),
            None => vec![self.op.as_mut()],
        }
    }

    /// Each member's watermarks.
    fn member_wms(&mut self) -> Vec<&mut Watermarks> {
        match self.chain.as_mut() {
            Some(c) => c.wms.iter_mut().collect(),
            None => vec![&mut self.wm],
        }
    }

    /// Restores the members' state and watermarks from a checkpoint (taking them out of
    /// `members`).
    pub(crate) fn restore(&mut self, members: &mut HashMap<String, RestoredMember>) -> Result<()> {
        let names: Vec<String> = self.members().iter().map(|&m| self.process.plan.nodes[m].name.clone()).collect();
        let mut restored: Vec<Option<RestoredMember>> = names.iter().map(|n| members.remove(n)).collect();
        self.stores = restored
            .iter()
            .map(|r| r.as_ref().map_or_else(StoreVersion::default, |r| StoreVersion::from_entries(&r.entries)))
            .collect();
        for (wm, r) in self.member_wms().into_iter().zip(&restored) {
            if let Some(r) = r {
                *wm = Watermarks::restored(r.input, r.output);
            }
        }
        for (op, r) in self.member_ops().into_iter().zip(restored.iter_mut()) {
            if let (Some(op), Some(r)) = (op, r.as_mut()) {
                op.restore_entries(std::mem::take(&mut r.entries))?;
            }
        }
        Ok(())
    }

    /// Checkpoints every member after `epoch`: its state file (a snapshot or what changed)
    /// written now, and its watermarks and file kept for the worker's manifest of the epoch.
    fn checkpoint(&mut self, epoch: u64) -> Result<()> {
        let Some(pending) = self.pending.clone() else { return Ok(()) };
        let process = self.process.clone();
        let Some(log) = process.checkpoint.as_ref() else { return Ok(()) };
        let snapshot = log.is_snapshot(epoch);
        let me = self.me;
        let members = self.members();
        let wms: Vec<(Timestamp, Timestamp)> = self.member_wms().iter().map(|w| (w.input(), w.output())).collect();
        let mut entries = Vec::with_capacity(members.len());
        for op in self.member_ops() {
            entries.push(match op {
                Some(op) => Some(op.state_entries()?),
                None => None,
            });
        }
        let mut states = Vec::with_capacity(members.len());
        for (k, &m) in members.iter().enumerate() {
            let name = &process.plan.nodes[m].name;
            let file = match entries[k].take() {
                Some(e) => match self.stores[k].commit(name, me, e, snapshot)? {
                    Some((f, bytes)) => {
                        log.write_state_file(epoch, me, &f, bytes)?;
                        Some(f)
                    }
                    None => None,
                },
                None => None,
            };
            states.push(MemberState { node: name.clone(), input: wms[k].0, output: wms[k].1, file });
        }
        pending.borrow_mut().entry(epoch).or_default().extend(states);
        Ok(())
    }

    /// The minimum watermark the workers of the producers of `inputs` last reported.
    fn watermark_of(&self, inputs: &[weir_sdk::graph::PCollectionId]) -> Timestamp {
        inputs
            .iter()
            .map(|&pc| {
                let p = self.process.topology.producer(pc) as u32;
                self.upstream.get(&p).and_then(|ws| ws.iter().min().copied()).unwrap_or(MIN_TIMESTAMP)
            })
            .min()
            .unwrap_or(weir_sdk::time::MAX_TIMESTAMP)
    }

    /// Runs one epoch over what arrived for it, appending what goes downstream to `out`.
    pub(crate) fn run_epoch(
        &mut self,
        epoch: u64,
        envelopes: Vec<Envelope>,
        out: &mut Vec<(u64, Routed)>,
    ) -> Result<()> {
        self.last_epoch = Some(epoch);
        let name = self.process.plan.nodes[self.i].name.clone();
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
                        Error::execution(&name, format!("cannot decode a batch from worker {}: {e}", env.to.from))
                    })?;
                    match env.to.slot {
                        WireSlot::Main(_) => main.push(batch),
                        WireSlot::Side(k) => sides.push((k as usize, batch)),
                    }
                }
            }
        }
        let node = &self.process.plan.nodes[self.i];
        let upstream = self.watermark_of(&node.inputs);
        let now = self.clock.unwrap_or_else(|| Clock::Wall.now());
        if let Some(chain) = self.chain.as_mut() {
            run_chain(&self.process, chain, self.me, upstream, now, self.clock, main, out)?;
            return self.end_epoch(epoch);
        }
        let system = MetricsContainerImpl::new();
        match self.op.take() {
            None => {
                if let Some(sink) = &self.process.sinks[self.i] {
                    let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
                    sink.ran(epoch);
                    for b in main {
                        sink.stage(epoch, self.me, b);
                    }
                }
                self.wm.advance(upstream, None, None);
            }
            Some(op) => {
                let side_wms: Vec<Timestamp> = node.side_inputs.iter().map(|&pc| self.watermark_of(&[pc])).collect();
                let in_ops = node.input_ops(&self.process.graph);
                let n_outputs = node.outputs.len();
                let draining = self.process.drained.load(std::sync::atomic::Ordering::SeqCst);
                let task = PartitionTask { op, in_ops, bundles: main, sides, side_wms: side_wms.into(), draining };
                let (op, done) = task.run(upstream, now, n_outputs);
                let hold = op.hold();
                let (rows, bytes) = (op.state_rows(), op.state_bytes());
                self.op = Some(op);
                let done = match done {
                    Ok(done) => done,
                    Err((e, metrics)) => {
                        self.process.metrics.record(Some(&name), &metrics, false);
                        return Err(e);
                    }
                };
                self.process.metrics.record(Some(&name), &done.metrics, true);
                self.wm.advance(upstream, None, hold);
                if rows > 0 || bytes > 0 {
                    system_metrics::state(&system, rows, bytes, now);
                }
                for (port, batches) in done.outputs.into_iter().enumerate() {
                    if let Some(&pc) = node.outputs.get(port) {
                        let ops = self.process.graph.pcollection(pc).ops.clone();
                        for b in &batches {
                            system_metrics::count_batch(&system, &*ops, b, true);
                        }
                    }
                    let batches = if node.stateful { in_fired_bundles(batches) } else { batches };
                    route(&self.process, self.i, port, batches, self.me, out)?;
                }
            }
        }
        system_metrics::watermarks(&system, self.wm.input(), self.wm.output(), now);
        self.process.metrics.record(Some(&name), &system, true);
        progress(&self.process, self.i, self.me, self.wm.output(), self.clock, out);
        self.end_epoch(epoch)
    }

    /// Ends `epoch` here: what the operators output belongs to it (work waiting for its commit
    /// waits for it), and the members are checkpointed.
    fn end_epoch(&mut self, epoch: u64) -> Result<()> {
        for op in self.member_ops().into_iter().flatten() {
            op.seal(epoch);
        }
        self.checkpoint(epoch)
    }

    /// Every epoch before `epoch` is committed: the operators run the work that waited for it.
    pub(crate) fn committed_through(&mut self, epoch: u64) {
        let chained = self.chain.iter_mut().flat_map(|c| c.ops.iter_mut());
        for op in self.op.iter_mut().chain(chained) {
            op.on_committed_through(epoch);
        }
    }

    /// The plan node this is a share of (a chain's head).
    pub(crate) fn index(&self) -> usize {
        self.i
    }

    /// When this worker's share of the node next has work of its own (a splittable DoFn's
    /// pending restrictions, a processing-time timer), if it has any.
    pub(crate) fn next_work(&self) -> Option<Timestamp> {
        self.op.as_ref().and_then(|op| op.next_processing_timer())
    }

    /// The output watermark of this worker's share of the node (of a chain, its last member).
    pub(crate) fn output_watermark(&self) -> Timestamp {
        self.chain.as_ref().and_then(|c| c.wms.last()).map_or(self.wm.output(), |w| w.output())
    }

    /// The last epoch the node ran.
    pub(crate) fn last_epoch(&self) -> Option<u64> {
        self.last_epoch
    }

    /// A stateful node's state on this worker.
    pub(crate) fn operator_state(&self) -> Option<crate::progress::OperatorState> {
        let node = &self.process.plan.nodes[self.i];
        let op = self.op.as_ref().filter(|_| node.stateful)?;
        Some(crate::progress::OperatorState {
            operator_name: node.name.clone(),
            num_rows_total: op.state_rows() as u64,
            memory_used_bytes: op.state_bytes() as u64,
        })
    }

    /// The output watermark of a leaf (a node, or a chain, whose output goes nowhere).
    pub(crate) fn leaf_watermark(&self) -> Option<Timestamp> {
        let tail = self.chain.as_ref().and_then(|c| c.members.last().copied()).unwrap_or(self.i);
        if !self.process.edges[tail].is_empty() {
            return None;
        }
        Some(self.chain.as_ref().and_then(|c| c.wms.last()).map_or(self.wm.output(), |w| w.output()))
    }

    /// Keys and windows the node's operators hold, and their bytes.
    pub(crate) fn state(&self) -> (u64, u64) {
        let chained = self.chain.iter().flat_map(|c| c.ops.iter());
        self.op.iter().chain(chained).fold((0, 0), |(r, b), o| (r + o.state_rows() as u64, b + o.state_bytes() as u64))
    }

    /// Ends the node's operators (closes what they hold open).
    pub(crate) fn finish(&mut self) {
        let chained = self.chain.iter_mut().flat_map(|c| c.ops.iter_mut());
        for op in self.op.iter_mut().chain(chained) {
            op.finish();
        }
    }
}

/// One epoch of a fused chain on worker `me`: the head's input (batches, or planned source
/// reads carried out piece by piece) through every member, then every member's watermark; the
/// tail's output routed on, with the tail's progress.
#[allow(clippy::too_many_arguments)]
fn run_chain(
    process: &Process,
    chain: &mut Chain,
    me: usize,
    upstream: Timestamp,
    now: Timestamp,
    clock: Option<Timestamp>,
    bundles: Vec<Batch>,
    out: &mut Vec<(u64, Routed)>,
) -> Result<()> {
    let task = ChainTask {
        ops: std::mem::take(&mut chain.ops),
        in_ops: chain.in_ops.clone(),
        out_ops: chain.out_ops.clone(),
        bundles,
    };
    let (ops, done, error) = task.run(upstream, now);
    chain.ops = ops;
    let ok = error.is_none();
    for (step, c) in &done.sources {
        process.metrics.record(Some(step), c, ok);
    }
    for (&m, member) in chain.members.iter().zip(&done.members) {
        process.metrics.record(Some(&process.plan.nodes[m].name), &member.metrics, ok);
    }
    if let Some(e) = error {
        return Err(e);
    }
    // Element-wise members hold nothing back: every member's input watermark is the head's.
    for ((&m, wm), op) in chain.members.iter().zip(&mut chain.wms).zip(&chain.ops) {
        wm.advance(upstream, None, op.hold());
        let system = MetricsContainerImpl::new();
        system_metrics::watermarks(&system, wm.input(), wm.output(), now);
        process.metrics.record(Some(&process.plan.nodes[m].name), &system, true);
    }
    let tail = *chain.members.last().unwrap_or(&0);
    for (port, batches) in done.outputs.into_iter().enumerate() {
        route(process, tail, port, batches, me, out)?;
    }
    let output = chain.wms.last().map_or(upstream, |w| w.output());
    progress(process, tail, me, output, clock, out);
    Ok(())
}
