//! `StreamingQueryProgress`: what each batch (a micro-batch, a timely epoch) did, as JSON with
//! Spark's field names. One schema for every runner that runs in batches: the micro-batch
//! runner fills all of it; the timely runner fills what a cluster of workers measures (its
//! phases are the WAL commit and the whole epoch, its state the rows and bytes each operator
//! holds) and adds a row per worker beside it.

use serde::Serialize;
use std::collections::BTreeMap;

/// Time spent in each phase of a batch, ms.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DurationMs {
    /// Asking the sources for new data.
    pub latest_offset: u64,
    /// Writing the offset log entry.
    pub wal_commit: u64,
    /// Reading the batch's data.
    pub get_batch: u64,
    /// Planning (the plan is built once per query, so this is near zero).
    pub query_planning: u64,
    /// Running the plan and advancing watermarks.
    pub add_batch: u64,
    /// Committing state, sinks and the commit log.
    pub commit_offsets: u64,
    /// The whole batch.
    pub trigger_execution: u64,
}

/// Event-time statistics of a batch's input, ISO 8601.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct EventTimeStats {
    /// Earliest input timestamp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    /// Latest input timestamp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    /// Average input timestamp.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg: Option<String>,
    /// The query's watermark: the minimum output watermark of the sinks (leaf operators).
    pub watermark: String,
}

/// One stateful operator's state-store figures.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StateOperatorProgress {
    /// The step.
    pub operator_name: String,
    /// Keys and windows held after the batch.
    pub num_rows_total: u64,
    /// State rows (one per key and window) created or written by the batch, each counted once;
    /// reads are not updates, and the last pane of an expiring window is only a removal.
    pub num_rows_updated: u64,
    /// State rows removed by the batch: expired, cleared, or merged into another window.
    pub num_rows_removed: u64,
    /// Input dropped because its window had expired.
    pub num_rows_dropped_by_watermark: u64,
    /// Time spent processing input, ms.
    pub all_updates_time_ms: u64,
    /// Time spent firing timers and evicting state, ms.
    pub all_removals_time_ms: u64,
    /// Time the batch's commit spent taking, encoding and writing the operator's state files,
    /// over its partitions, ms (rounded up; 0 when it wrote none).
    pub commit_time_ms: u64,
    /// Approximate memory held by the state, bytes.
    pub memory_used_bytes: u64,
    /// Number of state store instances (partitions).
    pub num_state_store_instances: u64,
    /// Other figures: `snapshotBytes`, `deltaBytes` and `stateFilesWritten` of the state files
    /// the batch's commit wrote (whole snapshots come only from a run's first commit; later ones
    /// are made in the background), `backgroundSnapshotBytes`, `backgroundSnapshotFiles` and
    /// `backgroundSnapshotTimeMs` of the background snapshots finished since the batch before, and (micro-batch) Spark's `loadedMapCacheHitCount` /
    /// `loadedMapCacheMissCount`: per partition, whether the batch started from the state in
    /// memory or, after a restart, read it from the files.
    pub custom_metrics: BTreeMap<String, u64>,
}

/// What a stateful step's checkpoint wrote in a batch (epoch), and the background snapshots
/// of it finished meanwhile: its [`StateOperatorProgress::custom_metrics`] `snapshotBytes`,
/// `deltaBytes`, `stateFilesWritten` (one per partition that wrote), `backgroundSnapshotBytes`,
/// `backgroundSnapshotFiles` and `backgroundSnapshotTimeMs`, named here once for every runner.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateWrites {
    snapshot_bytes: u64,
    delta_bytes: u64,
    files: u64,
    background_bytes: u64,
    background_files: u64,
    background_time: std::time::Duration,
}

impl StateWrites {
    /// Counts a state file the commit wrote.
    pub fn wrote(&mut self, f: &crate::checkpoint::state_files::StateFile) {
        match f.kind {
            crate::checkpoint::state_files::FileKind::Snapshot => self.snapshot_bytes += f.bytes,
            crate::checkpoint::state_files::FileKind::Delta => self.delta_bytes += f.bytes,
        }
        self.files += 1;
    }

    /// Counts a background snapshot's file `f`, made in `took`.
    pub fn snapshot_made(&mut self, f: &crate::checkpoint::state_files::StateFile, took: std::time::Duration) {
        self.background_bytes += f.bytes;
        self.background_files += 1;
        self.background_time += took;
    }

    /// Adds the background snapshots `other` counted.
    pub fn add_snapshots(&mut self, other: &StateWrites) {
        self.background_bytes += other.background_bytes;
        self.background_files += other.background_files;
        self.background_time += other.background_time;
    }

    /// The figures, by their names in the progress.
    pub fn custom_metrics(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([
            ("snapshotBytes".to_string(), self.snapshot_bytes),
            ("deltaBytes".to_string(), self.delta_bytes),
            ("stateFilesWritten".to_string(), self.files),
            ("backgroundSnapshotBytes".to_string(), self.background_bytes),
            ("backgroundSnapshotFiles".to_string(), self.background_files),
            ("backgroundSnapshotTimeMs".to_string(), self.background_time.as_millis() as u64),
        ])
    }
}

/// One source's part of a batch.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    /// The step.
    pub description: String,
    /// Offsets before the batch.
    pub start_offset: serde_json::Value,
    /// Offsets after the batch.
    pub end_offset: serde_json::Value,
    /// Records read.
    pub num_input_rows: u64,
    /// Records per second arriving since the previous batch.
    pub input_rows_per_second: f64,
    /// Records per second processed by this batch.
    pub processed_rows_per_second: f64,
}

/// The sink's part of a batch.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SinkProgress {
    /// The leaf steps of the pipeline.
    pub description: String,
    /// Rows they output in this batch.
    pub num_output_rows: i64,
}

/// Spark's `StreamingQueryProgress`, plus every operator's watermark.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryProgress {
    /// The query's id (stable for a checkpoint).
    pub id: String,
    /// This run's id.
    pub run_id: String,
    /// The job name.
    pub name: String,
    /// When the batch started, ISO 8601.
    pub timestamp: String,
    /// The batch id.
    pub batch_id: u64,
    /// The batch's duration, ms.
    pub batch_duration: u64,
    /// Records read from all sources.
    pub num_input_rows: u64,
    /// Records per second arriving since the previous batch.
    pub input_rows_per_second: f64,
    /// Records per second processed by this batch.
    pub processed_rows_per_second: f64,
    /// Time per phase.
    pub duration_ms: DurationMs,
    /// Event-time statistics.
    pub event_time: EventTimeStats,
    /// Stateful operators.
    pub state_operators: Vec<StateOperatorProgress>,
    /// Sources.
    pub sources: Vec<SourceProgress>,
    /// The sink.
    pub sink: SinkProgress,
    /// Output watermark of every operator after the batch, ISO 8601 (beyond Spark).
    pub watermarks: BTreeMap<String, String>,
}

impl StreamingQueryProgress {
    /// The progress as JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A duration as whole milliseconds, rounded up: work that took time, however little, reads as
/// at least 1 ms (a state commit of a few entries is not "0 ms").
pub fn millis_rounded_up(d: std::time::Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}
