//! The `nexmark` binary as an operator meets it: help and exit codes, events files with any
//! name and malformed lines, results directories that are not silently appended to, reused
//! checkpoints, logging on stderr, `--explain`, and SIGINT/SIGTERM. Regression tests of issue 16.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nexmark(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nexmark")).args(args).env_remove("RUST_LOG").output().expect("run nexmark")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Every result line under a `--results` directory's query folder, sorted.
fn results(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".jsonl") {
            lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(String::from));
        }
    }
    lines.sort();
    lines
}

/// An exported events file of 5 000 events named `events[1].jsonl` (glob characters), with line
/// 2 501 replaced by a JSON object that is not an event, followed by a terminal escape sequence
/// (which no message may print raw).
fn events_file(dir: &Path) -> PathBuf {
    let path = dir.join("events[1].jsonl");
    assert_eq!(code(&nexmark(&["--export-events", path.to_str().unwrap(), "--num-events", "5000"])), 0);
    let mut lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(String::from).collect();
    lines[2500] = "{\"foo\":1}\u{1b}[2J".to_string();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn help_and_version_go_to_stdout_with_status_0() {
    for flag in ["--help", "-h"] {
        let o = nexmark(&[flag]);
        assert_eq!(code(&o), 0, "{flag}");
        assert!(text(&o.stdout).contains("Usage") && text(&o.stdout).contains("--events-file"), "{flag}");
        assert!(text(&o.stderr).is_empty(), "{flag}: {}", text(&o.stderr));
    }
    let o = nexmark(&["--version"]);
    assert_eq!((code(&o), text(&o.stdout).trim()), (0, format!("nexmark {}", env!("CARGO_PKG_VERSION")).as_str()));
}

#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    let o = nexmark(&["--query", "0", "--num-events", "1.5"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o.stderr).contains("--num-events") && text(&o.stderr).contains("1.5"), "{}", text(&o.stderr));
    let o = nexmark(&["--query", "0", "--no-such-flag"]);
    assert_eq!(code(&o), 2);
    let o = nexmark(&["--query", "0", "--on-malformed", "ignore"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o.stderr).contains("dead-letter=FILE"), "{}", text(&o.stderr));
    let o = nexmark(&["--query", "0", "--events-file", "/no/such/events.jsonl"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o.stderr).contains("/no/such/events.jsonl"), "{}", text(&o.stderr));
}

