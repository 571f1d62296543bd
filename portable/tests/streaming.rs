//! Beam Python's streaming pipelines on Weir: results as the data comes, from a TestStream
//! (played by Weir) and from an unbounded splittable DoFn (Beam's `PeriodicImpulse`, whose
//! residuals wait in Weir's state), with windows, state and timers.

mod common;
use std::path::Path;

/// The `RESULT` lines of `streaming_pipeline.py` run with `options`, sorted.
fn results(py: &str, options: &[String]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/streaming_pipeline.py");
    let mut args = vec![script.to_string_lossy().to_string()];
    args.extend(options.iter().cloned());
    let (ok, out, err) = common::python(py, &args);
    assert!(ok, "{}", &err[err.len().saturating_sub(5000)..]);
    let mut lines: Vec<String> = out.lines().filter(|l| l.starts_with("RESULT ")).map(String::from).collect();
    lines.sort();
    lines
}

#[test]
fn a_streaming_pipeline_with_state_and_timers_gives_the_direct_runner_s_results_on_every_runner() {
    let Some(py) = common::beam_python() else { return };
    let expected = results(&py, &["--runner=DirectRunner".into(), "--streaming".into()]);
    assert_eq!(expected.len(), 10, "{expected:#?}");
    for args in [&[][..], &["--runner", "timely", "--processes", "2"][..]] {
        let server = common::JobServer::start(args);
        assert_eq!(results(&py, &server.options()), expected, "on weir-job-server {args:?}");
    }
}

#[test]
fn an_unbounded_source_streams_windowed_results_until_the_job_is_cancelled() {
    let Some(py) = common::beam_python() else { return };
    let program = r#"
import os, sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
start = time.time()
p = beam.Pipeline(options=PipelineOptions(sys.argv[1:]))
(p | PeriodicImpulse(start_timestamp=start, fire_interval=0.25)
   | "Key" >> beam.Map(lambda t: ("k", 1))
   | beam.WindowInto(beam.window.FixedWindows(1))
   | beam.CombinePerKey(sum)
   | "Print" >> beam.Map(lambda kv: os.write(1, b"COUNT %d\n" % kv[1])))
result = p.run()
result.wait_until_finish(duration=5000)
print("STATE", result.state, flush=True)
from apache_beam.runners.runner import PipelineState
result.cancel()
# Polled with GetState, not a second wait_until_finish: each wait starts a thread reading the
# same job-message stream, and two readers of one gRPC stream fail in the client ("Internal
# gRPC call error 8") while the first wait's reader still runs.
deadline = time.time() + 20
while not PipelineState.is_terminal(result.state) and time.time() < deadline:
    time.sleep(0.1)
print("ENDED", result.state, flush=True)
# Out at once: grpc's channel teardown can hang a client whose job was cancelled mid-call.
os._exit(0)
"#;
    for args in [&[][..], &["--runner", "timely", "--workers", "2"][..]] {
        let server = common::JobServer::start(args);
        let mut argv = vec!["-c".to_string(), program.to_string()];
        argv.extend(server.options());
        let (_, out, err) = common::python(&py, &argv);
        let counts: Vec<u32> =
            out.lines().filter_map(|l| l.strip_prefix("COUNT ")).map(|c| c.parse().unwrap()).collect();
        // A window's count comes when its second has passed, while the source still runs:
        // four impulses a second, the first and last windows partial.
        assert!(counts.len() >= 3, "{args:?}: {out}\n{}", &err[err.len().saturating_sub(3000)..]);
        assert!(counts[1..counts.len() - 1].iter().all(|&c| c == 4), "{args:?}: {counts:?}");
        assert!(out.contains("STATE RUNNING"), "{args:?}: {out}");
        assert!(out.contains("ENDED CANCELLED"), "{args:?}: {out}");
    }
}

/// Counts impulses in a user state cell (`ReadModifyWriteState`), printing each count as
/// `N <count>`: 16 impulses, a quarter of a second apart, from `sys.argv[1]` (a Unix time).
const COUNTING: &str = r#"
import os, sys
import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms import userstate
class Count(beam.DoFn):
    N = userstate.ReadModifyWriteStateSpec("n", VarIntCoder())
    def process(self, kv, n=beam.DoFn.StateParam(N)):
        c = (n.read() or 0) + 1
        n.write(c)
        yield c
