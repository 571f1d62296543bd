//! `DoFn`: user code run once per element, with Beam's lifecycle.

use crate::coders::Element;
use crate::error::{UserError, UserResult};
use crate::kernel::{Batch, ErasedDoFn, KeyedStateEnv, SideInputReader, UniformBatch};
use crate::pane::PaneInfo;
use crate::state::{KeyedState, StateAccess, StateScope, StateTime};
use crate::time::Timestamp;
use crate::time::MIN_TIMESTAMP;
use crate::view::{PCollectionView, ViewValue};
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;

/// Per-element user code with Beam's lifecycle.
///
/// Per instance the runner calls `setup` once, then any number of bundles
/// (`start_bundle`, `process`*, `finish_bundle`), then `teardown` (best effort, also after a
/// failure). An instance processes one bundle at a time; runners make instances by cloning the
/// DoFn given to [`crate::ParDo::of`]. A method that returns an error or panics fails its bundle,
/// and the runner fails the pipeline with the step name and the message.
///
/// Each `process` call sees one element in one window: an element in several windows is
/// processed once per window.
pub trait DoFn: Clone + Send + 'static {
    /// Input element type.
    type In: Element;
    /// Main output element type.
    type Out: Element;

    /// Called once per instance before any bundle.
    fn setup(&mut self) -> UserResult {
        Ok(())
    }
    /// Called at the start of every bundle.
    fn start_bundle(&mut self) -> UserResult {
        Ok(())
    }
    /// Called for every element.
    fn process(&mut self, element: Self::In, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult;
    /// A whole-bundle form of [`DoFn::process`] for values that share one timestamp, window and
    /// pane, each output with that metadata: drains `input` into `out` and returns `Some`, or
    /// returns `None` (the default) with `input` untouched, and `process` is called per element.
    /// Map, FlatMap, TryMap and Filter implement it as tight loops over their closures.
    #[doc(hidden)]
    fn process_values(&mut self, _input: &mut Vec<Self::In>, _out: &mut Vec<Self::Out>) -> Option<UserResult> {
        None
    }
    /// Called at the end of every bundle; outputs need an explicit timestamp and window.
    fn finish_bundle(&mut self, _ctx: &mut FinishBundleContext<'_, Self::Out>) -> UserResult {
        Ok(())
    }
    /// Called once when the instance is discarded.
    fn teardown(&mut self) -> UserResult {
        Ok(())
    }
    /// How far before the input timestamp `output_with_timestamp` may go, in milliseconds
    /// (Beam's `getAllowedTimestampSkew`; default 0, `i64::MAX` for unlimited).
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        0
    }
    /// Called when a timer set through the context fires (stateful ParDos only), with the state
    /// of the timer's key and window. Outputs carry the timer's output timestamp.
    fn on_timer(&mut self, timer: &TimerFiring, _ctx: &mut OnTimerContext<'_, Self::Out>) -> UserResult {
        Err(format!("timer '{}' fired but the DoFn does not implement on_timer", timer.id).into())
    }
    /// Called once per key and window that holds state when the window expires (end of window
    /// plus allowed lateness), before the state is cleared (stateful ParDos only).
    fn on_window_expiration(&mut self, _ctx: &mut OnTimerContext<'_, Self::Out>) -> UserResult {
        Ok(())
    }
}

pub use crate::state::TimerFiring;

/// What `on_timer` and `on_window_expiration` see: the key, window and state, and the outputs.
pub struct OnTimerContext<'a, O> {
    pub(crate) out: Outputs<'a, O>,
    pub(crate) state: StateScope<'a>,
    pub(crate) key: &'a [u8],
    pub(crate) window: Window,
    pub(crate) timestamp: Option<Timestamp>,
    pub(crate) skew: i64,
}