/// Issue 33: flags that crashed the launcher or ate memory without bound are refused at once,
/// exit status 2, naming the flag.
#[test]
fn odd_flags_are_refused_naming_the_flag() {
    let max = i64::MAX.to_string();
    let cases: &[(&[&str], &str)] = &[
        (&["--first-event-rate", &max, "--is-rate-limited", "--streaming"], "--first-event-rate"),
        (&["--query", "13", "--side-input-row-count", &max], "--side-input-row-count"),
        (&["--occasional-delay-sec", &max, "--prob-delayed-event", "1", "--is-rate-limited"], "--occasional-delay-sec"),
        (&["--parallelism", "100000"], "--parallelism"),
        (&["--runner", "timely", "--workers", "100000"], "--workers"),
        (&["--streaming", "--trigger", "once", "--num-events", "0"], "--num-events 0"),
        (&["--query", "5", "--window-size-sec", &max], "--window-size-sec"),
        (&["--query", "5", "--window-size-sec", "3600", "--window-period-sec", "1"], "--window-period-sec"),
        (&["--avg-bid-byte-size", "2147483647"], "--avg-bid-byte-size"),
        (&["--checkpoint-dir", ""], "--checkpoint-dir"),
        (&["--max-batch-size", "0"], "--max-batch-size"),
        (&["--num-event-generators", "0"], "--num-event-generators"),
    ];
    for (flags, named) in cases {
        let mut args = vec!["--query", "0", "--num-events", "1000"];
        args.extend_from_slice(flags);
        let o = nexmark(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(named), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"), "{args:?}: {}", text(&o.stderr));
    }
    // The edges of the ranges run.
    let o = nexmark(&[
        "--query",
        "0",
        "--num-events",
        "2000",
        "--first-event-rate",
        "2000000",
        "--next-event-rate",
        "2000000",
        "--is-rate-limited",
        "--streaming",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
}

#[test]
fn malformed_events_are_reported_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = events_file(dir.path());
    let f = file.to_str().unwrap();
    let perf = dir.path().join("perf.jsonl");
    // Skip (the default): a warning naming file and line, the count in the summary and perf file.
    let o = nexmark(&["--query", "0", "--events-file", f, "--perf-file", perf.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(&format!("{f}:2501")) && text(&o.stderr).contains("WARN"), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("4999") && out.contains("1 malformed event line(s)"), "{out}");
    let record: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&perf).unwrap().trim()).unwrap();
    assert_eq!(record["numResults"], 4999);
    assert!(record["errors"][0].as_str().unwrap().contains("1 malformed"), "{record}");
    // Fail: the run fails naming file and line.
    let o = nexmark(&["--query", "0", "--events-file", f, "--on-malformed", "fail"]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stdout).contains(&format!("{f}:2501")), "{}", text(&o.stdout));
    // The bad line is shown with its control characters escaped, as in skip mode's warning.
    for shown in [text(&o.stdout), text(&o.stderr)] {
        assert!(!shown.contains('\u{1b}'), "a raw escape character was printed: {shown:?}");
    }
    assert!(text(&o.stdout).contains("{\"foo\":1}\\u{1b}[2J"), "{}", text(&o.stdout));
    // Dead letter: the bad line kept verbatim.
    let dead = dir.path().join("dead.jsonl");
    let o =
        nexmark(&["--query", "0", "--events-file", f, "--on-malformed", &format!("dead-letter={}", dead.display())]);
    assert_eq!(code(&o), 0);
    assert_eq!(std::fs::read_to_string(&dead).unwrap(), "{\"foo\":1}\u{1b}[2J\n");
    // A glob reads the same file when asked for one.
    let pattern = dir.path().join("events*.jsonl");
    let o = nexmark(&["--query", "0", "--events-glob", pattern.to_str().unwrap()]);
    assert_eq!(code(&o), 0);
    assert!(text(&o.stdout).contains("4999"));
    // An empty file is worth a warning.
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = nexmark(&["--query", "0", "--events-file", empty.to_str().unwrap()]);
    assert!(text(&o.stderr).contains("is empty"), "{}", text(&o.stderr));
}

/// Issue 33: CSV events that lost data with exit 0. A line whose quote is never closed is one
/// malformed line (the lines after it are read), and a header without a column the reader needs
/// fails at once, naming it.
#[test]
fn csv_events_with_an_open_quote_or_a_missing_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.csv");
    let p = path.to_str().unwrap();
    assert_eq!(code(&nexmark(&["--export-events", p, "--num-events", "3000"])), 0);
    let good = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = good.lines().collect();
    lines[1000] = "\"unterminated,1,2";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let o = nexmark(&["--query", "0", "--events-file", p]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("2999") && out.contains("1 malformed event line(s)"), "{out}");
    assert!(text(&o.stderr).contains("not closed on its line"), "{}", text(&o.stderr));
    let o = nexmark(&["--query", "0", "--events-file", p, "--on-malformed", "fail"]);
    assert_eq!(code(&o), 1, "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("not closed on its line"), "{}", text(&o.stdout));
    // A header that lacks a number column the events need.
    for column in ["price", "dateTime"] {
        let header = good.lines().next().unwrap().replace(column, "renamed");
        std::fs::write(&path, good.replacen(good.lines().next().unwrap(), &header, 1)).unwrap();
        let o = nexmark(&["--query", "0", "--events-file", p]);
        assert_eq!(code(&o), 1, "{column}: {}", text(&o.stderr));
        let shown = text(&o.stdout) + &text(&o.stderr);
        assert!(shown.contains(&format!("no column '{column}'")) && shown.contains(p), "{column}: {shown}");
    }
}

