//! Executes the physical plan in rounds. Each round, in topological order, every node
//! (1) reads its next slice if it is a source, (2) processes its pending bundles, in shuffled
//! order when asked to, then (3) advances its input watermark to the minimum of its producers'
//! output watermarks and fires what that releases. Outputs of a node are pending for its
//! consumers later in the same round, so a window closes in the round whose data closed it, and
//! every watermark is per transform. Sinks commit at the end of each round. The pipeline is done
//! when every output watermark reached the end of time.

use crate::options::DirectOptions;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use std::time::Duration;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::node::{NodeShare, ShareOptions, Unit, UnitMetrics};
use weir_runner_core::exec::sink::SinkWriter;
use weir_runner_core::exec::source::SourceState;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::JobMetrics;
use weir_runner_core::plan::topology::{Slot, Topology};
use weir_runner_core::plan::{PhysicalPlan, Role};
use weir_runner_core::watermark::Watermarks;
use weir_sdk::graph::{PCollectionId, PipelineGraph};
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result, WithStepExt};

/// One node's state across rounds.
struct Runtime {
    /// A transform's or sink's partition (the only one): runner-core's node runtime.
    share: Option<NodeShare>,
    source: Option<SourceState>,
    sink: Option<Box<dyn SinkWriter>>,
    wm: Watermarks,
    pending: Vec<Batch>,
    side_pending: Vec<(usize, Batch)>,
}

struct Executor<'a> {
    graph: &'a PipelineGraph,
    plan: &'a PhysicalPlan,
    options: &'a DirectOptions,
    metrics: &'a JobMetrics,
    job: &'a Job,
    rng: SmallRng,
    clock: Clock,
    topology: Topology,
    nodes: Vec<Runtime>,
    round: u64,
}

pub(crate) fn execute(
    graph: &PipelineGraph,
    plan: &PhysicalPlan,
    options: &DirectOptions,
    job: &Job,
    metrics: &JobMetrics,
) -> Result<()> {
    let mut ex = Executor::new(graph, plan, options, metrics, job)?;
    let result = ex.run();
    ex.nodes.iter_mut().filter_map(|n| n.share.as_mut()).for_each(NodeShare::finish);
    result
}

