//! Beam Python pipelines submitted to `weir-job-server`, run on Weir with Beam Python SDK
//! harnesses (LOOPBACK): their output equals Beam Python's own DirectRunner's, and a failing
//! pipeline fails in the Python client with its traceback.

mod common;
use std::path::Path;

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python").join(name).to_string_lossy().into()
}

/// Runs `tests/python/batch_pipeline.py` on the DirectRunner and on Weir with `weir_args`;
/// both outputs, sorted.
fn both_ways(py: &str, weir_args: &[&str]) -> (Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let direct = dir.path().join("direct");
    // Beam Python's bundle-based DirectRunner: its default one (the FnApiRunner) fails on windows
    // of a coder of the user's own that merge (it writes its opaque windows in the user's coder).
    let reference = [
        script("batch_pipeline.py"),
        format!("--output={}", direct.display()),
        "--runner=BundleBasedDirectRunner".into(),
    ];
    let (ok, _, err) = python(py, &reference);
    assert!(ok, "the DirectRunner failed: {err}");
    let server = common::JobServer::start(weir_args);
    let weir = dir.path().join("weir");
    let mut args = vec![script("batch_pipeline.py"), format!("--output={}", weir.display())];
    args.extend(server.options());
    let (ok, _, err) = python(py, &args);
    assert!(ok, "Weir failed: {err}");
    (common::lines_of(&direct), common::lines_of(&weir))
}

fn python(python: &str, args: &[String]) -> (bool, String, String) {
    common::python(python, args)
}

/// A Python program that runs the pipeline `body` builds on `p` (after `setup`, with `beam`
/// imported) and prints `RAISED` with the exception's type and text if it raises. It leaves
/// without Python's shutdown (`os._exit`): after a failed job, Beam's client sometimes
/// deadlocks there, in a gRPC channel's finalizer (seen in CI: every thread waiting, 300 s).
fn raising(setup: &str, body: &str) -> String {
    let body: String = body.lines().map(|l| format!("        {l}\n")).collect();
    format!(
        "import os, sys\nimport apache_beam as beam\nfrom apache_beam.options.pipeline_options import PipelineOptions\n\
         {setup}\n\
         try:\n    with beam.Pipeline(options=PipelineOptions(sys.argv[1:])) as p:\n{body}\
         except Exception as e:\n    print(\"RAISED\", type(e).__name__, e, flush=True)\n    os._exit(0)\n\
         print(\"NOT RAISED\", flush=True)\nos._exit(0)\n"
    )
}

/// Runs Python `program` with `server`'s Beam options as its arguments (LOOPBACK); its
/// standard output, once it has exited successfully.
fn submit(py: &str, server: &common::JobServer, program: &str) -> String {
    let mut args = vec!["-c".to_string(), program.to_string()];
    args.extend(server.options());
    let (ok, out, err) = python(py, &args);
    assert!(ok, "{}", &err[err.len().saturating_sub(5000)..]);
    out
}

#[test]
fn grouping_combining_side_inputs_flatten_and_windows_match_the_direct_runner() {
    let Some(py) = common::beam_python() else { return };
    let (direct, weir) = both_ways(&py, &[]);
    assert!(direct.len() > 40, "{direct:?}");
    // Windows of the user's own type and coder, short and long, merged by the harness.
    let tagged = direct.iter().filter(|l| l.starts_with("[\"tagged_window\"")).count();
    assert_eq!(tagged, 19, "{direct:?}");
    assert_eq!(weir, direct);
    // The same on the other runners, with several partitions.
    let (_, direct_runner) = both_ways(&py, &["--runner", "direct"]);
    assert_eq!(direct_runner, direct);
    let (_, partitioned) = both_ways(&py, &["--parallelism", "3"]);
    assert_eq!(partitioned, direct);
}

#[test]
fn a_raising_dofn_fails_the_job_in_the_client_with_its_traceback() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    let program = &raising(
        r#"
def divide(x):
    return 1 // (x - 2)
"#,
        r#"
p | beam.Create([1, 2, 3]) | "Divide" >> beam.Map(divide)
"#,
    );
    let out = submit(&py, &server, program);
    assert!(out.starts_with("RAISED RuntimeError"), "{out}");
    assert!(out.contains("ZeroDivisionError") && out.contains("Divide"), "{out}");
}

