//! End to end against a real Prometheus Pushgateway (Debian's `prometheus-pushgateway`) and a
//! real Prometheus with its remote-write receiver (Debian's `prometheus`, started with
//! `--web.enable-remote-write-receiver`), both started by the test on 127.0.0.1. Pipelines on
//! the direct and micro-batch runners push to them, and the values are read back through the
//! receivers' own HTTP APIs. Without the packages the tests are skipped with a message, except
//! under CI, where `.ci/run` installs them and the tests fail.

use std::time::{Duration, Instant};
use weir_sdk::prelude::*;
use weir_tests::receivers::{free_port, get, installed, start};

use weir_tests::Measured;

/// Runs Create(1..=4) -> `step` on `config` with the metrics flags `flags`.
fn run(config: &str, step: &str, flags: &[&str]) {
    weir_tests::register_runners();
    let options = weir_tests::with_metrics_flags(config, flags);
    let p = TestPipeline::from_options(options);
    p.apply("Create", Create::of(1..=4i64)).apply(step, ParDo::of(Measured));
    assert_eq!(p.try_run().unwrap(), PipelineState::Done);
}

/// The value of the sample of `text` (Prometheus text format) whose metric is `metric` and
/// whose labels include every one of `labels`.
fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines().filter(|l| l.starts_with(&format!("{metric}{{"))).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        labels.iter().all(|want| series.contains(want)).then(|| value.parse().ok())?
    })
}

#[test]
fn pushes_to_a_real_pushgateway_from_both_runners() {
    if !installed("prometheus-pushgateway", "prometheus-pushgateway") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = [format!("--web.listen-address=127.0.0.1:{port}"), "--log.level=warn".to_string()];
    let gateway = start("prometheus-pushgateway", &args, port, &dir.path().join("pushgateway.log"));
    for config in ["direct_unshuffled", "microbatch_p1"] {
        let url = format!("http://127.0.0.1:{}/metrics/job/weir_{config}", gateway.port);
        run(config, "Measured", &["--metrics-sink", "prometheus", "--metrics-prometheus-url", &url]);
        let text = get(&format!("http://127.0.0.1:{}/metrics", gateway.port)).expect("the Pushgateway's /metrics");
        let job = format!("job=\"weir_{config}\"");
        let of = |metric: &str, name: &str, which: &str| {
            let (name, which) = (format!("name=\"{name}\""), format!("value=\"{which}\""));
            sample(&text, metric, &[&job, "namespace=\"test\"", "step=\"Measured\"", &name, &which])
        };
        assert_eq!(of("beam_counter", "elements", "attempted"), Some(4.0), "{config}: {text}");
        assert_eq!(of("beam_counter", "elements", "committed"), Some(4.0), "{config}");
        assert_eq!(of("beam_gauge", "last", "attempted"), Some(7.0), "{config}");
        assert_eq!(of("beam_distribution_sum", "values", "attempted"), Some(10.0), "{config}");
        assert_eq!(of("beam_distribution_count", "values", "attempted"), Some(4.0), "{config}");
        // The gateway accepted every push: a rejected one sets its failure time.
        assert_eq!(sample(&text, "push_failure_time_seconds", &[&job]), Some(0.0), "{config}: {text}");
        assert!(sample(&text, "push_time_seconds", &[&job]).is_some_and(|t| t > 0.0), "{config}");
    }
}

#[test]
fn writes_to_a_real_prometheus_remote_write_receiver_from_both_runners() {
    if !installed("prometheus", "prometheus") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("prometheus.yml"), "global:\n  scrape_interval: 1h\n").unwrap();
    let args = [
        format!("--config.file={}", dir.path().join("prometheus.yml").display()),
        format!("--storage.tsdb.path={}", dir.path().join("data").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        "--web.enable-remote-write-receiver".to_string(),
        "--log.level=warn".to_string(),
    ];
    let prometheus = start("prometheus", &args, port, &dir.path().join("prometheus.log"));
    let base = format!("http://127.0.0.1:{}", prometheus.port);
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&format!("{base}/-/ready")).is_none() {
        assert!(Instant::now() < deadline, "Prometheus never became ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    for (config, step) in [("direct_unshuffled", "Direct"), ("microbatch_p1", "Micro")] {
        let url = format!("{base}/api/v1/write");
        run(config, step, &["--metrics-sink", "prometheus-remote-write", "--metrics-prometheus-url", &url]);
        let query = |metric: &str, name: &str| -> Option<f64> {
            let q = format!("{metric}{{namespace=\"test\",name=\"{name}\",step=\"{step}\",value=\"attempted\"}}");
            let body = get(&format!("{base}/api/v1/query?query={}", encode(&q)))?;
            let json: serde_json::Value = serde_json::from_str(&body).ok()?;
            json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
        };
        // Remote-written samples are queryable at once; allow the receiver a moment anyway.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = None;
        while Instant::now() < deadline {
            seen = query("beam_counter", "elements");
            if seen == Some(4.0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(
            seen,
            Some(4.0),
            "{config}: {}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap()
        );
        assert_eq!(query("beam_gauge", "last"), Some(7.0), "{config}");
        assert_eq!(query("beam_distribution_sum", "values"), Some(10.0), "{config}");
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
