//! State and timers of stateful DoFns, scoped per key and window.
//!
//! A stateful ParDo (`ParDo::stateful`) gives each `process` and `on_timer` call the
//! [`KeyedState`] of the element's key and window: named cells read and written through typed
//! handles (`ctx.value_state::<T>("id")` and friends) and named timers. Cells hold encoded values,
//! so state can be merged, measured and persisted by runners without knowing its types. Reading
//! returns owned snapshots: later writes never change a value already read.

use crate::coders::{Coder, Element, ElementCoder};
use crate::combine_fn::CombineFn;
use crate::error::{UserError, UserResult};
use crate::time::{duration_millis, Timestamp};
use crate::windowed_value::TimestampedValue;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::time::Duration;

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

/// Beam's `ReadableState<T>`: a read of a state cell taken now and carried out when
/// [`ReadableState::read`] is called, so it observes every write made in between (a bag's
/// `is_empty_view()` taken before an `add` reads `false` after it). Views are made by the state
/// handles (`read_view`, `is_empty_view`, a map's `entries_view` and `get_view`, a set's
/// `contains_view`) and read in the same call's context, for the same key and window.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// /// Emits whether each key's bag was empty before the element, through a view taken first.
/// #[derive(Clone)]
/// struct FirstOfKey;
///
/// impl DoFn for FirstOfKey {
///     type In = KV<String, i64>;
///     type Out = bool;
///     fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, bool>) -> UserResult {
///         let empty = ctx.bag_state::<i64>("seen").read_later().is_empty_view();
///         let was_empty = empty.read(ctx)?;
///         ctx.bag_state::<i64>("seen").add(&e.value)?;
///         // The view sees the add.
///         assert!(!empty.read(ctx)?);
///         ctx.output(was_empty);
///         Ok(())
///     }
/// }
///
/// let p = Pipeline::create();
/// p.apply("Create", Create::of(vec![KV::new("a".to_string(), 1i64)])).apply("First", ParDo::stateful(FirstOfKey));
/// assert!(p.validate().is_ok());
/// ```
pub struct ReadableState<T> {
    read: std::sync::Arc<ReadFn<T>>,
}

/// How a [`ReadableState`] reads its cell from a call's state.
type ReadFn<T> = dyn Fn(&mut StateScope<'_>) -> Result<T, UserError> + Send + Sync;

impl<T> Clone for ReadableState<T> {
    fn clone(&self) -> Self {
        ReadableState { read: self.read.clone() }
    }
}

impl<T> ReadableState<T> {
    fn new(read: impl Fn(&mut StateScope<'_>) -> Result<T, UserError> + Send + Sync + 'static) -> Self {
        ReadableState { read: std::sync::Arc::new(read) }
    }
    /// Reads the cell now, through `ctx` (the context of the call that took the view).
    pub fn read<'a, S: StateAccess<'a>>(&self, ctx: &mut S) -> Result<T, UserError> {
        (self.read)(ctx.scope())
    }
    /// A prefetch hint (Beam's `readLater`): state lives in memory, so there is nothing to
    /// fetch ahead; the view is returned for chaining.
    pub fn read_later(self) -> Self {
        self
    }
}

/// Handle on a `ValueState<T>`.
pub struct ValueState<'s, 'a, T> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T: Element> ValueState<'_, '_, T> {
    /// The value, `None` if unset.
    pub fn read(&mut self) -> Result<Option<T>, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Value(b)) => Ok(Some(dec(b)?)),
            Some(other) => Err(format!("state '{}' is a {}, not a ValueState", self.id, other.kind()).into()),
            None => Ok(None),
        }
    }
    /// Sets the value.
    pub fn write(&mut self, v: &T) -> UserResult {
        let b = enc(v)?;
        *self.scope.cell(&self.id, || StateCell::Value(Vec::new()))? = StateCell::Value(b);
        Ok(())
    }
    /// A prefetch hint (Beam's `readLater`); see [`BagState::read_later`].
    pub fn read_later(self) -> Self {
        self
    }
    /// A view of the value, read when [`ReadableState::read`] is called (it sees later writes).
    pub fn read_view(&self) -> ReadableState<Option<T>> {
        let id = self.id.clone();
        ReadableState::new(move |scope| ValueState::<T> { scope, id: id.clone(), _t: PhantomData }.read())
    }
    /// Clears the value.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// Handle on a `BagState<T>`.
