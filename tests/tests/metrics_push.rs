//! The MetricsPusher on every runner: pushes to a JSON-lines file and to a Graphite receiver
//! started by the test on 127.0.0.1; the final push happens before `wait_until_finish`
//! returns; a sink that is down never fails the pipeline; an unknown sink is an error.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;
use weir_sdk::prelude::*;

use weir_tests::Measured;

fn pipeline(config: &str, flags: &[&str]) -> TestPipeline {
    let p = TestPipeline::from_options(weir_tests::with_metrics_flags(config, flags));
    p.apply("Create", Create::of(1..=4i64)).apply("Measured", ParDo::of(Measured));
    p
}

weir_tests::conformance! {
    fn pushes_to_a_json_lines_file(p) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("metrics.jsonl");
        let q = pipeline(&config_of(p), &["--metrics-sink", "jsonl", "--metrics-file", file.to_str().unwrap(), "--metrics-push-period", "1"]);
        assert_eq!(q.try_run().unwrap(), PipelineState::Done);
        let text = std::fs::read_to_string(&file).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        let find = |kind: &str| {
            last[kind].as_array().unwrap().iter().find(|m| m["name"]["namespace"] == "test").cloned().unwrap()
        };
        let counter = &find("counters");
        assert_eq!(counter["attempted"], 4);
        assert_eq!(counter["committed"], 4);
        assert_eq!(counter["name"]["namespace"], "test");
        assert_eq!(counter["step"], "Measured");
        let dist = &find("distributions")["attempted"];
        assert_eq!((dist["sum"].as_i64(), dist["count"].as_i64(), dist["min"].as_i64(), dist["max"].as_i64()), (Some(10), Some(4), Some(1), Some(4)));
        assert_eq!(find("gauges")["attempted"]["value"], 7);
        assert!(last["timestamp"].as_str().unwrap().ends_with('Z'));
    }

    fn pushes_graphite_lines_over_tcp(p) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        let receiver = std::thread::spawn(move || {
            listener.set_nonblocking(false).unwrap();
            let mut all = String::new();
            // The final push is the last connection; read until a push with the counter at 4.
            for stream in listener.incoming().take(20) {
                let mut s = stream.unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut text = String::new();
                s.read_to_string(&mut text).unwrap();
                all.push_str(&text);
                if text.contains("beam.counter.test.elements.Measured.attempted.value 4 ") {
                    break;
                }
            }
            all
        });
        let q = pipeline(&config_of(p), &["--metrics-sink", "graphite", "--metrics-graphite-host", "127.0.0.1", "--metrics-graphite-port", &port]);
        assert_eq!(q.try_run().unwrap(), PipelineState::Done);
        let lines = receiver.join().unwrap();
        for expected in [
            "beam.counter.test.elements.Measured.committed.value 4 ",
            "beam.distribution.test.values.Measured.attempted.sum 10 ",
            "beam.distribution.test.values.Measured.attempted.mean 2.5 ",
            "beam.gauge.test.last.Measured.attempted.value 7 ",
        ] {
            assert!(lines.contains(expected), "missing {expected:?} in\n{lines}");
        }
    }

    fn a_sink_that_is_down_does_not_fail_the_pipeline(p) {
        // Nothing listens on this port: every push fails and is logged.
        let port = { let l = TcpListener::bind("127.0.0.1:0").unwrap(); l.local_addr().unwrap().port().to_string() };
        let q = pipeline(&config_of(p), &["--metrics-sink", "graphite", "--metrics-graphite-host", "127.0.0.1", "--metrics-graphite-port", &port]);
        assert_eq!(q.try_run().unwrap(), PipelineState::Done);
    }
}

fn config_of(p: &TestPipeline) -> String {
    let o = p.options();
    match (
        o.runner.as_str(),
        o.get::<weir::direct::DirectOptions>().shuffle,
        o.get::<weir::microbatch::MicroBatchOptions>().parallelism,
    ) {
        ("direct", true, _) => "direct",
        ("direct", false, _) => "direct_unshuffled",
        (_, _, 1) => "microbatch_p1",
        _ => "microbatch_p4_small_batches",
    }
    .to_string()
}

#[test]
fn unknown_sinks_and_missing_settings_are_errors() {
    let p = pipeline("direct", &["--metrics-sink", "statsd"]);
    let err = p.try_run().unwrap_err().to_string();
    assert!(
        err.contains("unknown metrics sink 'statsd'") && err.contains("graphite") && err.contains("jsonl"),
        "{err}"
    );
    let p = pipeline("microbatch_p1", &["--metrics-sink", "graphite"]);
    assert!(p.try_run().unwrap_err().to_string().contains("--metrics-graphite-host"));
}

