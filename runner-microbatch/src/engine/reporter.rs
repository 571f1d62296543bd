//! The reporter: what a query tells the world as batches run. Its progress reports (kept for
//! `recent_progress`, handed to listeners), its idle and active state for the query handle, and
//! the job's metrics, under the query's id and this run's.

use crate::progress::StreamingQueryProgress;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use weir_runner_core::metrics::JobMetrics;

type Listener = Box<dyn Fn(&StreamingQueryProgress) + Send + Sync>;

/// State shared between the engine thread and the query handle.
pub(crate) struct Shared {
    pub(super) recent: Mutex<VecDeque<StreamingQueryProgress>>,
    pub(super) listeners: Mutex<Vec<Listener>>,
    /// Incremented whenever a trigger found no new data; with `changed`, for
    /// `process_all_available`.
    pub(super) idle: Mutex<u64>,
    pub(super) changed: Condvar,
    pub(super) active: std::sync::atomic::AtomicBool,
}

/// Progress reports kept for `recent_progress`.
pub(super) const RECENT: usize = 100;

/// The reporter's own state.
pub(super) struct Reporter {
    pub(super) metrics: Arc<JobMetrics>,
    pub(super) shared: Arc<Shared>,
    /// The query's id: a checkpoint's, across restarts.
    pub(super) id: String,
    /// This run's id.
    pub(super) run_id: String,
}

impl Reporter {
    pub(super) fn new(metrics: Arc<JobMetrics>, shared: Arc<Shared>) -> Reporter {
        Reporter { metrics, shared, id: random_id(), run_id: random_id() }
    }
}

/// A random id in the form of a UUID, as Spark's query and run ids are.
pub(super) fn random_id() -> String {
    let a: u128 = rand::random();
    let h = format!("{a:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}
