//! `--state-backend disk`: a grouping's or a stateful DoFn's state past
//! `--state-memory-budget` moves to disk and comes back, with the same results on every runner
//! configuration, and its figures in the progress and the job's metrics.

use weir::microbatch::MicroBatchRunner;
use weir_sdk::metrics::MetricsFilter;
use weir_sdk::options::{StateBackendKind, StateOptions};
use weir_sdk::prelude::*;
use weir_sdk::testing::TestPipeline;
use weir_sdk::PipelineOptions;

const KEYS: i64 = 400;
const ELEMENTS: i64 = 6_000;

/// Groups and co-groups `ELEMENTS` numbers over `KEYS` keys (strings long enough that the
/// state passes a few kilobytes), and checks every group.
fn grouping(p: &Pipeline) {
    let key = |k: i64| format!("key-{k:05}-{}", "x".repeat(24));
    let input: Vec<KV<String, i64>> = (0..ELEMENTS).map(|i| KV::new(key(i * 7 % KEYS), i)).collect();
    let kvs = p.apply("Create", Create::of(input));
    let sums = kvs.apply("GroupByKey", GroupByKey::create()).apply(
        "Sum",
        Map::new(|kv: KV<String, Vec<i64>>| (kv.key, kv.value.len() as i64, kv.value.iter().sum::<i64>())),
    );
    let mut want: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for i in 0..ELEMENTS {
        let e = want.entry(key(i * 7 % KEYS)).or_default();
        e.0 += 1;
        e.1 += i;
    }
    assert_that(&sums).contains_in_any_order(want.iter().map(|(k, (n, s))| (k.clone(), *n, *s)).collect());
    let tens = kvs.apply("Tens", Map::new(|kv: KV<String, i64>| KV::new(kv.key, kv.value / 10)));
    let (a, b) = (TupleTag::<i64>::new("a"), TupleTag::<i64>::new("b"));
    let (ta, tb) = (a.clone(), b.clone());
    let joined = KeyedPCollectionTuple::of(&a, &kvs).and(&b, &tens).apply("Join", CoGroupByKey).apply(
        "Sizes",
        Map::new(move |r: KV<String, CoGbkResult>| {
            (r.key.clone(), r.value.get_all(&ta).unwrap().len(), r.value.get_all(&tb).unwrap().len())
        }),
    );
    assert_that(&joined)
        .contains_in_any_order(want.iter().map(|(k, (n, _))| (k.clone(), *n as usize, *n as usize)).collect());
    // Combine.perKey as a window aggregation: in the global window, and in sliding windows
    // (element i at i ms, windows of 2,000 ms every 1,000 ms).
    let sums = kvs.apply("SumPerKey", Sum::per_key());
    assert_that(&sums).contains_in_any_order(want.iter().map(|(k, (_, s))| KV::new(k.clone(), *s)).collect());
    let windowed = kvs
        .apply("Stamp", WithTimestamps::of(|kv: &KV<String, i64>| kv.value))
        .apply("Slide", Window::into(SlidingWindows::of(ms(2000)).every(ms(1000))))
        .apply("CountPerKey", Count::per_key())
        .apply("Ends", ParDo::of(WithWindowEnd));
    let mut counts: std::collections::BTreeMap<(String, i64), i64> = Default::default();
    for i in 0..ELEMENTS {
        for end in [(i / 1000 + 1) * 1000, (i / 1000 + 2) * 1000] {
            *counts.entry((key(i * 7 % KEYS), end)).or_default() += 1;
        }
    }
    assert_that(&windowed).contains_in_any_order(counts.into_iter().map(|((k, e), n)| (k, e, n)).collect());
}

fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// Each count with the end of its window.
#[derive(Clone)]
struct WithWindowEnd;

impl DoFn for WithWindowEnd {
    type In = KV<String, i64>;
    type Out = (String, i64, i64);
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, (String, i64, i64)>) -> UserResult {
        let end = match ctx.window() {
            weir_sdk::window::Window::Interval(w) => w.end,
            other => panic!("not a sliding window: {other:?}"),
        };
        ctx.output((e.key, end, e.value));
        Ok(())
    }
}

/// The running count of its key with each element (value state).
#[derive(Clone)]
struct RunningCount;

impl DoFn for RunningCount {
    type In = KV<String, i64>;
    type Out = (String, i64, i64);
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, (String, i64, i64)>) -> UserResult {
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0) + 1;
        ctx.value_state::<i64>("count").write(&n)?;
        ctx.output((e.key, e.value, n));
        Ok(())
    }
}

