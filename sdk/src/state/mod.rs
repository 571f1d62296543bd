//! State and timers of stateful DoFns, scoped per key and window.
//!
//! A stateful ParDo (`ParDo::stateful`) gives each `process` and `on_timer` call the
//! [`KeyedState`] of the element's key and window: named cells read and written through typed
//! handles (`ctx.value_state::<T>("id")` and friends) and named timers. Cells hold encoded values,
//! so state can be merged, measured and persisted by runners without knowing its types. Reading
//! returns owned snapshots: later writes never change a value already read.
//!
//! The files: [`cells`] (the typed handles: value, bag, combining, map, set and ordered-list
//! state) and [`timers`] (timers, and a timer as it fires). This file holds what runners keep:
//! [`KeyedState`], its cells and timers, and the scope a call works in.

pub mod cells;
#[cfg(test)]
mod tests;
pub mod timers;

use crate::coders::{Coder, Element, ElementCoder};
use crate::combine_fn::CombineFn;
use crate::error::{UserError, UserResult};
use crate::time::Timestamp;
pub use cells::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
pub use timers::*;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimeDomain {
    /// The input watermark.
    EventTime,
    /// Processing time.
    ProcessingTime,
}

/// One state cell, encoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateCell {
    /// `ValueState`.
    Value(Vec<u8>),
    /// `BagState`.
    Bag(Vec<Vec<u8>>),
    /// `CombiningState`: the accumulator.
    Combining(Vec<u8>),
    /// `MapState`: encoded key to encoded value.
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
    /// `SetState`.
    Set(BTreeSet<Vec<u8>>),
    /// `OrderedListState`: (timestamp, arrival sequence) to value.
    OrderedList(BTreeMap<(Timestamp, u64), Vec<u8>>),
}

impl StateCell {
    fn kind(&self) -> &'static str {
        match self {
            StateCell::Value(_) => "ValueState",
            StateCell::Bag(_) => "BagState",
            StateCell::Combining(_) => "CombiningState",
            StateCell::Map(_) => "MapState",
            StateCell::Set(_) => "SetState",
            StateCell::OrderedList(_) => "OrderedListState",
        }
    }

    /// Approximate bytes held.
    pub fn size_bytes(&self) -> usize {
        match self {
            StateCell::Value(v) | StateCell::Combining(v) => v.len(),
            StateCell::Bag(v) => v.iter().map(Vec::len).sum(),
            StateCell::Map(m) => m.iter().map(|(k, v)| k.len() + v.len()).sum(),
            StateCell::Set(s) => s.iter().map(Vec::len).sum(),
            StateCell::OrderedList(m) => m.values().map(|v| v.len() + 16).sum(),
        }
    }
}

/// The timer family of an operator's own deferred input (a portable splittable DoFn's
/// residuals, which wait in state until their resume time): unlike a user's timers, such a
/// timer keeps its window from expiring until it has fired, holding expiry at its output
/// timestamp, since the input it stands for is not yet processed. User code cannot set timers of
/// this family (family names it declares are its own).
pub const DEFERRED_INPUT: &str = "weir:deferred-input";

/// A timer as set by user code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerData {
    /// Clock.
    pub domain: TimeDomain,
    /// When it fires (it fires once the clock is past this).
    pub fire: Timestamp,
    /// The timestamp of what its callback outputs; holds the output watermark. `None` for
    /// timers set without an output timestamp.
    pub output: Option<Timestamp>,
}

/// The state and timers of one key and window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedState {
    /// Cells by state id.
    pub cells: BTreeMap<String, StateCell>,
    /// Timers by (family, id); plain timers have family "".
    pub timers: BTreeMap<(String, String), TimerData>,
    next_seq: u64,
    #[serde(skip)]
    changed: ChangeFlag,
}

/// Whether user code wrote a key and window's state since the runner last asked. Not part of
/// the state's value: never persisted, and equal whatever it holds.
#[derive(Clone, Copy, Debug, Default)]
struct ChangeFlag(bool);

impl PartialEq for ChangeFlag {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ChangeFlag {}

impl KeyedState {
    /// Whether user code wrote this state (cells or timers) since the last call; resets it.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed.0)
    }
    /// Records a write made by code outside the typed handles (a portable harness's).
    pub fn touch(&mut self) {
        self.changed.0 = true;
    }
    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.timers.is_empty()
    }
    /// Approximate bytes held.
    pub fn size_bytes(&self) -> usize {
        self.cells.iter().map(|(k, c)| k.len() + c.size_bytes()).sum::<usize>() + self.timers.len() * 48
    }
}

/// The time context of a stateful call, for timer validation and relative timers.
#[derive(Clone, Copy, Debug)]
pub struct StateTime {
    /// The stateful ParDo's input watermark.
    pub input_watermark: Timestamp,
    /// Current processing time.
    pub processing_time: Timestamp,
    /// The element's (or firing timer's output) timestamp.
    pub element_timestamp: Timestamp,
    /// End of the window plus allowed lateness: timers may not fire after it.
    pub gc_time: Timestamp,
    /// Whether the job is being drained: its sources have stopped, and what waits for more
    /// input (a splittable DoFn's open-ended rest) is cut short.
    pub draining: bool,
}