pub struct BagState<'s, 'a, T> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T: Element> BagState<'_, '_, T> {
    /// Adds a value.
    pub fn add(&mut self, v: &T) -> UserResult {
        let b = enc(v)?;
        if let StateCell::Bag(items) = self.scope.cell(&self.id, || StateCell::Bag(Vec::new()))? {
            items.push(b);
        }
        Ok(())
    }
    /// A snapshot of the values.
    pub fn read(&mut self) -> Result<Vec<T>, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Bag(items)) => items.iter().map(|b| dec(b)).collect(),
            Some(other) => Err(format!("state '{}' is a {}, not a BagState", self.id, other.kind()).into()),
            None => Ok(Vec::new()),
        }
    }
    /// Whether the bag is empty (without decoding its values).
    pub fn is_empty(&mut self) -> Result<bool, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Bag(items)) => Ok(items.is_empty()),
            Some(other) => Err(format!("state '{}' is a {}, not a BagState", self.id, other.kind()).into()),
            None => Ok(true),
        }
    }
    /// A prefetch hint (Beam's `readLater`): state lives in memory, so there is nothing to
    /// fetch ahead; the handle is returned for chaining.
    pub fn read_later(self) -> Self {
        self
    }
    /// A view of the values, read when [`ReadableState::read`] is called: it sees every write
    /// made after the view was taken (Beam's `BagState` as a `ReadableState`).
    pub fn read_view(&self) -> ReadableState<Vec<T>> {
        let id = self.id.clone();
        ReadableState::new(move |scope| BagState::<T> { scope, id: id.clone(), _t: PhantomData }.read())
    }
    /// A view of whether the bag is empty (Beam's `BagState.isEmpty()`), read when asked, without
    /// decoding the values.
    pub fn is_empty_view(&self) -> ReadableState<bool> {
        let id = self.id.clone();
        ReadableState::new(move |scope| BagState::<T> { scope, id: id.clone(), _t: PhantomData }.is_empty())
    }
    /// Clears the bag.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// Handle on a `CombiningState` of a [`CombineFn`].
pub struct CombiningState<'s, 'a, F> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) fn_: F,
}

impl<F: CombineFn> CombiningState<'_, '_, F> {
    /// The accumulator (a new one if unset).
    pub fn get_accum(&mut self) -> Result<F::Accum, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Combining(b)) => dec(b),
            Some(other) => Err(format!("state '{}' is a {}, not a CombiningState", self.id, other.kind()).into()),
            None => Ok(self.fn_.create_accumulator()),
        }
    }
    fn put(&mut self, acc: &F::Accum) -> UserResult {
        let b = enc(acc)?;
        *self.scope.cell(&self.id, || StateCell::Combining(Vec::new()))? = StateCell::Combining(b);
        Ok(())
    }
    /// Adds an input.
    pub fn add(&mut self, v: F::In) -> UserResult {
        let mut acc = self.get_accum()?;
        self.fn_.add_input(&mut acc, v);
        self.put(&acc)
    }
    /// Merges an accumulator in.
    pub fn add_accum(&mut self, other: F::Accum) -> UserResult {
        let acc = self.get_accum()?;
        let merged = self.fn_.merge_accumulators(vec![acc, other]);
        self.put(&merged)
    }
    /// The combined output.
    pub fn read(&mut self) -> Result<F::Out, UserError> {
        let acc = self.get_accum()?;
        Ok(self.fn_.extract_output(acc))
    }
    /// Whether nothing was added since the last clear (without decoding the accumulator).
    pub fn is_empty(&mut self) -> Result<bool, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Combining(_)) => Ok(false),
            Some(other) => Err(format!("state '{}' is a {}, not a CombiningState", self.id, other.kind()).into()),
            None => Ok(true),
        }
    }
    /// A prefetch hint (Beam's `readLater`); see [`BagState::read_later`].
    pub fn read_later(self) -> Self {
        self
    }
    /// A view of the combined output, read when [`ReadableState::read`] is called.
    pub fn read_view(&self) -> ReadableState<F::Out>
    where
        F: Sync,
    {
        let (id, fn_) = (self.id.clone(), self.fn_.clone());
        ReadableState::new(move |scope| CombiningState { scope, id: id.clone(), fn_: fn_.clone() }.read())
    }
    /// A view of whether the state is empty (Beam's `CombiningState.isEmpty()`).
    pub fn is_empty_view(&self) -> ReadableState<bool>
    where
        F: Sync,
    {
        let (id, fn_) = (self.id.clone(), self.fn_.clone());
        ReadableState::new(move |scope| CombiningState { scope, id: id.clone(), fn_: fn_.clone() }.is_empty())
    }
    /// Clears the accumulator.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// A map state's entries, encoded.
