//! The window aggregation: Combine.perKey as a hash aggregation on (window, key), the fast path
//! of the common case, as Flink's and Spark's window aggregations run.
//!
//! When the windows never merge, the trigger is the default one (or the watermark alone), the
//! allowed lateness is zero and the output time is the end of the window, every window fires
//! exactly once: one on-time pane, the first and the last, at the window's end, once the input
//! watermark passes it. Then no window needs a trigger machine, pane counters, a watermark hold
//! of its own or timers: the combine's typed [`CombineTable`] keeps one accumulator per key in
//! each window, the windows in the order of their ends, and a watermark fires the first
//! windows whole. The output watermark is held at the earliest end of a window held. Input for
//! a window that has already expired is dropped as late, as the general engine drops it.
//!
//! Everything else runs on the general engine ([`crate::group_also_by_window`]). The tests
//! below drive both engines with the same random input and require the same panes, holds and
//! drops; the window aggregation's conformance tests (`tests/tests/window_aggregation.rs`) run
//! the same pipelines on both (`--window-aggregation general`) on every runner configuration.
//!
//! With `--state-backend disk`, windows leave memory past the budget and fire from disk a
//! slice at a time (see the `disk` module).

mod disk;

use crate::group_also_by_window::{engine_entry, restore_engine_entry, DropCounts, StateChanges, FIRED_BUNDLE};
use crate::operator::{OpContext, Operator};
use crate::watermark::Watermarks;
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::{Batch, CombineKernel, CombineTable};
use weir_sdk::metrics::scoped_container;
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::{Timestamp, MIN_TIMESTAMP};
use weir_sdk::trigger::{TimestampCombiner, Trigger};
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::{Error, Result, WithStepExt};

/// Whether a Combine.perKey over input windowed by `strategy` runs as a window aggregation with
/// the same panes as the general engine: windows that never merge, each firing once (the
/// default trigger or the watermark alone, no allowed lateness), at its end.
pub fn applies(strategy: &WindowingStrategy) -> bool {
    !strategy.needs_merge()
        && strategy.allowed_lateness_ms == 0
        && strategy.timestamp_combiner == TimestampCombiner::EndOfWindow
        && matches!(strategy.trigger, Trigger::Default | Trigger::AfterWatermark { early: None, late: None })
}

/// The operator of a window aggregation (see the module documentation).
pub struct WindowAggregation {
    step: String,
    strategy: WindowingStrategy,
    kernel: Arc<dyn CombineKernel>,
    table: Box<dyn CombineTable>,
    watermarks: Watermarks,
    processing_time: Timestamp,
    dropped: DropCounts,
    /// Groups fired since the last [`Operator::take_state_changes`].
    removed: u64,
    /// The disk backend's part, when the backend is disk.
    disk: Option<Box<disk::Disk>>,
}

impl WindowAggregation {
    /// The aggregation of the Combine.perKey `node` with `kernel`, whose input strategy
    /// [`applies`].
    pub fn new(node: &TransformNode, graph: &PipelineGraph, kernel: Arc<dyn CombineKernel>) -> Self {
        Self::of(&node.full_name, graph.pcollection(node.inputs[0]).windowing.clone(), kernel)
    }

    /// The aggregation of the step `step` whose input is windowed by `strategy`.
    pub fn of(step: &str, strategy: WindowingStrategy, kernel: Arc<dyn CombineKernel>) -> Self {
        WindowAggregation {
            step: step.to_string(),
            strategy,
            table: kernel.table(),
            kernel,
            watermarks: Watermarks::new(),
            processing_time: MIN_TIMESTAMP,
            dropped: DropCounts::default(),
            removed: 0,
            disk: None,
        }
    }

    fn add(&mut self, bundles: Vec<Batch>) -> Result<()> {
        if self.disk.is_some() {
            self.open_disk()?;
        }
        for b in bundles {
            self.read_back_rows(&b)?;
            let (strategy, input) = (&self.strategy, self.watermarks.input());
            let mut expired = |w: &weir_sdk::window::Window| strategy.gc_time(w) < input;
            self.dropped.late += self.table.add(b, &mut expired).with_step(&self.step)?;
        }
        self.evict_over_budget()
    }