impl StateTime {
    /// The time context of a timer callback or expiry: no element, so no element timestamp.
    pub fn at(input_watermark: Timestamp, processing_time: Timestamp, gc_time: Timestamp) -> Self {
        StateTime {
            input_watermark,
            processing_time,
            element_timestamp: crate::time::MIN_TIMESTAMP,
            gc_time,
            draining: false,
        }
    }
}

/// Access to the state of the current key and window (borrowed from a context).
pub struct StateScope<'a> {
    pub(crate) state: Option<&'a mut KeyedState>,
    pub(crate) time: StateTime,
    /// The DoFn's allowed timestamp skew (ms): how far before the element a timer's output
    /// timestamp may be set, as in Beam.
    pub(crate) skew: i64,
}

impl<'a> StateScope<'a> {
    /// No state: the DoFn is not in a stateful ParDo.
    pub(crate) fn none(time: StateTime) -> Self {
        StateScope { state: None, time, skew: 0 }
    }

    fn state(&mut self) -> Result<&mut KeyedState, UserError> {
        self.state.as_deref_mut().ok_or_else(|| -> UserError {
            "state and timers are only available in a stateful ParDo: apply the DoFn with ParDo::stateful(..) on a \
             keyed (KV) input"
                .into()
        })
    }

    /// The state, for a write.
    fn state_mut(&mut self) -> Result<&mut KeyedState, UserError> {
        let state = self.state()?;
        state.changed.0 = true;
        Ok(state)
    }

    /// The cell `id` for a write, created by `make` when missing.
    fn cell<'s>(&'s mut self, id: &str, make: fn() -> StateCell) -> Result<&'s mut StateCell, UserError> {
        let state = self.state_mut()?;
        let cell = state.cells.entry(id.to_string()).or_insert_with(make);
        let expected = make();
        if std::mem::discriminant(cell) != std::mem::discriminant(&expected) {
            return Err(format!("state '{id}' is a {}, not a {}", cell.kind(), expected.kind()).into());
        }
        Ok(cell)
    }

    fn existing(&mut self, id: &str) -> Result<Option<&StateCell>, UserError> {
        Ok(self.state()?.cells.get(id))
    }

    fn remove(&mut self, id: &str) -> UserResult {
        let state = self.state()?;
        if state.cells.remove(id).is_some() {
            state.changed.0 = true;
        }
        Ok(())
    }
}

fn enc<T: Element>(v: &T) -> Result<Vec<u8>, UserError> {
    let mut b = Vec::new();
    ElementCoder::<T>::new().encode(v, &mut b)?;
    Ok(b)
}

fn dec<T: Element>(b: &[u8]) -> Result<T, UserError> {
    Ok(ElementCoder::<T>::new().decode_outer(b)?)
}

/// The state handles, shared by the process and timer contexts.
pub trait StateAccess<'a> {
    /// The state scope of the current key and window.
    fn scope(&mut self) -> &mut StateScope<'a>;

    /// A `ValueState<T>` named `id`.
    fn value_state<T: Element>(&mut self, id: &str) -> ValueState<'_, 'a, T> {
        ValueState { scope: self.scope(), id: id.to_string(), _t: PhantomData }
    }
    /// A `BagState<T>` named `id`.
    fn bag_state<T: Element>(&mut self, id: &str) -> BagState<'_, 'a, T> {
        BagState { scope: self.scope(), id: id.to_string(), _t: PhantomData }
    }
    /// A `CombiningState` of `fn_` named `id`.
    fn combining_state<F: CombineFn>(&mut self, id: &str, fn_: F) -> CombiningState<'_, 'a, F> {
        CombiningState { scope: self.scope(), id: id.to_string(), fn_ }
    }
    /// A `MapState<K, V>` named `id`.
    fn map_state<K: Element, V: Element>(&mut self, id: &str) -> MapState<'_, 'a, K, V> {
        MapState { scope: self.scope(), id: id.to_string(), _t: PhantomData }
    }
    /// A `SetState<T>` named `id`.
    fn set_state<T: Element>(&mut self, id: &str) -> SetState<'_, 'a, T> {
        SetState { scope: self.scope(), id: id.to_string(), _t: PhantomData }
    }
    /// An `OrderedListState<T>` named `id`.
    fn ordered_list_state<T: Element>(&mut self, id: &str) -> OrderedListState<'_, 'a, T> {
        OrderedListState { scope: self.scope(), id: id.to_string(), _t: PhantomData }
    }
    /// The timer `id` in `domain`.
    fn timer(&mut self, id: &str, domain: TimeDomain) -> Timer<'_, 'a> {
        Timer {
            scope: self.scope(),
            family: String::new(),
            id: id.to_string(),
            domain,
            offset: 0,
            period: 0,
            output: None,
        }
    }
    /// The timer `id` of the timer family `family` in `domain` (Beam's `TimerMap`).
    fn timer_in_family(&mut self, family: &str, id: &str, domain: TimeDomain) -> Timer<'_, 'a> {
        Timer {
            scope: self.scope(),
            family: family.to_string(),
            id: id.to_string(),
            domain,
            offset: 0,
            period: 0,
            output: None,
        }
    }
}

/// A timer that fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerFiring {
    /// Timer family ("" for plain timers).
    pub family: String,
    /// Timer id.
    pub id: String,
    /// Clock.
    pub domain: TimeDomain,
    /// When it was set to fire.
    pub fire_timestamp: Timestamp,
    /// Its output timestamp, `None` if set without one.
    pub output_timestamp: Option<Timestamp>,
}
