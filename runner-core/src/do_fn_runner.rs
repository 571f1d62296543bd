//! Drives a DoFn instance through its lifecycle, turning errors and panics into step errors.

use crate::metrics::MetricsContainerImpl;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use weir_sdk::graph::{ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{Batch, CollectionOps, ErasedDoFn, SideInputReader};
use weir_sdk::metrics::scoped_container;
use weir_sdk::panic::panic_message;
use weir_sdk::{Error, Result, UserError};

/// Runs `f`, turning an error or a panic into an [`Error::Execution`] of `step` that says which
/// lifecycle method failed.
pub fn guarded<T>(step: &str, method: &str, f: impl FnOnce() -> Result<T, UserError>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::execution(step, format!("{method} failed: {e}"))),
        Err(p) => Err(Error::execution(step, format!("{method} panicked: {}", panic_message(&*p)))),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifecycle {
    New,
    SetUp,
    TornDown,
}

/// One DoFn instance of a ParDo step with its lifecycle: `setup` once, bundles, `teardown`
/// once (also after a failure, best effort).
pub struct DoFnRunner {
    step: String,
    instance: Box<dyn ErasedDoFn>,
    outputs: Vec<Arc<dyn CollectionOps>>,
    /// Elements each additional output got in the last bundle: the room its buffer starts with
    /// in the next (the main output's room is the DoFn kernel's to size).
    last_sizes: Vec<usize>,
    state: Lifecycle,
}

impl DoFnRunner {
    /// A fresh instance of the ParDo `node`.
    pub fn new(node: &TransformNode, payload: &ParDoPayload, graph: &PipelineGraph) -> Self {
        DoFnRunner {
            step: node.full_name.clone(),
            instance: (payload.factory)(),
            outputs: node.outputs.iter().map(|&o| graph.pcollection(o).ops.clone()).collect(),
            last_sizes: vec![0; node.outputs.len()],
            state: Lifecycle::New,
        }
    }

    /// The instance's output so far is durably committed ([`ErasedDoFn::on_committed`]).
    pub fn on_committed(&mut self) {
        self.instance.on_committed();
    }

    /// What the instance output so far belongs to `epoch` ([`ErasedDoFn::seal`]).
    pub fn seal(&mut self, epoch: u64) {
        self.instance.seal(epoch);
    }

    /// Every epoch before `epoch` is committed ([`ErasedDoFn::on_committed_through`]).
    pub fn on_committed_through(&mut self, epoch: u64) {
        self.instance.on_committed_through(epoch);
    }

    /// One empty batch per output (the result of a bundle with nothing to process).
    pub fn empty_outputs(&self) -> Vec<Batch> {
        self.outputs.iter().map(|o| o.empty()).collect()
    }

    /// The step name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Processes one bundle: `start_bundle`, every element of every input batch,
    /// `finish_bundle`. Returns one batch per output, main output first. On failure the bundle's
    /// outputs are discarded, the instance is torn down, and the error names the step.
    ///
    /// User code runs with `metrics` bound as the current metrics container.
    pub fn process_bundle(
        &mut self,
        inputs: Vec<Batch>,
        sides: &dyn SideInputReader,
        metrics: &Arc<MetricsContainerImpl>,
    ) -> Result<Vec<Batch>> {
        self.bundle(metrics, |step, instance, outputs| {
            for input in inputs {
                guarded(step, "process", || instance.process_batch(input, outputs, sides))?;
            }
            Ok(())
        })
    }

    /// Runs `body` between `start_bundle` and `finish_bundle` of this instance (setting it up
    /// first if needed). `body` gets the step name, the instance and the output buffers, and
    /// calls user code through [`guarded`].
    pub fn bundle(
        &mut self,
        metrics: &Arc<MetricsContainerImpl>,
        body: impl FnOnce(&str, &mut dyn ErasedDoFn, &mut [Batch]) -> Result<()>,
    ) -> Result<Vec<Batch>> {
        let _scope = scoped_container(metrics.clone());
        let result = self.try_bundle(body);
        if result.is_err() {
            self.teardown();
        }
        result
    }

    fn try_bundle(
        &mut self,
        body: impl FnOnce(&str, &mut dyn ErasedDoFn, &mut [Batch]) -> Result<()>,
    ) -> Result<Vec<Batch>> {
        if self.state == Lifecycle::TornDown {
            return Err(Error::Internal {
                component: "DoFnRunner".into(),
                message: format!("{} used after teardown", self.step),
            });
        }
        let step = self.step.clone();
        if self.state == Lifecycle::New {
            // Teardown is owed even when setup fails part-way (Beam's ParDoLifecycleTest).
            self.state = Lifecycle::SetUp;
            guarded(&step, "setup", || self.instance.setup())?;
        }
        let mut outputs: Vec<Batch> = self
            .outputs
            .iter()
            .zip(&self.last_sizes)
            .enumerate()
            .map(|(i, (o, &n))| if i == 0 || n == 0 { o.empty() } else { o.empty_with_capacity(n) })
            .collect();
        guarded(&step, "start_bundle", || self.instance.start_bundle())?;
        body(&step, self.instance.as_mut(), &mut outputs)?;
        guarded(&step, "finish_bundle", || self.instance.finish_bundle(&mut outputs))?;
        for (size, b) in self.last_sizes.iter_mut().zip(&outputs).skip(1) {
            *size = b.len();
        }
        Ok(outputs)
    }

    /// Calls `teardown` once, if `setup` ran. Errors are logged: teardown is best effort.
    pub fn teardown(&mut self) {
        if self.state == Lifecycle::SetUp {
            let step = self.step.clone();
            if let Err(e) = guarded(&step, "teardown", || self.instance.teardown()) {
                tracing::warn!(step = %step, error = %e, "DoFn teardown failed");
            }
        }
        self.state = Lifecycle::TornDown;
    }
}

impl Drop for DoFnRunner {
    fn drop(&mut self) {
        self.teardown();
    }
}
