//! A local timely cluster of two processes meeting the faults an operator causes: one process
//! stopped by a signal, every process stopped at once (Ctrl-C), and a peer that goes silent
//! without closing its connections (SIGSTOP). Each process exits, with a message and the
//! conventional status, within seconds, never hanging the cluster.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An endless rate-limited streaming run on a local cluster of two processes, in a process
/// group of its own (so a test can signal the whole cluster as a terminal's Ctrl-C does).
fn endless(extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_nexmark"))
        .args(["--runner", "timely", "--processes", "2", "--streaming", "--query", "0", "--num-events", "0"])
        .args(["--is-rate-limited", "--first-event-rate", "2000", "--next-event-rate", "2000"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run nexmark")
}

/// The second process of the cluster `parent` started, once it runs.
fn second_process(parent: &Child) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
            let Some(rest) = stat.rsplit_once(')').map(|r| r.1) else { continue };
            if rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent.id()) {
                if let Ok(pid) = e.file_name().to_string_lossy().parse() {
                    return pid;
                }
            }
        }
        assert!(Instant::now() < deadline, "the second process never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(target: &str, name: &str) {
    assert!(Command::new("kill").args([&format!("-{name}"), "--", target]).status().unwrap().success());
}

/// Waits for `child` to exit within `limit`; returns its status and standard error. A child
/// still running then is killed, with its group, and the test fails: the cluster hung.
fn exits_within(mut child: Child, limit: Duration, what: &str) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill").args(["-9", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
            panic!("{what}: the cluster did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` has exited (its entry is gone or a zombie).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit_once(')').is_some_and(|r| r.1.trim_start().starts_with('Z')))
}

/// Fails unless process `pid` exits within `limit`.
fn gone_within(pid: u32, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while !gone(pid) {
        assert!(Instant::now() < deadline, "{what}: process {pid} did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Let the run get going: a few epochs in.
fn settle() {
    std::thread::sleep(Duration::from_secs(3));
}

#[test]
fn a_signal_to_one_process_stops_the_whole_cluster() {
    for name in ["TERM", "INT"] {
        let run = endless(&[]);
        let second = second_process(&run);
        settle();
        signal(&second.to_string(), name);
        let (status, err) = exits_within(run, Duration::from_secs(30), name);
        assert_eq!(status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("process 1 failed") && err.contains("stopped"), "{name}: {err}");
        gone_within(second, Duration::from_secs(10), name);
    }
}

#[test]
fn ctrl_c_on_the_cluster_stops_every_process_with_the_signal_status() {
    for (name, code) in [("INT", 130), ("TERM", 143)] {
        let run = endless(&[]);
        let second = second_process(&run);
        settle();
        // A terminal's Ctrl-C reaches every process of the group.
        signal(&format!("-{}", run.id()), name);
        let (status, err) = exits_within(run, Duration::from_secs(30), name);
        assert_eq!(status.code(), Some(code), "{name}: {err}");
        gone_within(second, Duration::from_secs(10), name);
    }
}

/// A peer stopped with SIGSTOP keeps its connections open and says nothing: the other process
/// notices within the peer timeout, fails naming it, and does not wait for it; the silenced one,
/// resumed, finds its connections shut and exits too.
#[test]
fn a_silent_peer_is_noticed_within_the_peer_timeout() {
    let run = endless(&["--peer-timeout", "3"]);
    let second = second_process(&run);
    settle();
    signal(&second.to_string(), "STOP");
    let (status, err) = exits_within(run, Duration::from_secs(20), "SIGSTOP");
    signal(&second.to_string(), "CONT");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("lost process 1") && err.contains("--peer-timeout"), "{err}");
    gone_within(second, Duration::from_secs(15), "the resumed process");
}
