//! Micro-batch engine specifics: progress reports, the query handle, explain, triggers.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::microbatch::{MicroBatchRunner, StreamingQueryProgress};
use weir_sdk::prelude::*;

/// Two threads on two partitions: these tests count batches, splits and exchanges at a known
/// layout.
fn options(extra: &[&str]) -> PipelineOptions {
    let mut args = vec!["--runner", "microbatch", "--parallelism", "2", "--partitions", "2"];
    args.extend_from_slice(extra);
    PipelineOptions::from_args(args).unwrap()
}

fn windowed_counts(p: &Pipeline) {
    p.apply("Create", Create::timestamped((0..100i64).map(|i| TimestampedValue::new(i, i * 10))))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 5, i)))
        .apply("Count", Count::per_key())
        .apply("Format", Map::new(|kv: KV<i64, i64>| format!("{}:{}", kv.key, kv.value)));
}

#[test]
fn progress_reports_every_batch_with_sparks_fields() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&["--max-batch-size", "5"]));
    windowed_counts(&p);
    let seen = Arc::new(Mutex::new(Vec::<StreamingQueryProgress>::new()));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    let s = seen.clone();
    query.add_listener(move |pr| s.lock().unwrap().push(pr.clone()));
    assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
    let recent = query.recent_progress();
    assert!(recent.len() >= 3, "at most 5 rows per split and batch: {} batches", recent.len());
    assert_eq!(recent.iter().map(|p| p.num_input_rows).sum::<u64>(), 100);
    for (i, pr) in recent.iter().enumerate() {
        assert_eq!(pr.batch_id, i as u64);
        assert_eq!(pr.id, recent[0].id);
    }
    let last = query.last_progress().unwrap();
    let json: serde_json::Value = serde_json::from_str(&last.json()).unwrap();
    for field in [
        "id",
        "runId",
        "name",
        "timestamp",
        "batchId",
        "batchDuration",
        "numInputRows",
        "inputRowsPerSecond",
        "processedRowsPerSecond",
        "durationMs",
        "eventTime",
        "stateOperators",
        "sources",
        "sink",
        "watermarks",
    ] {
        assert!(json.get(field).is_some(), "missing {field} in {json}");
    }
    for field in
        ["latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution"]
    {
        assert!(json["durationMs"].get(field).is_some(), "missing durationMs.{field}");
    }
    let op = &json["stateOperators"][0];
    for field in [
        "operatorName",
        "numRowsTotal",
        "numRowsUpdated",
        "numRowsRemoved",
        "numRowsDroppedByWatermark",
        "allUpdatesTimeMs",
        "allRemovalsTimeMs",
        "commitTimeMs",
        "memoryUsedBytes",
        "numStateStoreInstances",
        "customMetrics",
    ] {
        assert!(op.get(field).is_some(), "missing stateOperators[].{field}");
    }
    assert_eq!(op["operatorName"], "Count");
    assert_eq!(op["numStateStoreInstances"], 2);
    // All windows fired by the end: state drained, watermark at the end of time.
    assert_eq!(op["numRowsTotal"], 0);
    assert_eq!(last.event_time.watermark, weir_sdk::time::iso8601(MAX_TIMESTAMP));
    // The listener hears every batch after it was added (the query may have run one before).
    let seen = seen.lock().unwrap();
    assert!(seen.len() <= recent.len(), "{} of {}", seen.len(), recent.len());
    assert_eq!(seen[..], recent[recent.len() - seen.len()..]);
    // State grows while windows are open, before the watermark jumps at the end.
    assert!(recent.iter().any(|p| p.state_operators[0].num_rows_total > 0));
    assert_eq!(query.status().message, "Stopped");
}

