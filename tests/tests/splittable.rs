//! Splittable DoFns on every runner: every position of every restriction output once however
//! the runner splits, checkpoints and resumes; the watermark held at the pending restrictions'
//! estimates; polling with a resume delay; trackers that do not split honestly or leave work
//! undone found out; PeriodicSequence.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::io::periodic::{PeriodicSequence, SequenceDefinition};
use weir_sdk::io::{BoundedReader, BoundedSource};
use weir_sdk::prelude::*;
use weir_sdk::splittable::*;
use weir_sdk::window::Window as W;
use weir_tests::{conformance, Seen};

/// For each `n`, the positions `0..n` as `(n, i)` at timestamp `i`, its initial restriction
/// split into parts of `part` positions.
#[derive(Clone)]
struct Positions {
    part: i64,
}

impl SplittableDoFn for Positions {
    type In = i64;
    type Out = KV<i64, i64>;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, *n))
    }
    fn split_restriction(&self, _: &i64, r: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        Ok(r.split(self.part))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
        OffsetRangeTracker::new(r)
    }
    fn initial_watermark_estimator(&self, _: &i64, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(0)
    }
    fn process(
        &mut self,
        n: &i64,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, KV<i64, i64>>,
    ) -> UserResult<ProcessContinuation> {
        let mut i = tracker.current_restriction().from;
        // Nothing before the restriction's start is output any more.
        ctx.set_watermark(i)?;
        while tracker.try_claim(i) {
            ctx.output_with_timestamp(KV::new(*n, i), i)?;
            i += 1;
        }
        Ok(ProcessContinuation::stop())
    }
}

/// Per `n`: how many positions came out and their sum (a repeated or lost position changes both).
fn counted(out: &PCollection<KV<i64, i64>>) -> PCollection<KV<i64, (i64, i64)>> {
    out.apply("Global", Window::into(GlobalWindows)).apply("Summary", Combine::per_key(SummaryFn))
}

#[derive(Clone)]
struct SummaryFn;

impl CombineFn for SummaryFn {
    type In = i64;
    type Accum = (i64, i64);
    type Out = (i64, i64);
    fn create_accumulator(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add_input(&self, acc: &mut (i64, i64), i: i64) {
        acc.0 += 1;
        acc.1 += i;
    }
    fn merge_accumulators(&self, accs: Vec<(i64, i64)>) -> (i64, i64) {
        accs.into_iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
    fn extract_output(&self, acc: (i64, i64)) -> (i64, i64) {
        acc
    }
}

fn summary(n: i64) -> KV<i64, (i64, i64)> {
    KV::new(n, (n, n * (n - 1) / 2))
}

/// A tracker whose splits do not shrink the restriction it keeps: the DoFn goes on claiming
/// the positions it gave away.
struct Dishonest(OffsetRangeTracker);

impl RestrictionTracker for Dishonest {
    type Restriction = OffsetRange;
    type Position = i64;
    fn try_claim(&mut self, i: i64) -> bool {
        self.0.try_claim(i)
    }
    fn current_restriction(&self) -> OffsetRange {
        self.0.current_restriction()
    }
    fn try_split(&mut self, fraction: f64) -> Option<OffsetRange> {
        let before = self.0.current_restriction();
        let residual = self.0.try_split(fraction)?;
        self.0 = OffsetRangeTracker::new(before);
        Some(residual)
    }
    fn check_done(&self) -> Result<(), String> {
        Ok(())
    }
    fn progress(&self) -> Progress {
        self.0.progress()
    }
}

#[derive(Clone)]
struct DishonestPositions;

impl SplittableDoFn for DishonestPositions {
    type In = i64;
    type Out = i64;
    type Restriction = OffsetRange;
    type Tracker = Dishonest;
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, *n))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> Dishonest {
        Dishonest(OffsetRangeTracker::new(r))
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut Claims<'_, Dishonest>,
        ctx: &mut SdfContext<'_, i64>,
    ) -> UserResult<ProcessContinuation> {
        let mut i = tracker.current_restriction().from;
        while tracker.try_claim(i) {
            ctx.output(i);
            i += 1;
        }
        Ok(ProcessContinuation::stop())
    }
}

/// Claims only the first half of its restriction and says it is done.
#[derive(Clone)]
struct HalfDone;

