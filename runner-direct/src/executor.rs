//! Executes a plan: steps in topological order, bundles in (optionally) shuffled order.

use crate::translate::{Plan, Step, StepKind};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use weir_runner_core::do_fn_runner::{guarded, DoFnRunner};
use weir_runner_core::group_by_key::BatchGrouper;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::{JobMetrics, MetricsContainerImpl};
use weir_sdk::graph::{PCollectionId, PipelineGraph};
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::metrics::scoped_container;
use weir_sdk::options::DirectOptions;
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::MIN_TIMESTAMP;
use weir_sdk::window::Window;
use weir_sdk::{Error, Result, WindowedValue, WithStepExt};

/// The bundles of every PCollection not yet consumed by all its consumers.
struct Store {
    bundles: HashMap<PCollectionId, Vec<Batch>>,
    remaining: HashMap<PCollectionId, usize>,
}

impl Store {
    fn new(graph: &PipelineGraph) -> Self {
        let mut remaining = HashMap::new();
        for n in &graph.nodes {
            if !n.is_composite {
                for &i in &n.inputs {
                    *remaining.entry(i).or_insert(0) += 1;
                }
            }
        }
        Store { bundles: HashMap::new(), remaining }
    }

    fn put(&mut self, pc: PCollectionId, bundles: Vec<Batch>) {
        if self.remaining.get(&pc).copied().unwrap_or(0) > 0 {
            self.bundles.insert(pc, bundles);
        }
    }

    /// The bundles of `pc` for one consumer: the last consumer takes them, earlier ones copy.
    fn take(&mut self, pc: PCollectionId, ops: &dyn CollectionOps) -> Vec<Batch> {
        let left = self.remaining.entry(pc).or_insert(1);
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.bundles.remove(&pc).unwrap_or_default()
        } else {
            self.bundles.get(&pc).map(|bs| bs.iter().map(|b| ops.clone_batch(b)).collect()).unwrap_or_default()
        }
    }
}

struct Executor<'a> {
    graph: &'a PipelineGraph,
    options: &'a DirectOptions,
    rng: SmallRng,
    store: Store,
    metrics: &'a JobMetrics,
}

pub(crate) fn execute(
    graph: &PipelineGraph,
    plan: &Plan,
    options: &DirectOptions,
    job: &Job,
    metrics: &JobMetrics,
) -> Result<()> {
    let mut ex =
        Executor { graph, options, rng: SmallRng::seed_from_u64(options.seed), store: Store::new(graph), metrics };
    for step in &plan.steps {
        if job.is_cancelled() {
            return Err(Error::Cancelled);
        }
        ex.run_step(step)?;
    }
    Ok(())
}

impl Executor<'_> {
    fn ops(&self, pc: PCollectionId) -> Arc<dyn CollectionOps> {
        self.graph.pcollection(pc).ops.clone()
    }

    fn inputs(&mut self, step: &Step) -> Vec<Batch> {
        let node = self.graph.node(step.node);
        let mut all = Vec::new();
        for &pc in &node.inputs {
            let ops = self.ops(pc);
            all.extend(self.store.take(pc, &*ops));
        }
        all
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

    /// Runs user code of `step` outside a DoFn (sources, window functions) with a fresh
    /// metrics container, recorded as committed when it succeeds.
    fn with_metrics<T>(&self, step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let container = MetricsContainerImpl::new();
        let result = {
            let _scope = scoped_container(container.clone());
            f()
        };
        self.metrics.record(Some(step), &container, result.is_ok());
        result
    }

    fn run_step(&mut self, step: &Step) -> Result<()> {
        let node = self.graph.node(step.node);
        let name = step.name.as_str();
        let outputs: Vec<Vec<Batch>> = match &step.kind {
            StepKind::Impulse => {
                let v = vec![WindowedValue {
                    value: Vec::<u8>::new(),
                    timestamp: MIN_TIMESTAMP,
                    window: Window::Global,
                    pane: PaneInfo::NO_FIRING,
                }];
                vec![vec![Box::new(v) as Batch]]
            }
            StepKind::Read(source) => {
                let size = self
                    .with_metrics(name, || guarded(name, "estimate source size", || source.estimated_size_bytes()))?;
                let splits =
                    self.with_metrics(name, || guarded(name, "split source", || source.split((size / 8).max(1))))?;
                let mut bundles = Vec::new();
                let max = self.options.bundle_size.max(1);
                for s in splits {
                    self.with_metrics(name, || {
                        let mut reader = guarded(name, "open reader", || s.reader())?;
                        while let Some(b) = guarded(name, "read", || reader.read_batch(max))? {
                            bundles.push(b);
                        }
                        Ok(())
                    })?;
                }
                vec![bundles]
            }
            StepKind::ParDo(payload) => {
                let in_ops = self.ops(node.inputs[0]);
                let mut bundles = self.inputs(step);
                self.shuffle(&mut bundles, &*in_ops);
                let mut runner = DoFnRunner::new(node, payload, self.graph);
                let mut outs: Vec<Vec<Batch>> = node.outputs.iter().map(|_| Vec::new()).collect();
                for b in bundles {
                    // A fresh container per bundle: attempted whatever happens, committed only
                    // when the bundle succeeds.
                    let container = MetricsContainerImpl::new();
                    let result = runner.process_bundle(vec![b], &container);
                    self.metrics.record(Some(name), &container, result.is_ok());
                    for (i, o) in result?.into_iter().enumerate() {
                        outs[i].push(o);
                    }
                }
                runner.teardown();
                outs
            }
            StepKind::GroupByKey(kernel) => {
                let in_ops = self.ops(node.inputs[0]);
                let mut bundles = self.inputs(step);
                self.shuffle(&mut bundles, &*in_ops);
                let mut grouper = BatchGrouper::new(name);
                for b in bundles {
                    grouper.add(&**kernel, b)?;
                }
                let out = grouper.finish(&**kernel)?;
                let out_ops = self.ops(node.outputs[0]);
                vec![self.rebundle(vec![out], &*out_ops)]
            }
            StepKind::Flatten => vec![self.inputs(step)],
            StepKind::WindowInto(kernel) => {
                let bundles = self.inputs(step);
                let mut out = Vec::with_capacity(bundles.len());
                for b in bundles {
                    out.push(self.with_metrics(name, || guarded(name, "assign windows", || kernel.assign(b)))?);
                }
                vec![out]
            }
        };
        for (&pc, bundles) in node.outputs.iter().zip(outputs) {
            let ops = self.ops(pc);
            if self.options.check_encodability {
                for b in &bundles {
                    ops.check_encodable(b).with_step(name)?;
                }
            }
            let bundles = if matches!(step.kind, StepKind::Read(_) | StepKind::ParDo(_)) {
                self.rebundle(bundles, &*ops)
            } else {
                bundles
            };
            self.store.put(pc, bundles);
        }
        Ok(())
    }
}