/// Sums of (numRowsUpdated, numRowsRemoved) of the operator `name` over a query's batches.
fn row_changes(recent: &[StreamingQueryProgress], name: &str) -> (u64, u64) {
    recent
        .iter()
        .flat_map(|pr| pr.state_operators.iter().filter(|o| o.operator_name == name))
        .fold((0, 0), |(u, r), o| (u + o.num_rows_updated, r + o.num_rows_removed))
}

#[test]
fn state_rows_updated_and_removed_are_counted_per_key_and_window() {
    // 100 elements, 10 windows x 5 keys = 50 state rows, each fed twice within the batch: every
    // row is updated once (not once per element) and removed once when its window expires; the
    // final pane of an expiring window is a removal, not also an update.
    weir_tests::register_runners();
    let p = Pipeline::new(options(&["--max-batch-size", "1000"]));
    windowed_counts(&p);
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
    assert_eq!(row_changes(&query.recent_progress(), "Count"), (50, 50));
}

/// `commitTimeMs` is the time a batch's commit spent taking, encoding, writing and flushing the
/// operator's state files (issue 52): with a checkpoint, some for every batch that wrote state
/// (rounded up to 1 ms), and no more than its instances could spend between the end of their
/// runs and the commit log entry (the batch, and the next batch's reading, which the flush
/// overlaps); without one, none.
#[test]
fn commit_time_is_the_state_commit_of_each_batch() {
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("cp");
    for with_checkpoint in [true, false] {
        // Batches of 5 rows: 20 of them, a background snapshot every 2, every one kept.
        let mut args = vec!["--max-batch-size", "5"];
        let cp = checkpoint.to_str().unwrap().to_string();
        if with_checkpoint {
            args.extend([
                "--checkpoint-dir",
                cp.as_str(),
                "--state-snapshot-interval",
                "2",
                "--min-batches-to-retain",
                "100",
            ]);
        }
        let p = Pipeline::new(options(&args));
        windowed_counts(&p);
        let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done);
        let recent = query.recent_progress();
        assert!(!recent.is_empty());
        for (n, pr) in recent.iter().enumerate() {
            let op = pr.state_operators.iter().find(|o| o.operator_name == "Count").expect("Count's state");
            let wrote = op.custom_metrics.get("snapshotBytes").copied().unwrap_or(0)
                + op.custom_metrics.get("deltaBytes").copied().unwrap_or(0);
            let files = op.custom_metrics.get("stateFilesWritten").copied().unwrap_or(0);
            if with_checkpoint {
                assert_eq!(op.commit_time_ms > 0, wrote > 0, "batch {}: {op:?}", pr.batch_id);
                // A file per partition that wrote: at most one per instance, and one if any.
                assert!(files <= op.num_state_store_instances && (files > 0) == (wrote > 0), "{op:?}");
                let next_read = recent.get(n + 1).map_or(0, |next| next.duration_ms.latest_offset);
                let span = (pr.duration_ms.trigger_execution + next_read + 1) * op.num_state_store_instances;
                assert!(op.commit_time_ms <= span, "{}", pr.json());
            } else {
                assert_eq!((op.commit_time_ms, wrote, files), (0, 0, 0), "{}", pr.json());
            }
        }
        if with_checkpoint {
            assert!(recent.iter().any(|pr| pr.state_operators.iter().any(|o| o.commit_time_ms > 0)));
            // The background snapshots reported are among those the checkpoint holds: each
            // manifest lists a file per partition of the step.
            let reported = |n: &str| -> u64 {
                recent
                    .iter()
                    .flat_map(|pr| pr.state_operators.iter().filter(|o| o.operator_name == "Count"))
                    .map(|o| o.custom_metrics.get(n).copied().unwrap_or(0))
                    .sum()
            };
            let (mut files, mut bytes) = (0, 0);
            for batch in std::fs::read_dir(checkpoint.join("state")).unwrap() {
                let Ok(m) = std::fs::read(batch.unwrap().path().join("snapshot.json")) else { continue };
                // A log entry: the manifest's JSON in its `body`.
                let m: serde_json::Value = serde_json::from_slice(&m).unwrap();
                let m: serde_json::Value = serde_json::from_str(m["body"].as_str().unwrap()).unwrap();
                for f in m.as_array().unwrap().iter().filter(|f| f["node"] == "Count") {
                    files += 1;
                    bytes += f["bytes"].as_u64().unwrap();
                }
            }
            let (got_files, got_bytes) = (reported("backgroundSnapshotFiles"), reported("backgroundSnapshotBytes"));
            assert!(got_files > 0 && got_files <= files, "{got_files} reported, {files} in the checkpoint");
            assert!(got_bytes > 0 && got_bytes <= bytes, "{got_bytes} reported, {bytes} in the checkpoint");
        }
        // The last batch's figures are the step's gauges in the job's metrics (and so every
        // sink's).
        let last = recent.last().unwrap().state_operators.iter().find(|o| o.operator_name == "Count").unwrap();
        let m = query.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        let gauge = |n: &str| m.gauge("Count", "weir", n).and_then(|g| g.committed.as_ref().map(|c| c.value));
        for (n, v) in [
            ("numRowsTotal", last.num_rows_total),
            ("numRowsUpdated", last.num_rows_updated),
            ("numRowsRemoved", last.num_rows_removed),
            ("commitTimeMs", last.commit_time_ms),
            ("memoryUsedBytes", last.memory_used_bytes),
            ("numStateStoreInstances", 2),
            ("deltaBytes", last.custom_metrics["deltaBytes"]),
        ] {
            assert_eq!(gauge(n), Some(v as i64), "{n} of {last:?}");
        }
    }
}

