//! The HTTP sink against a real HTTP server on 127.0.0.1.

use std::time::{Duration, Instant};
use weir_metrics_sinks::format::http_json;
use weir_metrics_sinks::HttpSink;
use weir_sdk::metrics::{MetricKey, MetricName, MetricQueryResults, MetricResult, MetricsSink};

fn results() -> MetricQueryResults {
    MetricQueryResults {
        counters: vec![MetricResult {
            key: MetricKey { step: Some("s1".into()), name: MetricName::new("ns1", "n1").unwrap() },
            attempted: 20,
            committed: Some(10),
        }],
        ..Default::default()
    }
}

/// What the test server saw of each request: method, content type, body.
type Seen = Vec<(String, String, String)>;

/// Serves `responses` (status, delay) one request each, recording what it saw.
fn server(responses: Vec<(u16, Duration)>) -> (String, std::thread::JoinHandle<Seen>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", server.server_addr().to_ip().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, delay) in responses {
            let Ok(Some(mut req)) = server.recv_timeout(Duration::from_secs(10)) else { break };
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            let ct = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Content-Type"))
                .map(|h| h.value.to_string())
                .unwrap_or_default();
            seen.push((req.method().to_string(), ct, body));
            std::thread::sleep(delay);
            let mut resp = tiny_http::Response::from_string("").with_status_code(status);
            if status == 302 {
                resp = resp.with_header("Location: /elsewhere".parse::<tiny_http::Header>().unwrap());
            }
            let _ = req.respond(resp);
        }
        seen
    });
    (url, handle)
}

#[test]
fn posts_beams_json_body_and_accepts_only_200() {
    let (url, handle) =
        server(vec![(200, Duration::ZERO), (204, Duration::ZERO), (302, Duration::ZERO), (500, Duration::ZERO)]);
    let mut sink = HttpSink::new(&url, Duration::from_secs(5));
    sink.write(&results()).unwrap();
    for code in ["204", "302", "500"] {
        let err = sink.write(&results()).unwrap_err().to_string();
        assert!(err.contains("Expected HTTP 200") && err.contains(code), "{err}");
    }
    let seen = handle.join().unwrap();
    assert_eq!(seen.len(), 4, "redirects are not followed");
    assert_eq!(seen[0].0, "POST");
    assert_eq!(seen[0].1, "application/json");
    assert_eq!(seen[0].2, http_json(&results()));
    let parsed: serde_json::Value = serde_json::from_str(&seen[0].2).unwrap();
    assert_eq!(parsed["counters"][0]["committed"], 10);
}

#[test]
fn a_slow_receiver_times_out() {
    let (url, handle) = server(vec![(200, Duration::from_millis(1500))]);
    let mut sink = HttpSink::new(&url, Duration::from_millis(300));
    let start = Instant::now();
    assert!(sink.write(&results()).is_err());
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    let _ = handle.join();
}

#[test]
fn an_unreachable_receiver_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut sink = HttpSink::new(format!("http://127.0.0.1:{port}/m"), Duration::from_secs(1));
    let err = sink.write(&results()).unwrap_err().to_string();
    assert!(err.contains(&port.to_string()), "{err}");
}

/// Issue 16: credentials in a URL are used, never shown.
#[test]
fn credentials_never_appear_in_errors() {
    use weir_metrics_sinks::{PushgatewaySink, RemoteWriteSink};
    use weir_sdk::metrics::MetricsSink;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://weir:hunter2@127.0.0.1:{port}/m");
    let timeout = Duration::from_millis(500);
    let sinks: Vec<Box<dyn MetricsSink>> = vec![
        Box::new(HttpSink::new(&url, timeout)),
        Box::new(PushgatewaySink::new(&url, timeout)),
        Box::new(RemoteWriteSink::new(&url, timeout)),
    ];
    for mut sink in sinks {
        let err = sink.write(&results()).unwrap_err().to_string();
        assert!(!err.contains("hunter2") && err.contains("***@127.0.0.1"), "{}: {err}", sink.name());
    }
    // And a receiver that answers an error sees the credentials as basic auth, not the log.
    let (url, handle) = server(vec![(500, Duration::ZERO)]);
    let url = url.replacen("http://", "http://weir:hunter2@", 1);
    let err = HttpSink::new(&url, timeout).write(&results()).unwrap_err().to_string();
    assert!(err.contains("500") && !err.contains("hunter2"), "{err}");
    let _ = handle.join();
}

/// Issue 16: headers from `--metrics-header-env` and `--metrics-bearer-token-env` reach the
/// receiver.
#[test]
fn extra_headers_are_sent() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/m", server.server_addr().to_ip().unwrap());
    let handle = std::thread::spawn(move || {
        let req = server.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
        let headers: Vec<String> = req.headers().iter().map(|h| format!("{}: {}", h.field, h.value)).collect();
        let _ = req.respond(tiny_http::Response::from_string("").with_status_code(200));
        headers
    });
    let headers = vec![("Authorization".into(), "Bearer t0ken".into()), ("X-Scope-OrgID".into(), "tenant".into())];
    HttpSink::new(&url, Duration::from_secs(5)).with_headers(headers).write(&results()).unwrap();
    let seen = handle.join().unwrap();
    assert!(seen.iter().any(|h| h.eq_ignore_ascii_case("authorization: Bearer t0ken")), "{seen:?}");
    assert!(seen.iter().any(|h| h.eq_ignore_ascii_case("x-scope-orgid: tenant")), "{seen:?}");
}

#[test]
fn pushgateway_and_remote_write_requests() {
    use weir_metrics_sinks::{PushgatewaySink, RemoteWriteSink};
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let base = format!("http://{}", server.server_addr().to_ip().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let Ok(Some(mut req)) = server.recv_timeout(Duration::from_secs(10)) else { break };
            let mut body = Vec::new();
            req.as_reader().read_to_end(&mut body).unwrap();
            let headers: Vec<String> = req.headers().iter().map(|h| format!("{}: {}", h.field, h.value)).collect();
            seen.push((req.method().to_string(), req.url().to_string(), headers, body));
            let _ = req.respond(tiny_http::Response::from_string("").with_status_code(202));
        }
        seen
    });
    PushgatewaySink::new(format!("{base}/metrics/job/weir"), Duration::from_secs(5)).write(&results()).unwrap();
    RemoteWriteSink::new(format!("{base}/api/v1/write"), Duration::from_secs(5)).write(&results()).unwrap();
    let seen = handle.join().unwrap();
    assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), ("PUT", "/metrics/job/weir"));
    assert!(String::from_utf8_lossy(&seen[0].3)
        .contains(r#"beam_counter{namespace="ns1",name="n1",step="s1",value="attempted"} 20"#));
    assert_eq!((seen[1].0.as_str(), seen[1].1.as_str()), ("POST", "/api/v1/write"));
    assert!(seen[1].2.iter().any(|h| h.eq_ignore_ascii_case("content-encoding: snappy")), "{:?}", seen[1].2);
    let raw = snap::raw::Decoder::new().decompress_vec(&seen[1].3).unwrap();
    let req: weir_metrics_sinks::format::remote_write::WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
    assert_eq!(req.timeseries.len(), 2);
}