type EncodedMap = BTreeMap<Vec<u8>, Vec<u8>>;

/// Handle on a `MapState<K, V>` (keys compared by encoded bytes).
pub struct MapState<'s, 'a, K, V> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) _t: PhantomData<fn() -> (K, V)>,
}

impl<K: Element, V: Element> MapState<'_, '_, K, V> {
    fn map(&mut self) -> Result<&mut BTreeMap<Vec<u8>, Vec<u8>>, UserError> {
        match self.scope.cell(&self.id, || StateCell::Map(BTreeMap::new()))? {
            StateCell::Map(m) => Ok(m),
            _ => Err("internal error: map cell".into()),
        }
    }
    /// The map for reading (`None` when never written).
    fn map_ref(&mut self) -> Result<Option<&EncodedMap>, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Map(m)) => Ok(Some(m)),
            Some(other) => Err(format!("state '{}' is a {}, not a MapState", self.id, other.kind()).into()),
            None => Ok(None),
        }
    }
    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> UserResult {
        let (k, v) = (enc(key)?, enc(value)?);
        self.map()?.insert(k, v);
        Ok(())
    }
    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Result<Option<V>, UserError> {
        let k = enc(key)?;
        self.map_ref()?.and_then(|m| m.get(&k)).map(|b| dec(b)).transpose()
    }
    /// Sets `key` to `value` unless present; returns the previous value.
    pub fn put_if_absent(&mut self, key: &K, value: &V) -> Result<Option<V>, UserError> {
        let prev = self.get(key)?;
        if prev.is_none() {
            self.put(key, value)?;
        }
        Ok(prev)
    }
    /// Removes `key`.
    pub fn remove(&mut self, key: &K) -> UserResult {
        let k = enc(key)?;
        self.map()?.remove(&k);
        Ok(())
    }
    /// A snapshot of the entries, ordered by encoded key.
    pub fn entries(&mut self) -> Result<Vec<(K, V)>, UserError> {
        self.map_ref()?.into_iter().flatten().map(|(k, v)| Ok((dec(k)?, dec(v)?))).collect()
    }
    /// A snapshot of the keys.
    pub fn keys(&mut self) -> Result<Vec<K>, UserError> {
        self.map_ref()?.into_iter().flat_map(|m| m.keys()).map(|k| dec(k)).collect()
    }
    /// A snapshot of the values.
    pub fn values(&mut self) -> Result<Vec<V>, UserError> {
        self.map_ref()?.into_iter().flat_map(|m| m.values()).map(|v| dec(v)).collect()
    }
    /// Whether the map is empty.
    pub fn is_empty(&mut self) -> Result<bool, UserError> {
        Ok(self.map_ref()?.is_none_or(|m| m.is_empty()))
    }
    /// A prefetch hint (Beam's `readLater`); see [`BagState::read_later`].
    pub fn read_later(self) -> Self {
        self
    }
    fn view<R: 'static>(
        &self,
        f: impl Fn(&mut MapState<'_, '_, K, V>) -> Result<R, UserError> + Send + Sync + 'static,
    ) -> ReadableState<R> {
        let id = self.id.clone();
        ReadableState::new(move |scope| f(&mut MapState::<K, V> { scope, id: id.clone(), _t: PhantomData }))
    }
    /// A view of `key`'s value (Beam's `MapState.get`), read when asked.
    pub fn get_view(&self, key: &K) -> ReadableState<Option<V>> {
        let key = key.clone();
        self.view(move |m| m.get(&key))
    }
    /// A view of the entries (Beam's `MapState.entries()`): read when asked, it sees every put
    /// and remove made after it was taken.
    pub fn entries_view(&self) -> ReadableState<Vec<(K, V)>> {
        self.view(|m| m.entries())
    }
    /// A view of the keys.
    pub fn keys_view(&self) -> ReadableState<Vec<K>> {
        self.view(|m| m.keys())
    }
    /// A view of the values.
    pub fn values_view(&self) -> ReadableState<Vec<V>> {
        self.view(|m| m.values())
    }
    /// A view of whether the map is empty (Beam's `MapState.isEmpty()`).
    pub fn is_empty_view(&self) -> ReadableState<bool> {
        self.view(|m| m.is_empty())
    }
    /// Clears the map.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// Handle on a `SetState<T>` (elements compared by encoded bytes).
