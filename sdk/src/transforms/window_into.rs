//! Window.into and Window.configure: (re)assign windows and set the trigger, lateness and
//! accumulation of a PCollection.

use crate::coders::Element;
use crate::error::UserError;
use crate::graph::Payload;
use crate::kernel::{downcast_batch, AssignKernel, Batch};
use crate::pipeline::{output_boundedness, PCollection, PTransform};
use crate::trigger::{AccumulationMode, ClosingBehavior, OnTimeBehavior, TimestampCombiner, Trigger};
use crate::window_fn::{ElementWindowFn, WindowFn};
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// Windows a PCollection: `Window::into(FixedWindows::of(..)).triggering(..)`. Settings not given
/// are inherited from the input's windowing strategy, as in Beam.
pub struct Window<T> {
    assign: Option<(Arc<dyn WindowFn>, Arc<dyn AssignKernel>)>,
    trigger: Option<Trigger>,
    allowed_lateness_ms: Option<i64>,
    mode: Option<AccumulationMode>,
    timestamp_combiner: Option<TimestampCombiner>,
    closing: Option<ClosingBehavior>,
    on_time: Option<OnTimeBehavior>,
    by_element: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Window<T> {
    /// Assigns every element to the windows of `window_fn`.
    pub fn into<W: WindowFn + Clone>(window_fn: W) -> Self {
        let kernel = Arc::new(AssignKernelImpl::<T, W> { window_fn: window_fn.clone(), _t: PhantomData });
        Window { assign: Some((Arc::new(window_fn), kernel)), ..Self::configure() }
    }
    /// Assigns every element to the windows an [`ElementWindowFn`] derives from the element
    /// itself (Beam's `WindowFn` reading `AssignContext.element()`).
    pub fn into_by_element<W: ElementWindowFn<T>>(window_fn: W) -> Self {
        let kernel = Arc::new(ElementAssignKernel::<T, W> { window_fn: window_fn.clone(), _t: PhantomData });
        Window { assign: Some((Arc::new(window_fn), kernel)), by_element: true, ..Self::configure() }
    }
    /// Keeps the windows and changes only the trigger, lateness or accumulation.
    pub fn configure() -> Self {
        Window {
            assign: None,
            trigger: None,
            allowed_lateness_ms: None,
            mode: None,
            timestamp_combiner: None,
            closing: None,
            on_time: None,
            by_element: false,
            _t: PhantomData,
        }
    }
    /// Sets the trigger.
    pub fn triggering(mut self, trigger: impl Into<Trigger>) -> Self {
        self.trigger = Some(trigger.into());
        self
    }
    /// Sets how late data may arrive after the end of a window before it is dropped.
    pub fn with_allowed_lateness(mut self, d: Duration) -> Self {
        self.allowed_lateness_ms = Some(crate::time::duration_millis(d));
        self
    }
    /// Each pane holds everything so far.
    pub fn accumulating_fired_panes(mut self) -> Self {
        self.mode = Some(AccumulationMode::Accumulating);
        self
    }
    /// Each pane holds what arrived since the previous pane.
    pub fn discarding_fired_panes(mut self) -> Self {
        self.mode = Some(AccumulationMode::Discarding);
        self
    }
    /// Sets how grouped output timestamps are chosen.
    pub fn with_timestamp_combiner(mut self, c: TimestampCombiner) -> Self {
        self.timestamp_combiner = Some(c);
        self
    }
    /// Sets whether an empty on-time pane is emitted.
    pub fn with_on_time_behavior(mut self, b: OnTimeBehavior) -> Self {
        self.on_time = Some(b);
        self
    }
    /// Sets whether an empty final pane is emitted at expiry.
    pub fn with_closing_behavior(mut self, b: ClosingBehavior) -> Self {
        self.closing = Some(b);
        self
    }
}

struct AssignKernelImpl<T, W> {
    window_fn: W,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element, W: WindowFn> AssignKernel for AssignKernelImpl<T, W> {
    fn assign(&self, input: Batch) -> Result<Batch, UserError> {
        assign_all(downcast_batch::<T>(input)?, |wv, windows| {
            self.window_fn.assign_windows(wv.timestamp, &wv.window, windows);
            Ok(())
        })
    }
}

struct ElementAssignKernel<T, W> {
    window_fn: W,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element, W: ElementWindowFn<T>> AssignKernel for ElementAssignKernel<T, W> {
    fn assign(&self, input: Batch) -> Result<Batch, UserError> {
        assign_all(downcast_batch::<T>(input)?, |wv, windows| {
            self.window_fn
                .assign_element_windows(&wv.value, wv.timestamp, &wv.window, windows)
                .map_err(|e| format!("{:?} cannot window an element at {}: {e}", self.window_fn, wv.timestamp).into())
        })
    }
}

/// Puts every element of `input` in the windows `assign` gives it. While each element gets
/// exactly one window (fixed windows, sessions before merging), the window is set in place and
/// `input` is returned as it is; from the first element with another count on, elements are
/// moved to a new batch, once per window.
fn assign_all<T: Clone + Send + 'static>(
    mut input: Vec<WindowedValue<T>>,
    mut assign: impl FnMut(&WindowedValue<T>, &mut Vec<crate::window::Window>) -> Result<(), UserError>,
) -> Result<Batch, UserError> {
    let mut windows = Vec::with_capacity(4);
    let mut done = 0;
    while let Some(wv) = input.get_mut(done) {
        windows.clear();
        assign(wv, &mut windows)?;
        match windows[..] {
            [w] => wv.window = w,
            _ => break,
        }
        done += 1;
    }
    if done == input.len() {
        return Ok(Batch::new(input));
    }
    let n = input.len();
    let rest = input.split_off(done);
    let mut out = input;
    out.reserve_exact(rest.len() * windows.len());
    for (i, wv) in rest.into_iter().enumerate() {
        if i > 0 {
            windows.clear();
            assign(&wv, &mut windows)?;
        }
        push_windowed(&mut out, wv, &windows, n - done - i - 1);
    }
    Ok(Batch::new(out))
}

/// Appends `wv` once per window in `windows` (cloning the value for all but the last). `left`
/// is how many inputs are still to come after this one: when `out` is full, it grows at once to
/// hold them all if each gets as many windows as this one (sliding windows give every element
/// the same number), so a batch of 100k elements in two windows each is not copied again and
/// again as its buffer doubles.
fn push_windowed<T: Clone>(
    out: &mut Vec<WindowedValue<T>>,
    wv: WindowedValue<T>,
    windows: &[crate::window::Window],
    left: usize,
) {
    if out.capacity() - out.len() < windows.len() {
        out.reserve(windows.len() * (left + 1));
    }
    if let Some((last, rest)) = windows.split_last() {
        for w in rest {
            out.push(WindowedValue { value: wv.value.clone(), timestamp: wv.timestamp, window: *w, pane: wv.pane });
        }
        out.push(WindowedValue { value: wv.value, timestamp: wv.timestamp, window: *last, pane: wv.pane });
    }
}

/// Keeps every element as it is (Window.configure changes only the strategy).
struct IdentityKernel;

impl AssignKernel for IdentityKernel {
    fn assign(&self, input: Batch) -> Result<Batch, UserError> {
        Ok(input)
    }
}

impl<T: Element> PTransform<PCollection<T>> for Window<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let p = input.pipeline().clone();
        let step = p.current_step();
        let mut strategy = input.windowing_strategy();
        let kernel: Arc<dyn AssignKernel> = match self.assign {
            Some((window_fn, kernel)) => {
                if window_fn.assigns_by_element() && !self.by_element {
                    p.record_error(
                        &step,
                        format!(
                            "{window_fn:?} assigns windows from the element; apply it with Window::into_by_element"
                        ),
                    );
                }
                strategy.window_fn = window_fn;
                strategy.already_merged = false;
                kernel
            }
            None => Arc::new(IdentityKernel),
        };
        if let Some(t) = &self.trigger {
            if self.allowed_lateness_ms.is_none() && !strategy.is_global() {
                p.record_error(
                    &step,
                    "Except when using GlobalWindows, calling .triggering() to specify a trigger requires that \
                     the allowed lateness be specified using .with_allowed_lateness() to set the upper bound on \
                     how late data can arrive before being dropped.",
                );
            }
            if self.mode.is_none() {
                p.record_error(
                    &step,
                    "Calling .triggering() to specify a trigger requires that the accumulation mode be specified \
                     using .discarding_fired_panes() or .accumulating_fired_panes()",
                );
            }
            strategy.trigger = t.clone();
        }
        if let Some(l) = self.allowed_lateness_ms {
            strategy.allowed_lateness_ms = l.max(0);
        }
        if let Some(m) = self.mode {
            strategy.accumulation_mode = m;
        }
        if let Some(c) = self.timestamp_combiner {
            strategy.timestamp_combiner = c;
        }
        if let Some(c) = self.closing {
            strategy.closing_behavior = c;
        }
        if let Some(o) = self.on_time {
            strategy.on_time_behavior = o;
        }
        let node = p.make_primitive(crate::urns::WINDOW_INTO, Payload::WindowInto(kernel));
        let b = output_boundedness(&p, &[input.id()]);
        p.new_output(node, "out", b, strategy)
    }
}
