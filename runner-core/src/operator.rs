//! Operators: the primitives as runners execute them, with one shape for all runners.
//!
//! A runner feeds each operator bundles of input ([`Operator::process`]) and moves its input
//! watermark and processing time ([`Operator::advance`]); both return output batches, one per
//! output of the transform. The operator's output watermark is `min(input watermark,
//! Operator::hold)`. What an operator *means* lives here; where its data lives and when it runs
//! is the runner's business.

pub use crate::checkpoint::log::Journal;
use crate::do_fn_runner::DoFnRunner;
use crate::group_also_by_window::{DropCounts, GroupAlsoByWindow, StateChanges, Values};
use crate::metrics::MetricsContainerImpl;
use crate::side_inputs::{Pushback, SideInputs, SideState};
use std::sync::Arc;
use weir_sdk::graph::{ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{AssignKernel, Batch, CollectionOps, NoSideInputs};
use weir_sdk::metrics::scoped_container;
use weir_sdk::time::Timestamp;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::Result;

/// What an operator call may use.
pub struct OpContext<'a> {
    /// Current processing time, ms.
    pub processing_time: Timestamp,
    /// The metrics container of this unit of work.
    pub metrics: &'a Arc<MetricsContainerImpl>,
    /// Whether the job is being drained (Beam's drain, as the sources read this unit of work):
    /// operators with open-ended work of their own (a splittable DoFn's unbounded
    /// restrictions) drop it, so the watermarks can reach the end.
    pub draining: bool,
}