#[test]
fn explain_shows_stages_exchanges_and_native_composites() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&[]));
    windowed_counts(&p);
    let plan = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
    assert!(plan.contains("Exchange hashpartitioning(encoded key, 2)"), "{plan}");
    // Fixed windows, the default trigger and timestamp combiner: a window aggregation, the
    // combiner lifted (two partitions).
    assert!(
        plan.contains(
            "WindowAggregation[hash aggregation per key and window, combined before the exchange] 'Count' \
             (native beam:transform:combine_per_key:v1) [stateful]"
        ),
        "{plan}"
    );
    // On the general engine, the combiner is lifted too.
    let general = Pipeline::new(options(&["--window-aggregation", "general"]));
    windowed_counts(&general);
    let general = MicroBatchRunner.explain(&general.graph(), &general.options()).unwrap();
    assert!(
        general.contains(
            "GroupAlsoByWindow[combining partial accumulators, combined before the exchange] 'Count' \
             (native beam:transform:combine_per_key:v1) [stateful]"
        ),
        "{general}"
    );
    // In one partition, the window aggregation takes its input as it is.
    let one = Pipeline::new(PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "1"]).unwrap());
    windowed_counts(&one);
    let one = MicroBatchRunner.explain(&one.graph(), &one.options()).unwrap();
    assert!(one.contains("WindowAggregation[hash aggregation per key and window] 'Count'"), "{one}");
    // Sessions merge, so a partial accumulator could span sessions that never merge: not lifted.
    let p = Pipeline::new(options(&[]));
    p.apply("Create", Create::timestamped((0..10i64).map(|i| TimestampedValue::new(KV::new(i % 2, i), i))))
        .apply("Sessions", Window::into(Sessions::with_gap_duration(Duration::from_millis(5))))
        .apply("Count", Count::per_key());
    let sessions = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
    assert!(sessions.contains("GroupAlsoByWindow[combining] 'Count'"), "{sessions}");
    assert!(plan.contains("Stage 0: Scan[bounded] 'Create/Read'"), "{plan}");
    // The element-wise chain before the exchange runs fused; a stateful node ends a chain.
    assert!(plan.contains("Stage 0: ParDo[MapFn] 'Key/ParDo' [fused into 'Window']"), "{plan}");
    assert!(plan.contains("Stage 1: ParDo[MapFn] 'Format/ParDo'\n"), "{plan}");
    // CoGroupByKey: its inputs are encoded and tagged on their way into one grouping node.
    let p = Pipeline::new(options(&[]));
    let (a, b) = (TupleTag::<i64>::new("a"), TupleTag::<i64>::new("b"));
    let pa = p.apply("A", Create::of(vec![KV::new(1i64, 10i64)]));
    let pb = p.apply("B", Create::of(vec![KV::new(1i64, 20i64)]));
    KeyedPCollectionTuple::of(&a, &pa).and(&b, &pb).apply("Join", CoGroupByKey);
    let plan = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
    assert!(
        plan.contains(
            "GroupAlsoByWindow[co-group of 2 inputs] 'Join' (native weir:transform:co_group_by_key:v1) [stateful]"
        ),
        "{plan}"
    );
    assert!(!plan.contains("MakeUnion"), "{plan}");
    // Deduplicate runs as one native operator after an exchange by key.
    let p = Pipeline::new(options(&[]));
    p.apply("Create", Create::of(vec![1i64, 2, 1])).apply("Dedup", Deduplicate::values());
    let plan = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
    assert!(
        plan.contains(
            "StreamingDeduplicate[within 600000 ms] 'Dedup/Deduplicate' (native weir:transform:deduplicate:v1) \
             [stateful]"
        ),
        "{plan}"
    );
    assert!(plan.contains("Stage 1:"), "{plan}");
}

