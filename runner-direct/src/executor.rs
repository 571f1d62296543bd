//! Executes a plan in rounds (DESIGN D5). Each round, in topological order, every step
//! (1) produces input if it is a source, (2) processes its pending bundles, in shuffled order
//! when asked to, then (3) advances its input watermark to the minimum of its producers' output
//! watermarks and fires what that releases. Outputs of a step are pending for its consumers later
//! in the same round, so a window closes in the round whose data closed it, and every watermark
//! is per transform. The pipeline is done when every output watermark reached the end of time.

use crate::options::DirectOptions;
use crate::translate::{Plan, StepKind};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_runner_core::do_fn_runner::guarded;
use weir_runner_core::group_also_by_window::Values;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::{JobMetrics, MetricsContainerImpl};
use weir_runner_core::operator::{
    count_drops, AssignOperator, FlattenOperator, GroupOperator, OpContext, Operator, ParDoOperator,
};
use weir_runner_core::stateful::StatefulParDoOperator;
use weir_runner_core::system_metrics;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::graph::{PCollectionId, PipelineGraph};
use weir_sdk::kernel::{Batch, CollectionOps, ErasedBoundedReader, ErasedUnboundedReader, TestStreamEvent};
use weir_sdk::metrics::scoped_container;
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::{Error, Result, WindowedValue, WithStepExt};

/// A source step's progress.
enum Root {
    Impulse {
        done: bool,
    },
    Bounded {
        source: Arc<dyn weir_sdk::kernel::ErasedBoundedSource>,
        done: bool,
    },
    Unbounded {
        source: Arc<dyn weir_sdk::kernel::ErasedUnboundedSource>,
        readers: Option<Vec<Box<dyn ErasedUnboundedReader>>>,
    },
    TestStream {
        events: Arc<Vec<TestStreamEvent>>,
        next: usize,
        watermark: Timestamp,
    },
}

struct Runtime {
    op: Option<Box<dyn Operator>>,
    root: Option<Root>,
    wm: Watermarks,
    pending: Vec<Batch>,
    side_pending: Vec<(usize, Batch)>,
}

/// Processing time: the wall clock, or a test clock moved only by TestStream events.
enum Clock {
    Wall,
    Test(Timestamp),
}

impl Clock {
    fn now(&self) -> Timestamp {
        match self {
            Clock::Wall => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0),
            Clock::Test(t) => *t,
        }
    }
}

struct Executor<'a> {
    graph: &'a PipelineGraph,
    plan: &'a Plan,
    options: &'a DirectOptions,
    metrics: &'a JobMetrics,
    job: &'a Job,
    rng: SmallRng,
    clock: Clock,
    /// Step index producing each PCollection.
    producer: HashMap<PCollectionId, usize>,
    /// Consumers of each PCollection (once per input slot): step index and side-input index
    /// (`None` for a main input).
    consumers: HashMap<PCollectionId, Vec<(usize, Option<usize>)>>,
    steps: Vec<Runtime>,
}

pub(crate) fn execute(
    graph: &PipelineGraph,
    plan: &Plan,
    options: &DirectOptions,
    job: &Job,
    metrics: &JobMetrics,
) -> Result<()> {
    let mut ex = Executor::new(graph, plan, options, metrics, job)?;
    let result = ex.run();
    for rt in &mut ex.steps {
        if let Some(op) = rt.op.as_mut() {
            op.finish();
        }
    }
    result
}

