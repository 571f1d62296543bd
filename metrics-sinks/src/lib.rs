//! # weir-metrics-sinks: where pushed metrics go
//!
//! Each sink turns the cumulative `MetricQueryResults` a MetricsPusher hands it into one
//! backend's wire format. The formats are pure functions, tested against the examples of Beam's
//! own sinks (Beam's MetricsHttpSink and MetricsGraphiteSink), so that dashboards built for Beam read Weir unchanged;
//! the transports around them are thin. [`register`] makes the sinks selectable with
//! `--metrics-sink NAME`: `http`, `graphite`, `prometheus` (Pushgateway), `prometheus-remote-write`,
//! `jsonl`, `console`.

#![deny(missing_docs)]

pub mod endpoint;
pub mod format;
pub mod options;
mod sinks;

pub use options::SinkOptions;

pub use sinks::{ConsoleSink, GraphiteSink, HttpSink, JsonLinesSink, PushgatewaySink, RemoteWriteSink};
use weir_sdk::metrics::{register_metrics_sink, MetricsSink};
use weir_sdk::{Error, PipelineOptions};

/// The timeout of network sinks.
fn timeout(o: &PipelineOptions) -> std::time::Duration {
    std::time::Duration::from_millis(o.metrics.push_timeout_ms.max(1))
}

/// The value of a required setting of sink `sink`.
fn required<'a>(value: &'a Option<String>, sink: &str, flag: &str, what: &str) -> Result<&'a str, Error> {
    value.as_deref().ok_or_else(|| Error::Options(format!("--metrics-sink {sink} needs {flag}{what}")))
}

/// Registers every sink of this crate under its name. Each factory checks its settings when
/// the pipeline starts (URLs parse with a supported scheme, hosts resolve, header variables are
/// set, files can be opened) and fails with an error naming the flag.
pub fn register() {
    weir_sdk::options::register_option_group::<SinkOptions>();
    register_metrics_sink("graphite", |o: &PipelineOptions| {
        let s = o.get::<SinkOptions>();
        let host = required(&s.graphite_host, "graphite", "--metrics-graphite-host", "")?;
        endpoint::graphite_host("--metrics-graphite-host", host, s.graphite_port)?;
        Ok(Box::new(GraphiteSink::new(host, s.graphite_port).with_timeout(timeout(o))) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("jsonl", |o: &PipelineOptions| {
        let s = o.get::<SinkOptions>();
        let file = required(&s.file, "jsonl", "--metrics-file", "")?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .map_err(|e| Error::Options(format!("--metrics-file '{file}': {e}")))?;
        Ok(Box::new(JsonLinesSink::new(file)) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("http", |o: &PipelineOptions| {
        let s = o.get::<SinkOptions>();
        let url = required(&s.http_url, "http", "--metrics-http-url", "")?;
        let url = endpoint::http_url("--metrics-http-url", url)?;
        Ok(Box::new(HttpSink::new(url, timeout(o)).with_headers(endpoint::headers(o)?)) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("prometheus", |o: &PipelineOptions| {
        let s = o.get::<SinkOptions>();
        let url = required(&s.prometheus_url, "prometheus", "--metrics-prometheus-url", " (a Pushgateway group URL)")?;
        let url = endpoint::http_url("--metrics-prometheus-url", url)?;
        Ok(Box::new(PushgatewaySink::new(url, timeout(o)).with_headers(endpoint::headers(o)?)) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("prometheus-remote-write", |o: &PipelineOptions| {
        let s = o.get::<SinkOptions>();
        let url = required(&s.prometheus_url, "prometheus-remote-write", "--metrics-prometheus-url", "")?;
        let url = endpoint::http_url("--metrics-prometheus-url", url)?;
        Ok(Box::new(RemoteWriteSink::new(url, timeout(o)).with_headers(endpoint::headers(o)?)) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("console", |_: &PipelineOptions| Ok(Box::new(ConsoleSink) as Box<dyn MetricsSink>));
}