impl<O: Element> OnTimerContext<'_, O> {
    /// The window the timer was set in.
    pub fn window(&self) -> &Window {
        &self.window
    }
    /// The output timestamp (`None` for a timer without one).
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp
    }
    /// The key, decoded.
    pub fn key<K: Element>(&self) -> Result<K, UserError> {
        use crate::coders::Coder;
        Ok(crate::coders::ElementCoder::<K>::new().decode_outer(self.key)?)
    }
    fn stamp(&self) -> Result<Timestamp, UserError> {
        self.timestamp.ok_or_else(|| "Cannot output with timestamp: the timer was set with no output timestamp".into())
    }
    /// Outputs `value` at the output timestamp, in the timer's window.
    pub fn output(&mut self, value: O) -> UserResult {
        let timestamp = self.stamp()?;
        self.out.main.push(WindowedValue { value, timestamp, window: self.window, pane: PaneInfo::NO_FIRING });
        Ok(())
    }
    /// Outputs `value` at `timestamp` (no earlier than the output timestamp minus the skew).
    pub fn output_with_timestamp(&mut self, value: O, timestamp: Timestamp) -> UserResult {
        let base = self.stamp()?;
        if timestamp < base.saturating_sub(self.skew) {
            return Err(format!(
                "Cannot output with timestamp {timestamp}: earlier than the timer's output timestamp {base}"
            )
            .into());
        }
        self.out.main.push(WindowedValue { value, timestamp, window: self.window, pane: PaneInfo::NO_FIRING });
        Ok(())
    }
    /// Outputs `value` to the additional output `tag` at the output timestamp.
    pub fn output_tagged<T: Element>(&mut self, tag: &TupleTag<T>, value: T) -> UserResult {
        let timestamp = self.stamp()?;
        self.out.tagged(tag, WindowedValue { value, timestamp, window: self.window, pane: PaneInfo::NO_FIRING })
    }
}

impl<'a, O> StateAccess<'a> for OnTimerContext<'a, O> {
    fn scope(&mut self) -> &mut StateScope<'a> {
        &mut self.state
    }
}

impl<'a, O> StateAccess<'a> for ProcessContext<'a, O> {
    fn scope(&mut self) -> &mut StateScope<'a> {
        &mut self.state
    }
}

/// A typed output tag of a multi-output ParDo (Beam's `TupleTag`).
pub struct TupleTag<T> {
    id: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TupleTag<T> {
    fn clone(&self) -> Self {
        TupleTag { id: self.id.clone(), _t: PhantomData }
    }
}

impl<T> std::fmt::Debug for TupleTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TupleTag({})", self.id)
    }
}

impl<T: Element> TupleTag<T> {
    /// A tag with the given id (unique within one ParDo).
    pub fn new(id: impl Into<String>) -> Self {
        TupleTag { id: id.into(), _t: PhantomData }
    }
    /// The tag's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Where the outputs of one `process` call go.
pub(crate) struct Outputs<'a, O> {
    pub(crate) main: &'a mut Vec<WindowedValue<O>>,
    /// The main output's values when it is a [`crate::kernel::UniformBatch`] with the input's
    /// metadata: `output` appends here, outputs with other metadata go to `main`.
    pub(crate) values: Option<&'a mut Vec<O>>,
    pub(crate) tagged: &'a mut [Batch],
    pub(crate) tag_ids: &'a [String],
}

impl<O> Outputs<'_, O> {
    fn tagged<T: Element>(&mut self, tag: &TupleTag<T>, wv: WindowedValue<T>) -> UserResult {
        let idx = self.tag_ids.iter().position(|t| *t == tag.id).ok_or_else(|| -> UserError {
            format!("output to undeclared tag '{}'; declared additional outputs: [{}]", tag.id, self.tag_ids.join(", "))
                .into()
        })?;
        let buf = self.tagged[idx].downcast_mut::<Vec<WindowedValue<T>>>().ok_or_else(|| -> UserError {
            format!("tag '{}' was declared with another element type than {}", tag.id, std::any::type_name::<T>())
                .into()
        })?;
        buf.push(wv);
        Ok(())
    }
}

/// What `DoFn::process` sees besides the element: its timestamp, window and pane, and the
/// outputs.
pub struct ProcessContext<'a, O> {
    pub(crate) sides: &'a dyn SideInputReader,
    pub(crate) state: StateScope<'a>,
    pub(crate) timestamp: Timestamp,
    pub(crate) window: Window,
    pub(crate) pane: PaneInfo,
    pub(crate) skew: i64,
    pub(crate) out: Outputs<'a, O>,
}

