//! The job handle behind every runner's `PipelineResult`: state, failure, cancellation, waiting.

use crate::metrics::JobMetrics;
use crate::pusher::{MetricsPusher, Watched};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weir_sdk::metrics::MetricResults;
use weir_sdk::runner::{PipelineResult, PipelineState};
use weir_sdk::{Error, Result};

#[derive(Debug)]
struct Status {
    state: PipelineState,
    error: Option<Error>,
}

/// Shared between a running job and its [`PipelineResult`].
#[derive(Debug)]
pub struct Job {
    status: Mutex<Status>,
    changed: Condvar,
    cancel: AtomicBool,
    stop: AtomicBool,
    drain: AtomicBool,
}

impl Job {
    /// A running job.
    pub fn new() -> Arc<Self> {
        Arc::new(Job {
            status: Mutex::new(Status { state: PipelineState::Running, error: None }),
            changed: Condvar::new(),
            cancel: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            drain: AtomicBool::new(false),
        })
    }

    /// Whether cancellation was requested; long-running work checks it between bundles.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Whether a graceful stop was requested: work stops at its next commit point. Cancellation
    /// implies it.
    pub fn is_stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.is_cancelled()
    }

    /// Whether a drain was requested (Beam's drain): runners stop reading their unbounded
    /// sources, which then report the end of time, so every window and timer fires, the sinks
    /// finish, and the job ends as [`PipelineState::Done`].
    pub fn is_drain_requested(&self) -> bool {
        self.drain.load(Ordering::SeqCst)
    }

    /// Requests a drain ([`Job::is_drain_requested`]).
    pub fn request_drain(&self) {
        self.drain.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Waits up to `timeout`, returning early when a stop, a cancellation or a drain is
    /// requested; returns whether a stop or cancellation was.
    pub fn sleep_unless_stopped(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_stop_requested() {
                return true;
            }
            if self.is_drain_requested() {
                // A drain cuts long waits short (the sources have nothing more to wait for), but
                // still paces a loop that waits for the last windows to fire.
                let rest = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(10));
                std::thread::sleep(rest);
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let s = self.status.lock().unwrap_or_else(|e| e.into_inner());
            let step = (deadline - now).min(Duration::from_millis(20));
            drop(self.changed.wait_timeout(s, step).unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Waits up to `timeout` for a terminal state; returns whether the job has ended.
    pub fn wait_for_terminal(&self, timeout: Duration) -> bool {
        let s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if s.state.is_terminal() {
            return true;
        }
        let (s, _) =
            self.changed.wait_timeout_while(s, timeout, |s| !s.state.is_terminal()).unwrap_or_else(|e| e.into_inner());
        s.state.is_terminal()
    }

    /// Records the job's outcome. The first terminal state wins.
    pub fn finish(&self, outcome: Result<()>) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if s.state.is_terminal() {
            return;
        }
        match outcome {
            Ok(()) => s.state = PipelineState::Done,
            Err(Error::Cancelled) => s.state = PipelineState::Cancelled,
            Err(e) => {
                tracing::error!(error = %e, "pipeline failed");
                s.state = PipelineState::Failed;
                s.error = Some(e);
            }
        }
        self.changed.notify_all();
    }

    /// Runs `work` on a new thread and returns the result handle. A panic that escapes `work`
    /// fails the job instead of being lost.
    pub fn spawn(
        name: &str,
        metrics: Arc<JobMetrics>,
        options: &weir_sdk::PipelineOptions,
        work: impl FnOnce(Arc<Job>) -> Result<()> + Send + 'static,
    ) -> Result<Box<dyn PipelineResult>> {
        let sinks = weir_sdk::metrics::configured_sinks(options)?;
        let job = Job::new();
        let pusher = MetricsPusher::start(
            sinks,
            Duration::from_secs(options.metrics.push_period_secs),
            Duration::from_millis(options.metrics.push_timeout_ms),
            metrics.clone(),
            job.clone(),
        );
        let j = job.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(j.clone())));
                j.finish(match outcome {
                    Ok(r) => r,
                    Err(p) => {
                        Err(Error::Internal { component: "job".into(), message: weir_sdk::panic::panic_message(&*p) })
                    }
                });
            })
            .map_err(|e| Error::Internal { component: "job".into(), message: format!("cannot start thread: {e}") })?;
        Ok(Box::new(JobResult { job, metrics, thread: Mutex::new(Some(thread)), pusher: Mutex::new(pusher) }))
    }
}

/// The [`PipelineResult`] of a job run by [`Job::spawn`].
pub struct JobResult {
    job: Arc<Job>,
    metrics: Arc<JobMetrics>,
    pusher: Mutex<Option<MetricsPusher>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl PipelineResult for JobResult {
    fn state(&self) -> PipelineState {
        self.job.status.lock().unwrap_or_else(|e| e.into_inner()).state
    }

    fn wait_until_finish(&self, timeout: Option<Duration>) -> Result<PipelineState> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.job.status.lock().unwrap_or_else(|e| e.into_inner());
        while !s.state.is_terminal() {
            match deadline {
                None => s = self.job.changed.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(s.state);
                    }
                    s = self.job.changed.wait_timeout(s, d - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
        let (state, error) = (s.state, s.error.clone());
        drop(s);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // The thread has recorded a terminal state and is about to exit.
            let _ = t.join();
        }
        if let Some(p) = self.pusher.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // The final push happens before waiting returns.
            p.join();
        }
        match error {
            Some(e) => Err(e),
            None => Ok(state),
        }
    }

    fn cancel(&self) -> Result<PipelineState> {
        self.job.cancel.store(true, Ordering::SeqCst);
        self.job.changed.notify_all();
        Ok(self.state())
    }

    fn stop(&self) -> Result<PipelineState> {
        self.job.stop.store(true, Ordering::SeqCst);
        self.job.changed.notify_all();
        Ok(self.state())
    }

    fn drain(&self) -> Result<PipelineState> {
        self.job.request_drain();
        Ok(self.state())
    }

    fn metrics(&self) -> MetricResults {
        MetricResults::new(self.metrics.clone())
    }
}

impl Watched for Job {
    fn wait_for_terminal(&self, period: Duration) -> bool {
        Job::wait_for_terminal(self, period)
    }
}
