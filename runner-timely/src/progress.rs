//! What each epoch did, as process 0 reports it: the epoch's input rows and duration across
//! the cluster, with one row per worker (its input rows, how long its share took, and the
//! state its operators hold). Every worker sends its row to worker 0 once the epoch has
//! finished everywhere; an epoch is reported when every worker's row has arrived.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

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
}

/// What one epoch did across the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EpochProgress {
    /// The epoch (the micro-batch id), from 0.
    pub epoch: u64,
    /// Rows all sources read for the epoch.
    pub num_input_rows: u64,
    /// The slowest worker's duration, ms.
    pub duration_ms: u64,
    /// Keys and windows held after the epoch, over every worker.
    pub state_rows: u64,
    /// Bytes of that state.
    pub state_bytes: u64,
    /// One row per worker, by worker index.
    pub workers: Vec<WorkerProgress>,
}

/// Epochs reported and kept for `recent_progress`.
pub(crate) const RECENT: usize = 100;

type Listener = Box<dyn Fn(&EpochProgress) + Send + Sync>;

/// Worker 0's collection of workers' rows, and what it has reported.
#[derive(Default)]
pub(crate) struct Progress {
    peers: usize,
    pending: Mutex<BTreeMap<u64, Vec<WorkerProgress>>>,
    recent: Mutex<VecDeque<EpochProgress>>,
    listeners: Mutex<Vec<Listener>>,
}

impl Progress {
    /// The progress of a cluster of `peers` workers.
    pub(crate) fn new(peers: usize) -> Self {
        Progress { peers: peers.max(1), ..Default::default() }
    }

    /// A worker's row of `epoch`; the epoch is reported once every worker's row is in.
    pub(crate) fn add(&self, epoch: u64, row: WorkerProgress) {
        let done = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let rows = pending.entry(epoch).or_default();
            rows.push(row);
            if rows.len() < self.peers {
                return;
            }
            pending.remove(&epoch).unwrap_or_default()
        };
        let mut workers = done;
        workers.sort_by_key(|w| w.worker);
        let report = EpochProgress {
            epoch,
            num_input_rows: workers.iter().map(|w| w.input_rows).sum(),
            duration_ms: workers.iter().map(|w| w.duration_ms).max().unwrap_or(0),
            state_rows: workers.iter().map(|w| w.state_rows).sum(),
            state_bytes: workers.iter().map(|w| w.state_bytes).sum(),
            workers,
        };
        for l in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            l(&report);
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.push_back(report);
        while recent.len() > RECENT {
            recent.pop_front();
        }
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
        let p = Progress::new(2);
        let row =
            |worker, rows| WorkerProgress { worker, input_rows: rows, duration_ms: 3 * rows, ..Default::default() };
        p.add(0, row(1, 5));
        assert!(p.recent().is_empty());
        p.add(1, row(0, 1));
        p.add(0, row(0, 7));
        let r = p.recent();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].epoch, r[0].num_input_rows, r[0].duration_ms), (0, 12, 21));
        assert_eq!(r[0].workers.iter().map(|w| w.worker).collect::<Vec<_>>(), [0, 1]);
    }
}