impl SplittableDoFn for HalfDone {
    type In = i64;
    type Out = i64;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, *n))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
        OffsetRangeTracker::new(r)
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, i64>,
    ) -> UserResult<ProcessContinuation> {
        let r = tracker.current_restriction();
        let mut i = r.from;
        while i < r.from + r.len() / 2 && tracker.try_claim(i) {
            ctx.output(i);
            i += 1;
        }
        Ok(ProcessContinuation::stop())
    }
}

/// Polls a growing source: position `i` exists once the processing time reaches `base + 5 i`
/// ms; there are `n` of them. Returns resume with a delay when nothing new is there.
#[derive(Clone)]
struct Poller {
    base: Timestamp,
    n: i64,
}

impl SplittableDoFn for Poller {
    type In = ();
    type Out = i64;
    type Restriction = OffsetRange;
    type Tracker = GrowableOffsetRangeTracker;
    fn initial_restriction(&self, _: &()) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, i64::MAX))
    }
    fn new_tracker(&self, _: &(), r: OffsetRange) -> GrowableOffsetRangeTracker {
        let (base, n) = (self.base, self.n);
        GrowableOffsetRangeTracker::of(r, move || ((weir_sdk::time::now_millis() - base) / 5 + 1).clamp(0, n))
    }
    fn unbounded_per_element(&self) -> bool {
        true
    }
    fn process(
        &mut self,
        _: &(),
        tracker: &mut Claims<'_, GrowableOffsetRangeTracker>,
        ctx: &mut SdfContext<'_, i64>,
    ) -> UserResult<ProcessContinuation> {
        let mut i = tracker.current_restriction().from;
        loop {
            if i >= self.n {
                // The source ended: claiming past its end gives the range its end.
                tracker.try_claim(i64::MAX);
                return Ok(ProcessContinuation::stop());
            }
            if ctx.processing_time() < self.base + 5 * i {
                return Ok(ProcessContinuation::resume().with_resume_delay(Duration::from_millis(3)));
            }
            if !tracker.try_claim(i) {
                return Ok(ProcessContinuation::stop());
            }
            ctx.output(i);
            i += 1;
        }
    }
}

conformance! {
    fn every_position_of_every_restriction_is_output_once(p) {
        // 150 000 positions of one element go past a batch's budget (checkpointed and resumed),
        // and parts of 997 spread over the workers.
        let ns = vec![0i64, 1, 5, 3_000, 150_000];
        let out = p.apply("Ns", Create::of(ns.clone())).apply("Positions", SplittableParDo::of(Positions { part: 997 }));
        assert_that(&counted(&out)).contains_in_any_order(ns.iter().filter(|&&n| n > 0).map(|&n| summary(n)).collect());
        let all = out.apply("Count", Count::globally());
        assert_that(&all).contains_in_any_order(vec![153_006]);
        p.run();
    }

    fn one_restriction_checkpointed_over_many_batches_outputs_each_position_once(p) {
        // One part only: the restriction itself is checkpointed at the budget and resumed.
        let out = p.apply("N", Create::of(vec![200_000i64])).apply("Positions", SplittableParDo::of(Positions { part: i64::MAX }));
        assert_that(&counted(&out)).contains_in_any_order(vec![summary(200_000)]);
        p.run();
    }

    fn the_watermark_waits_for_the_pending_restrictions(p) {
        // Positions at their own timestamps, counted in windows of 40 000 ms: every window is
        // complete and on time, though the input's watermark is at the end at once and the
        // restriction takes several batches (epochs, rounds). Without the hold, every runner
        // drops the later positions as late.
        let out = p
            .apply("N", Create::of(vec![600_000i64]))
            .apply("Positions", SplittableParDo::of(Positions { part: i64::MAX }))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(40_000))))
            .apply("Count", Count::globally().without_defaults());
        assert_that(&out).contains_in_any_order(vec![40_000; 15]);
        assert_that(&out).in_on_time_pane(W::Interval(IntervalWindow::new(560_000, 600_000))).contains_in_any_order(vec![40_000]);
        assert_that(&out).in_on_time_pane(W::Interval(IntervalWindow::new(0, 40_000))).contains_in_any_order(vec![40_000]);
        p.run();
    }

    fn a_polling_dofn_resumes_until_its_source_ends(p) {
        let base = weir_sdk::time::now_millis();
        let out = p.apply("Start", Create::of(vec![()])).apply("Poll", SplittableParDo::of(Poller { base, n: 40 }));
        assert_that(&out).contains_in_any_order((0..40).collect());
        assert!(p.graph().is_streaming());
        p.run();
    }

    fn a_restriction_left_unfinished_fails_its_step(p) {
        p.apply("N", Create::of(vec![10i64])).apply("Half", SplittableParDo::of(HalfDone));
        let err = p.try_run().expect_err("the tracker was not done");
        let msg = err.to_string();
        assert!(msg.contains("Half") && msg.contains("was not attempted"), "{msg}");
    }

    fn periodic_sequence_ticks_once_each_as_time_passes(p) {
        // 11 ticks 20 ms apart, the first five already due.
        let now = weir_sdk::time::now_millis();
        let start = now / 20 * 20 - 100;
        let defs = vec![
            SequenceDefinition::new(start, start + 200, Duration::from_millis(20)),
            SequenceDefinition::new(start + 5, start + 45, Duration::from_millis(20)),
        ];
        let ticks = p.apply("Definitions", Create::of(defs)).apply("Ticks", PeriodicSequence::create());
        let mut want: Vec<i64> = (0..=10).map(|i| start + 20 * i).collect();
        want.extend([start + 5, start + 25, start + 45]);
        let stamped = ticks.apply("Stamps", Reify::timestamps()).apply("Render", Map::new(|tv: TimestampedValue<i64>| (tv.value, tv.timestamp)));
        assert_that(&stamped).contains_in_any_order(want.iter().map(|&t| (t, t)).collect());
        assert!(p.graph().is_streaming());
        p.run();
    }

    fn periodic_sequence_windows_close_as_ticks_pass(p) {
        // Each tick in a window of its own: every window fires on time, once its tick passed.
        let now = weir_sdk::time::now_millis();
        let start = now / 20 * 20 - 60;
        let ticks = p
            .apply("Definition", Create::of(vec![SequenceDefinition::new(start, start + 140, Duration::from_millis(20))]))
            .apply("Ticks", PeriodicSequence::create())
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(20))))
            .apply("Count", Count::globally().without_defaults());
        assert_that(&ticks).contains_in_any_order(vec![1; 8]);
        assert_that(&ticks).in_on_time_pane(W::Interval(IntervalWindow::new(start + 140, start + 160))).contains_in_any_order(vec![1]);
        p.run();
    }
}

