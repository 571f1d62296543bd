//! Typed handles onto a key and window's state cells: value, bag, combining, map, set and
//! ordered-list state, and state read lazily ([`ReadableState`]). Each reads and writes the encoded
//! cell through the call's [`StateScope`].

use super::*;
use crate::coders::Element;
use crate::combine_fn::CombineFn;
use crate::error::{UserError, UserResult};
use crate::time::Timestamp;
use crate::windowed_value::TimestampedValue;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

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
    pub(super) read: std::sync::Arc<ReadFn<T>>,
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