/// An executable primitive.
pub trait Operator: Send {
    /// Processes one bundle of main input; returns one batch per output.
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>>;
    /// Processes several bundles of main input that arrived together; returns per output the
    /// batches produced. Operators that gain from seeing them at once (grouping combines each
    /// key's values of all bundles in one step) override it.
    fn process_bundles(&mut self, bundles: Vec<Batch>, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        let mut outputs: Vec<Vec<Batch>> = Vec::new();
        for b in bundles {
            for (port, out) in self.process(b, ctx)?.into_iter().enumerate() {
                if outputs.len() <= port {
                    outputs.resize_with(port + 1, Vec::new);
                }
                outputs[port].push(out);
            }
        }
        Ok(outputs)
    }
    /// The runner has durably committed everything the operator output so far (its batch,
    /// round or epoch): work that waited for that may run (a splittable DoFn's
    /// `after_commit` callbacks). Errors are the operator's to report.
    fn on_committed(&mut self) {}
    /// For runners that commit an epoch some time after running it (timely, whose epochs
    /// overlap): what the operator output so far belongs to `epoch`, and work waiting for a
    /// commit waits for [`Operator::on_committed_through`] past it.
    fn seal(&mut self, _epoch: u64) {}
    /// Every epoch before `epoch` is durably committed: work sealed with those epochs runs.
    fn on_committed_through(&mut self, _epoch: u64) {}
    /// Moves the input watermark and processing time, firing what they release.
    fn advance(&mut self, _input_watermark: Timestamp, _ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        Ok(Vec::new())
    }
    /// [`Operator::advance`], returning per output the batches produced: operators that may
    /// fire much at once (grouping) return it in several bundles.
    fn advance_bundles(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        Ok(self.advance(input_watermark, ctx)?.into_iter().map(|b| vec![b]).collect())
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
    /// Splits work at random points from now on, seeded (the direct runner's check that
    /// splittable DoFns' restriction trackers split honestly). Other operators ignore it.
    fn split_randomly(&mut self, _seed: u64) {}
    /// Claims at most `per_call` positions per call from now on (a runner's batch size, such
    /// as `--max-batch-size`, shared among partitions): the splittable DoFn of a Read's
    /// expansion checkpoints the rest for the next batch, as a native read would stop there.
    /// Other operators ignore it.
    fn limit_claims(&mut self, _per_call: usize) {}
    /// What the unit of work just run decided at run time that a replay of it must repeat:
    /// a source's reads (the positions a Kafka partition held when it was polled) and the
    /// watermark hold they left. Runners take it after every unit and log it before the unit's
    /// output commits. `None` for operators whose units replay alike by themselves.
    fn take_journal(&mut self) -> Option<Journal> {
        None
    }
    /// Keeps a journal of every unit of work from now on, for [`Operator::take_journal`] (a
    /// runner that takes it after every unit).
    fn keep_journal(&mut self) {}
    /// Makes the next unit of work repeat `journal` (a merge of every partition's for the
    /// node), a replay of a logged unit whose output a sink may already hold.
    fn replay_journal(&mut self, _journal: &Journal) {}
    /// The operator's state as encoded entries (entry key, value), for checkpoints: one per key
    /// and window, plus an entry with the empty key for operator-wide data. Empty for stateless
    /// operators. State stores diff entries between batches to write deltas.
    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(Vec::new())
    }
    /// What changed in the operator's state since the last call (entries written, keys of
    /// entries removed, as [`Operator::state_entries`] encodes them), for an operator that
    /// tracks its changes: its checkpoints then write only those. `None` for one that does not
    /// (its store diffs every entry). A full snapshot calls it too, to start afresh.
    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        Ok(None)
    }
    /// The new partition, of `n`, that [`Operator::rescale`] gives state entry `entry` to when
    /// its key alone says so (keyed state), or `None` for an entry it places by what it holds
    /// (bookkeeping, waiting elements). A rescaled restore reads for each new partition only
    /// the entries given to it and those placed by content, and rescales those: it so holds one
    /// new partition's state at a time rather than all of the step's.
    fn rescale_partition(&self, _entry: &[u8], _n: usize) -> Result<Option<usize>> {
        Ok(None)
    }
    /// Spreads state entries, as `old.len()` partitions wrote them, over `n` partitions (a restart
    /// at another parallelism): keyed state goes to its key's partition
    /// ([`crate::checkpoint::spread_keyed`]). An operator with state that cannot move between
    /// partitions refuses, saying why.
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        if old.iter().all(Vec::is_empty) {
            return Ok((0..n).map(|_| Vec::new()).collect());
        }
        Err(weir_sdk::Error::NotSupported("its state cannot be spread over another number of partitions".into()))
    }
    /// Restores state from entries written by [`Operator::state_entries`].
    fn restore_entries(&mut self, _entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        Ok(())
    }
    /// Whether [`Operator::restore_entries`] keeps changes from the restored state on, so that
    /// [`Operator::take_changed_entries`] reports, at the first commit after a restore, what
    /// changed since: the commit writes a delta on the restored chain, and nothing compares the
    /// whole restored state with the next. `false`: the first commit is diffed against the
    /// restored entries (their hashes are kept for it).
    fn restore_keeps_changes(&self) -> bool {
        false
    }
    /// Number of state entries held (keys and windows), for progress reports.
    fn state_rows(&self) -> usize {
        0
    }
    /// Approximate bytes of state held.
    fn state_bytes(&self) -> usize {
        0
    }
    /// The state backend's own figures (`--state-backend disk`: what is on disk, what was
    /// spilled, cache hits and misses), summed over partitions into the state operator's
    /// custom metrics.
    fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// State rows (keys and windows) updated and removed since the previous call; runners call
    /// it once per batch for the progress report.
    fn take_state_changes(&mut self) -> StateChanges {
        StateChanges::default()
    }
}

/// A stateless ParDo. With side inputs, elements whose side windows are not ready yet are
/// pushed back, hold the output watermark, and are retried as side data and watermarks arrive.
pub struct ParDoOperator {
    runner: DoFnRunner,
    side: SideState,
    ops: Arc<dyn CollectionOps>,
}

impl ParDoOperator {
    /// The ParDo `node`.
    pub fn new(node: &TransformNode, payload: &ParDoPayload, graph: &PipelineGraph) -> Self {
        let ops = graph.pcollection(node.inputs[0]).ops.clone();
        ParDoOperator {
            runner: DoFnRunner::new(node, payload, graph),
            side: SideState {
                sides: SideInputs::new(&payload.side_inputs, graph),
                pushback: Pushback::new(ops.clone()),
            },
            ops,
        }
    }

    /// The same operator keeping elements that wait for side inputs where `state` says.
    pub fn with_state(mut self, state: &crate::state_backend::StateBackend) -> Self {
        let pushback = std::mem::replace(&mut self.side.pushback, Pushback::new(self.ops.clone()));
        self.side.pushback = pushback.with_state(state, self.runner.step());
        self
    }

