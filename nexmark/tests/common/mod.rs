//! What the checkpoint tests share: the launcher as a command, its output as text, and a
//! results directory as a multiset of lines.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The launcher with `args` and `env`, without the crash and log settings of the test's own
/// environment.
pub fn nexmark(args: &[String], env: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nexmark"));
    c.args(args).env_remove("RUST_LOG").env_remove("WEIR_CRASH_AT");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// What a run printed, standard output then standard error.
pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Every result line with how often it appears, across the query's files.
pub fn results(dir: &Path) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    let Ok(queries) = std::fs::read_dir(dir) else { return lines };
    for q in queries.flatten() {
        for e in std::fs::read_dir(q.path()).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".jsonl") {
                for l in std::fs::read_to_string(e.path()).unwrap().lines() {
                    *lines.entry(l.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    lines
}

/// The first few result lines whose count differs from the expected one, each with both counts.
pub fn differences(expected: &BTreeMap<String, usize>, got: &BTreeMap<String, usize>) -> Vec<String> {
    expected
        .keys()
        .chain(got.keys())
        .filter(|k| got.get(*k) != expected.get(*k))
        .take(6)
        .map(|k| format!("{k}: {:?} times, expected {:?}", got.get(k), expected.get(k)))
        .collect()
}

/// The children of process `pid` (a local cluster's other processes, started by the launcher).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // pid (comm) state ppid ...: the command may hold spaces, so read after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|r| r.1) else { continue };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.extend(e.file_name().to_string_lossy().parse::<u32>().ok());
        }
    }
    out
}

/// Runs the launcher with `args` and SIGKILLs it, with a cluster's other processes, after
/// `after`; whether the kill landed before it finished (a run that ends first must succeed).
#[allow(dead_code)]
pub fn run_and_kill(args: &[String], after: Duration) -> bool {
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
    // The whole cluster at once: its other processes, then the launcher.
    for pid in children(child.id()).into_iter().chain([child.id()]) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    !child.wait().unwrap().success()
}
