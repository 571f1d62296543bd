//! What each epoch did, as process 0 reports it, in the shape of Spark's
//! `StreamingQueryProgress` (its field names in JSON): the epoch's input rows, rates and
//! durations across the cluster, the query's watermark, every stateful operator's state and
//! every source's rows, with one row per worker (its input rows, how long its share took, and
//! the state its operators hold). Every worker sends its row to worker 0 once the epoch has
//! finished everywhere; an epoch is reported when every worker's row has arrived.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use weir_runner_core::progress::{
    DurationMs, EventTimeStats, SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress,
};
use weir_sdk::time::{iso8601, Timestamp, MAX_TIMESTAMP};

/// One stateful operator's state on one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorState {
    /// The step.
    pub operator_name: String,
    /// Keys and windows held after the epoch.
    pub num_rows_total: u64,
    /// Bytes of that state.
    pub memory_used_bytes: u64,
    /// State rows the epoch updated (each once), as the micro-batch runner counts them.
    #[serde(default)]
    pub num_rows_updated: u64,
    /// State rows the epoch removed.
    #[serde(default)]
    pub num_rows_removed: u64,
    /// Input the epoch dropped because its window had expired.
    #[serde(default)]
    pub num_rows_dropped_by_watermark: u64,
    /// Time the epoch spent processing input, ms.
    #[serde(default)]
    pub all_updates_time_ms: u64,
    /// Time the epoch spent firing timers and evicting state, ms.
    #[serde(default)]
    pub all_removals_time_ms: u64,
    /// Time the epoch's checkpoint spent taking, encoding and writing its state files, ms.
    #[serde(default)]
    pub commit_time_ms: u64,
    /// `snapshotBytes`, `deltaBytes` and `backgroundSnapshotBytes`, as the micro-batch runner
    /// reports them.
    #[serde(default)]
    pub custom_metrics: BTreeMap<String, u64>,
}

/// One source's rows on one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRows {
    /// The source step.
    pub description: String,
    /// Rows read for the epoch.
    pub num_input_rows: u64,
}

/// One worker's part of an epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerProgress {
    /// The worker's index in the cluster.
    pub worker: usize,
    /// Its process.
    pub process: usize,
    /// Rows its sources read for the epoch.
    pub input_rows: u64,
    /// From reading its sources' slice to seeing the epoch finished everywhere, ms.
    pub duration_ms: u64,
    /// Keys and windows its operators hold after the epoch.
    pub state_rows: u64,
    /// Bytes of that state.
    pub state_bytes: u64,
    /// When the worker began the epoch (ms since the Unix epoch).
    pub started_ms: i64,
    /// Writing its offset log entry (with a checkpoint), ms.
    pub wal_commit_ms: u64,
    /// The minimum output watermark of its leaf operators after the epoch.
    pub watermark: Timestamp,
    /// The latest timestamp its sources read for the epoch, if they read any.
    #[serde(default)]
    pub max_event_time: Option<Timestamp>,
    /// Its stateful operators' state.
    pub operators: Vec<OperatorState>,
    /// Its sources' rows.
    pub sources: Vec<SourceRows>,
}

/// What one epoch did across the cluster: Spark's `StreamingQueryProgress` (runner-core's, which
/// the micro-batch runner fills too), with the epoch and one row per worker beside it. Its
/// fields read as the query progress's (`progress.num_input_rows`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochProgress {
    /// The query progress: ids, the epoch as the batch id, input rows and rates, the phases
    /// measured (the WAL commit and the whole epoch, the slowest worker's), the event times
    /// read and the query's watermark, every stateful operator and every source over the
    /// workers.
    #[serde(flatten)]
    pub query: StreamingQueryProgress,
    /// The epoch (the micro-batch id), from 0.
    pub epoch: u64,
    /// Keys and windows held after the epoch, over every worker.
    pub state_rows: u64,
    /// Bytes of that state.
    pub state_bytes: u64,
    /// One row per worker, by worker index.
    pub workers: Vec<WorkerProgress>,
}

impl std::ops::Deref for EpochProgress {
    type Target = StreamingQueryProgress;
    fn deref(&self) -> &StreamingQueryProgress {
        &self.query
    }
}

impl EpochProgress {
    /// The progress as JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Epochs reported and kept for `recent_progress`.
pub(crate) const RECENT: usize = 100;

type Listener = Box<dyn Fn(&EpochProgress) + Send + Sync>;

/// Worker 0's collection of workers' rows, and what it has reported.
#[derive(Default)]
pub(crate) struct Progress {
    peers: usize,
    id: String,
    run_id: String,
    /// When the previous epoch began (ms), for the input rate.
    previous_start: Mutex<Option<i64>>,
    pending: Mutex<BTreeMap<u64, Vec<WorkerProgress>>>,
    recent: Mutex<VecDeque<EpochProgress>>,
    listeners: Mutex<Vec<Listener>>,
}

impl Progress {
    /// The progress of query `id`'s run `run_id` on a cluster of `peers` workers.
    pub(crate) fn new(peers: usize, id: String, run_id: String) -> Self {
        Progress { peers: peers.max(1), id, run_id, ..Default::default() }
    }

