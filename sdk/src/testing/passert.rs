//! Assertions on the contents of PCollections, checked inside the pipeline (Beam's `PAssert`).

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pane::{PaneInfo, Timing};
use crate::pipeline::{PCollection, PCollectionList, PTransform};
use crate::time::MIN_TIMESTAMP;
use crate::transforms::flatten::Flatten;
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::impulse::Impulse;
use crate::transforms::par_do::ParDo;
use crate::transforms::window_into::Window as WindowInto;
use crate::trigger::Never;
use crate::window::Window;
use crate::window_fn::{GlobalWindows, IdentityWindowFn};
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Check<T> = Arc<dyn Fn(Vec<T>) -> Result<(), String> + Send + Sync>;

/// Which contents an assertion looks at.
#[derive(Clone, Copy, Debug)]
enum Scope {
    /// Everything, re-windowed into the global window.
    All,
    /// One window, all panes or some.
    Window(Window, PaneFilter),
}

/// Which panes of a window an assertion looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PaneFilter {
    All,
    OnTime,
    Final,
    Early,
    Late,
    NonLate,
}

impl PaneFilter {
    fn accepts(self, pane: &PaneInfo) -> bool {
        match self {
            PaneFilter::All => true,
            PaneFilter::OnTime => pane.timing == Timing::OnTime,
            PaneFilter::Final => pane.is_last,
            PaneFilter::Early => pane.timing == Timing::Early,
            PaneFilter::Late => pane.timing == Timing::Late,
            PaneFilter::NonLate => pane.timing != Timing::Late,
        }
    }
}

/// Asserts on all elements of a PCollection: `assert_that(&pc).contains_in_any_order(vec![..])`.
pub fn assert_that<T: Element>(pc: &PCollection<T>) -> IterableAssert<T> {
    IterableAssert { pc: pc.clone(), scope: Scope::All }
}

/// Asserts on the single element of a PCollection: `assert_that_singleton(&sum).equal_to(6)`.
pub fn assert_that_singleton<T: Element>(pc: &PCollection<T>) -> SingletonAssert<T> {
    SingletonAssert { inner: assert_that(pc) }
}

/// An assertion on the elements of a PCollection (see [`assert_that`]).
pub struct IterableAssert<T> {
    pc: PCollection<T>,
    scope: Scope,
}

fn describe<T: std::fmt::Debug>(v: &[T]) -> String {
    let shown: Vec<String> = v.iter().take(50).map(|x| format!("{x:?}")).collect();
    let more = if v.len() > 50 { format!(", ... ({} more)", v.len() - 50) } else { String::new() };
    format!("[{}{more}]", shown.join(", "))
}

/// Multiset difference: (expected but missing, present but unexpected).
fn diff<T: PartialEq + Clone>(expected: &[T], actual: &[T]) -> (Vec<T>, Vec<T>) {
    let mut unexpected: Vec<T> = actual.to_vec();
    let mut missing = Vec::new();
    for e in expected {
        match unexpected.iter().position(|a| a == e) {
            Some(i) => {
                unexpected.swap_remove(i);
            }
            None => missing.push(e.clone()),
        }
    }
    (missing, unexpected)
}

impl<T: Element> IterableAssert<T> {
    /// Restricts the assertion to the elements of `window`.
    pub fn in_window(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::All), ..self }
    }

    /// Restricts the assertion to the on-time pane of `window`.
    pub fn in_on_time_pane(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::OnTime), ..self }
    }

    /// Restricts the assertion to the final pane of `window`.
    pub fn in_final_pane(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::Final), ..self }
    }

    /// Restricts the assertion to the early panes of `window`, combined.
    pub fn in_early_panes(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::Early), ..self }
    }

    /// Restricts the assertion to the late panes of `window`, combined.
    pub fn in_late_panes(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::Late), ..self }
    }

    /// Restricts the assertion to the early and on-time panes of `window`, combined.
    pub fn in_combined_non_late_panes(self, window: Window) -> Self {
        IterableAssert { scope: Scope::Window(window, PaneFilter::NonLate), ..self }
    }

    /// Restricts the assertion to the global window (without re-windowing).
    pub fn in_global_window(self) -> Self {
        self.in_window(Window::Global)
    }

    /// The elements are exactly `expected`, in any order (as multisets).
    pub fn contains_in_any_order(self, expected: Vec<T>)
    where
        T: PartialEq,
    {
        self.satisfies(move |actual: Vec<T>| {
            let (missing, unexpected) = diff(&expected, &actual);
            if missing.is_empty() && unexpected.is_empty() {
                return Ok(());
            }
            Err(format!(
                "Expected: iterable with items {} in any order\n     but: got {}\n  missing: {}\n  unexpected: {}",
                describe(&expected),
                describe(&actual),
                describe(&missing),
                describe(&unexpected)
            ))
        })
    }

    /// There are no elements.
    pub fn empty(self) {
        self.satisfies(|actual: Vec<T>| {
            if actual.is_empty() {
                Ok(())
            } else {
                Err(format!("Expected: empty iterable\n     but: got {}", describe(&actual)))
            }
        })
    }

    /// A custom check over all elements; an `Err` message fails the pipeline.
    pub fn satisfies(self, check: impl Fn(Vec<T>) -> Result<(), String> + Send + Sync + 'static) {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.pc.apply(&format!("PAssert${id}"), AssertTransform { scope: self.scope, check: Arc::new(check) });
    }
}

/// An assertion on the single element of a PCollection (see [`assert_that_singleton`]).
pub struct SingletonAssert<T> {
    inner: IterableAssert<T>,
}

