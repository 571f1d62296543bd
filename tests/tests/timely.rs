//! Timely runner specifics: the progress of each epoch, with a row per worker.

use std::time::Duration;
use weir::timely::TimelyRunner;
use weir_sdk::prelude::*;

/// Serializes the tests that stop, restart or checkpoint timely runs: a stopped run must end
/// before its checkpoint is used again, and once (a local CI run on 2 cores) it did not end
/// within a minute while the other tests' clusters ran beside it in this process.
static CHECKPOINTED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_epoch_is_reported_with_a_row_per_worker() {
    weir_tests::register_runners();
    let options =
        PipelineOptions::from_args(["--runner", "timely", "--workers", "3", "--max-batch-size", "12"]).unwrap();
    let p = Pipeline::new(options);
    p.apply("Create", Create::timestamped((0..100i64).map(|i| TimestampedValue::new(i, i * 10))))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 5, i)))
        .apply("Count", Count::per_key());
    let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(0u64));
    let s = seen.clone();
    query.add_listener(move |e| *s.lock().unwrap() += e.num_input_rows);
    assert_eq!(query.wait_until_finish(None).unwrap(), PipelineState::Done);
    let recent = query.recent_progress();
    // 100 elements read 4 at a time per worker (12 shared among 3): at least 9 epochs.
    assert!(recent.len() >= 9, "{} epochs", recent.len());
    assert_eq!(recent.iter().map(|e| e.num_input_rows).sum::<u64>(), 100);
    assert_eq!(*seen.lock().unwrap(), 100, "the listener saw every epoch");
    for (i, e) in recent.iter().enumerate() {
        assert_eq!(e.epoch, i as u64);
        assert_eq!(e.workers.iter().map(|w| w.worker).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(e.num_input_rows, e.workers.iter().map(|w| w.input_rows).sum::<u64>());
    }
    // Until the end of input, the counts are state.
    assert!(recent.iter().any(|e| e.state_rows > 0), "{recent:?}");
    assert_eq!(query.last_progress().unwrap().epoch, recent.len() as u64 - 1);
    // Spark's StreamingQueryProgress fields, over the cluster.
    let first = &recent[0];
    assert!(!first.id.is_empty() && !first.run_id.is_empty());
    assert!(recent.iter().all(|e| e.id == first.id && e.run_id == first.run_id && e.batch_id == e.epoch));
    assert!(first.timestamp.starts_with("20") && first.timestamp.ends_with('Z'), "{}", first.timestamp);
    assert_eq!(first.sources.iter().map(|s| s.num_input_rows).sum::<u64>(), first.num_input_rows);
    assert!(first.sources.iter().all(|s| s.description == "Create/Read"), "{:?}", first.sources);
    let counted = recent.iter().find(|e| e.state_rows > 0).unwrap();
    let op = counted.state_operators.iter().find(|o| o.operator_name.starts_with("Count")).expect("Count's state");
    assert_eq!(op.num_state_store_instances, 3);
    assert_eq!(counted.state_operators.iter().map(|o| o.num_rows_total).sum::<u64>(), counted.state_rows);
    // The query's watermark reaches the end of time once the input is done.
    let end = weir_sdk::time::iso8601(weir_sdk::time::MAX_TIMESTAMP);
    assert_eq!(recent.last().unwrap().event_time.watermark, end);
    assert!(recent.iter().any(|e| e.event_time.watermark != end), "the watermark moved only at the end");
    let json = first.json();
    for field in [
        "\"batchId\"",
        "\"numInputRows\"",
        "\"inputRowsPerSecond\"",
        "\"processedRowsPerSecond\"",
        "\"stateOperators\"",
        "\"runId\"",
    ] {
        assert!(json.contains(field), "{field} in {json}");
    }
    // The micro-batch runner's schema (runner-core's): the phases as Spark's `durationMs`.
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(value["durationMs"]["triggerExecution"].is_u64() && value["durationMs"]["walCommit"].is_u64(), "{json}");
    assert!(value["eventTime"]["watermark"].is_string(), "{json}");
}

