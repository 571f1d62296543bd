//! WindowFns: how elements are assigned to windows, and the windowing strategy of a PCollection.

use crate::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP};
use crate::trigger::{AccumulationMode, ClosingBehavior, OnTimeBehavior, TimestampCombiner, Trigger};
use crate::window::{IntervalWindow, Window};
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

/// Assigns elements to windows (Beam's `WindowFn`). Implement it for custom windowing.
pub trait WindowFn: Send + Sync + Debug + 'static {
    /// Appends the windows of an element at `timestamp` currently in `window`.
    fn assign_windows(&self, timestamp: Timestamp, window: &Window, out: &mut Vec<Window>);
    /// Whether windows of this function merge per key (sessions).
    fn is_merging(&self) -> bool {
        false
    }
    /// Whether two functions produce compatible windows (required by Flatten, side inputs).
    fn is_compatible(&self, other: &dyn WindowFn) -> bool;
    /// Whether every element lands in exactly one window.
    fn assigns_to_one_window(&self) -> bool {
        true
    }
    /// For merging functions: given one key's active windows, the merges to make, each as
    /// (windows merged, resulting window). Merges of a single window into itself are omitted.
    fn merge_windows(&self, _windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
        Vec::new()
    }
    /// As [`WindowFn::merge_windows`], for a function whose merging can fail (one an SDK
    /// harness runs, for a portable pipeline): the merges, or why there are none. Runners call
    /// this one.
    fn try_merge_windows(&self, windows: &[Window]) -> Result<Vec<(Vec<Window>, Window)>, String> {
        Ok(self.merge_windows(windows))
    }
    /// For merging functions: whether windows merge exactly when they overlap as intervals
    /// ([`merge_overlapping_interval_windows`], as sessions do). A key's active windows are then
    /// disjoint, and new windows merge only with the active windows they overlap, so a runner
    /// need not show [`WindowFn::merge_windows`] the others.
    fn merges_overlapping_intervals(&self) -> bool {
        false
    }
    /// The timestamp an element at `timestamp` contributes to grouped output in `window`
    /// (before the timestamp combiner): its own, unless a custom function says otherwise.
    fn output_time(&self, timestamp: Timestamp, _window: &Window) -> Timestamp {
        timestamp
    }
    /// The side-input window that a main-input element in `main` reads, or why this
    /// function cannot window a side input.
    fn side_input_window(&self, _main: &Window) -> Result<Window, String> {
        Err(format!("{self:?} cannot be used to window a side input"))
    }
    /// Whether windows depend on the element itself, so that the function must be applied with
    /// [`crate::transforms::window_into::Window::into_by_element`] (an [`ElementWindowFn`]).
    fn assigns_by_element(&self) -> bool {
        false
    }
    /// `self` as `Any`, for compatibility checks.
    fn as_any(&self) -> &dyn Any;
}

/// A window function whose windows depend on the element (Beam's `AssignContext.element()`),
/// such as Nexmark's auction-or-bid windows. Apply it with
/// [`crate::transforms::window_into::Window::into_by_element`]; it must also report
/// [`WindowFn::assigns_by_element`] so that a plain `Window::into` is refused at construction.
pub trait ElementWindowFn<T>: WindowFn + Clone {
    /// Appends the windows of `element` at `timestamp` (currently in `window`), or says why the
    /// element cannot be windowed by this function.
    fn assign_element_windows(
        &self,
        element: &T,
        timestamp: Timestamp,
        window: &Window,
        out: &mut Vec<Window>,
    ) -> Result<(), String>;
}

/// Merges overlapping interval windows: sort by start, merge runs of mutually overlapping
/// windows into their span (Beam's `MergeOverlappingIntervalWindows`). Touching windows do not
/// merge.
pub fn merge_overlapping_interval_windows(windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
    let mut ivs: Vec<(IntervalWindow, Window)> = windows.iter().filter_map(|w| w.interval().map(|i| (i, *w))).collect();
    ivs.sort_by_key(|(i, _)| (i.start, i.end));
    let mut out = Vec::new();
    let mut run: Vec<Window> = Vec::new();
    let mut span: Option<IntervalWindow> = None;
    for (iv, w) in ivs {
        match span {
            Some(s) if s.intersects(&iv) => {
                span = Some(s.span(&iv));
                run.push(w);
            }
            _ => {
                if let Some(s) = span.take() {
                    if run.len() > 1 {
                        out.push((std::mem::take(&mut run), Window::Interval(s)));
                    }
                }
                run.clear();
                run.push(w);
                span = Some(iv);
            }
        }
    }
    if let Some(s) = span {
        if run.len() > 1 {
            out.push((run, Window::Interval(s)));
        }
    }
    out
}