#[test]
fn an_unsupported_transform_is_refused_at_prepare_naming_it() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    let program = &raising(
        r#"
from apache_beam.transforms.userstate import BagStateSpec
class Stateful(beam.DoFn):
    BAG = BagStateSpec("bag", beam.coders.VarIntCoder())
    def process(self, kv, bag=beam.DoFn.StateParam(BAG)):
        bag.add(kv[1])
        yield kv
"#,
        r#"
from apache_beam.transforms import window
(p | beam.Create([("a", 1)]) | beam.WindowInto(window.Sessions(10))
   | "KeepState" >> beam.ParDo(Stateful()))
"#,
    );
    let out = submit(&py, &server, program);
    assert!(out.starts_with("RAISED"), "{out}");
    assert!(
        out.contains("KeepState") && out.contains("beam:transform:pardo:v1") && out.contains("merging windows"),
        "{out}"
    );
}

#[test]
fn state_timers_and_side_inputs_work_in_windows_of_a_coder_of_the_sdks_own() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    // Fixed windows of the tagged window type of `batch_pipeline.py` (a type and coder of the
    // user's own, that Weir carries as bytes; the long key makes windows too long to keep
    // inline); a DoFn keeps each key and window's values and flushes them at the window's end,
    // and a side input in those windows is read in them.
    let setup = format!(
        r#"
sys.path.insert(0, {dir:?})
from batch_pipeline import _TaggedWindow, _TaggedWindowCoder
from apache_beam.transforms import window, userstate
class Tagged(window.NonMergingWindowFn):
    def assign(self, c):
        start = int(c.timestamp) // 10 * 10
        # A side input's window is found by assigning its end, with no element.
        return [_TaggedWindow(start, start + 10, c.element[0] if c.element else "side")]
    def get_window_coder(self):
        return _TaggedWindowCoder()
class Buffer(beam.DoFn):
    BAG = userstate.BagStateSpec("bag", beam.coders.VarIntCoder())
    END = userstate.TimerSpec("end", userstate.TimeDomain.WATERMARK)
    def process(self, kv, w=beam.DoFn.WindowParam, bag=beam.DoFn.StateParam(BAG), end=beam.DoFn.TimerParam(END)):
        bag.add(kv[1])
        end.set(w.max_timestamp())
    @userstate.on_timer(END)
    def flush(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam, bag=beam.DoFn.StateParam(BAG)):
        yield "%s %s %s %s" % (key, w.tag == key, float(w.start), sorted(bag.read()))
"#,
        dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python"),
    );
    let program = raising(
        &setup,
        r#"
side = (p | "Side" >> beam.Create([("side", i) for i in range(25)])
        | "StampSide" >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
        | "WindowSide" >> beam.WindowInto(Tagged())
        | beam.Map(lambda kv: kv[1]) | beam.CombineGlobally(sum).without_defaults())
(p | beam.Create([(k, i) for i in range(25) for k in ("a", "b" * 30)])
   | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
   | beam.WindowInto(Tagged())
   | beam.ParDo(Buffer())
   | beam.Map(lambda line, total: sys.stdout.write("OUT %s %s\n" % (line, total)) and sys.stdout.flush(),
              total=beam.pvalue.AsSingleton(side)))
"#,
    );
    let out = submit(&py, &server, &program);
    let mut lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("OUT ")).collect();
    lines.sort();
    let long = "b".repeat(30);
    let mut expected = Vec::new();
    for key in ["a", long.as_str()] {
        for start in [0, 10, 20] {
            let values: Vec<String> = (start..(start + 10).min(25)).map(|v| v.to_string()).collect();
            // The side input's sum in the window of the same start.
            let total: i32 = (start..(start + 10).min(25)).sum();
            expected.push(format!("{key} True {start}.0 [{}] {total}", values.join(", ")));
        }
    }
    expected.sort();
    assert_eq!(lines, expected, "{out}");
    assert!(out.contains("NOT RAISED"), "{out}");
}

/// Runs `program` (Python; `sys.argv[1:]` are the Beam options to submit with) against a
/// server started with `server_args`, in the PROCESS environment; its standard output.
fn run_in_process_environment(py: &str, server_args: &[&str], program: &str) -> String {
    run_in_process_environment_with(py, server_args, program, &[]).0
}