impl<T: Element> SingletonAssert<T> {
    /// Restricts the assertion to `window`.
    pub fn in_window(self, window: Window) -> Self {
        SingletonAssert { inner: self.inner.in_window(window) }
    }

    /// The PCollection holds exactly one element, equal to `expected`.
    pub fn equal_to(self, expected: T)
    where
        T: PartialEq,
    {
        self.satisfies(
            move |v: T| {
                if v == expected {
                    Ok(())
                } else {
                    Err(format!("Expected: {expected:?}\n     but: was {v:?}"))
                }
            },
        )
    }

    /// The PCollection holds exactly one element, different from `unexpected`.
    pub fn not_equal_to(self, unexpected: T)
    where
        T: PartialEq,
    {
        self.satisfies(move |v: T| {
            if v != unexpected {
                Ok(())
            } else {
                Err(format!("Expected: not {unexpected:?}\n     but: was {v:?}"))
            }
        })
    }

    /// The PCollection holds exactly one element, which satisfies `check`.
    pub fn satisfies(self, check: impl Fn(T) -> Result<(), String> + Send + Sync + 'static) {
        self.inner.satisfies(move |mut all: Vec<T>| match all.len() {
            1 => check(all.pop().expect("one element")),
            0 => Err("Expected: a single element\n     but: the PCollection is empty".into()),
            n => Err(format!("Expected: a single element\n     but: got {n}: {}", describe(&all))),
        })
    }
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

struct AssertTransform<T> {
    scope: Scope,
    check: Check<T>,
}

/// Emits the marker that guarantees the check runs even when the asserted window is empty.
#[derive(Clone)]
struct MarkerFn<T> {
    window: Window,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> DoFn for MarkerFn<T> {
    type In = Vec<u8>;
    type Out = KV<(), Option<(T, PaneInfo)>>;
    fn process(&mut self, _: Vec<u8>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let timestamp = match self.window {
            Window::Global => MIN_TIMESTAMP,
            w => w.max_timestamp(),
        };
        ctx.output_windowed_value(WindowedValue {
            value: KV::new((), None),
            timestamp,
            window: self.window,
            pane: PaneInfo::NO_FIRING,
        });
        Ok(())
    }
}

struct CheckFn<T> {
    window: Window,
    panes: PaneFilter,
    check: Check<T>,
}

impl<T> Clone for CheckFn<T> {
    fn clone(&self) -> Self {
        CheckFn { window: self.window, panes: self.panes, check: self.check.clone() }
    }
}

/// Pairs each element with the pane it came in, before the assertion regroups it.
#[derive(Clone)]
struct WrapFn<T>(PhantomData<fn(T)>);

impl<T: Element> DoFn for WrapFn<T> {
    type In = T;
    type Out = KV<(), Option<(T, PaneInfo)>>;
    fn process(&mut self, v: T, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let pane = *ctx.pane();
        ctx.output(KV::new((), Some((v, pane))));
        Ok(())
    }
}

impl<T: Element> DoFn for CheckFn<T> {
    type In = KV<(), Vec<Option<(T, PaneInfo)>>>;
    type Out = ();
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, ()>) -> UserResult {
        if *ctx.window() != self.window {
            return Ok(());
        }
        let panes = self.panes;
        let actual: Vec<T> = kv.value.into_iter().flatten().filter(|(_, p)| panes.accepts(p)).map(|(v, _)| v).collect();
        (self.check)(actual).map_err(|m| format!("assertion failed in window {}:\n{m}", self.window).into())
    }
}

impl<T: Element> PTransform<PCollection<T>> for AssertTransform<T> {
    type Output = PCollection<()>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let p = input.pipeline().clone();
        // The contents are regrouped with a trigger that fires once, when the window expires,
        // so an assertion sees every pane, in batch and in streaming.
        let lateness = std::time::Duration::from_millis(input.windowing_strategy().allowed_lateness_ms.max(0) as u64);
        let (windowed, window, panes) = match self.scope {
            Scope::All => (
                input.apply(
                    "RewindowGlobal",
                    WindowInto::into(GlobalWindows).triggering(Never::ever()).discarding_fired_panes(),
                ),
                Window::Global,
                PaneFilter::All,
            ),
            Scope::Window(w, panes) => {
                let retriggered = input.apply(
                    "Retrigger",
                    WindowInto::configure()
                        .triggering(Never::ever())
                        .discarding_fired_panes()
                        .with_allowed_lateness(lateness),
                );
                // Windows are checked as they are: the assertion's grouping must not merge them
                // (or the asserted window could vanish and the check never run).
                let mut strategy = retriggered.windowing_strategy();
                strategy.window_fn = std::sync::Arc::new(IdentityWindowFn::new(strategy.window_fn.clone()));
                strategy.already_merged = false;
                retriggered.set_windowing(strategy);
                (retriggered, w, panes)
            }
        };
        let actual = windowed.apply("Wrap", ParDo::of(WrapFn::<T>(PhantomData)));
        let marker =
            p.begin().apply("Impulse", Impulse).apply("Marker", ParDo::of(MarkerFn::<T> { window, _t: PhantomData }));
        marker.set_windowing(actual.windowing_strategy());
        PCollectionList::of(&p, vec![actual, marker])
            .apply("Flatten", Flatten::pcollections())
            .apply("GroupAll", GroupByKey::create())
            .apply("Check", ParDo::of(CheckFn { window, panes, check: self.check }))
    }
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn multiset_diff() {
        assert_eq!(diff(&[1, 2, 2, 3], &[2, 3, 1, 2]), (vec![], vec![]));
        assert_eq!(diff(&[1, 2, 2], &[2, 1, 4]), (vec![2], vec![4]));
    }
}