/// Keeps every element in the window it already has and never merges (Beam's
/// `IdentityWindowFn`): used where grouping must not change windows (Reshuffle, assertions).
#[derive(Debug)]
pub struct IdentityWindowFn(Arc<dyn WindowFn>);

impl IdentityWindowFn {
    /// Keeps the windows that `original` assigned.
    pub fn new(original: Arc<dyn WindowFn>) -> Self {
        IdentityWindowFn(original)
    }
}

impl WindowFn for IdentityWindowFn {
    fn assign_windows(&self, _: Timestamp, window: &Window, out: &mut Vec<Window>) {
        out.push(*window);
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        match other.as_any().downcast_ref::<IdentityWindowFn>() {
            Some(o) => self.0.is_compatible(&*o.0),
            None => self.0.is_compatible(other),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Every element in the single global window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalWindows;

impl WindowFn for GlobalWindows {
    fn assign_windows(&self, _: Timestamp, _: &Window, out: &mut Vec<Window>) {
        out.push(Window::Global);
    }
    fn side_input_window(&self, _: &Window) -> Result<Window, String> {
        Ok(Window::Global)
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().is::<GlobalWindows>()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn millis(d: Duration) -> i64 {
    crate::time::duration_millis(d)
}

/// Fixed-size, non-overlapping windows `[start, start + size)` with `start ≡ offset (mod size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindows {
    size: i64,
    offset: i64,
}

impl FixedWindows {
    /// Windows of `size` aligned to the epoch. `size` must be positive.
    pub fn of(size: Duration) -> Self {
        FixedWindows { size: millis(size).max(1), offset: 0 }
    }
    /// Shifts window boundaries by `offset` (must be below the size; reduced modulo it).
    pub fn with_offset(self, offset: Duration) -> Self {
        FixedWindows { offset: millis(offset).rem_euclid(self.size), ..self }
    }
    /// The window containing `ts`. Uses floor modulo, which equals Java's result for every
    /// timestamp Java gets right and is also right for very negative timestamps.
    pub fn window_for(&self, ts: Timestamp) -> IntervalWindow {
        let start = ts - (ts - self.offset).rem_euclid(self.size);
        IntervalWindow::new(start, start.saturating_add(self.size))
    }
}

impl WindowFn for FixedWindows {
    fn assign_windows(&self, ts: Timestamp, _: &Window, out: &mut Vec<Window>) {
        out.push(Window::Interval(self.window_for(ts)));
    }
    fn side_input_window(&self, main: &Window) -> Result<Window, String> {
        Ok(Window::Interval(self.window_for(main.max_timestamp())))
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().downcast_ref::<FixedWindows>() == Some(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Possibly overlapping windows of `size` starting every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindows {
    size: i64,
    period: i64,
    offset: i64,
}

impl SlidingWindows {
    /// Windows of `size`, with Beam's default period (1 h, 1 min, 1 s or 1 ms by size).
    pub fn of(size: Duration) -> Self {
        let size = millis(size).max(1);
        let period = if size > 3_600_000 {
            3_600_000
        } else if size > 60_000 {
            60_000
        } else if size > 1_000 {
            1_000
        } else {
            1
        };
        SlidingWindows { size, period, offset: 0 }
    }
    /// A new window starts every `period`.
    pub fn every(self, period: Duration) -> Self {
        let period = millis(period).max(1);
        SlidingWindows { period, offset: self.offset.rem_euclid(period), ..self }
    }
    /// Shifts window starts by `offset` (reduced modulo the period).
    pub fn with_offset(self, offset: Duration) -> Self {
        SlidingWindows { offset: millis(offset).rem_euclid(self.period), ..self }
    }
    /// The window size in milliseconds.
    pub fn size_millis(&self) -> i64 {
        self.size
    }
    /// The period in milliseconds.
    pub fn period_millis(&self) -> i64 {
        self.period
    }
    /// Start of the latest window containing `ts`.
    pub fn last_start(&self, ts: Timestamp) -> Timestamp {
        ts - (ts - self.offset).rem_euclid(self.period)
    }
}

impl WindowFn for SlidingWindows {
    fn assign_windows(&self, ts: Timestamp, _: &Window, out: &mut Vec<Window>) {
        // Newest first, as Beam emits them.
        let mut start = self.last_start(ts);
        while start > ts - self.size {
            out.push(Window::Interval(IntervalWindow::new(start, start + self.size)));
            start -= self.period;
        }
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().downcast_ref::<SlidingWindows>() == Some(self)
    }
    fn assigns_to_one_window(&self) -> bool {
        self.period >= self.size
    }
    fn side_input_window(&self, main: &Window) -> Result<Window, String> {
        if matches!(main, Window::Global) {
            return Err("a sliding-window side input cannot be read from the global window".into());
        }
        let start = self.last_start(main.max_timestamp() - self.size) + self.period;
        Ok(Window::Interval(IntervalWindow::new(start, start + self.size)))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Session windows: each element starts a window `[ts, ts + gap)`; per key, overlapping windows
/// merge (touching ones do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sessions {
    gap: i64,
}

impl Sessions {
    /// Sessions separated by at least `gap` of inactivity.
    pub fn with_gap_duration(gap: Duration) -> Self {
        Sessions { gap: millis(gap).max(1) }
    }
    /// The gap in milliseconds.
    pub fn gap_millis(&self) -> i64 {
        self.gap
    }
}

impl WindowFn for Sessions {
    fn assign_windows(&self, ts: Timestamp, _: &Window, out: &mut Vec<Window>) {
        out.push(Window::Interval(IntervalWindow::new(ts, ts.saturating_add(self.gap))));
    }
    fn is_merging(&self) -> bool {
        true
    }
    fn merge_windows(&self, windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
        merge_overlapping_interval_windows(windows)
    }
    fn merges_overlapping_intervals(&self) -> bool {
        true
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().is::<Sessions>()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// How a PCollection is windowed: the window function, the trigger, and what happens to late
/// data and fired panes (Beam's `WindowingStrategy`, with Beam's defaults).
#[derive(Clone, Debug)]
pub struct WindowingStrategy {
    /// The window function.
    pub window_fn: Arc<dyn WindowFn>,
    /// When panes fire.
    pub trigger: Trigger,
    /// Whether fired panes are kept.
    pub accumulation_mode: AccumulationMode,
    /// How long after the end of a window late data is still accepted, ms.
    pub allowed_lateness_ms: i64,
    /// How grouped output timestamps are chosen.
    pub timestamp_combiner: TimestampCombiner,
    /// Whether an empty final pane is emitted at expiry.
    pub closing_behavior: ClosingBehavior,
    /// Whether an empty on-time pane is emitted.
    pub on_time_behavior: OnTimeBehavior,
    /// Set after a GroupByKey merged the windows, so regrouping does not merge again.
    pub already_merged: bool,
}

impl WindowingStrategy {
    /// The strategy of a window function, with Beam's defaults for everything else.
    pub fn of(window_fn: Arc<dyn WindowFn>) -> Self {
        WindowingStrategy {
            window_fn,
            trigger: Trigger::Default,
            accumulation_mode: AccumulationMode::Discarding,
            allowed_lateness_ms: 0,
            timestamp_combiner: TimestampCombiner::EndOfWindow,
            closing_behavior: ClosingBehavior::FireIfNonEmpty,
            on_time_behavior: OnTimeBehavior::FireAlways,
            already_merged: false,
        }
    }
    /// The global window with the default trigger.
    pub fn global() -> Self {
        Self::of(Arc::new(GlobalWindows))
    }
    /// Whether this is the global window.
    pub fn is_global(&self) -> bool {
        self.window_fn.as_any().is::<GlobalWindows>()
    }
    /// Whether two strategies can be flattened together.
    pub fn is_compatible(&self, other: &WindowingStrategy) -> bool {
        self.window_fn.is_compatible(&*other.window_fn)
    }
    /// Whether windows still need merging at a GroupByKey.
    pub fn needs_merge(&self) -> bool {
        self.window_fn.is_merging() && !self.already_merged
    }
    /// Beam's `LateDataUtils.garbageCollectionTime`: end of window plus allowed lateness,
    /// capped at the global window's end.
    pub fn gc_time(&self, window: &Window) -> Timestamp {
        let max = window.max_timestamp();
        if GLOBAL_WINDOW_MAX_TIMESTAMP - self.allowed_lateness_ms < max {
            GLOBAL_WINDOW_MAX_TIMESTAMP
        } else {
            max + self.allowed_lateness_ms
        }
    }
}

impl Default for WindowingStrategy {
    fn default() -> Self {
        Self::global()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assign(f: &dyn WindowFn, ts: Timestamp) -> Vec<Window> {
        let mut out = Vec::new();
        f.assign_windows(ts, &Window::Global, &mut out);
        out
    }

    fn iw(a: i64, b: i64) -> Window {
        Window::Interval(IntervalWindow::new(a, b))
    }

    #[test]
    fn fixed_windows_floor() {
        let f = FixedWindows::of(Duration::from_millis(10));
        assert_eq!(assign(&f, 0), vec![iw(0, 10)]);
        assert_eq!(assign(&f, 9), vec![iw(0, 10)]);
        assert_eq!(assign(&f, 10), vec![iw(10, 20)]);
        assert_eq!(assign(&f, -13), vec![iw(-20, -10)]);
        let g = f.with_offset(Duration::from_millis(3));
        assert_eq!(assign(&g, 2), vec![iw(-7, 3)]);
        assert_eq!(assign(&g, 3), vec![iw(3, 13)]);
    }

    #[test]
    fn sliding_windows_newest_first() {
        let s = SlidingWindows::of(Duration::from_millis(10)).every(Duration::from_millis(5));
        assert_eq!(assign(&s, 1), vec![iw(0, 10), iw(-5, 5)]);
        assert_eq!(assign(&s, 7), vec![iw(5, 15), iw(0, 10)]);
        assert!(!s.assigns_to_one_window());
        assert_eq!(SlidingWindows::of(Duration::from_secs(120)).period_millis(), 60_000);
    }

    #[test]
    fn session_merging() {
        let s = Sessions::with_gap_duration(Duration::from_millis(10));
        let ws: Vec<Window> = [1, 5, 20, 30].iter().flat_map(|&t| assign(&s, t)).collect();
        let merges = s.merge_windows(&ws);
        // [1,11)+[5,15) merge; [20,30) and [30,40) only touch.
        assert_eq!(merges, vec![(vec![iw(1, 11), iw(5, 15)], iw(1, 15))]);
    }

    #[test]
    fn side_input_mapping() {
        let f = FixedWindows::of(Duration::from_millis(10));
        assert_eq!(f.side_input_window(&iw(10, 20)).unwrap(), iw(10, 20));
        let s = SlidingWindows::of(Duration::from_millis(10)).every(Duration::from_millis(5));
        assert_eq!(s.side_input_window(&iw(10, 20)).unwrap(), iw(10, 20));
        assert_eq!(s.side_input_window(&iw(3, 7)).unwrap(), iw(0, 10));
        assert!(Sessions::with_gap_duration(Duration::from_millis(1)).side_input_window(&iw(0, 1)).is_err());
        assert_eq!(GlobalWindows.side_input_window(&iw(0, 1)).unwrap(), Window::Global);
    }

    #[test]
    fn sliding_windows_keep_output_times() {
        // As Beam's SlidingWindows today (Java dropped getOutputTime's shift): an element's
        // timestamp is what it contributes to every window it is in.
        let s = SlidingWindows::of(Duration::from_millis(10)).every(Duration::from_millis(5));
        assert_eq!(s.output_time(7, &iw(0, 10)), 7);
        assert_eq!(s.output_time(2, &iw(0, 10)), 2);
    }

    #[test]
    fn compatibility() {
        let a = FixedWindows::of(Duration::from_millis(10));
        assert!(a.is_compatible(&FixedWindows::of(Duration::from_millis(10))));
        assert!(!a.is_compatible(&FixedWindows::of(Duration::from_millis(20))));
        assert!(!a.is_compatible(&GlobalWindows));
        assert!(GlobalWindows.is_compatible(&GlobalWindows));
    }
}