/// Stateful DoFns over `ELEMENTS` numbers and `KEYS` keys: running counts (every element
/// reads its key's state back), and sums flushed by timers at the end of the window.
fn stateful(p: &Pipeline) {
    let key = |k: i64| format!("key-{k:05}-{}", "y".repeat(24));
    let input: Vec<KV<String, i64>> = (0..ELEMENTS).map(|i| KV::new(key(i * 7 % KEYS), i)).collect();
    let kvs = p.apply("CreateKeyed", Create::of(input));
    let counts = kvs.apply("Count", ParDo::stateful(RunningCount));
    // Each key's counts are 1..=n, whatever order its elements came in.
    let finals = counts
        .apply("ByKey", Map::new(|(k, _, n): (String, i64, i64)| KV::new(k, n)))
        .apply("Counts", GroupByKey::create())
        .apply(
            "Check",
            Map::new(|kv: KV<String, Vec<i64>>| {
                let mut n = kv.value.clone();
                n.sort();
                (kv.key, n == (1..=kv.value.len() as i64).collect::<Vec<_>>(), kv.value.len() as i64)
            }),
        );
    let sums = kvs.apply("SumAtEnd", ParDo::stateful(weir_tests::BufferUntilEndOfWindow));
    // Deduplicate remembers every key (each seen 15 times).
    let firsts = kvs.apply("Dedup", Deduplicate::keyed_values()).apply("Keys", Keys::create());
    assert_that(&firsts).contains_in_any_order((0..KEYS).map(key).collect());
    let mut want: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for i in 0..ELEMENTS {
        let e = want.entry(key(i * 7 % KEYS)).or_default();
        e.0 += 1;
        e.1 += i;
    }
    assert_that(&finals).contains_in_any_order(want.iter().map(|(k, (n, _))| (k.clone(), true, *n)).collect());
    assert_that(&sums).contains_in_any_order(want.iter().map(|(k, (_, s))| KV::new(k.clone(), *s)).collect());
}

fn on_disk(mut o: PipelineOptions, dir: &std::path::Path) -> PipelineOptions {
    o.state = StateOptions {
        backend: StateBackendKind::Disk,
        memory_budget: 8 << 10,
        local_dir: Some(dir.display().to_string()),
    };
    o
}

#[test]
fn groupings_and_stateful_dofns_past_the_budget_give_the_same_results_on_every_runner() {
    weir_tests::register_runners();
    for config in weir_tests::CONFIGURATIONS {
        let dir = tempfile::tempdir().unwrap();
        let p = TestPipeline::from_options(on_disk(weir_tests::configuration(config), dir.path()));
        grouping(&p);
        p.run();
        let p = TestPipeline::from_options(on_disk(weir_tests::configuration(config), dir.path()));
        stateful(&p);
        p.run();
        // The job's store went with it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{config}");
    }
}