/// The micro-batch triggers drive epochs too: `once` reads everything available in one epoch,
/// `processing-time` an epoch per interval; both give the same counts.
#[test]
fn the_micro_batch_triggers_drive_epochs() {
    weir_tests::register_runners();
    for (flags, epochs) in [
        (&["--trigger", "once"][..], Some(1)),
        (&["--trigger", "processing-time", "--trigger-interval-ms", "5"][..], None),
        (&["--trigger", "available-now"][..], None),
    ] {
        let mut args = vec!["--runner", "timely", "--workers", "2", "--max-batch-size", "10"];
        args.extend(flags);
        let p = Pipeline::new(PipelineOptions::from_args(args).unwrap());
        let counts = p
            .apply("Create", Create::of(0..60i64))
            .apply("Key", Map::new(|i: i64| KV::new(i % 3, i)))
            .apply("Count", Count::per_key());
        assert_that(&counts).contains_in_any_order(vec![KV::new(0, 20), KV::new(1, 20), KV::new(2, 20)]);
        let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.wait_until_finish(None).unwrap(), PipelineState::Done, "{flags:?}");
        let recent = query.recent_progress();
        // The 60 numbers, and the one element of the assertion's own Impulse.
        assert_eq!(recent.iter().map(|e| e.num_input_rows).sum::<u64>(), 61, "{flags:?}");
        match epochs {
            Some(n) => assert_eq!(recent.len(), n, "{flags:?}"),
            // 60 elements, 5 per worker and epoch: 6 epochs of data, then the end of input.
            None => assert!(recent.len() >= 6, "{flags:?}: {} epochs", recent.len()),
        }
    }
}

/// Every line of the JSON-lines files in `dir`.
fn lines(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".jsonl") && !name.starts_with('.') {
            out.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(String::from));
        }
    }
    out
}

/// The state operators' row counts are what each epoch did, as on the micro-batch runner (issue
/// 52): 10 windows x 5 keys = 50 state rows, each fed twice, each updated once and removed once
/// when its window expires, over two workers and however many epochs.
#[test]
fn state_rows_updated_and_removed_are_counted_per_epoch() {
    let _serial = CHECKPOINTED.lock().unwrap_or_else(|e| e.into_inner());
    weir_tests::register_runners();
    for batch in ["1000", "7"] {
        let options =
            PipelineOptions::from_args(["--runner", "timely", "--workers", "2", "--max-batch-size", batch]).unwrap();
        let p = Pipeline::new(options);
        p.apply("Create", Create::timestamped((0..100i64).map(|i| TimestampedValue::new(i, i * 10))))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
            .apply("Key", Map::new(|i: i64| KV::new(i % 5, i)))
            .apply("Count", Count::per_key());
        let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.wait_until_finish(None).unwrap(), PipelineState::Done);
        let recent = query.recent_progress();
        let ops = recent.iter().flat_map(|e| e.state_operators.iter().filter(|o| o.operator_name.starts_with("Count")));
        let (updated, removed) = ops.fold((0, 0), |(u, r), o| (u + o.num_rows_updated, r + o.num_rows_removed));
        // Every epoch reported (an epoch's rows are reported once).
        assert_eq!(recent.iter().map(|e| e.epoch).collect::<Vec<_>>(), (0..recent.len() as u64).collect::<Vec<_>>());
        // In one epoch each row is updated once; over several, once per epoch that feeds it.
        assert_eq!(removed, 50, "--max-batch-size {batch}");
        match batch {
            "1000" => assert_eq!(updated, 50),
            _ => assert!((50..=100).contains(&updated), "--max-batch-size {batch}: {updated} updated"),
        }
    }
}

