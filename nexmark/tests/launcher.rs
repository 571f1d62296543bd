//! The `nexmark` launcher end to end: the SMOKE suite checked against the models, results and
//! perf files, baselines, events export/import, and clear failures on bad flags.

use weir_nexmark::launcher::run;
use weir_nexmark::models::expected;
use weir_nexmark::{NexmarkConfig, QueryName};

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn smoke_suite_checks_writes_results_and_perf_on_both_runners() {
    let dir = tempfile::tempdir().unwrap();
    for runner in ["direct", "microbatch"] {
        let results = dir.path().join(format!("results-{runner}"));
        let perf = dir.path().join("perf.jsonl");
        let code = run(args(&[
            "--suite",
            "smoke",
            "--check",
            "--num-event-generators",
            "1",
            "--num-events",
            "10000",
            "--runner",
            runner,
            "--results",
            results.to_str().unwrap(),
            "--perf-file",
            perf.to_str().unwrap(),
        ]));
        assert_eq!(code, 0, "{runner}");
        // The results of SELECTION, concatenated, are the model's.
        let config = NexmarkConfig { num_events: 10_000, num_event_generators: 1, ..NexmarkConfig::default() };
        let model = expected(QueryName::Selection, &config).unwrap();
        let mut lines = Vec::new();
        for f in std::fs::read_dir(results.join("SELECTION")).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            lines.extend(text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()));
        }
        assert_eq!(lines.len(), model.len());
        assert!(lines.iter().all(|l| l["query"] == "SELECTION" && l["value"]["auction"].as_i64().unwrap() % 123 == 0));
    }
    let perf = std::fs::read_to_string(dir.path().join("perf.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = perf.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.len() >= 6, "two runners x at least three queries");
    for r in &records {
        for field in ["runtimeSec", "numEvents", "eventsPerSec", "numResults", "query", "runner", "mode", "parallelism"]
        {
            assert!(r.get(field).is_some(), "perf record lacks {field}: {r}");
        }
    }
    let passthrough = records.iter().find(|r| r["query"] == "PASSTHROUGH").unwrap();
    assert_eq!((passthrough["numEvents"].as_i64(), passthrough["numResults"].as_i64()), (Some(10_000), Some(10_000)));

    // A baseline from that perf file is accepted; a corrupt one is a clear error.
    let perf_path = dir.path().join("perf.jsonl");
    assert_eq!(
        run(args(&[
            "--query",
            "1",
            "--num-events",
            "1000",
            "--runner",
            "direct",
            "--baseline-file",
            perf_path.to_str().unwrap()
        ])),
        0
    );
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "not json\n").unwrap();
    assert_eq!(run(args(&["--query", "1", "--runner", "direct", "--baseline-file", bad.to_str().unwrap()])), 2);
}

#[test]
fn check_models_the_split_timelines_the_source_reads() {
    // The default configuration splits the events over 100 generators, whose timelines differ
    // from the one unsplit timeline of Beam's models: the check compares with the events read.
    for mode in [&[][..], &["--streaming"][..]] {
        let mut list = vec!["--query", "0", "--query", "9", "--num-events", "5000", "--check"];
        list.extend_from_slice(mode);
        assert_eq!(run(args(&list)), 0, "{mode:?}");
    }
}

#[test]
fn exported_events_give_the_same_results_as_generated_ones() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.json");
    assert_eq!(
        run(args(&[
            "--export-events",
            events.to_str().unwrap(),
            "--num-events",
            "3000",
            "--num-event-generators",
            "3"
        ])),
        0
    );
    assert_eq!(std::fs::read_to_string(&events).unwrap().lines().count(), 3000);
    let collect = |out: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(out.join("CURRENCY_CONVERSION"))
            .unwrap()
            .filter(|f| f.as_ref().is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".jsonl")))
            .flat_map(|f| {
                std::fs::read_to_string(f.unwrap().path()).unwrap().lines().map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        v.sort();
        v
    };
    let generated = dir.path().join("generated");
    let imported = dir.path().join("imported");
    let base =
        ["--query", "CURRENCY_CONVERSION", "--num-events", "3000", "--num-event-generators", "3", "--runner", "direct"];
    assert_eq!(
        run([&base[..], &["--results", generated.to_str().unwrap()]].concat().iter().map(|s| s.to_string()).collect()),
        0
    );
    assert_eq!(
        run([&base[..], &["--results", imported.to_str().unwrap(), "--events-file", events.to_str().unwrap()]]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect()),
        0
    );
    let (a, b) = (collect(&generated), collect(&imported));
    assert_eq!(a.len(), 2760);
    assert_eq!(a, b);
}

#[test]
fn bad_flags_fail_with_the_flag_named() {
    assert_eq!(run(args(&["--query", "99"])), 2);
    assert_eq!(run(args(&["--suite", "bogus"])), 2);
    assert_eq!(run(args(&["--query", "0", "--num-events", "lots"])), 2);
    assert_eq!(run(args(&["--query", "0", "--num-event-generators", "0"])), 2);
    assert_eq!(run(args(&["--query", "0", "--no-such-flag"])), 2);
    assert_eq!(run(args(&["--suite", "default"])), 2, "DEFAULT needs --query");
    assert_eq!(run(args(&["--suite", "smoke", "--skip-queries", "0,bogus"])), 2);
}

#[test]
fn batch_only_queries_fail_in_streaming_unless_skipped() {
    let base =
        ["--suite", "smoke", "--streaming", "--num-events", "500", "--num-event-generators", "1", "--runner", "direct"];
    assert_eq!(run(args(&[&base[..], &["--query", "15"]].concat())), 1, "PORTABILITY_BATCH is batch-only");
    assert_eq!(
        run(args(&[&base[..], &["--query", "15", "--query", "16", "--skip-queries", "PORTABILITY_BATCH"]].concat())),
        0
    );
}

#[test]
fn streaming_steady_state_rate_uses_the_middle_third_of_long_runs() {
    use weir_nexmark::perf::{steady_state_events_per_sec, ProgressSnapshot};
    // Events at 1,000/s after a slow start; the middle third sees the steady rate only.
    let snap = |i: usize| {
        let runtime_sec = i as f64 * 15.0;
        let num_events = if i < 3 { (runtime_sec * 100.0) as i64 } else { (runtime_sec * 1000.0) as i64 };
        ProgressSnapshot { sec_since_start: runtime_sec + 1.0, runtime_sec, num_events, num_results: 0 }
    };
    let long: Vec<ProgressSnapshot> = (0..12).map(snap).collect();
    let rate = steady_state_events_per_sec(&long).expect("12 snapshots over 165 s");
    assert!((rate - 1000.0).abs() < 1e-6, "{rate}");
    assert_eq!(steady_state_events_per_sec(&long[..8]), None, "fewer than 9 snapshots");
    let short: Vec<ProgressSnapshot> =
        (0..10).map(|i| ProgressSnapshot { sec_since_start: i as f64, ..snap(i) }).collect();
    assert_eq!(steady_state_events_per_sec(&short), None, "under two minutes");
}