#[test]
fn the_progress_and_the_metrics_show_what_went_to_disk_and_came_back() {
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    let mut o = PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "2", "--max-batch-size", "500"])
        .unwrap();
    o = on_disk(o, dir.path());
    let p = Pipeline::new(o);
    grouping(&p);
    stateful(&p);
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
    let recent = query.recent_progress();
    let figure = |step: &str, name: &str| -> Vec<u64> {
        recent
            .iter()
            .filter_map(|pr| pr.state_operators.iter().find(|o| o.operator_name == step))
            .map(|o| *o.custom_metrics.get(name).unwrap_or_else(|| panic!("{name} of {step}")))
            .collect()
    };
    for step in ["GroupByKey", "Join", "SumPerKey", "CountPerKey", "Count", "SumAtEnd", "Dedup"] {
        assert!(figure(step, "stateOnDiskRows").iter().any(|&r| r > 0), "{step}");
        assert!(figure(step, "spilledBytes").last().is_some_and(|&b| b > 0));
        // Keys that came back when touched again, and at the end of the input.
        assert!(figure(step, "cacheMissCount").last().is_some_and(|&m| m > 0));
        assert!(figure(step, "cacheHitCount").last().is_some_and(|&h| h > 0));
        // All of it fired: nothing is left on disk or in memory.
        assert_eq!(figure(step, "stateOnDiskRows").last(), Some(&0));
        let last = recent.last().unwrap().state_operators.iter().find(|o| o.operator_name == step).unwrap();
        assert_eq!(last.num_rows_total, 0);
        // The step's gauges in the job's metrics.
        let m = query.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        let gauge = m.gauge(step, "weir", "spilledBytes").and_then(|g| g.committed.as_ref().map(|c| c.value));
        assert_eq!(gauge, Some(last.custom_metrics["spilledBytes"] as i64));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// With a checkpoint, every commit's delta names the keys that changed wherever they are: a
/// debug build checks each delta, applied to what was committed before, against the whole
/// state (in memory and on disk), on micro-batch and timely.
#[test]
fn checkpoints_of_state_on_disk_are_exact() {
    weir_tests::register_runners();
    for runner in [["--runner", "microbatch", "--parallelism", "2"], ["--runner", "timely", "--workers", "2"]] {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path().join("cp");
        let local = dir.path().join("local");
        std::fs::create_dir_all(&local).unwrap();
        let mut args: Vec<&str> = runner.to_vec();
        args.extend([
            "--max-batch-size",
            "700",
            "--checkpoint-dir",
            cp.to_str().unwrap(),
            "--state-snapshot-interval",
            "3",
        ]);
        let p = TestPipeline::from_options(on_disk(PipelineOptions::from_args(args).unwrap(), &local));
        grouping(&p);
        stateful(&p);
        p.run();
        assert_eq!(std::fs::read_dir(&local).unwrap().count(), 0);
    }
}

/// A store that cannot be opened fails the job, naming the step and the folder.
#[test]
fn an_unusable_local_dir_fails_the_job_naming_the_step_and_the_folder() {
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    // A file where the folder should be.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let o = on_disk(weir_tests::configuration("microbatch_p1"), &file);
    let p = Pipeline::new(o);
    grouping(&p);
    let err = p.run().and_then(|r| r.wait_until_finish(None)).expect_err("the store cannot be opened");
    let msg = err.to_string();
    assert!(msg.contains("GroupByKey") || msg.contains("Join"), "{msg}");
    assert!(msg.contains("disk state store") && msg.contains("not-a-dir"), "{msg}");
}

/// Counts its key's elements and flushes the count a second after the key's latest element
/// (an event timer moved by every element, holding the watermark at its fire time).
#[derive(Clone)]
struct FlushAfterLatest;

impl DoFn for FlushAfterLatest {
    type In = KV<String, i64>;
    type Out = (String, i64, i64);
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, (String, i64, i64)>) -> UserResult {
        let latest = ctx.value_state::<i64>("latest").read()?.map_or(e.value, |l| l.max(e.value));
        ctx.value_state::<i64>("latest").write(&latest)?;
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0) + 1;
        ctx.value_state::<i64>("count").write(&n)?;
        ctx.timer("flush", weir_sdk::state::TimeDomain::EventTime).set(latest + 1000)?;
        Ok(())
    }
    fn on_timer(
        &mut self,
        t: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, (String, i64, i64)>,
    ) -> UserResult {
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0);
        let key: String = ctx.key()?;
        ctx.output((key, n, t.fire_timestamp))
    }
}

/// Counts its key's elements and outputs the count from a processing-time timer an hour after
/// the key's latest element (so it fires when the input ends), moved by every element.
#[derive(Clone)]
struct CountUntilProcessingTime;

impl DoFn for CountUntilProcessingTime {
    type In = KV<String, i64>;
    type Out = KV<String, i64>;
    fn process(&mut self, _: KV<String, i64>, ctx: &mut ProcessContext<'_, KV<String, i64>>) -> UserResult {
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0) + 1;
        ctx.value_state::<i64>("count").write(&n)?;
        ctx.timer("later", weir_sdk::state::TimeDomain::ProcessingTime).offset(ms(3_600_000)).set_relative()
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, KV<String, i64>>,
    ) -> UserResult {
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0);
        let key: String = ctx.key()?;
        ctx.output(KV::new(key, n))
    }
}

