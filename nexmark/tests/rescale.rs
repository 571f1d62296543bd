//! A checkpoint resumes at another parallelism, exactly once: a checkpointed streaming query,
//! SIGKILLed while it runs at 2 partitions (workers), resumed at 4 and SIGKILLed again, then
//! resumed at 1 and run to the end, writes exactly the output of an uninterrupted run. On the
//! micro-batch runner the partitions change; on the timely runner the workers, and the 4 run as
//! a local cluster of 2 processes. Keyed state moves key group by key group; sources resume
//! split as they were, their splits dealt anew to the workers.

mod common;
use common::{differences, nexmark, results, run_and_kill, text};
use std::path::Path;
use std::time::Duration;

/// How a runner runs at 2, then 4, then 1 partitions (workers).
struct Layouts {
    runner: &'static str,
    at: [&'static [&'static str]; 3],
}

/// The partitions are pinned: by default they follow the threads that run, which a machine with
/// fewer cores than 4 caps.
const MICROBATCH: Layouts = Layouts {
    runner: "microbatch",
    at: [
        &["--parallelism", "2", "--partitions", "2"],
        &["--parallelism", "4", "--partitions", "4"],
        &["--parallelism", "1", "--partitions", "1"],
    ],
};

const TIMELY: Layouts = Layouts {
    runner: "timely",
    at: [&["--workers", "2"], &["--processes", "2", "--workers", "2"], &["--workers", "1"]],
};

fn args(q: &str, results: &Path, runner: &str, layout: &[&str], extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["--runner", runner, "--streaming", "--query", q, "--num-events", "300000"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--num-event-generators", "2", "--max-batch-size", "4000", "--results"].map(String::from));
    a.push(results.display().to_string());
    a.extend(layout.iter().chain(extra).map(|s| s.to_string()));
    a
}

fn resumes_at_other_parallelisms(q: &str, l: &Layouts) {
    resumes_at_other_parallelisms_with(q, &[], l)
}

/// [`resumes_at_other_parallelisms`] with the query's own flags `query`.
fn resumes_at_other_parallelisms_with(q: &str, query: &[&str], l: &Layouts) {
    let args = |q: &str, results: &Path, runner: &str, layout: &[&str], extra: &[&str]| {
        let extra: Vec<&str> = query.iter().chain(extra).copied().collect();
        args(q, results, runner, layout, &extra)
    };
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference");
    let o = nexmark(&args(q, &reference, l.runner, l.at[0], &[]), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = results(&reference);
    assert!(expected.len() > 10, "too small a reference: {} lines", expected.len());
    // Kills land later and later until one at 2 partitions and one at 4 both land mid-run.
    for after_ms in [400u64, 250, 150, 80] {
        let (out, cp) = (dir.path().join(format!("out{after_ms}")), dir.path().join(format!("cp{after_ms}")));
        let cp = cp.to_str().unwrap().to_string();
        let flags = ["--checkpoint-dir", cp.as_str()];
        if !run_and_kill(&args(q, &out, l.runner, l.at[0], &flags), Duration::from_millis(after_ms)) {
            continue;
        }
        let killed_at_four = run_and_kill(&args(q, &out, l.runner, l.at[1], &flags), Duration::from_millis(after_ms));
        let o = nexmark(&args(q, &out, l.runner, l.at[2], &flags), &[]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let got = results(&out);
        if got != expected {
            let diff = differences(&expected, &got);
            panic!(
                "resumed at 4 then 1 (killed at 4: {killed_at_four}) on {}: {} result lines, expected {}; {diff:#?}",
                l.runner,
                got.values().sum::<usize>(),
                expected.values().sum::<usize>()
            );
        }
        if killed_at_four {
            return;
        }
    }
    panic!("no run of query {q} on {} was killed at both 2 and 4 partitions", l.runner);
}

#[test]
fn a_windowed_aggregation_resumes_at_four_then_one_partition_exactly_once() {
    resumes_at_other_parallelisms("5", &MICROBATCH);
}

#[test]
fn a_stateful_join_resumes_at_four_then_one_partition_exactly_once() {
    resumes_at_other_parallelisms("3", &MICROBATCH);
}

#[test]
fn a_windowed_aggregation_resumes_at_four_then_one_timely_worker_exactly_once() {
    resumes_at_other_parallelisms("5", &TIMELY);
}

#[test]
fn a_stateful_join_resumes_at_four_then_one_timely_worker_exactly_once() {
    resumes_at_other_parallelisms("3", &TIMELY);
}

/// Query 7 joins bids with their window's maximum as a side input: bids wait for it, one state
/// entry per waiting batch, and move to the first partition of another layout (issue 52).
#[test]
fn elements_waiting_for_side_inputs_resume_at_four_then_one_partition_exactly_once() {
    resumes_at_other_parallelisms_with("7", &["--window-size-sec", "1"], &MICROBATCH);
}
