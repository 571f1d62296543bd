//! Side inputs and keyed state as an erased DoFn sees them: the reader of side input views, the
//! view kernels that build them, and the keyed state environment.

use crate::batch::Batch;
use crate::error::UserError;
use crate::window::Window;
use std::any::Any;
use std::sync::Arc;

/// Gives a stateful DoFn the state of each element's key and window (implemented by
/// runner-core).
pub trait KeyedStateEnv {
    /// The state of `key` in `window` (created empty if absent) and the time context.
    fn state(&mut self, key: &[u8], window: &Window) -> (&mut crate::state::KeyedState, crate::state::StateTime);
}

/// Reads materialized side inputs for a DoFn (implemented by runner-core).
pub trait SideInputReader {
    /// The value of view `view_id` for a main-input element in `main_window`: the view built
    /// from the side input's elements in the mapped side window.
    fn get(&self, view_id: &str, main_window: &Window) -> Result<Arc<dyn Any + Send + Sync>, UserError>;
}

/// A [`SideInputReader`] for DoFns without side inputs.
pub struct NoSideInputs;

impl SideInputReader for NoSideInputs {
    fn get(&self, view_id: &str, _: &Window) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        Err(format!("side input '{view_id}' was not declared with ParDo::with_side_inputs").into())
    }
}

/// Builds a view's value from the elements of one side window (typed by the SDK).
pub trait ViewKernel: Send + Sync {
    /// The view of `elements` (all the side input's elements in one window; possibly none).
    fn build(&self, elements: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError>;
}

/// A side input of a ParDo.
#[derive(Clone)]
pub struct SideInputSpec {
    /// The view's id.
    pub view_id: String,
    /// The side input PCollection.
    pub pcollection: usize,
    /// Builds the view value.
    pub kernel: Arc<dyn ViewKernel>,
    /// Maps main-input windows to side-input windows.
    pub window_fn: Arc<dyn crate::window_fn::WindowFn>,
    /// How long after a side window's end its watermark must pass before the window is ready
    /// with no pane fired, ms: 0 for a view (a window is ready at its end), the signal's
    /// allowed lateness for `Wait.on` (a signal window is done only once late data can no
    /// longer arrive).
    pub ready_after_ms: i64,
    /// Whether the side input reads as Beam's portable runners (Prism, and Beam Python's own)
    /// read one, for a pipeline submitted through Beam's portability API: a main-input window
    /// also waits for the side input's watermark to reach the window's start, whatever panes
    /// fired, and sees the elements of every pane fired so far. Weir's own pipelines (`false`)
    /// see a side window at its first pane, and then its latest pane, as Beam's Java runners do.
    pub portable_semantics: bool,
}