impl<'a> Executor<'a> {
    fn new(
        graph: &'a PipelineGraph,
        plan: &'a PhysicalPlan,
        options: &'a DirectOptions,
        metrics: &'a JobMetrics,
        job: &'a Job,
    ) -> Result<Self> {
        let mut nodes = Vec::with_capacity(plan.nodes.len());
        let owner = format!("direct run {:016x}", rand::random::<u64>());
        for n in &plan.nodes {
            let source = match (&n.role, n.outputs.first()) {
                (Role::Source(s), Some(&o)) => Some(SourceState::of(&n.name, s, graph.pcollection(o).ops.clone())),
                _ => None,
            };
            let sink = match &n.role {
                Role::Sink(factory) => Some(factory.open(&owner, 1)?),
                _ => None,
            };
            // Splittable DoFns are split at random claims too when shuffling: a restriction
            // tracker that does not split honestly loses or repeats output.
            let split =
                options.shuffle.then(|| options.seed ^ (nodes.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let share_options =
                ShareOptions { claims_per_call: None, one_at_a_time: true, split_randomly: split, journal: false };
            let i = nodes.len();
            let share = (!n.is_source()).then(|| NodeShare::new(graph, plan, i, None, 0, share_options));
            nodes.push(Runtime {
                share,
                source,
                sink,
                wm: Watermarks::new(),
                pending: Vec::new(),
                side_pending: Vec::new(),
            });
        }
        Ok(Executor {
            graph,
            plan,
            options,
            metrics,
            job,
            rng: SmallRng::seed_from_u64(options.seed),
            clock: Clock::for_plan(plan),
            topology: Topology::of(plan),
            nodes,
            round: 0,
        })
    }

    fn ops(&self, pc: PCollectionId) -> std::sync::Arc<dyn CollectionOps> {
        self.graph.pcollection(pc).ops.clone()
    }

    fn run(&mut self) -> Result<()> {
        loop {
            if self.job.is_stop_requested() {
                return Err(Error::Cancelled);
            }
            let drain = self.job.is_drain_requested();
            self.nodes.iter_mut().filter_map(|n| n.source.as_mut()).for_each(|s| s.prepare_read(None, drain));
            let mut progressed = false;
            for i in 0..self.plan.nodes.len() {
                progressed |= self.run_node(i)?;
                if self.job.is_stop_requested() {
                    return Err(Error::Cancelled);
                }
            }
            self.commit_sinks()?;
            // The round is committed: what waited for that runs (bundle finalization).
            self.nodes.iter_mut().filter_map(|n| n.share.as_mut()).for_each(NodeShare::on_committed);
            self.round += 1;
            if self.nodes.iter().all(|s| s.wm.is_done() && s.pending.is_empty() && s.side_pending.is_empty()) {
                return Ok(());
            }
            if !progressed {
                match self.clock {
                    Clock::Test(_) => {
                        return Err(Error::Internal {
                            component: "direct runner".into(),
                            message: "the pipeline stopped making progress before its watermarks reached the end"
                                .into(),
                        })
                    }
                    Clock::Wall => std::thread::sleep(Duration::from_millis(self.idle_wait_ms())),
                }
            }
        }
    }

    /// How long to wait when nothing moved: until the next processing-time timer, at most 20 ms.
    fn idle_wait_ms(&self) -> u64 {
        let now = self.clock.now();
        let next = self.nodes.iter().filter_map(|s| s.share.as_ref().and_then(NodeShare::next_processing_timer)).min();
        next.map(|t| (t - now + 1).clamp(1, 20) as u64).unwrap_or(20)
    }

    /// The input watermark of node `i`: the minimum output watermark of its main inputs.
    fn upstream_watermark(&self, i: usize) -> Timestamp {
        self.topology.upstream_watermark(i, |p| self.nodes[p].wm.output())
    }

    /// One node's part of a round. Returns whether anything happened.
    fn run_node(&mut self, i: usize) -> Result<bool> {
        if self.nodes[i].source.is_some() {
            return self.read_source(i);
        }
        // Side inputs first (data, then watermarks), then the pending bundles at the current
        // input watermark, one at a time, then the watermark moves.
        let sides = std::mem::take(&mut self.nodes[i].side_pending);
        let mut pending = std::mem::take(&mut self.nodes[i].pending);
        // A sink stages its input as it came.
        if !pending.is_empty() && !self.plan.nodes[i].is_sink() {
            // A TestStream's bundles stay whole: element-count triggers depend on them, as in
            // Beam's DirectRunner.
            if !self.plan.has_test_stream() {
                pending = self.rebundle(pending);
            }
            self.shuffle(&mut pending);
        }
        let side_watermarks = self.topology.side_watermarks(i, |p| self.nodes[p].wm.output());
        let now = self.clock.now();
        let unit = Unit {
            upstream: self.upstream_watermark(i),
            side_watermarks: &side_watermarks,
            now,
            draining: self.nodes.iter().filter_map(|n| n.source.as_ref()).any(|s| s.is_drained()),
        };
        let Some(share) = self.nodes[i].share.as_mut() else { return Ok(false) };
        let mut metrics = UnitMetrics::default();
        let done = share.run(pending, sides, &unit, &mut metrics);
        if done.is_ok() {
            NodeShare::gauges(&[&*share], now, &mut metrics);
        }
        metrics.publish(self.metrics, done.is_ok());
        let done = done?;
        self.nodes[i].wm = share.watermarks()[0];
        if let Some(sink) = self.nodes[i].sink.as_mut() {
            for b in done.staged {
                sink.stage(0, b)?;
            }
        }
        for (port, out) in done.outputs.into_iter().enumerate() {
            self.emit(i, port, out)?;
        }
        Ok(done.moved)
    }

    /// Reads a source node's next slice: a finite source whole, an unbounded one a bundle's
    /// worth per reader.
    fn read_source(&mut self, i: usize) -> Result<bool> {
        let node = &self.plan.nodes[i];
        let Some(&pc) = node.outputs.first() else { return Ok(false) };
        let ops = self.ops(pc);
        let mut metrics = UnitMetrics::default();
        let clock = &mut self.clock;
        let max = self.options.bundle_size.max(1);
        let Some(src) = self.nodes[i].source.as_mut() else { return Ok(false) };
        let max = if src.is_bounded() { usize::MAX } else { max };
        // One partition: bundles come in the order of the source's splits.
        let read = metrics.read(&node.name, &*ops, || src.next(1, max, None, clock, false, None));
        metrics.publish(self.metrics, read.is_ok());
        let read = read?;
        self.emit(i, 0, read.bundles.into_iter().flatten().collect())?;
        self.nodes[i].wm.advance(read.watermark, None, None);
        Ok(read.moved)
    }

    /// Commits every sink's round under the round number.
    fn commit_sinks(&mut self) -> Result<()> {
        let mut metrics = UnitMetrics::default();
        let mut result = Ok(());
        for (i, n) in self.plan.nodes.iter().enumerate() {
            let Some(sink) = self.nodes[i].sink.as_mut() else { continue };
            result = metrics.measure(&n.name, || sink.commit(self.round, None));
            if result.is_err() {
                break;
            }
        }
        metrics.publish(self.metrics, result.is_ok());
        result
    }

    /// Sends output bundles of node `i`'s output `port` to its consumers, after the
    /// encodability check: main inputs through their exchange, side inputs as they are.
    fn emit(&mut self, i: usize, port: usize, bundles: Vec<Batch>) -> Result<()> {
        let node = &self.plan.nodes[i];
        let Some(&pc) = node.outputs.get(port) else { return Ok(()) };
        let ops = self.ops(pc);
        let bundles: Vec<Batch> = bundles.into_iter().filter(|b| !b.is_empty()).collect();
        if bundles.is_empty() {
            return Ok(());
        }
        if self.options.check_encodability {
            for b in &bundles {
                ops.check_encodable(b).with_step(&node.name)?;
            }
        }
        let consumers = self.topology.consumers(pc).to_vec();
        let mut bundles = Some(bundles);
        for (n, (c, slot)) in consumers.iter().enumerate() {
            let copy = if n + 1 == consumers.len() {
                bundles.take().unwrap_or_default()
            } else {
                bundles.as_ref().map(|bs| bs.to_vec()).unwrap_or_default()
            };
            match *slot {
                Slot::Main(port) => {
                    let routed = self.plan.nodes[*c].exchanges[port].route(vec![copy], 1)?;
                    self.nodes[*c].pending.extend(routed.into_iter().flatten());
                }
                Slot::Side(k) => self.nodes[*c].side_pending.extend(copy.into_iter().map(|b| (k, b))),
            }
        }
        Ok(())
    }

    /// Shuffles bundle order and element order within bundles when asked to.
    fn shuffle(&mut self, bundles: &mut [Batch]) {
        if !self.options.shuffle {
            return;
        }
        bundles.shuffle(&mut self.rng);
        for b in bundles.iter_mut() {
            b.shuffle(self.rng.next_u64());
        }
    }

    /// Splits batches into bundles of at most the bundle size, with random sizes when shuffling.
    fn rebundle(&mut self, batches: Vec<Batch>) -> Vec<Batch> {
        let max = self.options.bundle_size.max(1);
        let mut out = Vec::new();
        for b in batches {
            let size = if self.options.shuffle { 1 + (self.rng.next_u64() as usize) % max } else { max };
            out.extend(b.split(size).into_iter().filter(|b| !b.is_empty()));
        }
        out
    }
}