#[test]
fn a_results_directory_is_never_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let results_dir = dir.path().join("results");
    let r = results_dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["--streaming", "--query", "5", "--num-events", "20000", "--results", r];
        args.extend_from_slice(extra);
        nexmark(&args)
    };
    assert_eq!(code(&run(&[])), 0);
    let once = results(&results_dir.join("HOT_ITEMS"));
    assert!(!once.is_empty());
    let again = run(&[]);
    assert_eq!(code(&again), 1);
    assert!(text(&again.stdout).contains("HOT_ITEMS") && text(&again.stdout).contains("--overwrite"));
    assert_eq!(results(&results_dir.join("HOT_ITEMS")), once, "the refused run wrote nothing");
    assert_eq!(code(&run(&["--overwrite"])), 0);
    assert_eq!(results(&results_dir.join("HOT_ITEMS")), once);
    // On the direct runner too (its sink writes a file per bundle).
    let direct = dir.path().join("direct");
    let d = direct.to_str().unwrap();
    let args = ["--query", "2", "--num-events", "5000", "--runner", "direct", "--results", d];
    assert_eq!(code(&nexmark(&args)), 0);
    assert_eq!(code(&nexmark(&args)), 1);
}

#[test]
fn a_checkpoint_resumes_only_its_own_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp");
    let o = nexmark(&[
        "--streaming",
        "--query",
        "0",
        "--query",
        "1",
        "--num-events",
        "10000",
        "--checkpoint-dir",
        cp.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 1);
    let out = text(&o.stdout);
    assert!(out.contains("different pipeline") && out.contains("CurrencyConversion"), "{out}");
}

#[test]
fn warnings_reach_stderr_and_explain_prints_the_plan() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://weir:hunter2@127.0.0.1:{port}/metrics");
    let o = nexmark(&[
        "--query",
        "2",
        "--num-events",
        "1000",
        "--metrics-sink",
        "http",
        "--metrics-http-url",
        &url,
        "--explain",
    ]);
    assert_eq!(code(&o), 0);
    let err = text(&o.stderr);
    assert!(err.contains("WARN") && err.contains("metrics push failed"), "{err}");
    assert!(!err.contains("hunter2") && err.contains("***@127.0.0.1"), "{err}");
    assert!(text(&o.stdout).contains("== Physical plan"), "{}", text(&o.stdout));
    let o = nexmark(&["--query", "2", "--num-events", "1000", "--runner", "direct", "--explain"]);
    assert!(
        text(&o.stdout).contains("== Physical plan") && text(&o.stdout).contains("1 partitions"),
        "{}",
        text(&o.stdout)
    );
}

/// A streaming HOT_ITEMS run with a checkpoint, in batches small enough to stop in between.
fn streaming_run(cp: &Path, results: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nexmark"));
    c.args(["--streaming", "--query", "5", "--num-events", "100000", "--max-batch-size", "2000"])
        .args(["--trigger", "processing-time", "--trigger-interval-ms", "20"])
        .arg("--checkpoint-dir")
        .arg(cp)
        .arg("--results")
        .arg(results)
        .args(extra)
        .env_remove("RUST_LOG");
    c
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().unwrap();
    assert!(ok.success());
}