    /// A worker's row of `epoch`; the epoch is reported once every worker's row is in, and
    /// returned then.
    pub(crate) fn add(&self, epoch: u64, row: WorkerProgress) -> Option<EpochProgress> {
        let done = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let rows = pending.entry(epoch).or_default();
            rows.push(row);
            if rows.len() < self.peers {
                return None;
            }
            pending.remove(&epoch).unwrap_or_default()
        };
        let mut workers = done;
        workers.sort_by_key(|w| w.worker);
        let num_input_rows = workers.iter().map(|w| w.input_rows).sum();
        let duration_ms = workers.iter().map(|w| w.duration_ms).max().unwrap_or(0);
        let started = workers.iter().map(|w| w.started_ms).min().unwrap_or(0);
        let since = {
            let mut prev = self.previous_start.lock().unwrap_or_else(|e| e.into_inner());
            let since = prev.map(|p| started - p).filter(|&d| d > 0);
            *prev = Some(started);
            since
        };
        let per_second = |ms: i64| if ms > 0 { num_input_rows as f64 * 1000.0 / ms as f64 } else { 0.0 };
        let mut operators: BTreeMap<String, StateOperatorProgress> = BTreeMap::new();
        let mut sources: BTreeMap<String, u64> = BTreeMap::new();
        for w in &workers {
            for o in &w.operators {
                let e = operators.entry(o.operator_name.clone()).or_default();
                e.operator_name = o.operator_name.clone();
                e.num_rows_total += o.num_rows_total;
                e.memory_used_bytes += o.memory_used_bytes;
                e.num_rows_updated += o.num_rows_updated;
                e.num_rows_removed += o.num_rows_removed;
                e.num_rows_dropped_by_watermark += o.num_rows_dropped_by_watermark;
                e.all_updates_time_ms += o.all_updates_time_ms;
                e.all_removals_time_ms += o.all_removals_time_ms;
                e.commit_time_ms += o.commit_time_ms;
                e.num_state_store_instances += 1;
                for (k, v) in &o.custom_metrics {
                    *e.custom_metrics.entry(k.clone()).or_default() += v;
                }
            }
            for s in &w.sources {
                *sources.entry(s.description.clone()).or_default() += s.num_input_rows;
            }
        }
        let watermark = workers.iter().map(|w| w.watermark).min().unwrap_or(MAX_TIMESTAMP);
        let wal_ms = workers.iter().map(|w| w.wal_commit_ms).max().unwrap_or(0);
        let query = StreamingQueryProgress {
            id: self.id.clone(),
            run_id: self.run_id.clone(),
            name: String::new(),
            timestamp: iso8601(started),
            batch_id: epoch,
            batch_duration: duration_ms,
            num_input_rows,
            input_rows_per_second: since.map_or(0.0, per_second),
            processed_rows_per_second: per_second(duration_ms as i64),
            // A worker's epoch is its WAL commit and the rest (reading, running the plan,
            // committing): the rest is reported as `addBatch`.
            duration_ms: DurationMs {
                wal_commit: wal_ms,
                add_batch: duration_ms.saturating_sub(wal_ms),
                trigger_execution: duration_ms,
                ..DurationMs::default()
            },
            event_time: EventTimeStats {
                max: workers.iter().filter_map(|w| w.max_event_time).max().map(iso8601),
                watermark: iso8601(watermark),
                ..EventTimeStats::default()
            },
            state_operators: operators.into_values().collect(),
            sources: sources
                .into_iter()
                .map(|(description, num_input_rows)| SourceProgress {
                    description,
                    num_input_rows,
                    ..SourceProgress::default()
                })
                .collect(),
            sink: SinkProgress::default(),
            watermarks: BTreeMap::new(),
        };
        let report = EpochProgress {
            query,
            epoch,
            state_rows: workers.iter().map(|w| w.state_rows).sum(),
            state_bytes: workers.iter().map(|w| w.state_bytes).sum(),
            workers,
        };
        for l in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            l(&report);
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.push_back(report.clone());
        while recent.len() > RECENT {
            recent.pop_front();
        }
        Some(report)
    }

    /// The latest epochs reported, oldest first.
    pub(crate) fn recent(&self) -> Vec<EpochProgress> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Calls `listener` with every epoch reported from now on.
    pub(crate) fn listen(&self, listener: Listener) {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(listener);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_is_reported_once_every_worker_is_in() {
        let p = Progress::new(2, "q".into(), "r".into());
        let row =
            |worker, rows| WorkerProgress { worker, input_rows: rows, duration_ms: 3 * rows, ..Default::default() };
        p.add(0, row(1, 5));
        assert!(p.recent().is_empty());
        p.add(1, row(0, 1));
        p.add(0, row(0, 7));
        let r = p.recent();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].epoch, r[0].num_input_rows, r[0].batch_duration), (0, 12, 21));
        assert_eq!(r[0].workers.iter().map(|w| w.worker).collect::<Vec<_>>(), [0, 1]);
    }
}
