//! The micro-batch runner's live page (`--ui-port`): its JSON API read while a streaming query
//! runs (the query listed, its progress growing, its plan and metrics), and the page itself in
//! headless Chromium (Debian's `chromium`, which `.ci/run` installs), loaded twice during the
//! run: the query is listed, the charts have more points the second time, the plan shows every
//! operator. A screenshot goes to `target/test-artifacts/live-page.png`. Without Chromium the
//! browser test is skipped, except under CI.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};
use weir::microbatch::{MicroBatchOptions, MicroBatchRunner, StreamingQuery, StreamingTrigger};
use weir_sdk::io::ReadUnbounded;
use weir_sdk::prelude::*;
use weir_sdk::runner::PipelineResult;
use weir_tests::sources::Numbers;

/// `options` for job `job`: small batches every 30 ms, the live page on a free port.
fn live(mut options: PipelineOptions, job: &str) -> PipelineOptions {
    weir_tests::register_runners();
    options.job_name = job.into();
    let mb = options.group_mut::<MicroBatchOptions>();
    mb.trigger = StreamingTrigger::ProcessingTime;
    mb.trigger_interval_ms = 30;
    mb.max_batch_size = 50;
    mb.ui_port = Some(0);
    options
}

/// An endless windowed count on the micro-batch runner with its live page on a free port.
fn start(job: &str) -> (StreamingQuery, SocketAddr) {
    let mut options = live(PipelineOptions::default(), job);
    options.group_mut::<MicroBatchOptions>().parallelism = 2;
    let p = Pipeline::new(options);
    p.apply("Read", ReadUnbounded::from(Numbers::new(None, true)))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(200))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 5, 1i64)))
        .apply("Count", Sum::per_key())
        .apply("Show", Map::new(|kv: KV<i64, i64>| kv.value));
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    let addr = query.ui_address().expect("the live page is served");
    (query, addr)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body.to_string())
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(addr, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until the query has reported at least `n` batches on the page.
fn batches_at_least(addr: SocketAddr, id: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = json(addr, &format!("/api/progress?id={id}")).as_array().map_or(0, Vec::len);
        if got >= n || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_json_api_serves_queries_progress_plan_and_metrics_while_the_query_runs() {
    let (query, addr) = start("live-api");
    let queries = json(addr, "/api/queries");
    let q = queries.as_array().unwrap().iter().find(|q| q["name"] == "live-api").expect("the query is listed").clone();
    let id = q["id"].as_str().unwrap().to_string();
    assert_eq!(q["runner"], "microbatch");
    assert_eq!(q["state"], "RUNNING");
    let first = batches_at_least(addr, &id, 3);
    let second = batches_at_least(addr, &id, first + 3);
    assert!(second > first, "progress grows: {first} then {second}");
    let progress = json(addr, &format!("/api/progress?id={id}"));
    let last = progress.as_array().unwrap().last().unwrap();
    assert!(last["batchId"].as_u64().is_some() && last["durationMs"]["addBatch"].is_u64(), "{last}");
    let plan = json(addr, &format!("/api/plan?id={id}"));
    let names: Vec<&str> = plan["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["Read", "Window", "Key/ParDo", "Count", "Show/ParDo"], "every operator of the plan");
    assert!(plan["edges"].as_array().unwrap().len() >= names.len() - 1);
    let metrics = json(addr, &format!("/api/metrics?id={id}"));
    assert!(metrics.as_array().unwrap().iter().any(|m| m["step"] == "Read" && m["name"] == "elementsOut"), "{metrics}");
    assert_eq!(get(addr, "/api/progress?id=nope").0, 404);
    let (status, page) = get(addr, "/");
    assert!(status == 200 && page.contains("Weir streaming queries"));
    query.stop().unwrap();
    query.await_termination(Some(Duration::from_secs(30))).unwrap();
    let after = json(addr, "/api/queries");
    let q = after.as_array().unwrap().iter().find(|q| q["id"] == id.as_str()).unwrap().clone();
    assert_eq!(q["state"], "STOPPED", "{q}");
}

fn chromium() -> bool {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("CI").is_none(), "chromium is not installed (Debian package chromium)");
        eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
    }
    found
}

fn browse(addr: SocketAddr, extra: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--virtual-time-budget=2500")
        .args(extra)
        .arg(format!("http://{addr}/"))
        .output()
        .expect("chromium runs")
}

/// The number in `data-points="N"` of the chart `id` in a rendered page.
fn points(dom: &str, id: &str) -> usize {
    let chart = dom.split(&format!("id=\"{id}\"")).nth(1).unwrap_or("");
    chart.split("data-points=\"").nth(1).and_then(|s| s.split('"').next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[test]
fn the_live_page_renders_in_chromium_and_grows_between_loads() {
    if !chromium() {
        return;
    }
    let (query, addr) = start("live-page");
    let id = json(addr, "/api/queries").as_array().unwrap()[0]["id"].as_str().unwrap().to_string();
    batches_at_least(addr, &id, 3);
    let load = || {
        let out = browse(addr, &["--dump-dom".into()]);
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let first = load();
    let now = json(addr, &format!("/api/progress?id={id}")).as_array().map_or(0, Vec::len);
    batches_at_least(addr, &id, now + 5);
    let second = load();
    for dom in [&first, &second] {
        assert!(dom.contains("live-page") && dom.contains("RUNNING"), "the query is listed");
    }
    for chart in ["rates", "durations", "inputs", "watermarks", "lags"] {
        let (a, b) = (points(&first, chart), points(&second, chart));
        assert!(a > 0 && b > a, "{chart}: {a} points, then {b}");
    }
    let plan = json(addr, &format!("/api/plan?id={id}"));
    let nodes = plan["nodes"].as_array().unwrap();
    assert_eq!(second.matches("class=\"node\"").count(), nodes.len(), "every operator is drawn");
    for n in nodes {
        let name = n["name"].as_str().unwrap();
        assert!(second.contains(&format!("data-name=\"{name}\"")), "{name} drawn");
    }
    let artifacts = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("live-page.png");
    let out = browse(addr, &["--window-size=1300,1500".into(), format!("--screenshot={}", png.display())]);
    assert!(out.status.success() && png.is_file(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    query.stop().unwrap();
    query.await_termination(Some(Duration::from_secs(30))).unwrap();
}

/// The timely runner serves the same page from process 0, with every epoch's progress.
#[test]
fn the_timely_runner_serves_the_page_with_its_epochs() {
    let p = Pipeline::new(live(weir_tests::configuration("timely_w1"), "live-timely"));
    p.apply("Read", ReadUnbounded::from(Numbers::new(None, true)))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(200))))
        .apply("Count", Count::globally().without_defaults());
    let query = weir::timely::TimelyRunner.start(p.graph(), &p.options()).unwrap();
    let addr = query.ui_address().expect("process 0 serves the live page");
    let queries = json(addr, "/api/queries");
    let q = queries.as_array().unwrap().iter().find(|q| q["name"] == "live-timely").expect("listed").clone();
    assert_eq!(q["runner"], "timely");
    let id = q["id"].as_str().unwrap().to_string();
    let first = batches_at_least(addr, &id, 3);
    assert!(batches_at_least(addr, &id, first + 3) > first, "epochs grow");
    let plan = json(addr, &format!("/api/plan?id={id}"));
    assert!(plan["nodes"].as_array().unwrap().len() >= 3, "{plan}");
    query.stop().unwrap();
    query.wait_until_finish(Some(Duration::from_secs(30))).unwrap();
    let after = json(addr, "/api/queries");
    let q = after.as_array().unwrap().iter().find(|q| q["id"] == id.as_str()).unwrap().clone();
    assert_eq!(q["state"], "STOPPED", "{q}");
}
