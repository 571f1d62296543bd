//! The sinks: thin transports around the formats.

use crate::format::{graphite_lines, http_json};
use std::io::Write;
use std::time::Duration;
use weir_sdk::metrics::{MetricQueryResults, MetricsSink};
use weir_sdk::time::iso8601;
use weir_sdk::UserError;

/// Beam's MetricsGraphiteSink: the carbon plaintext protocol over one TCP connection per push,
/// with connect and write timeouts (Beam has none).
pub struct GraphiteSink {
    host: String,
    port: u16,
    timeout: Duration,
}

impl GraphiteSink {
    /// A sink writing to carbon at `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        GraphiteSink { host: host.into(), port, timeout: Duration::from_secs(5) }
    }

    /// Bounds connecting and writing.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

impl MetricsSink for GraphiteSink {
    fn name(&self) -> &str {
        "graphite"
    }
    fn write(&mut self, results: &MetricQueryResults) -> Result<(), UserError> {
        use std::net::ToSocketAddrs;
        let payload = graphite_lines(results, weir_sdk::time::now_millis() / 1000);
        let addr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("graphite {}:{}: {e}", self.host, self.port))?
            .next()
            .ok_or_else(|| format!("graphite {}:{}: no address", self.host, self.port))?;
        let mut s = std::net::TcpStream::connect_timeout(&addr, self.timeout)
            .map_err(|e| format!("graphite {}:{}: {e}", self.host, self.port))?;
        s.set_write_timeout(Some(self.timeout))?;
        s.write_all(payload.as_bytes())?;
        s.flush()?;
        Ok(())
    }
}

/// One JSON object per push, appended to a file: Beam's HTTP sink body plus a `timestamp`.
pub struct JsonLinesSink {
    path: String,
}

impl JsonLinesSink {
    /// A sink appending to `path`.
    pub fn new(path: impl Into<String>) -> Self {
        JsonLinesSink { path: path.into() }
    }
}

impl MetricsSink for JsonLinesSink {
    fn name(&self) -> &str {
        "jsonl"
    }
    fn write(&mut self, results: &MetricQueryResults) -> Result<(), UserError> {
        let body = http_json(results);
        let line = format!("{{\"timestamp\":\"{}\",{}\n", iso8601(weir_sdk::time::now_millis()), &body[1..]);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("{}: {e}", self.path))?;
        f.write_all(line.as_bytes()).map_err(|e| format!("{}: {e}", self.path))?;
        Ok(())
    }
}

/// A readable table on standard output, one per push.
pub struct ConsoleSink;

impl MetricsSink for ConsoleSink {
    fn name(&self) -> &str {
        "console"
    }
    fn write(&mut self, r: &MetricQueryResults) -> Result<(), UserError> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "== metrics at {} ==", iso8601(weir_sdk::time::now_millis()))?;
        writeln!(out, "{:<40} {:<30} {:>15} {:>15}", "step", "metric", "attempted", "committed")?;
        let c = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        for m in &r.counters {
            writeln!(
                out,
                "{:<40} {:<30} {:>15} {:>15}",
                m.key.step.as_deref().unwrap_or(""),
                m.key.name.to_string(),
                m.attempted,
                c(m.committed.map(|v| v.to_string()))
            )?;
        }
        for m in &r.distributions {
            let d = |v: &weir_sdk::metrics::DistributionResult| format!("n={} mean={:.3}", v.count, v.mean());
            writeln!(
                out,
                "{:<40} {:<30} {:>15} {:>15}",
                m.key.step.as_deref().unwrap_or(""),
                m.key.name.to_string(),
                d(&m.attempted),
                c(m.committed.as_ref().map(d))
            )?;
        }
        for m in &r.gauges {
            writeln!(
                out,
                "{:<40} {:<30} {:>15} {:>15}",
                m.key.step.as_deref().unwrap_or(""),
                m.key.name.to_string(),
                m.attempted.value,
                c(m.committed.map(|v| v.value.to_string()))
            )?;
        }
        Ok(())
    }
}

/// One HTTP endpoint the HTTP and Prometheus sinks push to: the URL, an agent whose connect
/// and whole-request times are bounded, redirects not followed, and extra headers (tokens).
struct Endpoint {
    url: String,
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
}

