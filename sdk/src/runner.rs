//! The `Runner` trait, the registry runners are picked from, and `PipelineResult`.

use crate::error::{Error, Result};
use crate::graph::PipelineGraph;
use crate::options::PipelineOptions;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

/// Executes pipelines. A runner is a crate implementing this trait and registering itself with
/// [`register_runner`]; the SDK knows no runner.
pub trait Runner: Send + Sync {
    /// The name `--runner` selects it by.
    fn name(&self) -> &'static str;
    /// Translates and starts `graph`. Translation errors (an unsupported transform) are returned
    /// here, before anything runs; execution errors through the result.
    fn run(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<Box<dyn PipelineResult>>;
    /// The plan `graph` would run with on this runner, as text for people (`--explain`):
    /// translation errors are returned as [`Runner::run`] would return them.
    fn explain(&self, graph: &PipelineGraph, options: &PipelineOptions) -> Result<String>;
}

/// The state of a pipeline run (Beam's `PipelineResult.State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipelineState {
    /// Running.
    Running,
    /// Finished successfully.
    Done,
    /// Failed.
    Failed,
    /// Cancelled by the user.
    Cancelled,
}

impl PipelineState {
    /// Whether the run is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, PipelineState::Running)
    }
}

/// A handle on a running or finished pipeline.
pub trait PipelineResult: Send + Sync {
    /// The current state.
    fn state(&self) -> PipelineState;
    /// Waits until the pipeline ends or `timeout` passes, and returns the state then. A failed
    /// pipeline returns its error, naming the step that failed.
    fn wait_until_finish(&self, timeout: Option<Duration>) -> Result<PipelineState>;
    /// Asks the pipeline to stop at once, abandoning the work in progress (a streaming runner
    /// with a checkpoint redoes it on restart); returns the state after the request.
    fn cancel(&self) -> Result<PipelineState>;
    /// Asks the pipeline to stop gracefully: the work in progress is finished and committed
    /// first (on the micro-batch runner, the current batch), then the pipeline ends as
    /// [`PipelineState::Cancelled`]. A restart from the same checkpoint goes on exactly once.
    /// Runners without a unit of work to finish stop as [`PipelineResult::cancel`] does.
    fn stop(&self) -> Result<PipelineState> {
        self.cancel()
    }
    /// Drains the pipeline, as Beam's drain: it stops reading its unbounded sources (bounded
    /// ones are read to their end), every watermark advances to the end of time, every
    /// remaining window fires and every timer with it, the sinks finish, and the pipeline ends
    /// as [`PipelineState::Done`]. Unlike [`PipelineResult::cancel`] and
    /// [`PipelineResult::stop`], nothing buffered is left behind; a checkpointed source stays
    /// drained on a restart. Returns the state after the request (a batch pipeline simply
    /// finishes).
    fn drain(&self) -> Result<PipelineState>;
    /// The pipeline's metrics: attempted and committed values per step, live while it runs.
    fn metrics(&self) -> crate::metrics::MetricResults;
}

fn registry() -> &'static RwLock<BTreeMap<String, Arc<dyn Runner>>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<String, Arc<dyn Runner>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| RwLock::new(BTreeMap::new()))
}

/// Makes `runner` selectable by its name. Registering a name again replaces the runner.
pub fn register_runner(runner: Arc<dyn Runner>) {
    registry().write().unwrap_or_else(|e| e.into_inner()).insert(runner.name().to_string(), runner);
}

/// The names of the registered runners.
pub fn runner_names() -> Vec<String> {
    registry().read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
}

/// The runner registered as `name`, or an error listing the registered ones.
pub fn find_runner(name: &str) -> Result<Arc<dyn Runner>> {
    let reg = registry().read().unwrap_or_else(|e| e.into_inner());
    reg.get(name).cloned().ok_or_else(|| Error::UnknownRunner {
        name: name.to_string(),
        valid: if reg.is_empty() {
            "(none registered)".to_string()
        } else {
            reg.keys().cloned().collect::<Vec<_>>().join(", ")
        },
    })
}