/// Issue 16: bad sink settings fail the run before anything runs, naming the flag, and never
/// show credentials.
#[test]
fn bad_sink_settings_are_refused_at_startup_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--metrics-sink", "http", "--metrics-http-url", "ftp://weir:hunter2@127.0.0.1/m"], "--metrics-http-url"),
        (&["--metrics-sink", "http", "--metrics-http-url", "127.0.0.1:9/m"], "--metrics-http-url"),
        (
            &[
                "--metrics-sink",
                "prometheus",
                "--metrics-prometheus-url",
                "http://no-such-host.invalid:9091/metrics/job/x",
            ],
            "--metrics-prometheus-url",
        ),
        (
            &["--metrics-sink", "prometheus-remote-write", "--metrics-prometheus-url", "https://:0/api/v1/write"],
            "--metrics-prometheus-url",
        ),
        (&["--metrics-sink", "graphite", "--metrics-graphite-host", "no-such-host.invalid"], "--metrics-graphite-host"),
        (
            &[
                "--metrics-sink",
                "http",
                "--metrics-http-url",
                "http://127.0.0.1:9/m",
                "--metrics-bearer-token-env",
                "WEIR_TEST_NO_SUCH_VARIABLE",
            ],
            "--metrics-bearer-token-env",
        ),
        (&["--metrics-sink", "jsonl", "--metrics-file", "/no/such/dir/metrics.jsonl"], "--metrics-file"),
    ];
    for config in ["direct_unshuffled", "microbatch_p1"] {
        for (flags, flag) in cases {
            let err = pipeline(config, flags).try_run().unwrap_err().to_string();
            assert!(err.contains(flag) && !err.contains("hunter2"), "{config} {flags:?}: {err}");
        }
    }
}

/// Issue 16: a receiver that accepts connections and never answers delays neither the other
/// sinks (each pushes on its own schedule) nor the end of the pipeline by more than the push
/// timeout.
#[test]
fn a_hung_receiver_delays_neither_other_sinks_nor_the_end() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts, keeps every connection open, answers nothing.
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for s in listener.incoming() {
            open.push(s);
        }
    });
    for config in ["direct_unshuffled", "microbatch_p1"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("metrics.jsonl");
        let url = format!("http://127.0.0.1:{port}/m");
        weir_tests::register_runners();
        let options = weir_tests::with_metrics_flags(
            config,
            &[
                "--metrics-sink",
                "http",
                "--metrics-http-url",
                &url,
                "--metrics-sink",
                "jsonl",
                "--metrics-file",
                file.to_str().unwrap(),
                "--metrics-push-period",
                "1",
                "--metrics-push-timeout-ms",
                "2500",
            ],
        );
        let p = TestPipeline::from_options(options);
        let stream = weir_sdk::io::MemoryStream::<i64>::new();
        p.apply("Read", weir_sdk::io::ReadUnbounded::from(stream.clone())).apply("Measured", ParDo::of(Measured));
        let result = Pipeline::run(&p).unwrap();
        stream.add(vec![TimestampedValue::new(1, 1), TimestampedValue::new(2, 2)]);
        std::thread::sleep(Duration::from_millis(4500));
        stream.finish();
        let end = std::time::Instant::now();
        assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
        let waited = end.elapsed();
        // One push a second for 4.5 s plus the final one; pushes behind the hung sink's
        // 2.5 s timeouts would give two or three.
        let pushes = std::fs::read_to_string(&file).unwrap().lines().count();
        assert!(pushes >= 5, "{config}: the JSON-lines sink pushed {pushes} times");
        // The end waits for the final pushes, but not beyond the timeout (twice it without).
        assert!(waited < Duration::from_millis(4000), "{config}: waited {waited:?} after the input ended");
    }
}

#[derive(Clone)]
struct Slow;

impl DoFn for Slow {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        std::thread::sleep(Duration::from_millis(600));
        ctx.output(e);
        Ok(())
    }
}