#[test]
fn processing_time_trigger_and_stop() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&["--trigger", "processing-time", "--trigger-interval-ms", "5"]));
    p.apply(
        "Stream",
        TestStream::<i64>::create().add_elements(vec![TimestampedValue::new(1, 1)]).advance_watermark_to(5),
    )
    .apply("Double", Map::new(|x: i64| x * 2));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    query.process_all_available().unwrap();
    assert!(query.await_termination(Some(Duration::from_secs(5))).unwrap().is_terminal());
    // The events ran out: the watermark went to the end and the query finished by itself.
    assert!(query.recent_progress().len() >= 2);
}

/// Issue 33: a processing-time trigger paces a source that keeps up; it does not hold back one
/// that has fallen behind. Here every batch may read 100 of the source's 1,000 numbers, all
/// available at once, and the interval is an hour: the batches follow each other at once while
/// a reader gives all its share (waiting the interval after each would take ten hours), on the
/// micro-batch and the timely runner.
#[test]
fn a_source_that_is_behind_is_read_on_without_waiting_for_the_interval() {
    weir_tests::register_runners();
    for runner in [&["--runner", "microbatch", "--parallelism", "2"][..], &["--runner", "timely", "--workers", "2"]] {
        let mut args = runner.to_vec();
        args.extend(["--trigger", "processing-time", "--trigger-interval-ms", "3600000", "--max-batch-size", "100"]);
        let p = TestPipeline::from_options(PipelineOptions::from_args(args).unwrap());
        let total = p
            .apply("Read", weir_sdk::io::ReadUnbounded::from(weir_tests::sources::Numbers::new(Some(1_000), false)))
            .apply("Window", Window::into(GlobalWindows).triggering(Never::ever()).discarding_fired_panes())
            .apply("Count", Count::globally());
        assert_that(&total).contains_in_any_order(vec![1_000]);
        p.run();
    }
}

#[test]
fn unknown_trigger_is_an_error() {
    let e = PipelineOptions::from_args(["--trigger", "sometimes"]).unwrap_err().to_string();
    assert!(e.contains("sometimes"), "{e}");
}