/// As [`run_in_process_environment`], with `options` added to the client's; its standard output
/// and error.
fn run_in_process_environment_with(
    py: &str,
    server_args: &[&str],
    program: &str,
    options: &[&str],
) -> (String, String) {
    let mut args: Vec<&str> = vec!["--python", py];
    args.extend_from_slice(server_args);
    let server = common::JobServer::start(&args);
    let mut argv = vec!["-c".to_string(), program.to_string()];
    argv.push("--runner=PortableRunner".into());
    argv.push(format!("--job_endpoint={}", server.endpoint));
    argv.push("--environment_type=PROCESS".into());
    argv.push(r#"--environment_config={"command": "started by weir-job-server"}"#.into());
    argv.extend(options.iter().map(|o| o.to_string()));
    let (ok, out, err) = python(py, &argv);
    assert!(ok, "{err}");
    (out, err)
}

#[test]
fn process_harnesses_run_bundles_and_one_that_dies_fails_the_job_naming_it() {
    let Some(py) = common::beam_python() else { return };
    // Two harness processes, started by the job server, as Beam's --sdk_worker_parallelism asks.
    let program = r#"
import logging, os, sys
logging.basicConfig(level=logging.INFO)
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
with beam.Pipeline(options=PipelineOptions(sys.argv[1:])) as p:
    pids = (p | beam.Create(range(100)) | beam.Map(lambda x: (x % 7, x)) | beam.GroupByKey()
            | beam.MapTuple(lambda k, xs: (k, sum(xs))))
    assert_that(pids, equal_to([(k, sum(x for x in range(100) if x % 7 == k)) for k in range(7)]))
print("DONE")
"#;
    let (out, err) = run_in_process_environment_with(&py, &[], program, &["--sdk_worker_parallelism=2"]);
    assert!(out.contains("DONE"), "{out}");
    assert!(err.contains("starting 2 SDK harness(es)"), "{err}");
    // A harness whose process exits mid-bundle: the bundle fails on every harness in turn, and
    // the job fails naming the harness and its exit status.
    let program = &raising(
        r#"
import os
"#,
        r#"
p | beam.Create([1, 2, 3]) | "Die" >> beam.Map(lambda x: os._exit(7))
"#,
    );
    let out = run_in_process_environment(&py, &[], program);
    assert!(out.starts_with("RAISED"), "{out}");
    assert!(out.contains("SDK harness 'job-1-") && out.contains("exit status: 7"), "{out}");
}

/// Beam Python's wordcount example on `input`, on the DirectRunner and on Weir with
/// `server_args`: both outputs, sorted.
fn wordcount(py: &str, input: &Path, server_args: &[&str]) -> (Vec<String>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let run = |output: &Path, extra: Vec<String>| {
        let mut args = vec!["-m".to_string(), "apache_beam.examples.wordcount".into()];
        args.push(format!("--input={}", input.display()));
        args.push(format!("--output={}", output.display()));
        args.extend(extra);
        let (ok, _, err) = python(py, &args);
        assert!(ok, "{}", &err[err.len().saturating_sub(5000)..]);
        common::lines_of(output)
    };
    let direct = run(&dir.path().join("direct"), Vec::new());
    let server = common::JobServer::start(server_args);
    let weir = run(&dir.path().join("weir"), server.options());
    (direct, weir)
}

#[test]
fn beam_s_wordcount_gives_the_direct_runner_s_counts_on_micro_batch_and_on_two_timely_processes() {
    let Some(py) = common::beam_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.txt");
    // 20,000 lines of words from a small vocabulary (some words many times, some once).
    let text: String = (0..20_000u64)
        .map(|i| {
            let words: Vec<String> = (0..8).map(|j| format!("w{}", (i * 7919 + j * 104_729) % 1_009)).collect();
            words.join(" ") + "\n"
        })
        .collect();
    std::fs::write(&input, text).unwrap();
    let (direct, weir) = wordcount(&py, &input, &["--parallelism", "2"]);
    assert_eq!(direct.len(), 1_009);
    assert_eq!(weir, direct);
    // Two processes of a timely cluster, each with harnesses of its own.
    let (_, timely) = wordcount(&py, &input, &["--runner", "timely", "--processes", "2", "--workers", "1"]);
    assert_eq!(timely, direct);
}

#[test]
fn a_running_job_is_cancelled_from_python_even_while_a_bundle_runs() {
    let Some(py) = common::beam_python() else { return };
    for args in [&[][..], &["--runner", "timely", "--processes", "2", "--workers", "1"][..]] {
        let server = common::JobServer::start(args);
        let program = r#"
import sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
p = beam.Pipeline(options=PipelineOptions(sys.argv[1:]))
p | beam.Create([1]) | "Sleep" >> beam.Map(lambda x: time.sleep(600))
result = p.run()
deadline = time.time() + 60
while str(result.state) != "RUNNING" and time.time() < deadline:
    time.sleep(0.1)
time.sleep(1)
started = time.time()
result.cancel()
try:
    result.wait_until_finish()
except Exception as e:
    pass
print("STATE", result.state, "AFTER", round(time.time() - started))
"#;
        let out = submit(&py, &server, program);
        // Cancelled within seconds, not after the bundle's ten minutes.
        let after: u64 = out.trim().rsplit(' ').next().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
        assert!(out.starts_with("STATE CANCELLED") && after < 60, "{args:?}: {out}");
    }
}

#[test]
fn parquet_written_and_read_back_by_beam_python_gives_the_direct_runner_s_sums() {
    let Some(py) = common::beam_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (direct, weir) = (dir.path().join("direct"), dir.path().join("weir"));
    let run = |d: &Path, extra: Vec<String>| {
        std::fs::create_dir_all(d).unwrap();
        let mut args = vec![script("parquet_pipeline.py"), format!("--dir={}", d.display())];
        args.extend(extra);
        let (ok, _, err) = python(&py, &args);
        assert!(ok, "{}", &err[err.len().saturating_sub(5000)..]);
        common::lines_of(&d.join("sums"))
    };
    let expected = run(&direct, Vec::new());
    assert_eq!(expected.len(), 13);
    let server = common::JobServer::start(&["--parallelism", "2"]);
    assert_eq!(run(&weir, server.options()), expected);
    // Three Parquet files, as asked.
    let shards = std::fs::read_dir(&weir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("rows"))
        .count();
    assert_eq!(shards, 3);
}

#[test]
fn a_harness_s_user_counters_reach_weir_s_metrics_sinks_and_beam_s_metrics_query() {
    let Some(py) = common::beam_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.jsonl");
    let file_arg = file.to_string_lossy().to_string();
    let server = common::JobServer::start(&["--metrics-sink", "jsonl", "--metrics-file", &file_arg]);
    let program = r#"
import sys
import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
words = Metrics.counter("wordcount", "words_seen")
sizes = Metrics.distribution("wordcount", "word_size")
def see(w):
    words.inc()
    sizes.update(len(w))
    return w
p = beam.Pipeline(options=PipelineOptions(sys.argv[1:]))
p | beam.Create(["a", "bb", "ccc", "dddd"] * 25) | "See" >> beam.Map(see)
result = p.run()
result.wait_until_finish()
counters = result.metrics().query(MetricsFilter().with_name("words_seen"))["counters"]
dists = result.metrics().query(MetricsFilter().with_name("word_size"))["distributions"]
print("COUNTER", sum(c.committed for c in counters))
d = dists[0].committed
print("DIST", d.count, d.sum, d.min, d.max)
"#;
    let out = submit(&py, &server, program);
    assert!(out.contains("COUNTER 100") && out.contains("DIST 100 250 1 4"), "{out}");
    // The MetricsPusher's last push, after the job ended, holds the same counter.
    let pushed = std::fs::read_to_string(&file).unwrap();
    let last = pushed.lines().last().unwrap_or_default();
    assert!(last.contains("words_seen") && last.contains("100"), "{pushed}");
}

#[test]
fn a_worker_pool_that_cannot_be_reached_fails_the_job_naming_it() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let program = &raising(
        r#"
"#,
        r#"
p | beam.Create([1]) | beam.Map(lambda x: x)
"#,
    );
    let argv = vec![
        "-c".to_string(),
        program.to_string(),
        "--runner=PortableRunner".into(),
        format!("--job_endpoint={}", server.endpoint),
        "--environment_type=EXTERNAL".into(),
        format!("--environment_config=127.0.0.1:{port}"),
    ];
    let (ok, out, err) = python(&py, &argv);
    assert!(ok, "{err}");
    assert!(out.starts_with("RAISED") && out.contains(&format!("worker pool at 127.0.0.1:{port}")), "{out}");
}

