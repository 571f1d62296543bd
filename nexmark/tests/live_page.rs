//! The live page of a streaming Nexmark run, as a user opens it: the launcher binary runs query 5
//! (hot items) on the micro-batch runner with `--ui-port`, rate limited so it runs until stopped,
//! and headless Chromium (Debian's `chromium`, which `.ci/run` installs) loads the page twice
//! during the run. The test reads the rendered DOM: the query is listed and running, every chart
//! has data points and more the second time, the plan shows every operator; the page asked for
//! nothing but its own server. A screenshot goes to `target/test-artifacts/live-page.png`.
//! SIGINT then stops the run gracefully. Without Chromium the test is skipped, except under CI.

mod browser;

use browser::{chromium, render, screenshot};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The launcher's process, killed if the test ends early.
struct Launcher(Child);

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    Some((head.split_whitespace().nth(1)?.parse().ok()?, body.to_string()))
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(addr, path).unwrap_or_else(|| panic!("no answer to {path}"));
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits (up to two minutes, while the launcher lives) until `ready` holds.
fn wait_for<T>(launcher: &mut Launcher, what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(t) = ready() {
            return t;
        }
        if let Ok(Some(status)) = launcher.0.try_wait() {
            panic!("the launcher ended ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn batches(addr: SocketAddr, id: &str) -> usize {
    json(addr, &format!("/api/progress?id={id}")).as_array().map_or(0, Vec::len)
}

/// The value of attribute `name` of the chart `id`'s drawing in a rendered page.
fn attribute(dom: &str, id: &str, name: &str) -> String {
    let chart = dom.split(&format!("id=\"{id}\"")).nth(1).unwrap_or("");
    chart.split(&format!("{name}=\"")).nth(1).and_then(|s| s.split('"').next()).unwrap_or("").to_string()
}

/// The number in `data-points="N"` of the chart `id` in a rendered page.
fn points(dom: &str, id: &str) -> usize {
    attribute(dom, id, "data-points").parse().unwrap_or(0)
}

#[test]
fn the_live_page_of_a_streaming_nexmark_run_renders_in_chromium() {
    if !chromium() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let args = [
        "--query",
        "5",
        "--streaming",
        "--num-events",
        "100000000",
        "--is-rate-limited",
        "--first-event-rate",
        "2000",
        "--next-event-rate",
        "2000",
        "--window-size-sec",
        "2",
        "--window-period-sec",
        "1",
        "--trigger",
        "processing-time",
        "--trigger-interval-ms",
        "200",
    ];
    let mut launcher = Launcher(
        Command::new(env!("CARGO_BIN_EXE_nexmark"))
            .args(args)
            .args(["--ui-port", &port.to_string()])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the launcher starts"),
    );
    let id = wait_for(&mut launcher, "the query on the page", || {
        let (_, body) = get(addr, "/api/queries")?;
        let queries: serde_json::Value = serde_json::from_str(&body).ok()?;
        let q = queries.as_array()?.iter().find(|q| q["name"] == "nexmark-hot-items")?;
        Some(q["id"].as_str()?.to_string())
    });
    wait_for(&mut launcher, "three batches", || (batches(addr, &id) >= 3).then_some(()));
    let origin = format!("http://{addr}/");
    let load = || {
        let (dom, requested) = render(&origin, Some(&origin), 2500);
        assert!(requested.is_empty(), "the page asked for {requested:?}");
        dom
    };
    let first = load();
    let now = batches(addr, &id);
    wait_for(&mut launcher, "five more batches", || (batches(addr, &id) >= now + 5).then_some(()));
    let second = load();
    for dom in [&first, &second] {
        assert!(dom.contains("nexmark-hot-items") && dom.contains("RUNNING"), "the query is listed as running");
    }
    for chart in ["rates", "durations", "inputs", "staterows", "statemem", "watermarks", "lags"] {
        let (a, b) = (points(&first, chart), points(&second, chart));
        assert!(a > 0 && b > a, "{chart}: {a} points, then {b}");
    }
    // Nexmark's event times are from 2015: the lag is drawn behind the newest event time read
    // (seconds here, with windows of 2 s), not behind the wall clock (thousands of days), and
    // the wall-clock lag is not shown.
    let lag = attribute(&second, "lags", "data-max").parse::<f64>().unwrap();
    assert!(lag < 60_000.0, "the watermark lag is {lag} ms");
    assert_eq!(attribute(&second, "walllags", "data-shown"), "no", "the wall-clock lag is hidden");
    let plan = json(addr, &format!("/api/plan?id={id}"));
    let nodes = plan["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 5, "hot items' plan: {plan}");
    assert_eq!(second.matches("class=\"node\"").count(), nodes.len(), "every operator is drawn");
    for n in nodes {
        let name = n["name"].as_str().unwrap();
        assert!(second.contains(&format!("data-name=\"{name}\"")), "{name} drawn");
    }
    assert!(second.contains("elementsOut"), "the metrics table is filled");
    screenshot(&origin, "live-page.png", (1300, 2700));

    // SIGINT stops the run after its current batch, as it does without the page.
    let pid = launcher.0.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let mut err = String::new();
    launcher.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = launcher.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "stopped by SIGINT: {err}");
}