impl<'a> Executor<'a> {
    fn new(
        graph: &'a PipelineGraph,
        plan: &'a Plan,
        options: &'a DirectOptions,
        metrics: &'a JobMetrics,
        job: &'a Job,
    ) -> Result<Self> {
        let mut producer = HashMap::new();
        let mut consumers: HashMap<PCollectionId, Vec<(usize, Option<usize>)>> = HashMap::new();
        let mut steps = Vec::with_capacity(plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            for &o in &step.outputs {
                producer.insert(o, i);
            }
            for &input in &step.inputs {
                consumers.entry(input).or_default().push((i, None));
            }
            for (k, &side) in step.side_inputs.iter().enumerate() {
                consumers.entry(side).or_default().push((i, Some(k)));
            }
            let node = graph.node(step.node);
            let (op, root): (Option<Box<dyn Operator>>, Option<Root>) = match &step.kind {
                StepKind::Impulse => (None, Some(Root::Impulse { done: false })),
                StepKind::Read(s) => (None, Some(Root::Bounded { source: s.clone(), done: false })),
                StepKind::ReadUnbounded(s) => (None, Some(Root::Unbounded { source: s.clone(), readers: None })),
                StepKind::TestStream(e) => {
                    (None, Some(Root::TestStream { events: e.clone(), next: 0, watermark: MIN_TIMESTAMP }))
                }
                StepKind::ParDo(p) if p.stateful => (Some(Box::new(StatefulParDoOperator::new(node, p, graph))), None),
                StepKind::ParDo(p) => (Some(Box::new(ParDoOperator::new(node, p, graph))), None),
                StepKind::GroupByKey(k) => {
                    (Some(Box::new(GroupOperator::new(node, graph, Values::Buffer(k.clone())))), None)
                }
                StepKind::CombinePerKey(k) => {
                    (Some(Box::new(GroupOperator::new(node, graph, Values::Combine(k.clone())))), None)
                }
                StepKind::Flatten => (Some(Box::new(FlattenOperator)), None),
                StepKind::WindowInto(k) => (Some(Box::new(AssignOperator::new(node, k.clone()))), None),
            };
            steps.push(Runtime { op, root, wm: Watermarks::new(), pending: Vec::new(), side_pending: Vec::new() });
        }
        let clock = if plan.has_test_stream() { Clock::Test(0) } else { Clock::Wall };
        Ok(Executor {
            graph,
            plan,
            options,
            metrics,
            job,
            rng: SmallRng::seed_from_u64(options.seed),
            clock,
            producer,
            consumers,
            steps,
        })
    }

    fn ops(&self, pc: PCollectionId) -> Arc<dyn CollectionOps> {
        self.graph.pcollection(pc).ops.clone()
    }