impl<O: Element> ProcessContext<'_, O> {
    /// The element's event timestamp.
    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }
    /// The element's window.
    pub fn window(&self) -> &Window {
        &self.window
    }
    /// The pane that produced the element.
    pub fn pane(&self) -> &PaneInfo {
        &self.pane
    }

    /// The value of a side input declared with [`crate::ParDo::with_side_inputs`], for this
    /// element's window. Fails as Beam does for an empty or multi-valued singleton without a
    /// default, or duplicate keys of a map view.
    pub fn side_input<V: ViewValue>(&self, view: &PCollectionView<V>) -> Result<V::Output, UserError> {
        let any = self.sides.get(view.id(), &self.window)?;
        V::from_any(any)
    }
    /// Outputs `value` with the input's timestamp, window and pane.
    #[inline]
    pub fn output(&mut self, value: O) {
        match &mut self.out.values {
            Some(values) => values.push(value),
            None => self.out.main.push(WindowedValue {
                value,
                timestamp: self.timestamp,
                window: self.window,
                pane: self.pane,
            }),
        }
    }

    fn check_timestamp(&self, ts: Timestamp) -> UserResult {
        check_output_timestamp(ts, self.timestamp, self.skew)
    }

    /// Outputs `value` at `timestamp`, keeping the input's window (windows are not reassigned).
    /// Fails if `timestamp` is earlier than the input's minus the DoFn's allowed skew.
    pub fn output_with_timestamp(&mut self, value: O, timestamp: Timestamp) -> UserResult {
        self.check_timestamp(timestamp)?;
        self.out.main.push(WindowedValue { value, timestamp, window: self.window, pane: self.pane });
        Ok(())
    }

    /// Outputs `value` to the additional output `tag`.
    pub fn output_tagged<T: Element>(&mut self, tag: &TupleTag<T>, value: T) -> UserResult {
        let wv = WindowedValue { value, timestamp: self.timestamp, window: self.window, pane: self.pane };
        self.out.tagged(tag, wv)
    }

    /// Outputs `value` at `timestamp` to the additional output `tag`.
    pub fn output_tagged_with_timestamp<T: Element>(
        &mut self,
        tag: &TupleTag<T>,
        value: T,
        timestamp: Timestamp,
    ) -> UserResult {
        self.check_timestamp(timestamp)?;
        let wv = WindowedValue { value, timestamp, window: self.window, pane: self.pane };
        self.out.tagged(tag, wv)
    }

    /// Outputs a fully specified windowed value. For library transforms that restore an element's
    /// original timestamp and window (Reshuffle); bypasses the skew check.
    #[doc(hidden)]
    pub fn output_windowed_value(&mut self, wv: WindowedValue<O>) {
        self.out.main.push(wv);
    }
}

/// Beam's check of an explicit output timestamp: no earlier than the input's `timestamp` minus
/// the DoFn's allowed `skew` (ms).
pub(crate) fn check_output_timestamp(ts: Timestamp, timestamp: Timestamp, skew: i64) -> UserResult {
    if ts < timestamp.saturating_sub(skew) {
        return Err(format!(
            "Cannot output with timestamp {ts}. Output timestamps must be no earlier than the \
             timestamp of the current input ({timestamp}) minus the allowed skew ({skew} ms)"
        )
        .into());
    }
    Ok(())
}

/// What `DoFn::finish_bundle` can do: output with an explicit timestamp and window.
pub struct FinishBundleContext<'a, O> {
    pub(crate) out: Outputs<'a, O>,
}

impl<O: Element> FinishBundleContext<'_, O> {
    /// Outputs `value` at `timestamp` in `window`.
    pub fn output(&mut self, value: O, timestamp: Timestamp, window: Window) {
        self.out.main.push(WindowedValue { value, timestamp, window, pane: PaneInfo::NO_FIRING });
    }
    /// Outputs `value` at `timestamp` in `window` to the additional output `tag`.
    pub fn output_tagged<T: Element>(
        &mut self,
        tag: &TupleTag<T>,
        value: T,
        timestamp: Timestamp,
        window: Window,
    ) -> UserResult {
        self.out.tagged(tag, WindowedValue { value, timestamp, window, pane: PaneInfo::NO_FIRING })
    }
}

/// Encodes the key of a keyed element (stateful ParDos).
pub(crate) type KeyOf<I> = fn(&I, &mut Vec<u8>) -> Result<(), crate::coders::CoderError>;

/// Drives a typed DoFn over erased batches.
pub(crate) struct DoFnKernel<F: DoFn> {
    pub(crate) fn_: F,
    pub(crate) tag_ids: std::sync::Arc<[String]>,
    pub(crate) key_of: Option<KeyOf<F::In>>,
    /// Main outputs per input element in the previous batch (1 before the first): a DoFn
    /// that outputs several elements per input (a group's values) gets room for them up front
    /// instead of growing, and copying, its output buffer batch after batch, and one that
    /// outputs few (a filter, a sink) does not hold a large buffer it will not fill.
    pub(crate) fan_out: f64,
}