#[test]
fn deduplicate_state_is_evicted_by_the_watermark() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&[]));
    let mut stream = TestStream::create();
    for round in 0..4i64 {
        let ts = round * 1000;
        // Every id twice: the second occurrence only reads the state.
        stream = stream
            .add_elements((0..100).map(|i| TimestampedValue::new(format!("id-{round}-{}", i % 50), ts)).collect())
            .advance_watermark_to(ts + 500);
    }
    p.apply("Stream", stream.advance_watermark_to_infinity())
        .apply(
            "Global",
            Window::configure()
                .triggering(Repeatedly::forever(AfterPane::element_count_at_least(1)))
                .discarding_fired_panes(),
        )
        .apply("Dedup", Deduplicate::values().with_duration(Duration::from_millis(200)));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    query.await_termination(None).unwrap();
    let totals: Vec<u64> = query
        .recent_progress()
        .iter()
        .filter_map(|pr| {
            pr.state_operators.iter().find(|o| o.operator_name == "Dedup/Deduplicate").map(|o| o.num_rows_total)
        })
        .collect();
    // 50 ids held after each round's data, dropped to 0 once the watermark passes them + 200 ms.
    assert!(totals.contains(&50), "{totals:?}");
    assert!(totals.windows(2).any(|w| w[0] == 50 && w[1] == 0), "{totals:?}");
    assert!(totals.iter().all(|&t| t <= 50), "state never accumulates across rounds: {totals:?}");
    // Each id's row is written once (reads are not updates) and removed once by its timer.
    assert_eq!(row_changes(&query.recent_progress(), "Dedup/Deduplicate"), (200, 200));
}

#[test]
fn chained_stateful_aggregations_in_streaming_drop_nothing() {
    // The seeds' example: Op1 = max per 3-second window, Op2 = a second windowed aggregation of
    // Op1's output. With one global watermark (Spark) Op2 drops Op1's results as late; with a
    // watermark per operator it gets them all.
    weir_tests::register_runners();
    let p = Pipeline::new(options(&["--max-batch-size", "4"]));
    let mut stream = TestStream::create();
    for s in 0..12i64 {
        stream = stream
            .add_elements(
                (0..3).map(|k| TimestampedValue::new(KV::new(format!("k{k}"), s * 10 + k), s * 1000 + 100)).collect(),
            )
            .advance_watermark_to(s * 1000 + 900);
    }
    let maxes = p
        .apply("Stream", stream.advance_watermark_to_infinity())
        .apply("Window3s", Window::into(FixedWindows::of(Duration::from_secs(3))))
        .apply("Op1Max", Max::per_key());
    let sums = maxes
        .apply("Values", Values::create())
        .apply("Window6s", Window::into(FixedWindows::of(Duration::from_secs(6))))
        .apply("Op2Sum", Sum::globally().without_defaults());
    // Window [0,6s): maxes of [0,3s) are 20,21,22 and of [3s,6s) 50,51,52.
    assert_that(&sums).contains_in_any_order(vec![20 + 21 + 22 + 50 + 51 + 52, 80 + 81 + 82 + 110 + 111 + 112]);
    let result = Pipeline::run(&p).unwrap();
    assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
    let dropped =
        result.metrics().query_metrics(&weir_sdk::metrics::MetricsFilter::all().named("weir", "droppedDueToLateness"));
    assert!(dropped.counters.iter().all(|c| c.attempted == 0), "{dropped:?}");
}

/// Several threads get eight partitions each unless told otherwise, one thread one partition.
#[test]
fn partitions_outnumber_threads_by_default() {
    weir_tests::register_runners();
    // Eight per worker thread that runs: at most one thread per core.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let per_thread = |threads: usize| if threads.min(cores) == 1 { 1 } else { 8 * threads.min(cores) };
    for (flags, partitions) in [
        (&["--parallelism", "2"][..], per_thread(2)),
        (&["--parallelism", "3"][..], per_thread(3)),
        (&["--parallelism", "64"][..], per_thread(64)),
        (&["--parallelism", "2", "--partitions", "5"][..], 5),
        (&["--parallelism", "1"][..], 1),
    ] {
        let mut args = vec!["--runner", "microbatch"];
        args.extend_from_slice(flags);
        let p = Pipeline::new(PipelineOptions::from_args(args).unwrap());
        windowed_counts(&p);
        let plan = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
        let header = format!("{partitions} partitions ==");
        let exchange = format!("Exchange hashpartitioning(encoded key, {partitions})");
        assert!(plan.contains(&header) && plan.contains(&exchange), "{flags:?}: {plan}");
    }
}

