//! Beam's own Java Nexmark (`org.apache.beam.sdk.nexmark.Main`, beam-sdks-java-nexmark) on
//! `weir-job-server`, unchanged, through Beam's `PortableRunner`: a passthrough (q0), a stateful
//! join (q3, a stateful DoFn with timers) and a windowed aggregation (q5, sliding windows and a
//! combine), in SMOKE size (100,000 events), batch and streaming on micro-batch and streaming on
//! timely with 2 workers, with LOOPBACK harnesses. Nexmark's launcher reads its figures from the job's metrics
//! while the job runs and after; each result count must equal Beam's DirectRunner's for the same
//! configuration (run here too, in batch: Beam's model makes these counts the same in streaming).
//!
//! `benchmarks/beam-nexmark/bench.py` runs them, the harness that compares Weir with Beam's
//! Direct, Spark and Flink runners on every query (see `docs/beam-java.md`). It needs Java and
//! Maven; without them the test is skipped, saying so; under CI it fails.

use std::path::Path;
use std::process::Command;

fn maven() -> bool {
    let ok = Command::new("mvn").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "mvn is not on the PATH (.ci/run needs Java 17 and Maven)");
        eprintln!("SKIPPED: no mvn on the PATH, which Beam's Java Nexmark needs");
    }
    ok
}

#[test]
fn beam_java_nexmark_counts_equal_the_direct_runners_on_micro_batch_and_timely() {
    if !maven() {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("python3")
        .arg(repo.join("benchmarks/beam-nexmark/bench.py"))
        .args(["--only", "direct/batch,weir-microbatch/batch,weir-microbatch/streaming,weir-timely/streaming"])
        .args(["--queries", "0,3,5", "--check", "--timeout", "600"])
        .arg("--job-server")
        .arg(env!("CARGO_BIN_EXE_weir-job-server"))
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("python3 runs bench.py");
    let said = String::from_utf8_lossy(&run.stdout);
    println!("{said}");
    assert!(
        run.status.success(),
        "Beam's Java Nexmark on Weir did not match the DirectRunner:\n{said}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // Every Weir run counted and checked: 3 queries, 3 runs each.
    let checked: usize = said
        .lines()
        .find_map(|l| l.strip_suffix(" counts checked equal to the DirectRunner's")?.parse().ok())
        .expect("bench.py says how many counts it checked");
    assert_eq!(checked, 9, "{said}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap()).unwrap();
    let runs = results["results"].as_object().unwrap();
    assert_eq!(runs.len(), 12, "3 DirectRunner runs and 9 of Weir's: {runs:?}");
    // The counts are Nexmark's own, read from the job's metrics: q0 passes every event through.
    for (key, run) in runs {
        if key.ends_with("/0") {
            assert_eq!(run["row"][2], 100_000, "{key}: {run}");
        }
    }
}