type SplitOutputs<'a, O> = (&'a mut Vec<WindowedValue<O>>, &'a mut [Batch]);

fn split_outputs<O: Element>(outputs: &mut [Batch]) -> Result<SplitOutputs<'_, O>, UserError> {
    let (main, tagged) = outputs.split_first_mut().ok_or("internal error: no main output buffer")?;
    let main = crate::kernel::rows_mut::<O>(main).ok_or("internal error: main output buffer of the wrong type")?;
    Ok((main, tagged))
}

/// The values of the main output buffer for outputs with `input`'s metadata: an empty buffer
/// becomes a [`UniformBatch`] with room for `wanted` values. `None` when the buffer holds
/// elements with other metadata (they then all go in rows).
fn uniform_output<'a, I, O: Element>(
    main: &'a mut Batch,
    input: &UniformBatch<I>,
    wanted: usize,
) -> Option<&'a mut Vec<O>> {
    if main.kind() == crate::batch::BatchKind::Rows && main.is_empty() {
        *main = Batch::new(UniformBatch::like(input, crate::kernel::recycle::take::<O>(wanted)));
    }
    match main.downcast_mut::<UniformBatch<O>>() {
        Some(u) if u.same_metadata(input) => {
            u.values.reserve(wanted);
            Some(&mut u.values)
        }
        _ => None,
    }
}

/// The state scope of a DoFn outside a stateful ParDo.
fn stateless() -> StateScope<'static> {
    StateScope::none(StateTime {
        input_watermark: MIN_TIMESTAMP,
        processing_time: 0,
        element_timestamp: 0,
        gc_time: MIN_TIMESTAMP,
        draining: false,
    })
}

/// The side-input views one bundle has read, by view and main window: a DoFn that reads a view
/// for every element looks it up in the runner's reader (a search by view id, a lock, a hash
/// table) once per window and bundle, not once per element. The views cannot change during a
/// bundle: a runner gives a bundle to a DoFn only once its side inputs are ready.
struct MemoSides<'a> {
    inner: &'a dyn SideInputReader,
    seen: std::cell::RefCell<Vec<(String, Window, BuiltView)>>,
}

/// A view as a [`SideInputReader`] gives it.
type BuiltView = std::sync::Arc<dyn std::any::Any + Send + Sync>;

impl<'a> MemoSides<'a> {
    /// Views kept: a DoFn reads a few views, and a bundle's elements sit in a few windows.
    const KEPT: usize = 8;

    fn new(inner: &'a dyn SideInputReader) -> Self {
        MemoSides { inner, seen: std::cell::RefCell::new(Vec::new()) }
    }
}

impl SideInputReader for MemoSides<'_> {
    fn get(
        &self,
        view_id: &str,
        main_window: &Window,
    ) -> Result<std::sync::Arc<dyn std::any::Any + Send + Sync>, UserError> {
        if let Some((_, _, v)) = self.seen.borrow().iter().find(|(id, w, _)| w == main_window && id == view_id) {
            return Ok(v.clone());
        }
        let v = self.inner.get(view_id, main_window)?;
        let mut seen = self.seen.borrow_mut();
        if seen.len() == Self::KEPT {
            seen.remove(0);
        }
        seen.push((view_id.to_string(), *main_window, v.clone()));
        Ok(v)
    }
}

impl<F: DoFn> DoFnKernel<F> {
    /// Processes values sharing one timestamp, window and pane: the context's metadata is set
    /// once, and `output` appends bare values to a uniform main output. Outputs with another
    /// timestamp (or when the main output already holds other elements) go in rows.
    fn process_uniform(
        &mut self,
        mut input: UniformBatch<F::In>,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
    ) -> UserResult {
        let (main, tagged) = outputs.split_first_mut().ok_or("internal error: no main output buffer")?;
        let n = input.values.len();
        let wanted = (n as f64 * self.fan_out) as usize;
        let mut spill: Vec<WindowedValue<F::Out>> = Vec::new();
        let Some(values) = uniform_output::<_, F::Out>(main, &input, wanted) else {
            let rows = crate::kernel::Bundle::Uniform(input).into_rows();
            return self.process_batch(Batch::new(rows), outputs, sides);
        };
        let before = values.len();
        match self.fn_.process_values(&mut input.values, values) {
            Some(result) => result?,
            None => {
                let mut ctx = ProcessContext {
                    sides,
                    state: stateless(),
                    timestamp: input.timestamp,
                    window: input.window,
                    pane: input.pane,
                    skew: self.fn_.allowed_timestamp_skew_millis(),
                    out: Outputs { main: &mut spill, values: Some(&mut *values), tagged, tag_ids: &self.tag_ids },
                };
                for v in input.values.drain(..) {
                    self.fn_.process(v, &mut ctx)?;
                }
            }
        }
        let produced = values.len() - before + spill.len();
        crate::kernel::recycle::give(input.values);
        if n > 0 {
            self.fan_out = (produced as f64 / n as f64).clamp(0.0, 1024.0);
        }
        if !spill.is_empty() {
            crate::kernel::rows_mut::<F::Out>(main)
                .ok_or("internal error: main output buffer of the wrong type")?
                .append(&mut spill);
        }
        Ok(())
    }
}

