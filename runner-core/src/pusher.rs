//! The MetricsPusher (spec §4, DESIGN D9): pushes a job's cumulative metrics to the configured
//! sinks on its own thread — at once, then every period, and a final time when the job reaches a
//! terminal state — so a slow or failing sink never slows or fails the pipeline. A failed push
//! is logged with the sink's name and retried at the next tick.

use crate::job::Job;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_sdk::metrics::{MetricsSink, MetricsSource};

/// A running pusher; join it to wait for its final push.
pub struct MetricsPusher {
    thread: JoinHandle<()>,
}

fn push(sinks: &mut [Box<dyn MetricsSink>], source: &dyn MetricsSource) {
    let results = source.snapshot();
    if results.is_empty() {
        return;
    }
    for sink in sinks.iter_mut() {
        let name = sink.name().to_string();
        match catch_unwind(AssertUnwindSafe(|| sink.write(&results))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(sink = %name, error = %e, "metrics push failed; retrying at the next tick"),
            Err(p) => tracing::warn!(
                sink = %name,
                error = %crate::do_fn_runner::panic_message(&*p),
                "metrics sink panicked; retrying at the next tick"
            ),
        }
    }
}

impl MetricsPusher {
    /// Starts pushing `source` to `sinks` every `period` while `job` runs; `None` without sinks.
    pub fn start(
        mut sinks: Vec<Box<dyn MetricsSink>>,
        period: Duration,
        source: Arc<dyn MetricsSource>,
        job: Arc<Job>,
    ) -> Option<Self> {
        if sinks.is_empty() {
            return None;
        }
        let period = period.max(Duration::from_millis(10));
        let thread = std::thread::Builder::new()
            .name("MetricsPusher-thread".into())
            .spawn(move || loop {
                push(&mut sinks, &*source);
                if job.wait_for_terminal(period) {
                    // The final push, with the values the job ended with.
                    push(&mut sinks, &*source);
                    return;
                }
            })
            .ok()?;
        Some(MetricsPusher { thread })
    }

    /// Waits until the final push is done.
    pub fn join(self) {
        // The pusher catches sink panics; a panic here would be a bug in the pusher itself.
        let _ = self.thread.join();
    }
}