conformance! {
    fn a_drain_ends_an_endless_periodic_sequence_with_every_window_fired(p) {
        // Beam's drain truncates the open-ended restrictions: the ticks stop, the watermark
        // goes to the end, every window with a tick fires once, and the run is Done.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let start = weir_sdk::time::now_millis() / 10 * 10 - 50;
        let counts = p
            .apply("Definition", Create::of(vec![SequenceDefinition::new(start, i64::MAX / 2, Duration::from_millis(10))]))
            .apply("Ticks", PeriodicSequence::create())
            .apply("Seen", ParDo::of(Seen(seen.clone())))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(50))))
            .apply("Count", Count::globally().without_defaults())
            .apply("Windows", Reify::windows())
            .apply("Starts", Map::new(|v: ValueInSingleWindow<i64>| match v.window {
                W::Interval(w) => (w.start, v.value),
                _ => (-1, v.value),
            }));
        let read = seen.clone();
        assert_that(&counts)
            .satisfies(move |counts| weir_tests::counted_once_in_every_window(&read, counts, |t| t - t.rem_euclid(50)));
        let result = Pipeline::run(p).unwrap();
        for _ in 0..2000 {
            if seen.lock().unwrap().len() >= 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(seen.lock().unwrap().len() >= 8, "the sequence never ticked");
        assert_eq!(result.state(), PipelineState::Running);
        result.drain().unwrap();
        assert_eq!(result.wait_until_finish(Some(Duration::from_secs(20))).unwrap(), PipelineState::Done);
    }
}

/// The direct runner splits restrictions at random claims: a tracker whose splits keep what
/// they gave away repeats positions, and the output shows it.
#[test]
fn the_direct_runner_finds_a_tracker_that_splits_dishonestly() {
    let p = weir_tests::pipeline("direct");
    // Small: every residual of a dishonest split repeats the rest of its range, and splits again.
    let out = p.apply("N", Create::of(vec![40i64])).apply("Positions", SplittableParDo::of(DishonestPositions));
    let count = out.apply("Count", Count::globally());
    assert_that(&count).contains_in_any_order(vec![40]);
    assert!(p.try_run().is_err(), "random splits repeat positions of a dishonest tracker");
    // The same DoFn with an honest tracker passes.
    let p = weir_tests::pipeline("direct");
    let out =
        p.apply("N", Create::of(vec![2_000i64])).apply("Positions", SplittableParDo::of(Positions { part: i64::MAX }));
    assert_that(&out.apply("Count", Count::globally())).contains_in_any_order(vec![2_000]);
    p.run();
}

