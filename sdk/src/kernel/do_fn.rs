//! DoFn erasure: a DoFn as a runner calls it, on whole batches, without its types.

use super::*;
use crate::batch::Batch;
use crate::error::UserError;
use crate::window::Window;
use std::sync::Arc;

/// A DoFn instance as a runner drives it. Built by [`crate::transforms::par_do`] for a typed
/// [`crate::DoFn`]. `outputs` holds one batch per declared output tag, main output first.
pub trait ErasedDoFn: Send {
    /// `DoFn::setup`.
    fn setup(&mut self) -> Result<(), UserError>;
    /// `DoFn::start_bundle`.
    fn start_bundle(&mut self) -> Result<(), UserError>;
    /// Processes every element of `input`, appending to `outputs`; side inputs are read through
    /// `sides`.
    fn process_batch(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
    ) -> Result<(), UserError>;
    /// Processes every element of a keyed `input` with the state of its key and window from
    /// `env` (stateful ParDos).
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
        env: &mut dyn KeyedStateEnv,
    ) -> Result<(), UserError>;
    /// Calls `DoFn::on_timer` (`firing` given) or `DoFn::on_window_expiration` (`None`) for the
    /// key and window with their state, and the side inputs of the window in `sides`.
    #[allow(clippy::too_many_arguments)]
    fn on_timer(
        &mut self,
        key: &[u8],
        window: Window,
        firing: Option<&crate::state::TimerFiring>,
        outputs: &mut [Batch],
        state: &mut crate::state::KeyedState,
        time: crate::state::StateTime,
        sides: &dyn SideInputReader,
    ) -> Result<(), UserError>;
    /// `DoFn::finish_bundle`, appending to `outputs`.
    fn finish_bundle(&mut self, outputs: &mut [Batch]) -> Result<(), UserError>;
    /// `DoFn::teardown`.
    fn teardown(&mut self) -> Result<(), UserError>;
    /// Whether the runner may fire many timers in one call ([`ErasedDoFn::on_timers`]): a DoFn
    /// whose callbacks run elsewhere, a bundle at a time (a portable harness's).
    fn fires_timers_together(&self) -> bool {
        false
    }
    /// Fires `firings` (at most one per key and window, each already taken from its state)
    /// with the state of their keys and windows from `env`; only called when
    /// [`ErasedDoFn::fires_timers_together`] says so.
    fn on_timers(
        &mut self,
        firings: Vec<(Vec<u8>, Window, crate::state::TimerFiring)>,
        _outputs: &mut [Batch],
        _env: &mut dyn KeyedStateEnv,
        _sides: &dyn SideInputReader,
    ) -> Result<(), UserError> {
        Err(format!("{} timers fired together, which this DoFn cannot take", firings.len()).into())
    }
    /// The runner has durably committed everything this instance output so far: work that
    /// waited for that runs (a portable harness's bundle finalization). Only for a ParDo
    /// declared to finalize after commit; errors are the instance's to report.
    fn on_committed(&mut self) {}
    /// For runners that commit an epoch after running it (timely): what the instance output so
    /// far belongs to `epoch`.
    fn seal(&mut self, _epoch: u64) {}
    /// Every epoch before `epoch` is durably committed: work sealed with those epochs runs.
    fn on_committed_through(&mut self, _epoch: u64) {}
}

/// Makes fresh [`ErasedDoFn`] instances (one per worker, or a new one after a failure).
pub type DoFnFactory = Arc<dyn Fn() -> Box<dyn ErasedDoFn> + Send + Sync>;