#[test]
fn elements_larger_than_grpc_s_default_message_size_cross_the_data_plane() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    let program = r#"
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
with beam.Pipeline(options=PipelineOptions(sys.argv[1:])) as p:
    big = p | beam.Create([1, 2]) | beam.Map(lambda n: (n, "x" * (6_000_000 * n)))
    sizes = big | beam.GroupByKey() | beam.MapTuple(lambda n, vs: (n, [len(v) for v in vs]))
    assert_that(sizes, equal_to([(1, [6_000_000]), (2, [12_000_000])]))
print("DONE")
"#;
    let out = submit(&py, &server, program);
    assert!(out.contains("DONE"), "{out}");
}

#[test]
fn a_job_picks_its_weir_runner_and_flags_from_python_options() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    let program = r#"
import logging, sys
logging.basicConfig(level=logging.INFO)
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
with beam.Pipeline(options=PipelineOptions(sys.argv[1:])) as p:
    sums = p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.CombinePerKey(sum)
    assert_that(sums, equal_to([("a", 4), ("b", 2)]))
print("DONE")
"#;
    let mut args = vec!["-c".to_string(), program.to_string()];
    args.extend(server.options());
    args.extend(["--weir_runner=direct".to_string(), "--weir_direct_seed=7".to_string()]);
    let (ok, out, err) = python(&py, &args);
    assert!(ok && out.contains("DONE"), "{out}\n{}", &err[err.len().saturating_sub(5000)..]);
    assert!(err.contains("running on Weir's direct runner"), "{}", &err[err.len().saturating_sub(5000)..]);
}

