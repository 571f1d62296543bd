//! The live page (`--ui-port`) from the API: its JSON API read while a streaming query runs on
//! the micro-batch and the timely runner (the query listed, its progress growing, its plan and
//! metrics), and clients that connect and never read, which cost the query nothing and do not
//! keep the page from others. (The page in a browser, during a streaming Nexmark run from the
//! launcher, is `weir-nexmark`'s `live_page` test.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use weir::core::streaming::{StreamingOptions, StreamingTrigger};
use weir::microbatch::{MicroBatchOptions, MicroBatchRunner, StreamingQuery};
use weir_sdk::io::ReadUnbounded;
use weir_sdk::prelude::*;
use weir_sdk::runner::PipelineResult;
use weir_tests::sources::Numbers;

/// `options` for job `job`: small batches every 30 ms, the live page on a free port.
fn live(mut options: PipelineOptions, job: &str) -> PipelineOptions {
    weir_tests::register_runners();
    options.job_name = job.into();
    options.ui.port = Some(0);
    let mb = options.group_mut::<StreamingOptions>();
    mb.trigger = StreamingTrigger::ProcessingTime;
    mb.trigger_interval_ms = 30;
    mb.max_batch_size = 50;

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
    run(&p)
}

fn run(p: &Pipeline) -> (StreamingQuery, SocketAddr) {
    let query = MicroBatchRunner.start(p.graph(), &p.options()).unwrap();
    let addr = query.ui_address().expect("the live page is served");
    (query, addr)
}

/// An endless read whose next step keeps 30,000 counters: its metrics are an answer of megabytes.
fn start_wide(job: &str) -> (StreamingQuery, SocketAddr) {
    let p = Pipeline::new(live(PipelineOptions::default(), job));
    p.apply("Read", ReadUnbounded::from(Numbers::new(None, true))).apply(
        "Wide",
        Map::new(|i: i64| {
            for j in 0..500 {
                Metrics::counter("wide", format!("counter-{}-{j}", i % 60)).unwrap().inc();
            }
            i
        }),
    );
    run(&p)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap_or_else(|e| panic!("{path}: no answer from the live page: {e}"));
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

/// A connection to `addr` that takes in at most a few kilobytes unread: an answer larger than
/// that and the server's socket buffer fills them and leaves the server's write waiting.
fn narrow_client(addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    socket.connect(&addr.into()).unwrap();
    socket.into()
}

#[test]
fn clients_that_never_read_cost_the_query_nothing_and_do_not_hold_the_page() {
    let (query, addr) = start_wide("live-stuck");
    let id = json(addr, "/api/queries").as_array().unwrap()[0]["id"].as_str().unwrap().to_string();
    // Every counter reported: an answer too large for the sockets' buffers to take unread.
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(addr, &format!("/api/metrics?id={id}")).1.matches("counter-").count() < 30_000 {
        assert!(Instant::now() < deadline, "the counters were not all reported");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut held = Vec::new();
    for _ in 0..4 {
        // Connects and says nothing.
        held.push(TcpStream::connect(addr).unwrap());
        // Sends half a request.
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(b"GET /api/progress?id=").unwrap();
        held.push(half);
        // Asks for a large answer and never reads it.
        let mut s = narrow_client(addr);
        write!(s, "GET /api/metrics?id={id} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        held.push(s);
    }
    // The query goes on, by its own count of batches, not the page's.
    let batch = |q: &StreamingQuery| q.last_progress().map_or(0, |p| p.batch_id);
    let (from, deadline) = (batch(&query), Instant::now() + Duration::from_secs(120));
    while batch(&query) < from + 30 {
        assert!(Instant::now() < deadline, "the query stalled at batch {} with clients held", batch(&query));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another client is answered while they are held, and its answer is current.
    let queries = json(addr, "/api/queries");
    assert_eq!(queries[0]["name"], "live-stuck");
    assert!(queries[0]["batches"].as_u64().unwrap() >= from + 30, "{queries}");
    let (status, page) = get(addr, "/");
    assert!(status == 200 && page.contains("Weir streaming queries"));
    drop(held);
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

/// The direct runner has no page to serve, and says so rather than ignore the flag.
#[test]
fn the_direct_runner_refuses_ui_port() {
    weir_tests::register_runners();
    let options = PipelineOptions::from_args(["--runner", "direct", "--ui-port", "4040"]).unwrap();
    let p = weir_sdk::testing::TestPipeline::from_options(options);
    p.apply("Nums", Create::of(vec![1i64]));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("--ui-port 4040") && err.contains("direct runner serves no live page"), "{err}");
}

/// `--ui-host` chooses the address the page listens on; one it cannot listen on is an error
/// naming it, before the query starts.
#[test]
fn ui_host_chooses_the_address_and_a_bad_one_is_named() {
    let pipeline = |host: &str| {
        let mut options = live(PipelineOptions::default(), "live-host");
        options.ui.host = host.into();
        let p = Pipeline::new(options);
        p.apply("Read", ReadUnbounded::from(Numbers::new(None, true))).apply("Show", Map::new(|i: i64| i));
        p
    };
    let p = pipeline("0.0.0.0");
    let (query, addr) = run(&p);
    assert!(addr.ip().is_unspecified(), "listens on every address: {addr}");
    let local = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    assert_eq!(json(local, "/api/queries")[0]["name"], "live-host");
    query.stop().unwrap();
    query.await_termination(Some(Duration::from_secs(30))).unwrap();

    let p = pipeline("no-such-host.invalid");
    let err = MicroBatchRunner.start(p.graph(), &p.options()).err().expect("refused").to_string();
    assert!(err.contains("no-such-host.invalid") && err.contains("live page"), "{err}");
}