start = float(sys.argv[1])
p = beam.Pipeline(options=PipelineOptions(sys.argv[2:]))
(p | PeriodicImpulse(start_timestamp=start, stop_timestamp=start + 4, fire_interval=0.25)
   | "KEY" >> beam.Map(lambda t: ("k", t)) | beam.ParDo(Count())
   | "Print" >> beam.Map(lambda c: os.write(1, b"N %d\n" % c)))
try:
    result = p.run()
    result.wait_until_finish()
    print("ENDED", result.state, flush=True)
except Exception as e:
    print("RAISED", e, flush=True)
# Out at once: grpc's channel teardown can hang a client whose job server was killed.
os._exit(0)
"#;

/// Starts the counting pipeline (`label` naming its keying transform) on `server`; the client.
fn counting(py: &str, server: &common::JobServer, start: u64, label: &str) -> std::process::Child {
    let mut args = vec!["-c".to_string(), COUNTING.replace("KEY", label), start.to_string()];
    args.extend(server.options());
    std::process::Command::new(py)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python runs")
}

/// The counts a client printed, and its whole output. A client still running after a minute
/// is killed (Beam's Python client can wait forever in `wait_until_finish` once its job server
/// was SIGKILLed, even with the server's sockets closed); what it printed until then is kept,
/// so a hung run fails its assertions instead of hanging the suite.
fn counts(mut client: std::process::Child) -> (Vec<u32>, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while client.try_wait().expect("the client runs").is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = client.kill();
    let out = client.wait_with_output().expect("the client ends");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let n = text.lines().filter_map(|l| l.strip_prefix("N ")).filter_map(|c| c.trim().parse().ok()).collect();
    (n, text)
}

/// Kills the job server at a random point of each of `rounds` runs of the counting pipeline
/// (SIGKILL), then resubmits it to a new server on the same checkpoint: every impulse is
/// counted exactly once (the state holds 16 at the end, and every count from 1 to 16 is
/// printed). How many rounds went on from a checkpoint rather than from the start (a kill
/// before the first commit of a count starts over).
fn killed_and_resumed(rounds: usize) -> usize {
    let Some(py) = common::beam_python() else { return rounds };
    let mut resumed = 0;
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = dir.path().join("checkpoint").to_string_lossy().to_string();
        let args = ["--checkpoint-dir", checkpoint.as_str()];
        let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 1;
        let server = common::JobServer::start(&args);
        let client = counting(&py, &server, start, "Key");
        // Somewhere in the four seconds of impulses (and the second before them).
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        std::thread::sleep(std::time::Duration::from_millis(1000 + u64::from(nanos) % 3500));
        drop(server);
        let (before, _) = counts(client);
        let server = common::JobServer::start(&args);
        let (after, text) = counts(counting(&py, &server, start, "Key"));
        assert!(text.contains("ENDED DONE"), "round {round}: {text}");
        let mut seen: Vec<u32> = before.iter().chain(&after).copied().collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, (1..=16).collect::<Vec<_>>(), "round {round}: before {before:?}, after {after:?}");
        // (A kill after the job ended leaves nothing to count again: the resumed job is done.)
        if let (Some(&first), Some(&last)) = (after.first(), before.last()) {
            // The counts go on from the state of the last committed batch, with nothing skipped
            // (a batch cut short is counted again, once) and nothing counted twice.
            assert!(first <= last + 1, "round {round}: before {before:?}, after {after:?}");
            assert_eq!(after, (first..=16).collect::<Vec<_>>(), "round {round}: before {before:?}");
            resumed += usize::from(first > 1);
        }
        // A different pipeline on the same checkpoint is refused, naming what differs.
        let (_, text) = counts(counting(&py, &server, start, "Keyed"));
        assert!(text.contains("written by a different pipeline") && text.contains("'Keyed'"), "round {round}: {text}");
    }
    resumed
}

#[test]
fn a_job_killed_at_a_random_point_resumes_from_its_checkpoint_exactly_once() {
    killed_and_resumed(2);
}

/// The long form: `cargo test -p weir-portable --test streaming -- --ignored`.
#[test]
#[ignore]
fn a_job_killed_at_ten_random_points_resumes_from_its_checkpoint_exactly_once() {
    let resumed = killed_and_resumed(10);
    assert!(resumed >= 5, "only {resumed} of 10 rounds went on from a checkpoint");
}