/// The server remembers only its newest finished jobs (`--max-finished-jobs`), frees a
/// finished job's pipeline, and lists the rest in GetJobs; a job not yet run stays.
#[test]
fn the_server_forgets_old_finished_jobs_and_their_pipelines() {
    use japi::job_service_client::JobServiceClient;
    use prost::Message;
    use weir_portable::proto::job_management::v1 as japi;
    use weir_portable::proto::pipeline::v1 as rapi;
    let Some(mut pipeline) = common::submitted(r#"p | beam.Create([1]) | beam.Map(str)"#) else { return };
    // As Beam's client submits it: LOOPBACK is an EXTERNAL environment (no job here runs).
    for env in pipeline.components.as_mut().unwrap().environments.values_mut() {
        env.urn = "beam:env:external:v1".into();
        let endpoint = rapi::ApiServiceDescriptor { url: "localhost:1".into(), authentication: None };
        env.payload = rapi::ExternalPayload { endpoint: Some(endpoint), params: Default::default() }.encode_to_vec();
    }
    let server = common::JobServer::start(&["--max-finished-jobs", "2"]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut client = JobServiceClient::connect(format!("http://{}", server.endpoint)).await.unwrap();
        let mut ids = Vec::new();
        for k in 0..5 {
            let request = japi::PrepareJobRequest {
                pipeline: Some(pipeline.clone()),
                job_name: format!("j{k}"),
                ..Default::default()
            };
            let id = client.prepare(request).await.unwrap().into_inner().preparation_id;
            // All but the last end (a prepared job cancelled before it runs is CANCELLED).
            if k < 4 {
                let state = client.cancel(japi::CancelJobRequest { job_id: id.clone() }).await.unwrap();
                assert_eq!(state.into_inner().state, japi::job_state::Enum::Cancelled as i32);
            }
            ids.push(id);
        }
        // Preparing the last forgot the oldest finished beyond two.
        let listed: Vec<String> = client
            .get_jobs(japi::GetJobsRequest {})
            .await
            .unwrap()
            .into_inner()
            .job_info
            .into_iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(listed, [ids[4].clone(), ids[3].clone(), ids[2].clone()]);
        let gone = client.get_state(japi::GetJobStateRequest { job_id: ids[0].clone() }).await.unwrap_err();
        assert_eq!(gone.code(), tonic::Code::NotFound, "{gone}");
        // A finished job's pipeline is freed; the one not run keeps its own.
        let freed = client.get_pipeline(japi::GetJobPipelineRequest { job_id: ids[3].clone() }).await.unwrap_err();
        assert_eq!(freed.code(), tonic::Code::FailedPrecondition, "{freed}");
        let kept = client.get_pipeline(japi::GetJobPipelineRequest { job_id: ids[4].clone() }).await.unwrap();
        assert_eq!(kept.into_inner().pipeline, Some(pipeline.clone()));
    });
}
