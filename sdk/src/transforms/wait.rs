//! Wait.on: holds a collection until the windows of signal collections are done.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kernel::SideInputSpec;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::combine::Combine;
use crate::transforms::distinct::UnitFn;
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use crate::transforms::view::View;
use crate::transforms::window_into::Window;
use crate::trigger::Never;
use std::marker::PhantomData;

/// Beam's `Wait.on(signals)`: passes its input on unchanged, but each element only once every
/// signal's window that the element's window maps to is done (the signal's watermark passed
/// its end plus allowed lateness), as a side input's window is mapped. Use it to start work
/// only after something else finished, such as writing to a database before reading it back.
///
/// In the global window of a bounded signal, the elements wait until the whole signal is done.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::transforms::wait::Wait;
/// let p = Pipeline::create();
/// let written = p.apply("Write", Create::of(vec![1i64, 2]));
/// let queries = p.apply("Queries", Create::of(vec!["q".to_string()]));
/// let after: PCollection<String> = queries.apply("AfterWrite", Wait::on(&written));
/// assert!(p.validate().is_ok());
/// ```
pub struct Wait;

impl Wait {
    /// Waits for `signal`; add more signals with [`WaitOn::and`].
    pub fn on<S: Element, T: Element>(signal: &PCollection<S>) -> WaitOn<T> {
        WaitOn { signals: Vec::new(), _t: PhantomData }.and(signal)
    }
}

/// Builds a signal's view, named by the given prefix, when the wait is applied (so its steps
/// are the wait's).
type Signal = Box<dyn FnOnce(&str) -> SideInputSpec>;

/// See [`Wait::on`].
pub struct WaitOn<T> {
    signals: Vec<Signal>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> WaitOn<T> {
    /// Waits for `signal` too.
    pub fn and<S: Element>(mut self, signal: &PCollection<S>) -> Self {
        let signal = signal.clone();
        self.signals.push(Box::new(move |name: &str| done_view(&signal, name)));
        self
    }
}

/// A view of `signal` whose windows become ready only when they are done: the signal's windows
/// never fire early (Beam's `Never` trigger: one pane, when the window expires), combined to at
/// most one element per window.
fn done_view<S: Element>(signal: &PCollection<S>, name: &str) -> SideInputSpec {
    // The signal's allowed lateness stays as it is: its windows are done when they expire.
    let lateness = std::time::Duration::from_millis(signal.windowing_strategy().allowed_lateness_ms.max(0) as u64);
    let never =
        Window::<S>::configure().triggering(Never::ever()).with_allowed_lateness(lateness).discarding_fired_panes();
    let done = signal
        .apply(&format!("{name}/Never"), never)
        .apply(&format!("{name}/Unit"), Map::new(|_: S| ()))
        .apply(&format!("{name}/Once"), Combine::globally(UnitFn).without_defaults());
    let mut spec = View::as_iterable(&done).spec().clone();
    // An empty signal window is done too only once late data can no longer arrive.
    spec.ready_after_ms = lateness.as_millis() as i64;
    spec
}

/// Passes elements on; declaring the signals' views as side inputs makes each wait for them.
struct PassThrough<T>(PhantomData<fn(T)>);

impl<T> Clone for PassThrough<T> {
    fn clone(&self) -> Self {
        PassThrough(PhantomData)
    }
}

impl<T: Element> DoFn for PassThrough<T> {
    type In = T;
    type Out = T;
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        ctx.output(e);
        Ok(())
    }
}

impl<T: Element> PTransform<PCollection<T>> for WaitOn<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let views = self.signals.into_iter().enumerate().map(|(i, view)| view(&format!("ToWaitView{i}"))).collect();
        input.apply("Wait", ParDo::of(PassThrough(PhantomData)).with_side_inputs(views))
    }
}
