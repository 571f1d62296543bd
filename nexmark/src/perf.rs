//! A run's performance record, Beam's `NexmarkPerf`: what the launcher measures for each
//! configuration, what the report prints and the baseline file holds, and the streaming
//! "steady state" rate from its progress snapshots.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How often a run's progress is recorded (Beam's monitor polls every 15 s).
pub const SNAPSHOT_PERIOD: Duration = Duration::from_secs(15);

/// Beam's `NexmarkPerf.ProgressSnapshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressSnapshot {
    /// Seconds since the run was launched.
    pub sec_since_start: f64,
    /// Seconds since the first event.
    pub runtime_sec: f64,
    /// Events so far.
    pub num_events: i64,
    /// Results so far.
    pub num_results: i64,
}

/// Beam's streaming "steady state" events per second: with at least 9 snapshots spanning at
/// least 2 minutes, the least-squares slope through the origin of events over runtime in the
/// middle third of the snapshots; `None` when the run was too short.
pub fn steady_state_events_per_sec(snapshots: &[ProgressSnapshot]) -> Option<f64> {
    let (first, last) = (snapshots.first()?, snapshots.last()?);
    if snapshots.len() < 9 || last.sec_since_start - first.sec_since_start < 120.0 {
        return None;
    }
    let n = snapshots.len();
    let middle = &snapshots[n / 3..n - n / 3];
    let sxx: f64 = middle.iter().map(|s| s.runtime_sec * s.runtime_sec).sum();
    let sxy: f64 = middle.iter().map(|s| s.runtime_sec * s.num_events as f64).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// One run's performance, with Beam's `NexmarkPerf` field names (-1 when unknown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NexmarkPerf {
    /// Seconds from the first event to the last event or result.
    pub runtime_sec: f64,
    /// Events read.
    pub num_events: i64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Event bytes per second.
    pub event_bytes_per_sec: f64,
    /// Results produced.
    pub num_results: i64,
    /// Results per second.
    pub results_per_sec: f64,
    /// Result bytes per second.
    pub result_bytes_per_sec: f64,
    /// Seconds from launch to the first event.
    pub startup_delay_sec: f64,
    /// Seconds from the first event to the first result.
    pub processing_delay_sec: f64,
    /// Seconds from the last result to the end of the run.
    pub shutdown_delay_sec: f64,
    /// Event-time span of the results over the runtime.
    pub time_dilation: f64,
    /// Errors of the run.
    pub errors: Vec<String>,
    /// Progress snapshots, one per [`SNAPSHOT_PERIOD`] of the run.
    pub snapshots: Vec<ProgressSnapshot>,
    /// Query name (`GENERATOR_ONLY` for `--generator-only`).
    pub query: String,
    /// Runner name.
    pub runner: String,
    /// `batch` or `streaming`.
    pub mode: String,
    /// The runner's parallelism (0 = one per core).
    pub parallelism: usize,
}