// A user's bounded source of the numbers `from..to` (at their own timestamps), whose reader
// may or may not say how many it has left.
use weir_sdk::testing::RangeSource as Range;

/// Legacy sources read as Beam's Read expands, through splittable DoFns, on every
/// configuration (the direct runner always reads so, split at random claims): every element of
/// a bounded source that knows its count or not, and of an unbounded source with gaps, once.
#[test]
fn legacy_sources_read_through_splittable_dofns_once_on_every_runner() {
    use weir_sdk::io::{Read, ReadUnbounded};
    use weir_sdk::options::ReadVia;
    weir_tests::register_runners();
    for config in weir_tests::CONFIGURATIONS {
        let mut options = weir_tests::configuration(config);
        options.read_via = Some(ReadVia::Splittable);
        let p = weir_sdk::testing::TestPipeline::from_options(options);
        let counted = p.apply("Counted", Read::from(Range { from: 0, to: 600, counted: true }));
        let uncounted = p.apply("Uncounted", Read::from(Range { from: 0, to: 600, counted: false }));
        let stream = p.apply("Stream", ReadUnbounded::from(weir_tests::sources::Numbers::new(Some(400), true)));
        assert_that(&counted).contains_in_any_order((0..600).collect::<Vec<_>>());
        assert_that(&uncounted).contains_in_any_order((0..600).collect::<Vec<_>>());
        assert_that(&stream).contains_in_any_order((0..400).collect::<Vec<_>>());
        // The stream's watermark closes its windows as it is read.
        let windows = stream
            .apply("Window", Window::into(FixedWindows::of(std::time::Duration::from_millis(1_000))))
            .apply("Count", Count::globally().without_defaults());
        assert_that(&windows).contains_in_any_order(vec![100; 4]);
        // What the plan runs: the splittable DoFn, under the Read's name.
        let plan = p.explain().unwrap_or_else(|e| panic!("{config}: {e}"));
        assert!(plan.contains("SplittableParDo[BoundedSourceFn"), "{config}: {plan}");
        p.run();
    }
}

/// A reader that says it has more than it gives fails its Read with the step and what it
/// found, on the direct runner as natively.
#[test]
fn a_reader_that_ends_short_of_its_count_fails_its_read() {
    struct Short(i64);
    impl BoundedReader for Short {
        type Output = i64;
        fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
            self.0 += 1;
            Ok((self.0 <= 5).then_some((self.0, 0)))
        }
        fn remaining(&self) -> Option<u64> {
            Some(10u64.saturating_sub(self.0 as u64))
        }
    }
    #[derive(Clone)]
    struct Lies;
    impl BoundedSource for Lies {
        type Output = i64;
        type Reader = Short;
        fn split(&self, _: u64) -> UserResult<Vec<Self>> {
            Ok(vec![Lies])
        }
        fn estimated_size_bytes(&self) -> UserResult<u64> {
            Ok(10)
        }
        fn create_reader(&self) -> UserResult<Short> {
            Ok(Short(0))
        }
    }
    let p = weir_tests::pipeline("direct");
    p.apply("Lies", weir_sdk::io::Read::from(Lies));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("'Lies'") && err.contains("ended after 5 elements, short of the 10"), "{err}");
}

/// The direct runner has no native read to choose.
#[test]
fn the_direct_runner_refuses_a_native_read() {
    let mut options = weir_tests::configuration("direct");
    options.read_via = Some(weir_sdk::options::ReadVia::Native);
    let p = weir_sdk::testing::TestPipeline::from_options(options);
    p.apply("Nums", Create::of(vec![1i64]));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("--read-via native") && err.contains("direct runner"), "{err}");
}

/// Fails unless `setup` ran on the instance first, in every method Beam calls on it.
#[derive(Clone)]
struct NeedsSetup {
    ready: bool,
}

impl NeedsSetup {
    fn check(&self, method: &str) -> UserResult {
        if self.ready {
            Ok(())
        } else {
            Err(format!("{method} was called on an instance whose setup never ran").into())
        }
    }
}

