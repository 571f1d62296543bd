//! Operators: the primitives as runners execute them, with one shape for all runners.
//!
//! A runner feeds each operator bundles of input ([`Operator::process`]) and moves its input
//! watermark and processing time ([`Operator::advance`]); both return output batches, one per
//! output of the transform. The operator's output watermark is `min(input watermark,
//! Operator::hold)`. What an operator *means* lives here; where its data lives and when it runs
//! is the runner's business.

use crate::do_fn_runner::DoFnRunner;
use crate::group_also_by_window::{DropCounts, GroupAlsoByWindow, Values};
use crate::metrics::MetricsContainerImpl;
use crate::side_inputs::SideInputs;
use std::sync::Arc;
use weir_sdk::graph::{ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{AssignKernel, Batch, CollectionOps, NoSideInputs};
use weir_sdk::metrics::scoped_container;
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

/// What an operator call may use.
pub struct OpContext<'a> {
    /// Current processing time, ms.
    pub processing_time: Timestamp,
    /// The metrics container of this unit of work.
    pub metrics: &'a Arc<MetricsContainerImpl>,
}

/// An executable primitive.
pub trait Operator: Send {
    /// Processes one bundle of main input; returns one batch per output.
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>>;
    /// Moves the input watermark and processing time, firing what they release.
    fn advance(&mut self, _input_watermark: Timestamp, _ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        Ok(Vec::new())
    }
    /// The earliest timestamp the operator may still output (holds its output watermark).
    fn hold(&self) -> Option<Timestamp> {
        None
    }
    /// The earliest processing time at which the operator has work.
    fn next_processing_timer(&self) -> Option<Timestamp> {
        None
    }
    /// Elements dropped as late or for closed windows.
    fn dropped(&self) -> DropCounts {
        DropCounts::default()
    }
    /// Receives a bundle of side input `index`.
    fn process_side(&mut self, _index: usize, _input: Batch) -> Result<()> {
        Ok(())
    }
    /// Moves the watermark of side input `index`.
    fn advance_side(&mut self, _index: usize, _watermark: Timestamp) {}
    /// Releases resources (DoFn teardown).
    fn finish(&mut self) {}
}

/// A stateless ParDo. With side inputs, elements whose side windows are not ready yet are
/// pushed back, hold the output watermark, and are retried as side data and watermarks arrive.
pub struct ParDoOperator {
    runner: DoFnRunner,
    sides: SideInputs,
    input_ops: Arc<dyn CollectionOps>,
    pushed_back: Vec<Batch>,
}

impl ParDoOperator {
    /// The ParDo `node`.
    pub fn new(node: &TransformNode, payload: &ParDoPayload, graph: &PipelineGraph) -> Self {
        ParDoOperator {
            runner: DoFnRunner::new(node, payload, graph),
            sides: SideInputs::new(&payload.side_inputs, graph),
            input_ops: graph.pcollection(node.inputs[0]).ops.clone(),
            pushed_back: Vec::new(),
        }
    }

    /// Runs the ready part of `input` and keeps the rest.
    fn run_ready(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        if self.sides.is_empty() {
            return self.runner.process_bundle(vec![input], &NoSideInputs, ctx.metrics);
        }
        let mut failure = None;
        let sides = &self.sides;
        let (ready, waiting) = self.input_ops.partition_by_window(input, &mut |w| match sides.is_ready(w) {
            Ok(r) => r,
            Err(e) => {
                failure.get_or_insert(e.to_string());
                true
            }
        });
        if let Some(message) = failure {
            return Err(weir_sdk::Error::execution(self.runner.step(), message));
        }
        if self.input_ops.len(&waiting) > 0 {
            self.pushed_back.push(waiting);
        }
        if self.input_ops.len(&ready) == 0 {
            return Ok(self.runner.empty_outputs());
        }
        self.runner.process_bundle(vec![ready], &self.sides, ctx.metrics)
    }
}

impl Operator for ParDoOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.run_ready(input, ctx)
    }
    fn process_side(&mut self, index: usize, input: Batch) -> Result<()> {
        self.sides.add(index, input);
        Ok(())
    }
    fn advance_side(&mut self, index: usize, watermark: Timestamp) {
        self.sides.set_watermark(index, watermark);
    }
    fn advance(&mut self, _input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        if self.pushed_back.is_empty() {
            return Ok(Vec::new());
        }
        let waiting = self.input_ops.concat(std::mem::take(&mut self.pushed_back));
        self.run_ready(waiting, ctx)
    }
    fn hold(&self) -> Option<Timestamp> {
        self.pushed_back.iter().filter_map(|b| self.input_ops.min_timestamp(b)).min()
    }
    fn finish(&mut self) {
        self.runner.teardown();
    }
}

/// GroupByKey or Combine.perKey over runner-core's GroupAlsoByWindow engine.
pub struct GroupOperator {
    engine: GroupAlsoByWindow,
}

impl GroupOperator {
    /// A grouping operator for `node`, whose input is windowed by `node`'s input strategy.
    pub fn new(node: &TransformNode, graph: &PipelineGraph, values: Values) -> Self {
        let strategy = graph.pcollection(node.inputs[0]).windowing.clone();
        GroupOperator { engine: GroupAlsoByWindow::new(&node.full_name, strategy, values) }
    }

    /// The engine, for state metrics.
    pub fn engine(&self) -> &GroupAlsoByWindow {
        &self.engine
    }
}

/// Namespace of the metrics Weir reports about pipelines (beyond user metrics).
pub const SYSTEM_NAMESPACE: &str = "weir";

impl GroupOperator {
    /// Counts what the engine dropped during a call in the step's metrics.
    fn count_drops(&self, before: DropCounts, ctx: &OpContext<'_>) {
        use weir_sdk::metrics::{MetricName, MetricsContainer};
        let after = self.engine.dropped();
        if after.late > before.late {
            if let Ok(n) = MetricName::new(SYSTEM_NAMESPACE, "droppedDueToLateness") {
                ctx.metrics.inc_counter(&n, (after.late - before.late) as i64);
            }
        }
        if after.closed > before.closed {
            if let Ok(n) = MetricName::new(SYSTEM_NAMESPACE, "droppedDueToClosedWindow") {
                ctx.metrics.inc_counter(&n, (after.closed - before.closed) as i64);
            }
        }
    }
}

impl Operator for GroupOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        let before = self.engine.dropped();
        let out = self.engine.process(input, ctx.processing_time);
        self.count_drops(before, ctx);
        Ok(vec![out?])
    }
    fn advance(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.engine.advance(input_watermark, ctx.processing_time)?])
    }
    fn hold(&self) -> Option<Timestamp> {
        self.engine.hold()
    }
    fn next_processing_timer(&self) -> Option<Timestamp> {
        self.engine.next_processing_timer()
    }
    fn dropped(&self) -> DropCounts {
        self.engine.dropped()
    }
}

/// WindowInto.
pub struct AssignOperator {
    step: String,
    kernel: Arc<dyn AssignKernel>,
}

impl AssignOperator {
    /// Window assignment for `node`.
    pub fn new(node: &TransformNode, kernel: Arc<dyn AssignKernel>) -> Self {
        AssignOperator { step: node.full_name.clone(), kernel }
    }
}

impl Operator for AssignOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![crate::do_fn_runner::guarded(&self.step, "assign windows", || self.kernel.assign(input))?])
    }
}

/// Flatten: every input bundle goes to the output unchanged.
pub struct FlattenOperator;

impl Operator for FlattenOperator {
    fn process(&mut self, input: Batch, _: &OpContext<'_>) -> Result<Vec<Batch>> {
        Ok(vec![input])
    }
}