    fn run(&mut self, input: Option<Batch>, retry: bool, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let ready = self
            .side
            .pushback
            .ready_batches(&self.side.sides, input, retry)
            .map_err(|e| weir_sdk::Error::execution(self.runner.step(), e.to_string()))?;
        if ready.is_empty() {
            return Ok(self.runner.empty_outputs());
        }
        if self.side.sides.is_empty() {
            return self.runner.process_bundle(ready, &NoSideInputs, ctx.metrics);
        }
        self.runner.process_bundle(ready, &self.side.sides, ctx.metrics)
    }
}

impl Operator for ParDoOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.run(Some(input), false, ctx)
    }
    fn process_side(&mut self, index: usize, input: Batch) -> Result<()> {
        self.side.sides.add(index, input);
        Ok(())
    }
    fn advance_side(&mut self, index: usize, watermark: Timestamp) {
        self.side.sides.set_watermark(index, watermark);
    }
    fn advance(&mut self, _input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        if self.side.pushback.is_empty() {
            return Ok(Vec::new());
        }
        self.run(None, true, ctx)
    }
    fn hold(&self) -> Option<Timestamp> {
        self.side.pushback.hold()
    }
    fn on_committed(&mut self) {
        self.runner.on_committed();
    }
    fn seal(&mut self, epoch: u64) {
        self.runner.seal(epoch);
    }
    fn on_committed_through(&mut self, epoch: u64) {
        self.runner.on_committed_through(epoch);
    }
    fn finish(&mut self) {
        self.runner.teardown();
    }
    /// One entry per side input window and per batch waiting for side inputs
    /// ([`SideInputs::entries`], [`Pushback::entries`]).
    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.side.entries(self.runner.step(), &mut out)?;
        Ok(out)
    }
    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        let (mut written, mut removed) = (Vec::new(), Vec::new());
        let kept = self.side.take_changes(self.runner.step(), &mut written, &mut removed)?;
        Ok(kept.then_some((written, removed)))
    }
    /// Elements waiting for side inputs are not keyed: every old partition's go to the first new
    /// one (renumbered); the side inputs (the same in every partition) to all. The older layout
    /// (one entry with both) is read too.
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        type Meta = (Vec<Vec<u8>>, crate::side_inputs::SidesSnapshot);
        let step = self.runner.step();
        let mut out: Vec<crate::checkpoint::Entries> = (0..n.max(1)).map(|_| Vec::new()).collect();
        let (mut pushback, mut legacy_sides, mut sides) = (Vec::new(), None, None::<crate::checkpoint::Entries>);
        for (p, entries) in old.into_iter().enumerate() {
            let mut own_sides = Vec::new();
            for (k, v) in entries {
                if k.is_empty() {
                    let (waiting, s): Meta = crate::checkpoint::decode(step, &v)?;
                    pushback.extend(waiting);
                    legacy_sides.get_or_insert(s);
                } else if let Some(k) = Pushback::renumber(&k, out[0].len() as u64) {
                    out[0].push((k, v));
                } else {
                    own_sides.push((k, v));
                }
            }
            if p == 0 || sides.as_ref().is_some_and(Vec::is_empty) {
                sides = Some(own_sides);
            }
        }
        for (p, entries) in out.iter_mut().enumerate() {
            entries.extend(sides.iter().flatten().cloned());
            if let Some(s) = &legacy_sides {
                let meta: Meta = (if p == 0 { std::mem::take(&mut pushback) } else { Vec::new() }, s.clone());
                entries.push((Vec::new(), crate::checkpoint::encode(step, &meta)?));
            }
        }
        Ok(out)
    }
    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let step = self.runner.step().to_string();
        for (k, v) in entries {
            if k.is_empty() {
                let (pushback, sides): (Vec<Vec<u8>>, crate::side_inputs::SidesSnapshot) =
                    crate::checkpoint::decode(&step, &v)?;
                self.side.restore_legacy(pushback, sides)?;
            } else {
                self.side.restore_entry(&step, &k, &v)?;
            }
        }
        // What was restored is what was committed: changes count from here.
        self.side.forget_changes();
        Ok(())
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
        Self::new_for(&node.full_name, strategy, values)
    }

    /// A grouping operator for the step `step`, whose input is windowed by `strategy`.
    pub fn new_for(step: &str, strategy: WindowingStrategy, values: Values) -> Self {
        GroupOperator { engine: GroupAlsoByWindow::new(step, strategy, values) }
    }

    /// The same operator keeping its state where `state` says.
    pub fn with_state(self, state: &crate::state_backend::StateBackend) -> Self {
        GroupOperator { engine: self.engine.with_state(state) }
    }

    /// The same operator taking partial accumulators (combiner lifting); see
    /// [`can_lift_combine`].
    pub fn lifted(self) -> Self {
        GroupOperator { engine: self.engine.lifted() }
    }

    /// The engine, for state metrics.
    pub fn engine(&self) -> &GroupAlsoByWindow {
        &self.engine
    }
}