#[test]
fn a_drained_job_ends_done_with_its_windows_fired() {
    use std::io::BufRead;
    let Some(py) = common::beam_python() else { return };
    let program = r#"
import os, sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
p = beam.Pipeline(options=PipelineOptions(sys.argv[1:]))
(p | PeriodicImpulse(start_timestamp=time.time(), fire_interval=0.25)
   | "Key" >> beam.Map(lambda t: ("k", 1))
   | beam.WindowInto(beam.window.FixedWindows(1))
   | beam.CombinePerKey(sum)
   | "Print" >> beam.Map(lambda kv: os.write(1, b"COUNT %d\n" % kv[1])))
result = p.run()
print("JOB", result._job_id, flush=True)
result.wait_until_finish()
print("ENDED", result.state, flush=True)
os._exit(0)
"#;
    // In one process, and in a process group of its own (a timely cluster of 2 processes).
    for server_args in [&[][..], &["--runner", "timely", "--processes", "2"][..]] {
        let server = common::JobServer::start(server_args);
        let mut args = vec!["-c".to_string(), program.to_string()];
        args.extend(server.options());
        let mut client = std::process::Command::new(&py)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python runs");
        let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines().map_while(Result::ok);
        let job = lines.find_map(|l| l.strip_prefix("JOB ").map(String::from)).expect("the client names its job");
        std::thread::sleep(std::time::Duration::from_secs(3));
        let port = server.endpoint.rsplit(':').next().unwrap().to_string();
        let drained = std::process::Command::new(env!("CARGO_BIN_EXE_weir-job-server"))
            .args(["--drain", &job, "--job-port", &port])
            .output()
            .expect("weir-job-server runs");
        assert!(drained.status.success(), "{}", String::from_utf8_lossy(&drained.stderr));
        assert_eq!(String::from_utf8_lossy(&drained.stdout).trim(), format!("job {job} is DRAINING"));
        let rest: Vec<String> = lines.collect();
        client.wait().unwrap();
        let counts: u32 = rest.iter().filter_map(|l| l.strip_prefix("COUNT ")).map(|c| c.parse::<u32>().unwrap()).sum();
        // Every impulse up to the drain is counted, the last window's too: about twelve.
        assert!(counts >= 10, "{rest:?}");
        assert_eq!(rest.last().map(String::as_str), Some("ENDED DONE"), "{rest:?}");
        // A job that is done cannot be drained again: it says how it ended.
        let again = std::process::Command::new(env!("CARGO_BIN_EXE_weir-job-server"))
            .args(["--drain", &job, "--job-port", &port])
            .output()
            .expect("weir-job-server runs");
        assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), format!("job {job} is DONE"));
    }
}

#[test]
fn match_continuously_finds_each_new_file_once_as_it_appears() {
    let Some(py) = common::beam_python() else { return };
    let program = r#"
import os, sys, time, threading
import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions
directory = sys.argv[1]
def write():
    for i in range(4):
        time.sleep(1)
        with open(os.path.join(directory, "f%d.txt" % i), "w") as f:
            f.write("x\n")
threading.Thread(target=write, daemon=True).start()
start = time.time()
p = beam.Pipeline(options=PipelineOptions(sys.argv[2:]))
(p | fileio.MatchContinuously(os.path.join(directory, "*.txt"), interval=0.5, stop_timestamp=start + 6)
   | beam.Map(lambda m: os.write(1, ("MATCHED %s\n" % os.path.basename(m.path)).encode())))
result = p.run()
result.wait_until_finish()
print("ENDED", result.state, flush=True)
os._exit(0)
"#;
    let dir = tempfile::tempdir().unwrap();
    let server = common::JobServer::start(&["--runner", "timely", "--workers", "2"]);
    let mut args = vec!["-c".to_string(), program.to_string(), dir.path().to_string_lossy().to_string()];
    args.extend(server.options());
    let (ok, out, err) = common::python(&py, &args);
    assert!(ok, "{}", &err[err.len().saturating_sub(3000)..]);
    let mut matched: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("MATCHED ")).collect();
    matched.sort();
    assert_eq!(matched, ["f0.txt", "f1.txt", "f2.txt", "f3.txt"], "{out}");
    assert!(out.contains("ENDED DONE"), "{out}");
}