/// A stateful operator's `commitTimeMs` is the time the epoch's checkpoint spent on its state
/// files, over the workers (issue 52): some for an epoch that wrote state, none without a
/// checkpoint.
#[test]
fn commit_time_is_the_state_checkpoint_of_each_epoch() {
    let _serial = CHECKPOINTED.lock().unwrap_or_else(|e| e.into_inner());
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    for with_checkpoint in [true, false] {
        let options = match with_checkpoint {
            true => two_workers_checkpointed(&dir.path().join("cp"), &["--max-batch-size", "20"]),
            false => {
                PipelineOptions::from_args(["--runner", "timely", "--workers", "2", "--max-batch-size", "20"]).unwrap()
            }
        };
        let p = Pipeline::new(options);
        p.apply("Create", Create::of(0..100i64))
            .apply("Key", Map::new(|i: i64| KV::new(i % 5, i)))
            .apply("Count", Count::per_key());
        let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.wait_until_finish(None).unwrap(), PipelineState::Done);
        let times: Vec<u64> = query
            .recent_progress()
            .iter()
            .flat_map(|e| e.state_operators.iter().filter(|o| o.operator_name.starts_with("Count")))
            .map(|o| o.commit_time_ms)
            .collect();
        assert!(!times.is_empty());
        match with_checkpoint {
            true => assert!(times.iter().any(|&t| t > 0), "{times:?}"),
            false => assert!(times.iter().all(|&t| t == 0), "{times:?}"),
        }
        // The last epoch's figures are the step's gauges in the job's metrics.
        let recent = query.recent_progress();
        let last =
            recent.last().unwrap().state_operators.iter().find(|o| o.operator_name.starts_with("Count")).unwrap();
        let m = query.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        let gauge =
            |n: &str| m.gauge(&last.operator_name, "weir", n).and_then(|g| g.committed.as_ref().map(|c| c.value));
        for (n, v) in [
            ("numRowsTotal", last.num_rows_total),
            ("numRowsUpdated", last.num_rows_updated),
            ("commitTimeMs", last.commit_time_ms),
            ("numStateStoreInstances", 2),
            ("deltaBytes", last.custom_metrics["deltaBytes"]),
        ] {
            assert_eq!(gauge(n), Some(v as i64), "{n} of {last:?}");
        }
    }
}

/// The options of a run on two timely workers, checkpointed in `cp`, with `extra` flags.
fn two_workers_checkpointed(cp: &std::path::Path, extra: &[&str]) -> PipelineOptions {
    let mut args = vec!["--runner", "timely", "--workers", "2", "--checkpoint-dir", cp.to_str().unwrap()];
    args.extend(extra);
    PipelineOptions::from_args(args).unwrap()
}