/// Whether a Combine.perKey over input windowed by `strategy` can be lifted (partial combine
/// before the exchange) without changing its output: windows that do not merge (a partial
/// accumulator never spans windows that later merge) and the end-of-window timestamp
/// combiner (every input holds the pane at the same time, so which inputs a partial
/// accumulator covers does not matter). Triggers see the same input counts either way.
pub fn can_lift_combine(strategy: &weir_sdk::window_fn::WindowingStrategy) -> bool {
    !strategy.needs_merge() && strategy.timestamp_combiner == weir_sdk::trigger::TimestampCombiner::EndOfWindow
}

pub use crate::system_metrics::SYSTEM_NAMESPACE;

/// Counts, in the step's metrics, what an operator dropped during one call (`before` is
/// [`Operator::dropped`] before the call); returns how many elements that was.
pub fn count_drops(op: &dyn Operator, before: DropCounts, metrics: &MetricsContainerImpl) -> u64 {
    use weir_sdk::metrics::{MetricName, MetricsContainer};
    let after = op.dropped();
    let deltas = [
        ("droppedDueToLateness", after.late.saturating_sub(before.late)),
        ("droppedDueToClosedWindow", after.closed.saturating_sub(before.closed)),
    ];
    for (name, delta) in deltas {
        if delta > 0 {
            if let Ok(n) = MetricName::new(SYSTEM_NAMESPACE, name) {
                metrics.inc_counter(&std::sync::Arc::new(n), delta as i64);
            }
        }
    }
    deltas.iter().map(|d| d.1).sum()
}

impl Operator for GroupOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.engine.process(input, ctx.processing_time)?])
    }
    fn process_bundles(&mut self, bundles: Vec<Batch>, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.engine.process_bundles(bundles, ctx.processing_time)?])
    }
    fn advance(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.engine.advance(input_watermark, ctx.processing_time)?])
    }
    fn advance_bundles(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.engine.advance_bundles(input_watermark, ctx.processing_time)?])
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
    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.engine.state_entries()
    }
    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        self.engine.take_changed_entries()
    }
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        self.engine.rescale(old, n)
    }
    fn rescale_partition(&self, entry: &[u8], n: usize) -> Result<Option<usize>> {
        self.engine.rescale_partition(entry, n)
    }
    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.engine.restore_entries(entries)
    }
    fn restore_keeps_changes(&self) -> bool {
        true
    }
    fn state_rows(&self) -> usize {
        self.engine.state_size()
    }
    fn state_bytes(&self) -> usize {
        self.engine.state_bytes()
    }
    fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        self.engine.state_backend_metrics()
    }
    fn take_state_changes(&mut self) -> StateChanges {
        self.engine.take_state_changes()
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

/// Helpers for operators' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::Operator;

    /// An operator's state as its checkpoints would have it from the changes it reports
    /// ([`Operator::take_changed_entries`]).
    #[derive(Default)]
    pub struct Committed(Option<std::collections::HashMap<Vec<u8>, Vec<u8>>>);

    impl Committed {
        /// What a restore from `entries` starts from: the operator reports what changes from
        /// there ([`Operator::restore_keeps_changes`]).
        pub fn restored(entries: &[(Vec<u8>, Vec<u8>)]) -> Self {
            Committed(Some(entries.iter().cloned().collect()))
        }

        /// Takes the operator's changes and checks that they bring what was committed to its
        /// whole state.
        pub fn commit(&mut self, op: &mut dyn Operator) {
            let whole: std::collections::HashMap<_, _> = op.state_entries().unwrap().into_iter().collect();
            match (op.take_changed_entries().unwrap(), &mut self.0) {
                (Some((written, removed)), Some(committed)) => {
                    committed.extend(written);
                    removed.iter().for_each(|k| {
                        committed.remove(k);
                    });
                    assert_eq!(committed, &whole, "the changes reported replay to the state");
                }
                (None, None) => self.0 = Some(whole),
                (changes, _) => panic!("changes kept from the first call on, not {changes:?}"),
            }
        }
    }
}