    /// Moves the input watermark, fires every window it releases (each in bundles of at most
    /// `limit` groups), then moves the output watermark to the earliest end still held.
    fn advance_to(
        &mut self,
        input_watermark: Timestamp,
        processing_time: Timestamp,
        limit: usize,
    ) -> Result<Vec<Batch>> {
        self.processing_time = self.processing_time.max(processing_time);
        let before = self.watermarks.output();
        self.watermarks.advance(input_watermark, None, Some(before));
        let input = self.watermarks.input();
        let mut out = Vec::new();
        while let Some(window) = self.next_window() {
            // Ends are in order, and so are the garbage-collection times (capped ends).
            if self.strategy.gc_time(&window) >= input {
                break;
            }
            if self.on_disk(&window) {
                if !self.fire_from_disk(window, limit, &mut out)? {
                    // The rest in the next calls (see `next_processing_timer`).
                    break;
                }
                continue;
            }
            let fired =
                self.table.fire_first(PaneInfo::ON_TIME_AND_ONLY_FIRING, limit, &mut out).with_step(&self.step)?;
            self.removed += fired as u64;
        }
        let hold = self.hold();
        self.watermarks.advance(input_watermark, None, hold);
        Ok(out)
    }
}

impl Operator for WindowAggregation {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        self.processing_time = self.processing_time.max(ctx.processing_time);
        self.add(vec![input])?;
        Ok(vec![self.table.empty()])
    }
    fn process_bundles(&mut self, bundles: Vec<Batch>, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        let _scope = scoped_container(ctx.metrics.clone());
        self.processing_time = self.processing_time.max(ctx.processing_time);
        self.add(bundles)?;
        Ok(vec![Vec::new()])
    }
    fn advance(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        let _scope = scoped_container(ctx.metrics.clone());
        let mut fired = self.advance_to(input_watermark, ctx.processing_time, usize::MAX)?;
        Ok(vec![fired.pop().unwrap_or_else(|| self.table.empty())])
    }
    fn advance_bundles(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Vec<Batch>>> {
        let _scope = scoped_container(ctx.metrics.clone());
        Ok(vec![self.advance_to(input_watermark, ctx.processing_time, FIRED_BUNDLE)?])
    }
    fn hold(&self) -> Option<Timestamp> {
        self.next_window().map(|w| w.max_timestamp())
    }
    fn next_processing_timer(&self) -> Option<Timestamp> {
        // A window firing from disk, a slice a call: the next at once.
        self.firing_from_disk().then_some(MIN_TIMESTAMP)
    }
    fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        self.disk_metrics()
    }
    fn dropped(&self) -> DropCounts {
        self.dropped
    }
    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(self.table.len() + 1);
        out.push(engine_entry(&self.step, self.watermarks, self.processing_time, self.dropped)?);
        self.for_each_group(&mut |key, window, group| {
            out.push((
                crate::checkpoint::entry_key(&self.step, key, &window)?,
                crate::checkpoint::encode(&self.step, &group)?,
            ));
            Ok(())
        })?;
        Ok(out)
    }
    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        let mut written = vec![engine_entry(&self.step, self.watermarks, self.processing_time, self.dropped)?];
        let (mut removed, mut failed) = (Vec::<(Vec<u8>, weir_sdk::window::Window)>::new(), None);
        let step = &self.step;
        let kept = self
            .table
            .take_changed(
                &mut |key, window, count, acc| {
                    let entry = crate::checkpoint::entry_key(step, key, &window)
                        .and_then(|k| Ok((k, crate::checkpoint::encode(step, &(count, acc))?)));
                    match entry {
                        Ok(e) => written.push(e),
                        Err(e) => failed = failed.take().or(Some(e)),
                    }
                },
                &mut |key, window| removed.push((key.to_vec(), window)),
            )
            .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !kept {
            // Changes are kept from here on, on disk too.
            self.start_tracking()?;
            return Ok(None);
        }
        self.take_moved(&mut written)?;
        let step = &self.step;
        let removed = removed.iter().map(|(k, w)| crate::checkpoint::entry_key(step, k, w)).collect::<Result<_>>()?;
        Ok(Some((written, removed)))
    }
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        crate::group_also_by_window::rescale_keyed(&self.step, old, n)
    }
    fn rescale_partition(&self, entry: &[u8], n: usize) -> Result<Option<usize>> {
        crate::checkpoint::keyed_partition(&self.step, entry, n)
    }
    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        // Restoring replaces what is held.
        self.table = self.kernel.table();
        self.removed = 0;
        self.clear_disk();
        if self.disk.is_some() {
            self.open_disk()?;
        }
        for (i, (entry, value)) in entries.into_iter().enumerate() {
            if i % 4096 == 4095 {
                self.evict_over_budget()?;
            }
            if entry.is_empty() {
                (self.watermarks, self.processing_time, self.dropped) = restore_engine_entry(&self.step, &value)?;
                continue;
            }
            let (key, window) = crate::checkpoint::split_entry_key(&self.step, &entry)?;
            let (count, acc): (u64, Vec<u8>) = crate::checkpoint::decode(&self.step, &value)?;
            self.table
                .restore(&key, window, count, &acc)
                .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        }
        // The state is what was committed: the table (which reports nothing at the first call,
        // and keeps changes from then on) and the groups on disk keep changes from here.
        let kept = self.table.take_changed(&mut |_, _, _, _| {}, &mut |_, _| {});
        kept.map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        self.start_tracking()?;
        self.evict_over_budget()
    }
    fn restore_keeps_changes(&self) -> bool {
        true
    }
    fn state_rows(&self) -> usize {
        self.table.len() + self.rows_on_disk()
    }
    fn state_bytes(&self) -> usize {
        self.table.bytes()
    }
    fn take_state_changes(&mut self) -> StateChanges {
        StateChanges { updated: self.table.take_updated(), removed: std::mem::take(&mut self.removed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_also_by_window::Values;
    use crate::metrics::MetricsContainerImpl;
    use crate::operator::GroupOperator;
    use rand::{Rng, SeedableRng};
    use weir_sdk::kernel::EncodedKvBatch;
    use weir_sdk::transforms::combiners::SumFn;
    use weir_sdk::window::{IntervalWindow, Window};
    use weir_sdk::window_fn::{FixedWindows, SlidingWindows};
    use weir_sdk::windowed_value::WindowedValue;
    use weir_sdk::KV;

    type Out = (String, i64, Window, Timestamp, PaneInfo);

    fn outputs(batches: Vec<Batch>) -> Vec<Out> {
        let mut out: Vec<Out> = batches
            .into_iter()
            .flat_map(|b| *b.downcast::<Vec<WindowedValue<KV<String, i64>>>>().expect("sums"))
            .map(|wv| (wv.value.key, wv.value.value, wv.window, wv.timestamp, wv.pane))
            .collect();
        out.sort_by(|a, b| (a.2, &a.0, a.1).cmp(&(b.2, &b.0, b.1)));
        out
    }

    fn strategies() -> Vec<WindowingStrategy> {
        let ms = std::time::Duration::from_millis;
        vec![
            WindowingStrategy::of(Arc::new(FixedWindows::of(ms(10)))),
            WindowingStrategy::of(Arc::new(SlidingWindows::of(ms(30)).every(ms(10)))),
            WindowingStrategy::global(),
        ]
    }

    /// Random rows: short and long string keys, each in the windows `strategy` assigns, at
    /// times around `around` (some behind it: late).
    fn rows(
        rng: &mut rand::rngs::StdRng,
        strategy: &WindowingStrategy,
        around: i64,
    ) -> Vec<WindowedValue<KV<String, i64>>> {
        let mut out = Vec::new();
        for _ in 0..rng.random_range(0..40) {
            let key = match rng.random_range(0..6) {
                0 => format!("a key longer than sixteen bytes {}", rng.random_range(0..3)),
                k => format!("k{k}"),
            };
            let t = around + rng.random_range(-15..40);
            let mut windows = Vec::new();
            strategy.window_fn.assign_windows(t, &Window::Global, &mut windows);
            for window in windows {
                let value = KV::new(key.clone(), rng.random_range(-5..100));
                out.push(WindowedValue { value, timestamp: t, window, pane: PaneInfo::NO_FIRING });
            }
        }
        out
    }

    #[test]
    fn a_window_aggregation_fires_the_panes_of_the_general_engine() {
        let metrics = MetricsContainerImpl::new();
        let ctx = OpContext { processing_time: 0, metrics: &metrics, draining: false };
        let kernel = weir_sdk::runner_api::combine_kernel::<String, SumFn<i64>>(SumFn::default());
        // What the disk backend did over every seed: each path taken somewhere.
        let (mut spilled, mut sliced, mut tracked_reads) = (0, 0, 0);
        let metric = |op: &WindowAggregation, name: &str| {
            op.state_backend_metrics().into_iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v)
        };
        for (s, strategy) in strategies().into_iter().enumerate() {
            assert!(applies(&strategy));
            for seed in 0..20u64 {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 7 + s as u64);
                let lifted = rng.random_bool(0.5);
                let mut general = GroupOperator::new_for("G", strategy.clone(), Values::Combine(kernel.clone()));
                if lifted {
                    general = general.lifted();
                }
                let mut fast = WindowAggregation::of("G", strategy.clone(), kernel.clone());
                // The same on the disk backend with a budget of a few groups: windows leave
                // memory and fire from disk a slice a call; its changes are kept from a random
                // step on (before, a group's parts on disk and in memory are merged late).
                let dir = tempfile::tempdir().unwrap();
                let backend = crate::state_backend::StateBackend::of(&weir_sdk::options::StateOptions {
                    backend: weir_sdk::options::StateBackendKind::Disk,
                    memory_budget: rng.random_range(200..2000),
                    local_dir: Some(dir.path().display().to_string()),
                });
                let on_disk = || WindowAggregation::of("G", strategy.clone(), kernel.clone()).with_state(&backend);
                let mut disk = on_disk();
                let commits_from = rng.random_range(0..40);
                let mut disk_committed = crate::operator::testing::Committed::default();
                let mut wm = weir_sdk::time::MIN_TIMESTAMP;
                // What each has committed by the changes it reported (issue 52).
                let (mut fast_committed, mut general_committed) =
                    (crate::operator::testing::Committed::default(), crate::operator::testing::Committed::default());
                for step in 0..30 {
                    let input = rows(&mut rng, &strategy, wm.max(0));
                    // The same rows as the exchange delivers them: typed, encoded, or lifted.
                    let (a, b, c) = match (lifted, rng.random_range(0..2)) {
                        (true, _) => {
                            let mut e = EncodedKvBatch::default();
                            kernel.partial(vec![Batch::new(input)], &mut e).unwrap();
                            e.lifted = true;
                            (Batch::new(e.clone()), Batch::new(e.clone()), Batch::new(e))
                        }
                        (false, 0) => (Batch::new(input.clone()), Batch::new(input.clone()), Batch::new(input)),
                        (false, _) => {
                            let mut e = EncodedKvBatch::default();
                            kernel.encode(Batch::new(input), &mut e).unwrap();
                            (Batch::new(e.clone()), Batch::new(e.clone()), Batch::new(e))
                        }
                    };
                    let want = general.process_bundles(vec![a], &ctx).unwrap().remove(0);
                    let got = fast.process_bundles(vec![b], &ctx).unwrap().remove(0);
                    assert_eq!(outputs(got), outputs(want.clone()), "seed {seed}, step {step}: nothing fires on input");
                    let got = disk.process_bundles(vec![c], &ctx).unwrap().remove(0);
                    assert_eq!(outputs(got), outputs(want), "seed {seed}, step {step}: on disk");
                    if rng.random_bool(0.2) {
                        // A checkpoint and a restore in between.
                        let entries = fast.state_entries().unwrap();
                        fast = WindowAggregation::of("G", strategy.clone(), kernel.clone());
                        fast_committed = crate::operator::testing::Committed::restored(&entries);
                        fast.restore_entries(entries).unwrap();
                        let mut entries = disk.state_entries().unwrap();
                        let mut memory = fast.state_entries().unwrap();
                        entries.sort();
                        memory.sort();
                        assert_eq!(entries, memory, "seed {seed}, step {step}: the disk's snapshot");
                        disk = on_disk();
                        disk_committed = crate::operator::testing::Committed::restored(&entries);
                        disk.restore_entries(entries).unwrap();
                    }
                    wm = match rng.random_range(0..10) {
                        0 => wm,
                        9 if step > 20 => weir_sdk::time::MAX_TIMESTAMP,
                        _ => wm.max(0) + rng.random_range(0..25),
                    };
                    let want = general.advance_bundles(wm, &ctx).unwrap().remove(0);
                    let got = fast.advance_bundles(wm, &ctx).unwrap().remove(0);
                    assert_eq!(outputs(got), outputs(want.clone()), "seed {seed}, step {step}, watermark {wm}");
                    // From disk, a slice a call until it asks for no more.
                    let mut got = disk.advance_bundles(wm, &ctx).unwrap().remove(0);
                    let mut calls = 0;
                    while disk.next_processing_timer().is_some() {
                        let held = disk.hold().is_some_and(|h| fast.hold().is_none_or(|f| h <= f));
                        assert!(held, "seed {seed}, step {step}: the output watermark is held while firing");
                        got.extend(disk.advance_bundles(wm, &ctx).unwrap().remove(0));
                        calls += 1;
                        sliced += 1;
                        assert!(calls < 10_000, "seed {seed}, step {step}: firing from disk never ends");
                    }
                    assert_eq!(outputs(got), outputs(want), "seed {seed}, step {step}, watermark {wm}: on disk");
                    assert_eq!(disk.hold(), fast.hold());
                    assert_eq!(disk.dropped(), fast.dropped());
                    assert!(disk.state_rows() >= fast.state_rows(), "seed {seed}, step {step}");
                    if step >= commits_from {
                        disk_committed.commit(&mut disk);
                    }
                    spilled += metric(&disk, "spilledBytes");
                    tracked_reads += metric(&disk, "cacheHitCount");
                    assert_eq!(
                        fast.hold().filter(|_| wm > weir_sdk::time::MIN_TIMESTAMP),
                        general.hold().filter(|_| wm > weir_sdk::time::MIN_TIMESTAMP)
                    );
                    assert_eq!(fast.dropped(), general.dropped(), "seed {seed}, step {step}");
                    assert_eq!(fast.state_rows(), general.state_rows(), "seed {seed}, step {step}");
                    fast_committed.commit(&mut fast);
                    general_committed.commit(&mut general);
                    if wm == weir_sdk::time::MAX_TIMESTAMP {
                        break;
                    }
                }
            }
        }
        assert!(
            spilled > 0 && sliced > 0 && tracked_reads > 0,
            "{spilled} bytes spilled, {sliced} slices, {tracked_reads} reads"
        );
    }

    #[test]
    fn only_windows_that_fire_once_at_their_end_are_aggregated() {
        let fixed = || WindowingStrategy::of(Arc::new(FixedWindows::of(std::time::Duration::from_millis(10))));
        assert!(applies(&fixed()));
        let mut late = fixed();
        late.allowed_lateness_ms = 1;
        assert!(!applies(&late), "a late pane may follow");
        let mut early = fixed();
        early.trigger = Trigger::AfterWatermark { early: Some(Box::new(Trigger::AfterCount(2))), late: None };
        assert!(!applies(&early), "early panes");
        let mut earliest = fixed();
        earliest.timestamp_combiner = TimestampCombiner::Earliest;
        assert!(!applies(&earliest), "outputs at the earliest input");
        let sessions = WindowingStrategy::of(Arc::new(weir_sdk::window_fn::Sessions::with_gap_duration(
            std::time::Duration::from_millis(10),
        )));
        assert!(!applies(&sessions), "merging windows");
        let _ = IntervalWindow::new(0, 1);
    }
}