/// Waits until the checkpoint has committed `n` batches.
fn wait_for_commits(cp: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_dir(cp.join("commits")).map_or(0, |d| d.count()) < n {
        assert!(Instant::now() < deadline, "no commits in {}", cp.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_stops_after_a_commit_and_the_resume_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (cp, out) = (dir.path().join("cp"), dir.path().join("results"));
    let perf = dir.path().join("perf.jsonl");
    let child = streaming_run(&cp, &out, &["--perf-file", perf.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_commits(&cp, 3);
    signal(&child, "TERM");
    let stopped = child.wait_with_output().unwrap();
    assert_eq!(code(&stopped), 143, "{}", text(&stopped.stderr));
    let summary = text(&stopped.stdout);
    assert!(summary.contains("Performance:") && summary.contains("stopped early by SIGTERM"), "{summary}");
    assert!(text(&stopped.stderr).contains("SIGTERM received"));
    assert!(std::fs::read_to_string(&perf).unwrap().contains("SIGTERM"));
    // The lock was released cleanly.
    assert_eq!(std::fs::read_to_string(cp.join("lock")).unwrap(), "");
    let resumed = streaming_run(&cp, &out, &[]).output().unwrap();
    assert_eq!(code(&resumed), 0, "{}", text(&resumed.stderr));
    let (cp2, out2) = (dir.path().join("cp2"), dir.path().join("results2"));
    assert_eq!(code(&streaming_run(&cp2, &out2, &[]).output().unwrap()), 0);
    let straight = results(&out2.join("HOT_ITEMS"));
    assert!(!straight.is_empty());
    assert_eq!(results(&out.join("HOT_ITEMS")), straight, "stopped and resumed differs from uninterrupted");
}

#[test]
fn a_second_sigint_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // One large batch, so the second signal comes while the first batch is still running.
    let mut c = Command::new(env!("CARGO_BIN_EXE_nexmark"));
    c.args(["--query", "9", "--num-events", "2000000", "--max-batch-size", "2000000", "--parallelism", "1"]);
    let child =
        c.arg("--results").arg(dir.path().join("r")).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, "INT");
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, "INT");
    let start = Instant::now();
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 130, "{}", text(&o.stderr));
    assert!(!text(&o.stdout).contains("Performance:"), "the second signal waited for the batch");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Waits until the query's results directory holds result lines, and returns how many.
fn wait_for_output(results: &Path) -> usize {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // Files are renamed into place at commit: one may go between listing and reading.
        let n: usize = std::fs::read_dir(results)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
            .map(|e| std::fs::read_to_string(e.path()).map_or(0, |t| t.lines().count()))
            .sum();
        if n > 0 {
            return n;
        }
        assert!(Instant::now() < deadline, "no results in {}", results.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigusr1_drains_a_streaming_run_which_ends_done() {
    for runner in [&["--runner", "microbatch"][..], &["--runner", "timely", "--processes", "2"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("results");
        let mut c = Command::new(env!("CARGO_BIN_EXE_nexmark"));
        c.args(["--streaming", "--query", "5", "--num-events", "100000000", "--max-batch-size", "2000"])
            .args(["--trigger", "processing-time", "--trigger-interval-ms", "20"])
            .args(runner)
            .arg("--results")
            .arg(&out)
            .env_remove("RUST_LOG");
        let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // Windows have closed and been written: the drain comes mid-stream, with windows open.
        let before = wait_for_output(&out.join("HOT_ITEMS"));
        signal(&child, "USR1");
        let o = child.wait_with_output().unwrap();
        // Drained: the windows fired, the query ended Done, the summary was written.
        assert_eq!(code(&o), 0, "{runner:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("draining"), "{}", text(&o.stderr));
        assert!(text(&o.stdout).contains("Performance:"), "{}", text(&o.stdout));
        assert!(results(&out.join("HOT_ITEMS")).len() >= before);
    }
}

/// `--check` of the queries built on WinningBids (4, 6, 9) in streaming says it is skipped, and
/// why, when the split generators' side-by-side timelines arrive over several batches (which
/// bids meet their auctions then depends on where the batches end, as on Beam's runners); with
/// one generator the model decides, and the run is checked.
#[test]
fn a_streaming_check_of_winning_bids_over_split_timelines_says_it_is_skipped() {
    let base = ["--query", "9", "--num-events", "20000", "--streaming", "--max-batch-size", "2000", "--check"];
    let split = nexmark(&base);
    assert_eq!(code(&split), 0, "{}", text(&split.stderr));
    let err = text(&split.stderr);
    assert!(
        err.contains("WINNING_BIDS: in streaming over 100 generators'") && err.contains("--check skipped"),
        "{err}"
    );
    let one = nexmark(&[&base[..], &["--num-event-generators", "1"]].concat());
    assert_eq!(code(&one), 0, "{}", text(&one.stderr));
    assert!(!text(&one.stderr).contains("skipped"), "{}", text(&one.stderr));
}