impl<F: DoFn> ErasedDoFn for DoFnKernel<F> {
    fn setup(&mut self) -> UserResult {
        self.fn_.setup()
    }
    fn start_bundle(&mut self) -> UserResult {
        self.fn_.start_bundle()
    }
    fn process_batch(&mut self, input: Batch, outputs: &mut [Batch], sides: &dyn SideInputReader) -> UserResult {
        let memo = MemoSides::new(sides);
        let sides: &dyn SideInputReader = &memo;
        if self.key_of.is_some() {
            // A stateful ParDo run without state: the runner did not translate it as stateful.
            return Err("internal error: a stateful DoFn must be run with its keyed state".into());
        }
        let mut input = match crate::kernel::Bundle::<F::In>::from_batch(input)? {
            crate::kernel::Bundle::Uniform(u) => return self.process_uniform(u, outputs, sides),
            crate::kernel::Bundle::Rows(rows) => rows,
        };
        let (main, tagged) = split_outputs::<F::Out>(outputs)?;
        let skew = self.fn_.allowed_timestamp_skew_millis();
        let (before, n) = (main.len(), input.len());
        let wanted = (n as f64 * self.fan_out) as usize;
        if main.capacity() == 0 {
            *main = crate::kernel::recycle::take(wanted);
        } else {
            main.reserve(wanted);
        }
        let mut ctx = ProcessContext {
            sides,
            state: stateless(),
            timestamp: 0,
            window: Window::Global,
            pane: PaneInfo::NO_FIRING,
            skew,
            out: Outputs { main, values: None, tagged, tag_ids: &self.tag_ids },
        };
        for wv in input.drain(..) {
            ctx.timestamp = wv.timestamp;
            ctx.window = wv.window;
            ctx.pane = wv.pane;
            self.fn_.process(wv.value, &mut ctx)?;
        }
        crate::kernel::recycle::give(input);
        if n > 0 {
            self.fan_out = ((ctx.out.main.len() - before) as f64 / n as f64).clamp(0.0, 1024.0);
        }
        Ok(())
    }
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
        env: &mut dyn KeyedStateEnv,
    ) -> UserResult {
        let key_of = self.key_of.ok_or("internal error: keyed processing of a DoFn that is not stateful")?;
        let memo = MemoSides::new(sides);
        let sides: &dyn SideInputReader = &memo;
        let input = crate::kernel::downcast_batch::<F::In>(input)?;
        let (main, tagged) = split_outputs::<F::Out>(outputs)?;
        let skew = self.fn_.allowed_timestamp_skew_millis();
        let mut key = Vec::new();
        for wv in input {
            key.clear();
            key_of(&wv.value, &mut key)?;
            let (state, mut time) = env.state(&key, &wv.window);
            time.element_timestamp = wv.timestamp;
            let mut ctx = ProcessContext {
                sides,
                state: StateScope { state: Some(state), time, skew: self.fn_.allowed_timestamp_skew_millis() },
                timestamp: wv.timestamp,
                window: wv.window,
                pane: wv.pane,
                skew,
                out: Outputs { main: &mut *main, values: None, tagged: &mut *tagged, tag_ids: &self.tag_ids },
            };
            self.fn_.process(wv.value, &mut ctx)?;
        }
        Ok(())
    }
    fn on_timer(
        &mut self,
        key: &[u8],
        window: Window,
        firing: Option<&TimerFiring>,
        outputs: &mut [Batch],
        state: &mut KeyedState,
        mut time: StateTime,
        _sides: &dyn crate::kernel::SideInputReader,
    ) -> UserResult {
        let (main, tagged) = split_outputs::<F::Out>(outputs)?;
        let timestamp = match firing {
            Some(f) => f.output_timestamp,
            None => Some(window.max_timestamp()),
        };
        time.element_timestamp = timestamp.unwrap_or(time.input_watermark);
        let mut ctx = OnTimerContext {
            out: Outputs { main, values: None, tagged, tag_ids: &self.tag_ids },
            state: StateScope { state: Some(state), time, skew: self.fn_.allowed_timestamp_skew_millis() },
            key,
            window,
            timestamp,
            skew: self.fn_.allowed_timestamp_skew_millis(),
        };
        match firing {
            Some(f) => self.fn_.on_timer(f, &mut ctx),
            None => self.fn_.on_window_expiration(&mut ctx),
        }
    }
    fn finish_bundle(&mut self, outputs: &mut [Batch]) -> UserResult {
        // What finish_bundle outputs goes in rows; a uniform main output becomes rows only if
        // there is something to add to it.
        let (main, tagged) = outputs.split_first_mut().ok_or("internal error: no main output buffer")?;
        let mut extra: Vec<WindowedValue<F::Out>> = Vec::new();
        let mut ctx =
            FinishBundleContext { out: Outputs { main: &mut extra, values: None, tagged, tag_ids: &self.tag_ids } };
        self.fn_.finish_bundle(&mut ctx)?;
        if !extra.is_empty() {
            crate::kernel::rows_mut::<F::Out>(main)
                .ok_or("internal error: main output buffer of the wrong type")?
                .append(&mut extra);
        }
        Ok(())
    }
    fn teardown(&mut self) -> UserResult {
        self.fn_.teardown()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{downcast_batch, NoSideInputs};

    /// Outputs each element; a multiple of 3 also one millisecond later; 1000 at bundle end
    /// when asked to.
    #[derive(Clone)]
    struct Probe {
        finish_output: bool,
    }

    impl DoFn for Probe {
        type In = i64;
        type Out = i64;
        fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            ctx.output(e * 10);
            if e % 3 == 0 {
                ctx.output_with_timestamp(e, ctx.timestamp() + 1)?;
            }
            Ok(())
        }
        fn finish_bundle(&mut self, ctx: &mut FinishBundleContext<'_, i64>) -> UserResult {
            if self.finish_output {
                ctx.output(1000, 0, Window::Global);
            }
            Ok(())
        }
    }

    fn kernel(finish_output: bool) -> DoFnKernel<Probe> {
        DoFnKernel { fn_: Probe { finish_output }, tag_ids: Vec::new().into(), key_of: None, fan_out: 1.0 }
    }

    fn uniform(values: Vec<i64>, timestamp: Timestamp) -> Batch {
        Batch::new(UniformBatch { values, timestamp, window: Window::Global, pane: PaneInfo::NO_FIRING })
    }

    fn sorted(b: Batch) -> Vec<(i64, Timestamp)> {
        let mut v: Vec<_> = downcast_batch::<i64>(b).unwrap().into_iter().map(|wv| (wv.value, wv.timestamp)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_uniform_input_gives_a_uniform_output_unless_metadata_differs() {
        // Only plain outputs: the output stays uniform, with the input's metadata.
        let mut k = kernel(false);
        let mut out: Vec<Batch> = vec![Batch::new(Vec::<WindowedValue<i64>>::new())];
        k.process_batch(uniform(vec![1, 2], 5), &mut out, &NoSideInputs).unwrap();
        k.process_batch(uniform(vec![4], 5), &mut out, &NoSideInputs).unwrap();
        k.finish_bundle(&mut out).unwrap();
        let u = out[0].downcast_ref::<UniformBatch<i64>>().expect("uniform output");
        assert_eq!((u.values.clone(), u.timestamp), (vec![10, 20, 40], 5));

        // Outputs at another timestamp, inputs with other metadata, and finish_bundle outputs
        // all end up as rows, none lost.
        let mut k = kernel(true);
        let mut out: Vec<Batch> = vec![Batch::new(Vec::<WindowedValue<i64>>::new())];
        k.process_batch(uniform(vec![1, 3], 5), &mut out, &NoSideInputs).unwrap();
        k.process_batch(uniform(vec![2], 7), &mut out, &NoSideInputs).unwrap();
        k.process_batch(Batch::new(vec![WindowedValue::timestamped(6i64, 9)]), &mut out, &NoSideInputs).unwrap();
        k.finish_bundle(&mut out).unwrap();
        assert_eq!(sorted(out.pop().unwrap()), vec![(3, 6), (6, 10), (10, 5), (20, 7), (30, 5), (60, 9), (1000, 0)]);
    }
}