/// Receiver down when the pipeline starts, up later: the pipeline is unaffected, failed pushes
/// are retried, and later pushes (at least the final one) arrive.
fn outage_then_recovery(config: &str) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let options = weir_tests::with_metrics_flags(
        config,
        &["--metrics-sink", "http", "--metrics-http-url", &url, "--metrics-push-period", "1"],
    );
    weir_tests::register_runners();
    let p = TestPipeline::from_options(options);
    p.apply("Create", Create::of(1..=4i64)).apply("Measured", ParDo::of(Measured)).apply("Slow", ParDo::of(Slow));
    let result = Pipeline::run(&p).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let server = tiny_http::Server::http(format!("127.0.0.1:{port}")).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        while let Ok(Some(mut req)) = server.recv_timeout(Duration::from_secs(8)) {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            let _ = req.respond(tiny_http::Response::from_string("ok"));
            let done = body.contains(r#""attempted":4"#);
            bodies.push(body);
            if done {
                break;
            }
        }
        bodies
    });
    assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
    let bodies = receiver.join().unwrap();
    assert!(!bodies.is_empty(), "no push arrived after the receiver came up");
    assert!(bodies.last().unwrap().contains(r#""attempted":4"#), "{bodies:?}");
}

#[test]
fn http_outage_direct() {
    outage_then_recovery("direct_unshuffled");
}

#[test]
fn http_outage_microbatch() {
    outage_then_recovery("microbatch_p1");
}

/// Paths and bodies a test receiver got.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// Serves every request after sleeping `delay`, answering `status`; collects bodies.
fn receiver(delay: Duration, status: u16) -> (u16, Received) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        while let Ok(Some(mut req)) = server.recv_timeout(Duration::from_secs(20)) {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            s.lock().unwrap().push((req.url().to_string(), body));
            std::thread::sleep(delay);
            let _ = req.respond(tiny_http::Response::from_string("").with_status_code(status));
        }
    });
    (port, seen)
}

weir_tests::conformance! {
    fn pushes_to_a_pushgateway(p) {
        let (port, seen) = receiver(Duration::ZERO, 200);
        let url = format!("http://127.0.0.1:{port}/metrics/job/weir");
        let q = pipeline(&config_of(p), &["--metrics-sink", "prometheus", "--metrics-prometheus-url", &url]);
        assert_eq!(q.try_run().unwrap(), PipelineState::Done);
        let seen = seen.lock().unwrap().clone();
        let (path, body) = seen.last().unwrap();
        assert_eq!(path, "/metrics/job/weir");
        assert!(body.contains(r#"beam_counter{namespace="test",name="elements",step="Measured",value="attempted"} 4"#), "{body}");
        assert!(body.contains(r#"beam_distribution_sum{namespace="test",name="values",step="Measured",value="attempted"} 10"#), "{body}");
    }

    fn posts_beams_json_to_an_http_receiver(p) {
        let (port, seen) = receiver(Duration::ZERO, 200);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let q = pipeline(&config_of(p), &["--metrics-sink", "http", "--metrics-http-url", &url, "--metrics-sink", "console"]);
        assert_eq!(q.try_run().unwrap(), PipelineState::Done);
        let seen = seen.lock().unwrap().clone();
        let body: serde_json::Value = serde_json::from_str(&seen.last().unwrap().1).unwrap();
        let counter = body["counters"].as_array().unwrap().iter().find(|c| c["name"]["name"] == "elements").unwrap();
        assert_eq!((counter["attempted"].as_i64(), counter["committed"].as_i64()), (Some(4), Some(4)));
    }
}

#[test]
fn a_slow_receiver_does_not_slow_the_pipeline() {
    for config in ["direct_unshuffled", "microbatch_p1"] {
        let (port, _) = receiver(Duration::from_secs(5), 200);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let p = pipeline(
            config,
            &["--metrics-sink", "http", "--metrics-http-url", &url, "--metrics-push-timeout-ms", "300"],
        );
        let start = std::time::Instant::now();
        assert_eq!(p.try_run().unwrap(), PipelineState::Done);
        // Work plus at most one timed-out final push, not the receiver's 5 s.
        assert!(start.elapsed() < Duration::from_secs(3), "{config}: {:?}", start.elapsed());
    }
}

#[test]
fn metrics_are_queryable_while_a_streaming_pipeline_runs() {
    for config in ["direct_unshuffled", "microbatch_p1"] {
        weir_tests::register_runners();
        let p = TestPipeline::from_options(weir_tests::configuration(config));
        let stream = weir_sdk::io::MemoryStream::<i64>::new();
        p.apply("Read", weir_sdk::io::ReadUnbounded::from(stream.clone())).apply("Measured", ParDo::of(Measured));
        let result = Pipeline::run(&p).unwrap();
        stream.add(vec![TimestampedValue::new(1, 1), TimestampedValue::new(2, 2)]);
        let mut live = 0;
        for _ in 0..2000 {
            live = result.metrics().all_metrics().counter("Measured", "test", "elements").map_or(0, |c| c.attempted);
            if live == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(live, 2, "{config}");
        assert_eq!(result.state(), PipelineState::Running);
        stream.finish();
        assert_eq!(result.wait_until_finish(Some(Duration::from_secs(10))).unwrap(), PipelineState::Done);
    }
}