impl Endpoint {
    fn new(url: String, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(timeout))
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        Endpoint { url, agent, headers: Vec::new() }
    }

    /// Sends `body` with `method` and `content` headers; returns the status. Messages name the
    /// URL without its credentials.
    fn send(&self, method: &str, content: &[(&str, &str)], body: &[u8]) -> Result<u16, UserError> {
        let shown = crate::endpoint::redact(&self.url);
        let mut req = match method {
            "PUT" => self.agent.put(&self.url),
            _ => self.agent.post(&self.url),
        };
        for (k, v) in content {
            req = req.header(*k, *v);
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let response = req.send(body).map_err(|e| format!("{method} {shown}: {e}"))?;
        Ok(response.status().as_u16())
    }
}

/// Beam's MetricsHttpSink: POSTs the JSON body to a URL; only `200` counts as success, redirects
/// are not followed, and — unlike Beam — connecting and the whole request are bounded in time.
pub struct HttpSink {
    endpoint: Endpoint,
}

impl HttpSink {
    /// A sink posting to `url`, giving up on a request after `timeout`.
    pub fn new(url: impl Into<String>, timeout: Duration) -> Self {
        HttpSink { endpoint: Endpoint::new(url.into(), timeout) }
    }

    /// Sends these headers with every push (e.g. `Authorization`).
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> Self {
        self.endpoint.headers = headers;
        self
    }
}

impl MetricsSink for HttpSink {
    fn name(&self) -> &str {
        "http"
    }
    fn write(&mut self, results: &MetricQueryResults) -> Result<(), UserError> {
        let body = http_json(results);
        let status = self.endpoint.send(
            "POST",
            &[("Content-Type", "application/json"), ("charset", "utf-8")],
            body.as_bytes(),
        )?;
        if status != 200 {
            return Err(format!(
                "Expected HTTP 200 OK response while writing metrics to MetricsHttpSink but received {status} from {}",
                crate::endpoint::redact(&self.endpoint.url)
            )
            .into());
        }
        Ok(())
    }
}

/// Pushes the Prometheus text format to a Pushgateway group URL
/// (`http://host:9091/metrics/job/<job>`) with `PUT`, replacing the group each push.
pub struct PushgatewaySink {
    endpoint: Endpoint,
}

impl PushgatewaySink {
    /// A sink pushing to `url`.
    pub fn new(url: impl Into<String>, timeout: Duration) -> Self {
        PushgatewaySink { endpoint: Endpoint::new(url.into(), timeout) }
    }

    /// Sends these headers with every push (e.g. `Authorization`).
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> Self {
        self.endpoint.headers = headers;
        self
    }
}

impl MetricsSink for PushgatewaySink {
    fn name(&self) -> &str {
        "prometheus"
    }
    fn write(&mut self, results: &MetricQueryResults) -> Result<(), UserError> {
        let body = crate::format::prometheus_text(results);
        let status = self.endpoint.send(
            "PUT",
            &[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
            body.as_bytes(),
        )?;
        if !(200..300).contains(&status) {
            return Err(format!("Pushgateway {} answered {status}", crate::endpoint::redact(&self.endpoint.url)).into());
        }
        Ok(())
    }
}

/// Prometheus remote write v1: protobuf, snappy block compression, to e.g.
/// `http://host:9090/api/v1/write`.
pub struct RemoteWriteSink {
    endpoint: Endpoint,
}

impl RemoteWriteSink {
    /// A sink writing to `url`.
    pub fn new(url: impl Into<String>, timeout: Duration) -> Self {
        RemoteWriteSink { endpoint: Endpoint::new(url.into(), timeout) }
    }

    /// Sends these headers with every push (e.g. `Authorization`).
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> Self {
        self.endpoint.headers = headers;
        self
    }
}

impl MetricsSink for RemoteWriteSink {
    fn name(&self) -> &str {
        "prometheus-remote-write"
    }
    fn write(&mut self, results: &MetricQueryResults) -> Result<(), UserError> {
        let body = crate::format::remote_write_body(results, weir_sdk::time::now_millis())?;
        let status = self.endpoint.send(
            "POST",
            &[
                ("Content-Encoding", "snappy"),
                ("Content-Type", "application/x-protobuf"),
                ("X-Prometheus-Remote-Write-Version", "0.1.0"),
                ("User-Agent", "weir-metrics-sinks"),
            ],
            &body,
        )?;
        if !(200..300).contains(&status) {
            return Err(
                format!("remote write to {} answered {status}", crate::endpoint::redact(&self.endpoint.url)).into()
            );
        }
        Ok(())
    }
}