#[test]
fn reshuffle_is_a_native_exchange_without_grouping() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&[]));
    let out = p.apply("Create", Create::of(0..10i64)).apply("Reshuffle", Reshuffle::via_random_key());
    let plan = MicroBatchRunner.explain(&p.graph(), &p.options()).unwrap();
    assert!(plan.contains("Exchange roundrobinpartitioning(2)"), "{plan}");
    assert!(plan.contains("Redistribute 'Reshuffle' (native beam:transform:reshuffle:v1)"), "{plan}");
    assert!(!plan.contains("GroupAlsoByWindow"), "{plan}");
    assert_that(&out).contains_in_any_order((0..10).collect());
    assert_eq!(Pipeline::run(&p).unwrap().wait_until_finish(None).unwrap(), PipelineState::Done);
}

#[derive(Clone)]
struct FailOnce(Arc<std::sync::atomic::AtomicBool>);

impl DoFn for FailOnce {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        Metrics::counter("test", "seen")?.inc();
        if e == 3 && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err("transient failure".into());
        }
        ctx.output(e);
        Ok(())
    }
}

#[test]
fn a_failed_batch_is_retried_and_counted_once_as_committed() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&["--max-batch-retries", "2"]));
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let out = p
        .apply("Create", Create::of(1..=5i64))
        .apply("FailOnce", ParDo::of(FailOnce(failed.clone())))
        .apply("Sum", Sum::globally());
    assert_that(&out).contains_in_any_order(vec![15]);
    let result = Pipeline::run(&p).unwrap();
    assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
    assert!(failed.load(std::sync::atomic::Ordering::SeqCst));
    let seen = result.metrics().all_metrics().counter("FailOnce", "test", "seen").cloned().unwrap();
    assert_eq!(seen.committed, Some(5), "{seen:?}");
    assert!(seen.attempted > 5 && seen.attempted <= 10, "the failed try counts as attempted: {seen:?}");

    // Without retries the same failure fails the query.
    let p = Pipeline::new(options(&[]));
    p.apply("Create", Create::of(1..=5i64))
        .apply("FailOnce", ParDo::of(FailOnce(Arc::new(std::sync::atomic::AtomicBool::new(false)))));
    let err = Pipeline::run(&p).unwrap().wait_until_finish(None).unwrap_err().to_string();
    assert!(err.contains("FailOnce") && err.contains("transient failure"), "{err}");
}

/// Per batch, the rows the progress reports read from the sources named `prefix...`.
fn rows_read(recent: &[StreamingQueryProgress], prefix: &str) -> Vec<u64> {
    recent
        .iter()
        .map(|p| p.sources.iter().filter(|s| s.description.starts_with(prefix)).map(|s| s.num_input_rows).sum())
        .collect()
}

