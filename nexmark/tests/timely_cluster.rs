//! The launcher on the timely runner across processes: a local cluster of two processes on
//! 127.0.0.1 (started by the launcher itself) gives the models' results and the same result
//! files as one process, and bad cluster flags are refused with the flag named.

use std::path::Path;
use std::process::{Command, Output};

fn nexmark(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nexmark")).args(args).env_remove("RUST_LOG").output().expect("run nexmark")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a run printed: its table (where a query's error goes) and its log.
fn printed(o: &Output) -> String {
    text(&o.stdout) + &text(&o.stderr)
}

/// Every result line of every query folder under a `--results` directory, sorted.
fn results(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for q in std::fs::read_dir(dir).unwrap().flatten() {
        for e in std::fs::read_dir(q.path()).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".jsonl") {
                lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(String::from));
            }
        }
    }
    lines.sort();
    lines
}

/// The result count of every query in a run's performance table (the `result.elements`
/// metric), by configuration.
fn counted(stdout: &str) -> Vec<(String, String)> {
    let table = stdout.split("Performance:").nth(1).unwrap_or("");
    table
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() == 4 && cols[0].len() == 4 && cols[0].chars().all(|c| c.is_ascii_digit()))
                .then(|| (cols[0].to_string(), cols[3].to_string()))
        })
        .collect()
}

#[test]
fn two_processes_match_the_models_and_one_process_in_batch_and_streaming() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [&[][..], &["--streaming"][..]] {
        let run = |name: &str, runner: &[&str]| {
            let out = dir.path().join(format!("{name}{}", mode.len()));
            let mut args = vec!["--query", "3", "--query", "5", "--query", "8", "--num-events", "20000"];
            args.extend(["--num-event-generators", "1", "--check", "--results", out.to_str().unwrap()]);
            args.extend(mode);
            args.extend(runner);
            let o = nexmark(&args);
            assert!(o.status.success(), "{name} {mode:?}: {}{}", text(&o.stdout), text(&o.stderr));
            (results(&out), counted(&text(&o.stdout)))
        };
        let one = run("one", &["--runner", "microbatch", "--parallelism", "1"]);
        let two = run("two", &["--runner", "timely", "--processes", "2"]);
        assert!(!one.0.is_empty());
        assert_eq!(one.0, two.0, "{mode:?}");
        // The table's result counts are the metrics process 0 adds up over the cluster.
        assert_eq!(one.1.len(), 3, "{mode:?}");
        assert_eq!(one.1, two.1, "{mode:?}");
    }
}

#[test]
fn bad_cluster_flags_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let o = nexmark(&["--runner", "timely", "--processes", "2", "--process-id", "1", "--query", "0"]);
    assert!(!o.status.success());
    assert!(printed(&o).contains("--process-id 1 needs --hostfile"), "{}", printed(&o));
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1:1\n").unwrap();
    let o = nexmark(&["--runner", "timely", "--processes", "2", "--hostfile", hosts.to_str().unwrap(), "--query", "0"]);
    assert!(!o.status.success());
    assert!(printed(&o).contains("names 1 processes, but --processes is 2"), "{}", printed(&o));
    std::fs::write(&hosts, "127.0.0.1:1\nnot an address\n").unwrap();
    let o = nexmark(&["--runner", "timely", "--processes", "2", "--hostfile", hosts.to_str().unwrap(), "--query", "0"]);
    assert!(!o.status.success());
    assert!(printed(&o).contains("line 2: 'not an address' is not host:port"), "{}", printed(&o));
    for (flags, says) in [
        (&["--parallelism", "2"][..], "--parallelism is an option of the microbatch runner; the timely runner"),
        (&["--max-batch-retries", "1"][..], "--max-batch-retries is an option of the microbatch runner; the timely"),
    ] {
        let mut args = vec!["--runner", "timely", "--query", "0", "--num-events", "100"];
        args.extend(flags);
        let o = nexmark(&args);
        assert!(!o.status.success(), "{flags:?}");
        assert!(printed(&o).contains(says), "{flags:?}: {}", printed(&o));
    }
    let o = nexmark(&["--runner", "timely", "--workers", "0", "--query", "0"]);
    assert!(!o.status.success());
    assert!(printed(&o).contains("'0' for '--workers <WORKERS>': 0 is not in 1..=1024"), "{}", printed(&o));
}

/// Timely is fail-stop: when a process of the cluster dies, the others stop within seconds
/// with an error naming it, and exit non-zero.
#[test]
fn a_lost_process_stops_the_cluster_naming_it() {
    use std::time::{Duration, Instant};
    let mut parent = Command::new(env!("CARGO_BIN_EXE_nexmark"))
        .args(["--runner", "timely", "--processes", "2", "--query", "5", "--streaming", "--num-events", "1000000000"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let children = format!("/proc/{0}/task/{0}/children", parent.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    let child: i32 = loop {
        let listed = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = listed.split_whitespace().next().and_then(|p| p.parse().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the local cluster never started its second process");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Let the cluster connect and run for a while, then kill its second process.
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("kill").args(["-9", &child.to_string()]).status().unwrap().success());
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = parent.try_wait().unwrap() {
            break s;
        }
        assert!(killed.elapsed() < Duration::from_secs(20), "process 0 did not stop after process 1 died");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(parent.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(!status.success());
    assert!(out.contains("lost process 1 of the cluster"), "{out}");
}

/// Processes started by hand with a hostfile, one of them with another option: both are
/// refused at startup with the difference named.
#[test]
fn processes_that_differ_are_refused_naming_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1])).unwrap();
    let start = |id: &str, extra: &[&str]| {
        let mut args = vec!["--runner", "timely", "--processes", "2", "--hostfile", hosts.to_str().unwrap()];
        args.extend(["--process-id", id, "--query", "0", "--num-events", "1000"]);
        args.extend(extra);
        Command::new(env!("CARGO_BIN_EXE_nexmark"))
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let one = start("1", &["--max-batch-size", "5"]);
    let zero = start("0", &[]);
    let (zero, one) = (zero.wait_with_output().unwrap(), one.wait_with_output().unwrap());
    for o in [&zero, &one] {
        assert!(
            printed(o).contains("process 1 was started with other options: process 0 has `max_batch_size: 100000`, process 1 has `max_batch_size: 5`"),
            "{}",
            printed(o)
        );
    }
    assert!(!zero.status.success());
}