pub struct SetState<'s, 'a, T> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T: Element> SetState<'_, '_, T> {
    fn set(&mut self) -> Result<&mut BTreeSet<Vec<u8>>, UserError> {
        match self.scope.cell(&self.id, || StateCell::Set(BTreeSet::new()))? {
            StateCell::Set(s) => Ok(s),
            _ => Err("internal error: set cell".into()),
        }
    }
    /// The set for reading (`None` when never written).
    fn set_ref(&mut self) -> Result<Option<&BTreeSet<Vec<u8>>>, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::Set(s)) => Ok(Some(s)),
            Some(other) => Err(format!("state '{}' is a {}, not a SetState", self.id, other.kind()).into()),
            None => Ok(None),
        }
    }
    /// Adds `v`.
    pub fn add(&mut self, v: &T) -> UserResult {
        let b = enc(v)?;
        self.set()?.insert(b);
        Ok(())
    }
    /// Adds `v` unless present; returns whether it was added.
    pub fn add_if_absent(&mut self, v: &T) -> Result<bool, UserError> {
        let b = enc(v)?;
        Ok(self.set()?.insert(b))
    }
    /// Whether `v` is present.
    pub fn contains(&mut self, v: &T) -> Result<bool, UserError> {
        let b = enc(v)?;
        Ok(self.set_ref()?.is_some_and(|s| s.contains(&b)))
    }
    /// Removes `v`.
    pub fn remove(&mut self, v: &T) -> UserResult {
        let b = enc(v)?;
        self.set()?.remove(&b);
        Ok(())
    }
    /// A snapshot of the elements.
    pub fn read(&mut self) -> Result<Vec<T>, UserError> {
        self.set_ref()?.into_iter().flatten().map(|b| dec(b)).collect()
    }
    /// Whether the set is empty.
    pub fn is_empty(&mut self) -> Result<bool, UserError> {
        Ok(self.set_ref()?.is_none_or(|s| s.is_empty()))
    }
    /// A prefetch hint (Beam's `readLater`); see [`BagState::read_later`].
    pub fn read_later(self) -> Self {
        self
    }
    fn view<R: 'static>(
        &self,
        f: impl Fn(&mut SetState<'_, '_, T>) -> Result<R, UserError> + Send + Sync + 'static,
    ) -> ReadableState<R> {
        let id = self.id.clone();
        ReadableState::new(move |scope| f(&mut SetState::<T> { scope, id: id.clone(), _t: PhantomData }))
    }
    /// A view of whether `v` is present (Beam's `SetState.contains`), read when asked.
    pub fn contains_view(&self, v: &T) -> ReadableState<bool> {
        let v = v.clone();
        self.view(move |s| s.contains(&v))
    }
    /// A view of the elements.
    pub fn read_view(&self) -> ReadableState<Vec<T>> {
        self.view(|s| s.read())
    }
    /// A view of whether the set is empty (Beam's `SetState.isEmpty()`).
    pub fn is_empty_view(&self) -> ReadableState<bool> {
        self.view(|s| s.is_empty())
    }
    /// Clears the set.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// Handle on an `OrderedListState<T>`: values sorted by timestamp.
