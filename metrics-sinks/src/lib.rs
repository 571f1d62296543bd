//! # weir-metrics-sinks: where pushed metrics go
//!
//! Each sink turns the cumulative `MetricQueryResults` a MetricsPusher hands it into one
//! backend's wire format. The formats are pure functions, tested against the examples of Beam's
//! own sinks (spec METRICS.md §6, §7), so that dashboards built for Beam read Weir unchanged;
//! the transports around them are thin. [`register`] makes the sinks selectable with
//! `--metrics-sink NAME`: `http`, `graphite`, `prometheus` (Pushgateway), `prometheus-remote-write`,
//! `jsonl`, `console`.

#![deny(missing_docs)]

pub mod format;
mod sinks;

pub use sinks::{ConsoleSink, GraphiteSink, HttpSink, JsonLinesSink, PushgatewaySink, RemoteWriteSink};
use weir_sdk::metrics::{register_metrics_sink, MetricsSink};
use weir_sdk::{Error, PipelineOptions};

/// Registers every sink of this crate under its name.
pub fn register() {
    register_metrics_sink("graphite", |o: &PipelineOptions| {
        let host = o
            .metrics
            .graphite_host
            .clone()
            .ok_or_else(|| Error::Options("--metrics-sink graphite needs --metrics-graphite-host".into()))?;
        Ok(Box::new(
            GraphiteSink::new(host, o.metrics.graphite_port)
                .with_timeout(std::time::Duration::from_millis(o.metrics.push_timeout_ms)),
        ) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("jsonl", |o: &PipelineOptions| {
        let file =
            o.metrics.file.clone().ok_or_else(|| Error::Options("--metrics-sink jsonl needs --metrics-file".into()))?;
        Ok(Box::new(JsonLinesSink::new(file)) as Box<dyn MetricsSink>)
    });
    register_metrics_sink("http", |o: &PipelineOptions| {
        let url = o
            .metrics
            .http_url
            .clone()
            .ok_or_else(|| Error::Options("--metrics-sink http needs --metrics-http-url".into()))?;
        Ok(Box::new(HttpSink::new(url, std::time::Duration::from_millis(o.metrics.push_timeout_ms)))
            as Box<dyn MetricsSink>)
    });
    register_metrics_sink("prometheus", |o: &PipelineOptions| {
        let url = o.metrics.prometheus_url.clone().ok_or_else(|| {
            Error::Options("--metrics-sink prometheus needs --metrics-prometheus-url (a Pushgateway group URL)".into())
        })?;
        Ok(Box::new(PushgatewaySink::new(url, std::time::Duration::from_millis(o.metrics.push_timeout_ms)))
            as Box<dyn MetricsSink>)
    });
    register_metrics_sink("prometheus-remote-write", |o: &PipelineOptions| {
        let url = o.metrics.prometheus_url.clone().ok_or_else(|| {
            Error::Options("--metrics-sink prometheus-remote-write needs --metrics-prometheus-url".into())
        })?;
        Ok(Box::new(RemoteWriteSink::new(url, std::time::Duration::from_millis(o.metrics.push_timeout_ms)))
            as Box<dyn MetricsSink>)
    });
    register_metrics_sink("console", |_: &PipelineOptions| Ok(Box::new(ConsoleSink) as Box<dyn MetricsSink>));
}
