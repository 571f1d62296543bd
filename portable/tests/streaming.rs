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
import sys, time
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse
start = time.time()
p = beam.Pipeline(options=PipelineOptions(sys.argv[1:]))
(p | PeriodicImpulse(start_timestamp=start, fire_interval=0.25)
   | "Key" >> beam.Map(lambda t: ("k", 1))
   | beam.WindowInto(beam.window.FixedWindows(1))
   | beam.CombinePerKey(sum)
   | "Print" >> beam.Map(lambda kv: print("COUNT", kv[1], flush=True)))
result = p.run()
result.wait_until_finish(duration=5000)
print("STATE", result.state, flush=True)
result.cancel()
try:
    result.wait_until_finish(duration=20000)
except RuntimeError as e:
    # Beam's client raises for a job that ends other than DONE.
    print("RAISED", e, flush=True)
print("ENDED", result.state, flush=True)
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