    fn run(&mut self) -> Result<()> {
        loop {
            if self.job.is_stop_requested() {
                return Err(Error::Cancelled);
            }
            let mut progressed = false;
            for i in 0..self.plan.steps.len() {
                progressed |= self.run_step(i)?;
            }
            if self.steps.iter().all(|s| s.wm.is_done() && s.pending.is_empty() && s.side_pending.is_empty()) {
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
        let next = self.steps.iter().filter_map(|s| s.op.as_ref().and_then(|o| o.next_processing_timer())).min();
        next.map(|t| (t - now + 1).clamp(1, 20) as u64).unwrap_or(20)
    }

    /// One step's part of a round. Returns whether anything happened.
    fn run_step(&mut self, i: usize) -> Result<bool> {
        let step = &self.plan.steps[i];
        let mut progressed = false;
        if self.steps[i].root.is_some() {
            let (bundles, watermark, moved) = self.produce(i)?;
            progressed |= moved || !bundles.is_empty();
            self.emit(i, 0, bundles)?;
            self.steps[i].wm.advance(watermark, None, None);
            return Ok(progressed);
        }
        // Side inputs first (data, then watermarks), so main input sees everything ready.
        for (k, b) in std::mem::take(&mut self.steps[i].side_pending) {
            progressed = true;
            if let Some(op) = self.steps[i].op.as_mut() {
                op.process_side(k, b)?;
            }
        }
        for (k, pc) in step.side_inputs.iter().enumerate() {
            let wm = self.steps[self.producer[pc]].wm.output();
            if let Some(op) = self.steps[i].op.as_mut() {
                op.advance_side(k, wm);
            }
        }
        // Process pending bundles at the current input watermark, then move the watermark.
        let mut pending = std::mem::take(&mut self.steps[i].pending);
        if !pending.is_empty() {
            progressed = true;
            let in_ops = self.ops(step.inputs[0]);
            // A TestStream's bundles stay whole: element-count triggers depend on them, as in
            // Beam's DirectRunner.
            if !self.plan.has_test_stream() {
                pending = self.rebundle(pending, &*in_ops);
            }
            self.shuffle(&mut pending, &*in_ops);
        }
        for bundle in pending {
            if self.job.is_stop_requested() {
                return Err(Error::Cancelled);
            }
            let in_ops = self.ops(step.inputs[0]);
            let outputs = self.call(i, |op, ctx| {
                system_metrics::count_batch(ctx.metrics, &*in_ops, &bundle, false);
                op.process(bundle, ctx)
            })?;
            for (port, out) in outputs.into_iter().enumerate() {
                self.emit(i, port, vec![out])?;
            }
        }
        let upstream =
            step.inputs.iter().map(|pc| self.steps[self.producer[pc]].wm.output()).min().unwrap_or(MAX_TIMESTAMP);
        let outputs = self.call(i, |op, ctx| op.advance(upstream, ctx))?;
        for (port, out) in outputs.into_iter().enumerate() {
            self.emit(i, port, vec![out])?;
        }
        let hold = self.steps[i].op.as_ref().and_then(|o| o.hold());
        progressed |= self.steps[i].wm.advance(upstream, None, hold);
        let container = MetricsContainerImpl::new();
        let wm = self.steps[i].wm;
        system_metrics::watermarks(&container, wm.input(), wm.output(), self.clock.now());
        if let Some(op) = self.steps[i].op.as_ref() {
            if op.state_rows() > 0 || op.state_bytes() > 0 {
                system_metrics::state(&container, op.state_rows(), op.state_bytes(), self.clock.now());
            }
        }
        self.metrics.record(Some(&step.name), &container, true);
        Ok(progressed)
    }

    /// Calls an operator with a fresh metrics container, recorded as committed if it succeeds.
    fn call(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Operator, &OpContext<'_>) -> Result<Vec<Batch>>,
    ) -> Result<Vec<Batch>> {
        let name = self.plan.steps[i].name.as_str();
        let container = MetricsContainerImpl::new();
        let ctx = OpContext { processing_time: self.clock.now(), metrics: &container };
        let op = self.steps[i].op.as_mut().ok_or_else(|| Error::Internal {
            component: "direct runner".into(),
            message: format!("step {name} has no operator"),
        })?;
        let before = op.dropped();
        let result = f(op.as_mut(), &ctx);
        count_drops(op.as_ref(), before, &container);
        self.metrics.record(Some(name), &container, result.is_ok());
        result
    }

    /// Sends output bundles of step `i`'s output `port` to its consumers, after the
    /// encodability check.
    fn emit(&mut self, i: usize, port: usize, bundles: Vec<Batch>) -> Result<()> {
        let step = &self.plan.steps[i];
        let Some(&pc) = step.outputs.get(port) else { return Ok(()) };
        let ops = self.ops(pc);
        let bundles: Vec<Batch> = bundles.into_iter().filter(|b| ops.len(b) > 0).collect();
        if bundles.is_empty() {
            return Ok(());
        }
        let container = MetricsContainerImpl::new();
        for b in &bundles {
            system_metrics::count_batch(&container, &*ops, b, true);
        }
        self.metrics.record(Some(&step.name), &container, true);
        if self.options.check_encodability {
            for b in &bundles {
                ops.check_encodable(b).with_step(&step.name)?;
            }
        }
        let consumers = self.consumers.get(&pc).cloned().unwrap_or_default();
        let mut bundles = Some(bundles);
        for (n, (c, side)) in consumers.iter().enumerate() {
            let copy = if n + 1 == consumers.len() {
                bundles.take().unwrap_or_default()
            } else {
                bundles.as_ref().map(|bs| bs.iter().map(|b| ops.clone_batch(b)).collect()).unwrap_or_default()
            };
            match side {
                None => self.steps[*c].pending.extend(copy),
                Some(k) => self.steps[*c].side_pending.extend(copy.into_iter().map(|b| (*k, b))),
            }
        }
        Ok(())
    }

    /// Produces a source's next bundles and its watermark after them.
    fn produce(&mut self, i: usize) -> Result<(Vec<Batch>, Timestamp, bool)> {
        let name = self.plan.steps[i].name.clone();
        let max = self.options.bundle_size.max(1);
        let container = MetricsContainerImpl::new();
        let result = {
            let _scope = scoped_container(container.clone());
            let root = self.steps[i].root.as_mut().ok_or_else(|| Error::Internal {
                component: "direct runner".into(),
                message: format!("step {name} is not a source"),
            })?;
            produce_root(root, &name, max, &mut self.clock)
        };
        self.metrics.record(Some(&name), &container, result.is_ok());
        result
    }

    /// Shuffles bundle order and element order within bundles when asked to.
    fn shuffle(&mut self, bundles: &mut [Batch], ops: &dyn CollectionOps) {
        if !self.options.shuffle {
            return;
        }
        bundles.shuffle(&mut self.rng);
        for b in bundles.iter_mut() {
            ops.shuffle(b, self.rng.next_u64());
        }
    }

    /// Splits batches into bundles of at most the bundle size, with random sizes when shuffling.
    fn rebundle(&mut self, batches: Vec<Batch>, ops: &dyn CollectionOps) -> Vec<Batch> {
        let max = self.options.bundle_size.max(1);
        let mut out = Vec::new();
        for b in batches {
            let size = if self.options.shuffle { 1 + (self.rng.next_u64() as usize) % max } else { max };
            out.extend(ops.split(b, size).into_iter().filter(|b| ops.len(b) > 0));
        }
        out
    }
}

fn produce_root(root: &mut Root, name: &str, max: usize, clock: &mut Clock) -> Result<(Vec<Batch>, Timestamp, bool)> {
    match root {
        Root::Impulse { done } => {
            if *done {
                return Ok((vec![], MAX_TIMESTAMP, false));
            }
            *done = true;
            let v = vec![WindowedValue {
                value: Vec::<u8>::new(),
                timestamp: MIN_TIMESTAMP,
                window: Window::Global,
                pane: PaneInfo::NO_FIRING,
            }];
            Ok((vec![Box::new(v) as Batch], MAX_TIMESTAMP, true))
        }
        Root::Bounded { source, done } => {
            if *done {
                return Ok((vec![], MAX_TIMESTAMP, false));
            }
            *done = true;
            // A bounded source's watermark stays at the beginning of time until all of it is
            // read, then jumps to the end (its elements are pending downstream until then).
            let size = guarded(name, "estimate source size", || source.estimated_size_bytes())?;
            let splits = guarded(name, "split source", || source.split((size / 8).max(1)))?;
            let mut bundles = Vec::new();
            for s in splits {
                let mut reader: Box<dyn ErasedBoundedReader> = guarded(name, "open reader", || s.reader())?;
                while let Some(b) = guarded(name, "read", || reader.read_batch(max))? {
                    bundles.push(b);
                }
            }
            Ok((bundles, MAX_TIMESTAMP, true))
        }
        Root::Unbounded { source, readers } => {
            if readers.is_none() {
                let splits = guarded(name, "split source", || source.split(4))?;
                let mut rs = Vec::with_capacity(splits.len());
                for s in splits {
                    rs.push(guarded(name, "open reader", || s.reader(None))?);
                }
                *readers = Some(rs);
            }
            let rs = readers.as_mut().expect("set above");
            let mut bundles = Vec::new();
            for r in rs.iter_mut() {
                let b = guarded(name, "read", || r.read_batch(max))?;
                if r.batch_len(&b) > 0 {
                    bundles.push(b);
                }
            }
            let watermark = rs.iter().map(|r| r.watermark()).min().unwrap_or(MAX_TIMESTAMP);
            Ok((bundles, watermark, false))
        }
        Root::TestStream { events, next, watermark } => {
            let Some(event) = events.get(*next) else {
                // Out of events: no more data.
                let moved = *watermark < MAX_TIMESTAMP;
                *watermark = MAX_TIMESTAMP;
                return Ok((vec![], MAX_TIMESTAMP, moved));
            };
            *next += 1;
            let bundles = match event {
                TestStreamEvent::Elements(make) => vec![make()],
                TestStreamEvent::Watermark(t) => {
                    *watermark = (*watermark).max(*t);
                    vec![]
                }
                TestStreamEvent::ProcessingTime(d) => {
                    if let Clock::Test(now) = clock {
                        *now += d;
                    }
                    vec![]
                }
            };
            Ok((bundles, *watermark, true))
        }
    }
}