/// Issue 52: a stateful DoFn's timer, hold and expiry indexes keep an entry for every key,
/// including the keys on disk; past their cap they keep their latest entries on disk too.
/// Timers moved by every element (removed and set again, on disk as in memory) fire once each,
/// at the right time, on every runner configuration, and the progress shows the entries that
/// waited on disk.
#[test]
fn timers_past_the_index_cap_wait_on_disk_and_fire_once_at_their_time() {
    const KEYS: i64 = 3_000;
    const ELEMENTS: i64 = 9_000;
    weir_tests::register_runners();
    let key = |k: i64| format!("key-{k:05}-{}", "z".repeat(16));
    let pipeline = |o: PipelineOptions| {
        let p = Pipeline::new(o);
        let input: Vec<KV<String, i64>> = (0..ELEMENTS).map(|i| KV::new(key(i * 7 % KEYS), i)).collect();
        let stamped =
            p.apply("Create", Create::of(input)).apply("Stamp", WithTimestamps::of(|kv: &KV<String, i64>| kv.value));
        let flushed = stamped.apply("FlushAfterLatest", ParDo::stateful(FlushAfterLatest));
        let counted = stamped.apply("CountUntilProcessingTime", ParDo::stateful(CountUntilProcessingTime));
        let mut want: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for i in 0..ELEMENTS {
            let e = want.entry(key(i * 7 % KEYS)).or_default();
            e.0 += 1;
            e.1 = e.1.max(i + 1000);
        }
        assert_that(&counted).contains_in_any_order(want.iter().map(|(k, (n, _))| KV::new(k.clone(), *n)).collect());
        assert_that(&flushed).contains_in_any_order(want.into_iter().map(|(k, (n, t))| (k, n, t)).collect());
        p
    };
    for config in weir_tests::CONFIGURATIONS {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(on_disk(weir_tests::configuration(config), dir.path()));
        p.run().and_then(|r| r.wait_until_finish(None)).unwrap_or_else(|e| panic!("{config}: {e}"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{config}");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "2", "--max-batch-size", "1000"])
        .unwrap();
    let p = pipeline(on_disk(o, dir.path()));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
    for step in ["FlushAfterLatest", "CountUntilProcessingTime"] {
        let on_disk: Vec<u64> = query
            .recent_progress()
            .iter()
            .filter_map(|pr| pr.state_operators.iter().find(|o| o.operator_name == step))
            .map(|o| o.custom_metrics["indexEntriesOnDisk"])
            .collect();
        assert!(on_disk.iter().any(|&n| n > 1_000), "{step}: {on_disk:?}");
        assert_eq!(on_disk.last(), Some(&0), "{step}");
    }
}

/// Adds its window's side input sum to each element.
#[derive(Clone)]
struct AddWindowSum(PCollectionView<weir_sdk::view::Singleton<i64>>);

impl DoFn for AddWindowSum {
    type In = KV<i64, i64>;
    type Out = i64;
    fn process(&mut self, e: KV<i64, i64>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        let sum = ctx.side_input(&self.0)?;
        ctx.output(e.value * 1_000_000 + sum);
        Ok(())
    }
}

/// Issue 52: main-input elements waiting for their side input past the cap wait on disk. Each
/// window's side input is the sum of the main input's own window, ready only once the watermark
/// passes the window's end (here once the whole input is in), so every element waits; a stateless and a stateful ParDo give every
/// element with its sum on every runner configuration, and the progress shows what waited on
/// disk.
#[test]
fn elements_waiting_for_side_inputs_past_the_cap_wait_on_disk() {
    const WINDOWS: i64 = 40;
    const PER_WINDOW: i64 = 150;
    weir_tests::register_runners();
    let pipeline = |o: PipelineOptions| {
        let p = Pipeline::new(o);
        let mut stream = weir_sdk::testing::TestStream::create().advance_watermark_to(0);
        for w in 0..WINDOWS {
            let bundle = (0..PER_WINDOW).map(|i| TimestampedValue::new(w * PER_WINDOW + i, w * 10 + i % 10)).collect();
            stream = stream.add_elements(bundle);
        }
        let main = p
            .apply("Main", stream.advance_watermark_to_infinity())
            .apply("Windows", Window::into(FixedWindows::of(ms(10))));
        let sums = main.apply("Sum", Sum::globally().without_defaults());
        let view = View::as_singleton(&sums);
        let keyed = main.apply("Key", Map::new(|v: i64| KV::new(v % 7, v)));
        let spec = vec![view.spec().clone()];
        let stateless = keyed.apply("Stateless", ParDo::of(AddWindowSum(view.clone())).with_side_inputs(spec.clone()));
        let stateful = keyed.apply("Stateful", ParDo::stateful(AddWindowSum(view.clone())).with_side_inputs(spec));
        let sum_of = |w: i64| (0..PER_WINDOW).map(|i| w * PER_WINDOW + i).sum::<i64>();
        let want: Vec<i64> = (0..WINDOWS * PER_WINDOW).map(|v| v * 1_000_000 + sum_of(v / PER_WINDOW)).collect();
        assert_that(&stateless).contains_in_any_order(want.clone());
        assert_that(&stateful).contains_in_any_order(want);
        p
    };
    for config in weir_tests::CONFIGURATIONS {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(on_disk(weir_tests::configuration(config), dir.path()));
        p.run().and_then(|r| r.wait_until_finish(None)).unwrap_or_else(|e| panic!("{config}: {e}"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{config}");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "2"]).unwrap();
    let p = pipeline(on_disk(o, dir.path()));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
    let spilled = query
        .recent_progress()
        .iter()
        .filter_map(|pr| pr.state_operators.iter().find(|o| o.operator_name == "Stateful"))
        .map(|o| o.custom_metrics["waitingSpilledBytes"])
        .max();
    assert!(spilled.is_some_and(|b| b > 0), "{spilled:?}");
}
