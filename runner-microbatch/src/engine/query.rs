//! The handle on a running micro-batch query (Spark's `StreamingQuery`): progress, status,
//! listeners, stop and wait.

use super::Engine;
use crate::progress::StreamingQueryProgress;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::JobMetrics;
use weir_runner_core::plan::PhysicalPlan;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::metrics::MetricResults;
use weir_sdk::runner::{PipelineResult, PipelineState};
use weir_sdk::{PipelineOptions, Result};

use super::reporter::Shared;

/// A running micro-batch query (Spark's `StreamingQuery`): progress, status, stop and wait.
pub struct StreamingQuery {
    result: Box<dyn PipelineResult>,
    shared: Arc<Shared>,
    /// The live page serving this query (`--ui-port`).
    ui: Option<Arc<weir_runner_core::ui::LiveUi>>,
}

/// What the query is doing (Spark's `StreamingQueryStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryStatus {
    /// A readable description.
    pub message: String,
    /// Whether the last trigger found new data.
    pub is_data_available: bool,
    /// Whether a batch is running.
    pub is_trigger_active: bool,
}

impl StreamingQuery {
    pub(crate) fn start(graph: Arc<PipelineGraph>, plan: PhysicalPlan, options: PipelineOptions) -> Result<Self> {
        let shared = Arc::new(Shared {
            recent: Mutex::new(VecDeque::new()),
            listeners: Mutex::new(Vec::new()),
            idle: Mutex::new(0),
            changed: Condvar::new(),
            active: std::sync::atomic::AtomicBool::new(false),
        });
        let metrics = JobMetrics::with_committed();
        let s = shared.clone();
        let active = move || s.active.load(std::sync::atomic::Ordering::Relaxed);
        let (ui, page) = match weir_runner_core::ui::serve(&options, crate::NAME, (&graph, &plan), &metrics, active)? {
            Some((ui, page)) => (Some(ui), Some(page)),
            None => (None, None),
        };
        let (m, s) = (metrics.clone(), shared.clone());
        let opts = options.clone();
        let on_page = page.clone();
        let result = Job::spawn("weir-microbatch", metrics, &opts, move |job| {
            let r = Engine::new(graph, plan, options, m, s.clone()).and_then(|mut engine| {
                let r = super::driver::run(&mut engine, &job);
                engine.finish();
                r
            });
            // Wake anyone waiting in process_all_available.
            *s.idle.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            s.changed.notify_all();
            if let Some(page) = &on_page {
                weir_runner_core::ui::ended(page, &r, job.is_stop_requested());
            }
            r
        })?;
        let query = StreamingQuery { result, shared, ui };
        if let Some(page) = page {
            query.add_listener(move |p| page.push(serde_json::to_value(p).unwrap_or_default()));
        }
        Ok(query)
    }

    /// The address of the live page serving this query, when `--ui-port` was given.
    pub fn ui_address(&self) -> Option<std::net::SocketAddr> {
        self.ui.as_ref().map(|u| u.addr())
    }

    /// The progress of the most recent batch.
    pub fn last_progress(&self) -> Option<StreamingQueryProgress> {
        self.shared.recent.lock().unwrap_or_else(|e| e.into_inner()).back().cloned()
    }

    /// The progress of the most recent batches (up to 100), oldest first.
    pub fn recent_progress(&self) -> Vec<StreamingQueryProgress> {
        self.shared.recent.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Calls `listener` with the progress of every batch from now on.
    pub fn add_listener(&self, listener: impl Fn(&StreamingQueryProgress) + Send + Sync + 'static) {
        self.shared.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(listener));
    }

    /// What the query is doing.
    pub fn status(&self) -> QueryStatus {
        let active = self.shared.active.load(std::sync::atomic::Ordering::SeqCst);
        let state = self.result.state();
        let message = match state {
            PipelineState::Running if active => "Processing new data",
            PipelineState::Running => "Waiting for next trigger",
            _ => "Stopped",
        };
        let is_data_available = self.last_progress().is_some_and(|p| p.num_input_rows > 0);
        QueryStatus { message: message.to_string(), is_data_available, is_trigger_active: active }
    }

    /// Stops the query after the current batch has committed (Spark's `stop`).
    pub fn stop(&self) -> Result<PipelineState> {
        self.result.stop()
    }

    /// Drains the query (Beam's drain): no more reading from unbounded sources, every watermark
    /// to the end, every window and timer fired, the sinks committed, then `Done`.
    pub fn drain(&self) -> Result<PipelineState> {
        self.result.drain()
    }

    /// Waits until the query ends (or `timeout` passes).
    pub fn await_termination(&self, timeout: Option<Duration>) -> Result<PipelineState> {
        self.result.wait_until_finish(timeout)
    }

    /// Blocks until every batch of data available so far has been processed: a trigger found no
    /// new data, or the query ended.
    pub fn process_all_available(&self) -> Result<()> {
        let mut idle = self.shared.idle.lock().unwrap_or_else(|e| e.into_inner());
        let start = *idle;
        while *idle == start && !self.result.state().is_terminal() {
            idle =
                self.shared.changed.wait_timeout(idle, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
        Ok(())
    }
}

impl PipelineResult for StreamingQuery {
    fn state(&self) -> PipelineState {
        self.result.state()
    }
    fn wait_until_finish(&self, timeout: Option<Duration>) -> Result<PipelineState> {
        self.result.wait_until_finish(timeout)
    }
    fn cancel(&self) -> Result<PipelineState> {
        self.result.cancel()
    }
    fn stop(&self) -> Result<PipelineState> {
        self.result.stop()
    }
    fn drain(&self) -> Result<PipelineState> {
        self.result.drain()
    }
    fn metrics(&self) -> MetricResults {
        self.result.metrics()
    }
}