pub struct OrderedListState<'s, 'a, T> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) id: String,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T: Element> OrderedListState<'_, '_, T> {
    /// Adds a value at its timestamp.
    pub fn add(&mut self, v: &TimestampedValue<T>) -> UserResult {
        let b = enc(&v.value)?;
        let state = self.scope.state_mut()?;
        let seq = state.next_seq;
        state.next_seq += 1;
        if let StateCell::OrderedList(m) = self.scope.cell(&self.id, || StateCell::OrderedList(BTreeMap::new()))? {
            m.insert((v.timestamp, seq), b);
        }
        Ok(())
    }
    /// The values with timestamps in `[from, to)`, in timestamp order.
    pub fn read_range(&mut self, from: Timestamp, to: Timestamp) -> Result<Vec<TimestampedValue<T>>, UserError> {
        match self.scope.existing(&self.id)? {
            Some(StateCell::OrderedList(m)) => {
                m.range((from, 0)..(to, 0)).map(|((ts, _), b)| Ok(TimestampedValue::new(dec(b)?, *ts))).collect()
            }
            Some(other) => Err(format!("state '{}' is a {}, not an OrderedListState", self.id, other.kind()).into()),
            None => Ok(Vec::new()),
        }
    }
    /// Every value, in timestamp order.
    pub fn read(&mut self) -> Result<Vec<TimestampedValue<T>>, UserError> {
        self.read_range(Timestamp::MIN, Timestamp::MAX)
    }
    /// Removes the values with timestamps in `[from, to)`.
    pub fn clear_range(&mut self, from: Timestamp, to: Timestamp) -> UserResult {
        if let StateCell::OrderedList(m) = self.scope.cell(&self.id, || StateCell::OrderedList(BTreeMap::new()))? {
            let keys: Vec<(Timestamp, u64)> = m.range((from, 0)..(to, 0)).map(|(k, _)| *k).collect();
            for k in keys {
                m.remove(&k);
            }
        }
        Ok(())
    }
    /// Clears the list.
    pub fn clear(&mut self) -> UserResult {
        self.scope.remove(&self.id)
    }
}

/// Handle on a timer (Beam's `Timer`): `ctx.timer("id", TimeDomain::EventTime).set(ts)`.
pub struct Timer<'s, 'a> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) family: String,
    pub(crate) id: String,
    pub(crate) domain: TimeDomain,
    pub(crate) offset: i64,
    pub(crate) period: i64,
    pub(crate) output: Option<Option<Timestamp>>,
}

impl Timer<'_, '_> {
    /// Adds `d` to the relative target.
    pub fn offset(mut self, d: Duration) -> Self {
        self.offset = duration_millis(d);
        self
    }
    /// Rounds the relative target up to a multiple of `period`.
    pub fn align(mut self, period: Duration) -> Self {
        self.period = duration_millis(period);
        self
    }
    /// Sets the timestamp of what the callback outputs (and the watermark hold). As in Beam, a
    /// timestamp set here must not be before the element's (or firing timer's) timestamp; one
    /// left unset defaults to the firing time (event time) or the element's timestamp
    /// (processing time) and is not checked against the element.
    pub fn with_output_timestamp(mut self, ts: Timestamp) -> Self {
        self.output = Some(Some(ts));
        self
    }
    /// Sets no output timestamp: no watermark hold, and the callback cannot output.
    pub fn with_no_output_timestamp(mut self) -> Self {
        self.output = Some(None);
        self
    }

    /// Sets an event-time timer to fire at `target` (absolute; processing-time timers must use
    /// [`Timer::set_relative`]).
    pub fn set(self, target: Timestamp) -> UserResult {
        // Outside a stateful ParDo there is no window to check against: say what is missing.
        self.scope.state()?;
        if self.domain == TimeDomain::ProcessingTime {
            return Err(format!(
                "Can't set an absolute processing-time timer '{}'; use offset(..).set_relative()",
                self.id
            )
            .into());
        }
        if target > self.scope.time.gc_time {
            return Err(format!(
                "Attempted to set event time timer '{}' for {target} but that is after the expiration of window \
                 (end of window plus allowed lateness is {})",
                self.id, self.scope.time.gc_time
            )
            .into());
        }
        self.store(target)
    }

