//! The MetricsPusher: pushes a job's cumulative metrics to the configured sinks, each on a
//! thread of its own — at once, then every period, and a final time when the job reaches a
//! terminal state — so a slow or failing sink never slows or fails the pipeline, nor delays the
//! other sinks. A failed push is logged with the sink's name and retried at the next tick.
//!
//! The end of a pipeline waits for the final pushes, but no longer than the push timeout: a
//! receiver that accepts connections and never answers cannot hold the job's exit hostage. A
//! sink still pushing then is left behind, with a warning.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_sdk::metrics::{MetricsSink, MetricsSource};

/// A running pusher; [`MetricsPusher::join`] waits for its final pushes.
pub struct MetricsPusher {
    /// Per sink: its name, and a channel that closes when its final push is done.
    sinks: Vec<(String, mpsc::Receiver<()>)>,
    timeout: Duration,
}

fn push(sink: &mut dyn MetricsSink, source: &dyn MetricsSource) {
    let results = source.snapshot();
    if results.is_empty() {
        return;
    }
    match catch_unwind(AssertUnwindSafe(|| sink.write(&results))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(sink = %sink.name(), error = %e, "metrics push failed; retrying at the next tick"),
        Err(p) => tracing::warn!(
            sink = %sink.name(),
            error = %weir_sdk::panic::panic_message(&*p),
            "metrics sink panicked; retrying at the next tick"
        ),
    }
}

/// What a pusher watches: whether its job has ended, waiting at most `period` to see.
pub trait Watched: Send + Sync {
    /// Whether the job ended within `period`.
    fn wait_for_terminal(&self, period: Duration) -> bool;
}

impl MetricsPusher {
    /// Starts pushing `source` to each of `sinks` every `period` while `job` runs; `None`
    /// without sinks. `timeout` bounds how long [`MetricsPusher::join`] waits for the final
    /// pushes.
    pub fn start(
        sinks: Vec<Box<dyn MetricsSink>>,
        period: Duration,
        timeout: Duration,
        source: Arc<dyn MetricsSource>,
        job: Arc<dyn Watched>,
    ) -> Option<Self> {
        if sinks.is_empty() {
            return None;
        }
        let period = period.max(Duration::from_millis(10));
        let mut done = Vec::new();
        for mut sink in sinks {
            let name = sink.name().to_string();
            let (tx, rx) = mpsc::channel::<()>();
            let (source, job) = (source.clone(), job.clone());
            let spawned = std::thread::Builder::new().name(format!("MetricsPusher-{name}")).spawn(move || {
                // Dropping `tx` at the end tells `join` this sink is done.
                let _done = tx;
                loop {
                    push(&mut *sink, &*source);
                    if job.wait_for_terminal(period) {
                        // The final push, with the values the job ended with.
                        push(&mut *sink, &*source);
                        return;
                    }
                }
            });
            match spawned {
                Ok(_) => done.push((name, rx)),
                Err(e) => tracing::warn!(sink = %name, error = %e, "cannot start the metrics pusher; no pushes"),
            }
        }
        Some(MetricsPusher { sinks: done, timeout })
    }

    /// Waits until every sink's final push is done, or the timeout has passed since the call.
    pub fn join(self) {
        let deadline = Instant::now() + self.timeout;
        for (name, rx) in self.sinks {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(left) {
                tracing::warn!(
                    sink = %name,
                    timeout_ms = self.timeout.as_millis() as u64,
                    "the final metrics push did not finish in time (--metrics-push-timeout-ms); not waiting for it"
                );
            }
        }
    }
}