/// A source that knows how many elements it has left is planned at getBatch and read by the
/// fused chain it feeds, piece by piece: every element arrives once, batches are bounded as
/// before, and progress, offsets and source metrics count what was read. The same pipeline
/// read eagerly (with retries on, which keep a batch's input whole) gives the same.
#[test]
fn planned_source_reads_deliver_every_element_once() {
    weir_tests::register_runners();
    let n = 100_000i64;
    let expected: i64 = (0..n).map(|x| x * 3).filter(|x| x % 2 == 0).map(|x| x + 1).sum();
    for extra in [&[][..], &["--max-batch-retries", "1"][..]] {
        let mut args = vec!["--max-batch-size", "30000"];
        args.extend_from_slice(extra);
        let p = Pipeline::new(options(&args));
        let sum = p
            .apply("Numbers", weir_sdk::io::GenerateSequence::from_to(0, n))
            .apply("Times3", Map::new(|x: i64| x * 3))
            .apply("Even", Filter::by(|x: &i64| x % 2 == 0))
            .apply("Plus1", Map::new(|x: i64| x + 1))
            .apply("Sum", Sum::globally());
        assert_that(&sum).contains_in_any_order(vec![expected]);
        let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done, "{extra:?}");
        let recent = query.recent_progress();
        // Rows read from "Numbers" per batch (assert_that and the global sum add sources of
        // their own).
        let rows = rows_read(&recent, "Numbers");
        assert_eq!(rows.iter().sum::<u64>(), n as u64, "{extra:?}: {rows:?}");
        assert!(rows.iter().all(|&r| r <= 30_000), "{extra:?}: {rows:?}");
        let first = recent.iter().find(|p| p.num_input_rows > 0).unwrap();
        assert_eq!(first.event_time.min, Some(weir_sdk::time::iso8601(weir_sdk::time::MIN_TIMESTAMP)), "{extra:?}");
        let m = query.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        assert_eq!(m.counter("Numbers/Read", "weir", "elementsOut").map(|c| c.attempted), Some(n), "{extra:?}");
        assert_eq!(m.counter("Times3/ParDo", "weir", "elementsIn").map(|c| c.attempted), Some(n), "{extra:?}");
    }
}

/// A file of lines is a source whose reader cannot say how much it has left. Without a
/// checkpoint its reads are planned as "up to" the batch's share and parsed by the chains; with
/// one (whose offset log needs exact counts), or when the lines feed two consumers, the splits
/// are read at planning, in parallel. Every way, each line arrives once, and the progress counts
/// each line once, however batches and splits end.
#[test]
fn a_file_of_lines_is_read_once_and_counted_exactly() {
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("numbers.txt");
    let n = 5_000i64;
    std::fs::write(&file, (0..n).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
    let file = file.to_string_lossy().into_owned();
    let checkpoint = dir.path().join("checkpoint").to_string_lossy().into_owned();
    for (extra, two_consumers) in
        [(&[][..], false), (&["--checkpoint-dir", checkpoint.as_str()][..], false), (&[][..], true)]
    {
        let mut args = vec!["--max-batch-size", "700"];
        args.extend_from_slice(extra);
        let p = Pipeline::new(options(&args));
        let lines = p.apply("Lines", TextIO::read().from(file.clone()));
        let sum = lines.apply("Parse", Map::new(|l: String| l.parse::<i64>().unwrap())).apply("Sum", Sum::globally());
        assert_that(&sum).contains_in_any_order(vec![n * (n - 1) / 2]);
        if two_consumers {
            let count = lines.apply("Count", Count::globally());
            assert_that(&count).contains_in_any_order(vec![n]);
        }
        let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.await_termination(None).unwrap(), PipelineState::Done, "{extra:?}");
        let recent = query.recent_progress();
        let rows = rows_read(&recent, "Lines");
        assert_eq!(rows.iter().sum::<u64>(), n as u64, "{extra:?} {two_consumers}: {rows:?}");
        // The batch size is shared among the splits left, rounded up: 8 splits at 2 partitions.
        assert!(rows.iter().all(|&r| r <= 700 + 7), "{extra:?} {two_consumers}: {rows:?}");
        let total: u64 = recent.iter().map(|p| p.num_input_rows).sum();
        let m = query.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        let out = m.counters.iter().filter(|c| {
            c.key.step.as_deref().is_some_and(|s| s.starts_with("Lines")) && c.key.name.name == "elementsOut"
        });
        assert_eq!(out.map(|c| c.attempted).sum::<i64>(), n, "{extra:?} {two_consumers}");
        assert!(total >= n as u64, "{extra:?} {two_consumers}: {total}");
    }
}

