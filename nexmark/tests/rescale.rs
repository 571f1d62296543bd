//! A checkpoint resumes at another parallelism, exactly once: a checkpointed streaming query on
//! the micro-batch runner, SIGKILLed while it runs at 2 partitions, resumed at 4 and SIGKILLed
//! again, then resumed at 1 and run to the end, writes exactly the output of an uninterrupted
//! run. Keyed state moves key group by key group; sources resume split as they were.

mod common;
use common::{nexmark, results, text};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn args(q: &str, results: &Path, parallelism: usize, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["--runner", "microbatch", "--streaming", "--query", q, "--num-events", "300000"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--num-event-generators", "2", "--max-batch-size", "4000", "--results"].map(String::from));
    a.push(results.display().to_string());
    a.extend(["--parallelism".to_string(), parallelism.to_string()]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Runs `args` and SIGKILLs it after `after`; whether the kill landed before it finished.
fn run_and_kill(args: &[String], after: Duration) -> bool {
    let mut child = nexmark(args, &[]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while start.elapsed() < after {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(status.success(), "a run failed on its own: {err}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = Command::new("kill").args(["-9", &child.id().to_string()]).status();
    !child.wait().unwrap().success()
}

fn resumes_at_other_parallelisms(q: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference");
    let o = nexmark(&args(q, &reference, 2, &[]), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = results(&reference);
    assert!(expected.len() > 10, "too small a reference: {} lines", expected.len());
    // Kills land later and later until one at 2 partitions and one at 4 both land mid-run.
    for after_ms in [400u64, 250, 150, 80] {
        let (out, cp) = (dir.path().join(format!("out{after_ms}")), dir.path().join(format!("cp{after_ms}")));
        let cp = cp.to_str().unwrap().to_string();
        let flags = ["--checkpoint-dir", cp.as_str()];
        if !run_and_kill(&args(q, &out, 2, &flags), Duration::from_millis(after_ms)) {
            continue;
        }
        let killed_at_four = run_and_kill(&args(q, &out, 4, &flags), Duration::from_millis(after_ms));
        let o = nexmark(&args(q, &out, 1, &flags), &[]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(results(&out), expected, "resumed at 4 then 1 partitions (killed at 4: {killed_at_four})");
        if killed_at_four {
            return;
        }
    }
    panic!("no run of query {q} was killed at both 2 and 4 partitions");
}

#[test]
fn a_windowed_aggregation_resumes_at_four_then_one_partition_exactly_once() {
    resumes_at_other_parallelisms("5");
}

#[test]
fn a_stateful_join_resumes_at_four_then_one_partition_exactly_once() {
    resumes_at_other_parallelisms("3");
}