impl SplittableDoFn for NeedsSetup {
    type In = i64;
    type Out = i64;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn setup(&mut self) -> UserResult {
        self.ready = true;
        Ok(())
    }
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        self.check("initial_restriction")?;
        Ok(OffsetRange::new(0, *n))
    }
    fn split_restriction(&self, _: &i64, r: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        self.check("split_restriction")?;
        Ok(r.split(3))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
        OffsetRangeTracker::new(r)
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, i64>,
    ) -> UserResult<ProcessContinuation> {
        self.check("process")?;
        let mut i = tracker.current_restriction().from;
        while tracker.try_claim(i) {
            ctx.output(i);
            i += 1;
        }
        Ok(ProcessContinuation::stop())
    }
}

/// One position per call, each call setting the manual watermark high and then lower, and
/// outputting the estimate it sees: Beam's manual estimator keeps the highest value set.
#[derive(Clone)]
struct LowersItsWatermark;

impl SplittableDoFn for LowersItsWatermark {
    type In = i64;
    type Out = KV<i64, i64>;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, *n))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
        OffsetRangeTracker::new(r)
    }
    fn initial_watermark_estimator(&self, _: &i64, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(0)
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, KV<i64, i64>>,
    ) -> UserResult<ProcessContinuation> {
        let i = tracker.current_restriction().from;
        if !tracker.try_claim(i) {
            return Ok(ProcessContinuation::stop());
        }
        if i == 0 {
            ctx.set_watermark(1_000)?;
        }
        // Lower than before, in this call and (from the checkpointed estimator) in later ones.
        ctx.set_watermark(10 - i)?;
        ctx.output_with_timestamp(KV::new(i, ctx.watermark()), 2_000)?;
        Ok(ProcessContinuation::resume())
    }
}

/// One position per call, each call registering a callback for after its commit and resuming
/// 50 ms later: each call outputs whether the callbacks of every call before it had run.
#[derive(Clone)]
struct Acknowledges {
    finalized: Arc<AtomicUsize>,
}

impl SplittableDoFn for Acknowledges {
    type In = i64;
    type Out = KV<i64, bool>;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn initial_restriction(&self, n: &i64) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, *n))
    }
    fn new_tracker(&self, _: &i64, r: OffsetRange) -> OffsetRangeTracker {
        OffsetRangeTracker::new(r)
    }
    fn finalizes_bundles(&self) -> bool {
        true
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, KV<i64, bool>>,
    ) -> UserResult<ProcessContinuation> {
        let i = tracker.current_restriction().from;
        if !tracker.try_claim(i) {
            return Ok(ProcessContinuation::stop());
        }
        ctx.output(KV::new(i, self.finalized.load(Ordering::SeqCst) >= i as usize));
        let finalized = self.finalized.clone();
        ctx.after_commit(move || {
            finalized.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        Ok(ProcessContinuation::resume().with_resume_delay(Duration::from_millis(50)))
    }
}

conformance! {
    fn every_instance_is_set_up_before_any_other_method(p) {
        // Beam's lifecycle: the instance that pairs elements with their initial restrictions
        // is set up first too.
        let out = p.apply("Ns", Create::of(vec![4i64, 7])).apply("Positions", SplittableParDo::of(NeedsSetup { ready: false }));
        assert_that(&out).contains_in_any_order(vec![0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6]);
        p.run();
    }

    fn a_manual_watermark_set_lower_does_not_move_back(p) {
        let out = p.apply("N", Create::of(vec![3i64])).apply("Lowers", SplittableParDo::of(LowersItsWatermark));
        assert_that(&out).contains_in_any_order(vec![KV::new(0, 1_000), KV::new(1, 1_000), KV::new(2, 1_000)]);
        p.run();
    }

    fn a_callback_runs_after_its_commit_while_the_element_still_has_work(p) {
        // Beam runs a bundle's finalization once its output is committed, residual or not: a
        // DoFn that checkpoints itself sees the callbacks of its earlier calls.
        let finalized = Arc::new(AtomicUsize::new(0));
        let out = p.apply("N", Create::of(vec![4i64])).apply("Ack", SplittableParDo::of(Acknowledges { finalized: finalized.clone() }));
        assert_that(&out).contains_in_any_order((0..4).map(|i| KV::new(i, true)).collect());
        p.run();
        assert_eq!(finalized.load(Ordering::SeqCst), 4, "every call's callback ran");
    }
}