/// Reads 0..3 but claims one more element than it has.
#[derive(Clone)]
struct Overclaiming;

struct OverclaimingReader(i64);

impl weir_sdk::io::BoundedSource for Overclaiming {
    type Output = i64;
    type Reader = OverclaimingReader;
    fn split(&self, _: u64) -> UserResult<Vec<Self>> {
        Ok(vec![Overclaiming])
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(24)
    }
    fn create_reader(&self) -> UserResult<OverclaimingReader> {
        Ok(OverclaimingReader(0))
    }
}

impl weir_sdk::io::BoundedReader for OverclaimingReader {
    type Output = i64;
    fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        self.0 += 1;
        Ok((self.0 <= 3).then_some((self.0, 0)))
    }
    fn remaining(&self) -> Option<u64> {
        Some((4 - self.0).max(0) as u64)
    }
}

/// A reader that delivers fewer elements than the count it reported fails the query with an
/// error naming the source, instead of a batch that silently lacks them.
#[test]
fn a_reader_short_of_its_reported_count_is_an_error() {
    weir_tests::register_runners();
    let p = Pipeline::new(options(&[]));
    p.apply("Lying", weir_sdk::io::Read::from(Overclaiming))
        .apply("A", Map::new(|x: i64| x + 1))
        .apply("B", Map::new(|x: i64| x * 2));
    let err = Pipeline::run(&p).unwrap().wait_until_finish(None).unwrap_err().to_string();
    assert!(err.contains("Lying") && err.contains("1 elements short"), "{err}");
}

/// What a grouping node fires at the end of a bounded input (here 20 000 groups, more than one
/// bundle of them) reaches the nodes after it whole, in pieces.
#[test]
fn many_fired_groups_are_delivered_whole() {
    weir_tests::register_runners();
    for parallelism in ["1", "3"] {
        let p = Pipeline::new(
            PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", parallelism]).unwrap(),
        );
        let sizes = p
            .apply("Create", Create::of(0..60_000i64))
            .apply("Key", Map::new(|x: i64| KV::new(x % 20_000, x)))
            .apply("Group", GroupByKey::create())
            .apply("Size", Map::new(|kv: KV<i64, Vec<i64>>| KV::new(kv.value.len() as i64, 1i64)))
            .apply("Totals", Sum::per_key());
        // Every one of the 20 000 groups, each with its 3 values.
        assert_that(&sizes).contains_in_any_order(vec![KV::new(3, 20_000)]);
        assert_eq!(Pipeline::run(&p).unwrap().wait_until_finish(None).unwrap(), PipelineState::Done);
    }
}

#[test]
fn a_drained_query_stays_drained_when_restarted_from_its_checkpoint() {
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("ck");
    let build = || {
        let p = Pipeline::new(options(&["--checkpoint-dir", checkpoint.to_str().unwrap()]));
        p.apply("Read", weir_sdk::io::ReadUnbounded::from(weir_tests::sources::Numbers::new(None, true)))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
            .apply("Count", Count::globally().without_defaults());
        p
    };
    let p = build();
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    for _ in 0..2000 {
        if query.recent_progress().iter().any(|b| b.num_input_rows > 0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    query.drain().unwrap();
    assert_eq!(query.await_termination(Some(Duration::from_secs(20))).unwrap(), PipelineState::Done);
    let read: u64 = query.recent_progress().iter().map(|b| b.num_input_rows).sum();
    assert!(read > 0);
    // Restarted, the endless source reads nothing more: the drain is part of its position.
    let p = build();
    let again = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    assert_eq!(again.await_termination(Some(Duration::from_secs(20))).unwrap(), PipelineState::Done);
    let more: u64 = again.recent_progress().iter().map(|b| b.num_input_rows).sum();
    assert_eq!(more, 0, "{:?}", again.recent_progress());
}