/// A splittable DoFn's residuals are part of each epoch's checkpoint: a cluster stopped half way
/// and started again from its checkpoint directory resumes them, and every number is written
/// once.
#[test]
fn a_splittable_dofn_resumes_from_the_epoch_checkpoint_exactly_once() {
    let _serial = CHECKPOINTED.lock().unwrap_or_else(|e| e.into_inner());
    weir_tests::register_runners();
    let dir = tempfile::tempdir().unwrap();
    let (cp, out, counts) = (dir.path().join("cp"), dir.path().join("out"), dir.path().join("counts"));
    let run = || {
        // Every epoch's state kept, to look at.
        let p = Pipeline::new(two_workers_checkpointed(&cp, &["--min-batches-to-retain", "1000000"]));
        let numbers = p.apply("N", Create::of(vec![2_100i64])).apply(
            "Numbers",
            weir_sdk::splittable::SplittableParDo::of(weir_tests::SevenAtATime {
                resume_delay: Duration::from_millis(5),
            }),
        );
        numbers
            .apply("Render", Map::new(|i: i64| i.to_string()))
            .apply("Write", weir_sdk::io::WriteJsonLines::to(out.to_str().unwrap()));
        // Keyed state held across the restart (counted until the input ends).
        numbers
            .apply("Key", Map::new(|i: i64| KV::new(i % 3, i)))
            .apply("Count", Count::per_key())
            .apply("RenderCounts", Map::new(|kv: KV<i64, i64>| format!("{}={}", kv.key, kv.value)))
            .apply("WriteCounts", weir_sdk::io::WriteJsonLines::to(counts.to_str().unwrap()));
        TimelyRunner.start(p.graph(), &p.options()).unwrap()
    };
    let first = run();
    for _ in 0..5000 {
        if lines(&out).len() >= 50 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    first.stop().unwrap();
    // A stop finishes the running epoch and then ends the run, which releases the checkpoint.
    let ended = first.wait_until_finish(Some(Duration::from_secs(60))).unwrap();
    assert!(ended.is_terminal(), "{ended:?}");
    let written = lines(&out).len();
    // At least 1.5 s of work: stopped half way, however loaded the machine.
    assert!((1..2_100).contains(&written), "stopped after {written} of 2100 numbers");
    let committed = epochs(&cp.join("commits")).into_iter().max().expect("the first run committed");
    let second = run();
    assert_eq!(second.wait_until_finish(Some(Duration::from_secs(60))).unwrap(), PipelineState::Done);
    let mut got: Vec<i64> =
        lines(&out).iter().map(|l| serde_json::from_str::<String>(l).unwrap().parse().unwrap()).collect();
    got.sort();
    assert_eq!(got, (0..2_100).collect::<Vec<_>>(), "each number once across the restart");
    let mut got_counts: Vec<String> = lines(&counts).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    got_counts.sort();
    assert_eq!(got_counts, ["0=700", "1=700", "2=700"], "counted once across the restart");
    // Issue 52: the second run, on as many workers, went on writing deltas onto the first
    // run's chains; it wrote no whole snapshot on its epochs' path.
    let mut kinds = Vec::new();
    for e in epochs(&cp.join("state")).into_iter().filter(|&e| e > committed) {
        for w in 0..2 {
            let Ok(m) = std::fs::read_to_string(cp.join(format!("state/{e}/{w}/manifest.json"))) else { continue };
            // A log entry: the manifest's JSON in an envelope with its checksum.
            let envelope: serde_json::Value = serde_json::from_str(&m).unwrap();
            let m: serde_json::Value = serde_json::from_str(envelope["body"].as_str().unwrap()).unwrap();
            for member in m["members"].as_array().unwrap() {
                if let Some(kind) = member["file"]["kind"].as_str() {
                    kinds.push((e, kind.to_string()));
                }
            }
        }
    }
    assert!(!kinds.is_empty(), "the second run wrote no state after epoch {committed}");
    assert!(kinds.iter().all(|(_, k)| k == "Delta"), "{kinds:?}");
}

/// The epochs named by the entries of a checkpoint folder (`commits`, `state`).
fn epochs(dir: &std::path::Path) -> Vec<u64> {
    std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// A checkpointed run with the available-now trigger ends once every worker has done all the
/// work there is, not when the worker that reads the sources has (nor the one that reads none):
/// the splittable DoFn's restrictions spread over both workers, one of them far longer than the
/// others, and every number is written in the one run, whichever worker holds the long one.
#[test]
fn an_available_now_run_with_a_checkpoint_ends_when_every_worker_is_done() {
    weir_tests::register_runners();
    for long in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let (cp, out) = (dir.path().join("cp"), dir.path().join("out"));
        let sizes: Vec<i64> = (0..4).map(|i| if i == long { 700 + i } else { 7 + i }).collect();
        let p = Pipeline::new(two_workers_checkpointed(&cp, &["--max-batch-size", "14"]));
        let numbers =
            weir_sdk::splittable::SplittableParDo::of(weir_tests::SevenAtATime { resume_delay: Duration::ZERO });
        // One element, read by one worker, and the sizes made from it.
        let all = sizes.clone();
        p.apply("One", Create::of(vec![0i64]))
            .apply("Sizes", FlatMap::new(move |_: i64| all.clone()))
            .apply("Numbers", numbers)
            .apply("Render", Map::new(|i: i64| i.to_string()))
            .apply("Write", weir_sdk::io::WriteJsonLines::to(out.to_str().unwrap()));
        let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
        assert_eq!(query.wait_until_finish(Some(Duration::from_secs(60))).unwrap(), PipelineState::Done);
        let mut got: Vec<i64> =
            lines(&out).iter().map(|l| serde_json::from_str::<String>(l).unwrap().parse().unwrap()).collect();
        got.sort();
        let mut want: Vec<i64> = sizes.iter().flat_map(|&n| 0..n).collect();
        want.sort();
        assert_eq!(got.len(), want.len(), "numbers written in the one run, the long restriction being {long}");
        assert_eq!(got, want);
    }
}