    /// Sets the timer relative to now (input watermark or processing time) plus the offset,
    /// aligned to the period (Java's truncating `%`, as Beam's).
    pub fn set_relative(self) -> UserResult {
        self.scope.state()?;
        let now = match self.domain {
            TimeDomain::EventTime => self.scope.time.input_watermark,
            TimeDomain::ProcessingTime => self.scope.time.processing_time,
        };
        let mut target = if self.period == 0 {
            now.saturating_add(self.offset)
        } else {
            let r = now.saturating_add(self.offset) % self.period;
            if r == 0 {
                now
            } else {
                now + self.period - r
            }
        };
        if self.domain == TimeDomain::EventTime {
            target = target.min(self.scope.time.gc_time);
        }
        self.store(target)
    }

    fn store(self, target: Timestamp) -> UserResult {
        let time = self.scope.time;
        // As Beam: only an output timestamp the user set is checked against the element's; a
        // defaulted one is the firing time (event time) or the element's timestamp (processing
        // time), even when the firing time is before the element (a relative timer set while the
        // input watermark is behind it, as after a GroupByKey in the global window).
        let (output, explicit) = match self.output {
            None => (
                Some(match self.domain {
                    TimeDomain::EventTime => target,
                    TimeDomain::ProcessingTime => time.element_timestamp,
                }),
                false,
            ),
            Some(o) => (o, true),
        };
        if let Some(o) = output {
            if explicit && o < time.element_timestamp.saturating_sub(self.scope.skew) {
                return Err(format!(
                    "Cannot set timer '{}' with output timestamp {o} before the element timestamp {} (minus the \
                     DoFn's allowed timestamp skew of {} ms)",
                    self.id, time.element_timestamp, self.scope.skew
                )
                .into());
            }
            let limit = if self.domain == TimeDomain::EventTime { target } else { time.gc_time };
            if o > limit {
                return Err(format!(
                    "Cannot set timer '{}' with output timestamp {o} after {} ({})",
                    self.id,
                    if self.domain == TimeDomain::EventTime { "its firing time" } else { "the window's expiration" },
                    limit
                )
                .into());
            }
        }
        let domain = self.domain;
        self.scope.state_mut()?.timers.insert((self.family, self.id), TimerData { domain, fire: target, output });
        Ok(())
    }

    /// Sets an event-time timer at `target`, clamped to the window's expiry instead of failing
    /// when beyond it (for timers whose purpose is cleanup).
    pub fn set_relative_to(self, target: Timestamp) -> UserResult {
        let gc = self.scope.time.gc_time;
        self.set(target.min(gc))
    }

    /// Deletes the timer.
    pub fn clear(self) -> UserResult {
        let state = self.scope.state()?;
        if state.timers.remove(&(self.family, self.id)).is_some() {
            state.changed.0 = true;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(state: &mut KeyedState) -> StateScope<'_> {
        StateScope { state: Some(state), time: StateTime::at(0, 0, 100), skew: 0 }
    }

    #[test]
    fn emptiness_is_answered_without_decoding_values() {
        let mut state = KeyedState::default();
        let mut s = scope(&mut state);
        BagState::<String> { scope: &mut s, id: "bag".into(), _t: PhantomData }.add(&"x".to_string()).unwrap();
        // The two bytes of "x" are no nine-byte array: a read fails, but emptiness needs no
        // decoding.
        let mut wrong = BagState::<[u8; 9]> { scope: &mut s, id: "bag".into(), _t: PhantomData };
        assert!(wrong.read().is_err());
        assert!(!wrong.is_empty().unwrap());
        let view = wrong.is_empty_view();
        let mut other = KeyedState::default();
        let mut empty = scope(&mut other);
        assert!((view.read)(&mut empty).unwrap(), "a view reads the scope it is read in");
    }
}
