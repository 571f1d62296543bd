//! Reify (timestamps, windows and panes as values) and WithTimestamps (timestamps from values).

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pane::PaneInfo;
use crate::pipeline::{PCollection, PTransform};
use crate::time::Timestamp;
use crate::transforms::par_do::ParDo;
use crate::window::Window;
use crate::windowed_value::TimestampedValue;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::time::Duration;

/// A value with its timestamp, its window and the pane it came in (Beam's
/// `ValueInSingleWindow`), as [`Reify::windows`] outputs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ValueInSingleWindow<T> {
    /// The value.
    pub value: T,
    /// Its event timestamp.
    pub timestamp: Timestamp,
    /// Its window.
    pub window: Window,
    /// The pane it came in.
    pub pane: PaneInfo,
}

/// Beam's `Reify`: turns the metadata of elements into values. Each output keeps the input's
/// timestamp, window and pane.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::transforms::reify::{Reify, ValueInSingleWindow};
/// let p = Pipeline::create();
/// let words = p.apply("Words", Create::timestamped(vec![TimestampedValue::new("a".to_string(), 5)]));
/// let stamped: PCollection<TimestampedValue<String>> = words.apply("Stamps", Reify::timestamps());
/// let windowed: PCollection<ValueInSingleWindow<String>> = words.apply("Windows", Reify::windows());
/// let keyed = words.apply("Key", WithKeys::of(|w: &String| w.len()));
/// let in_value: PCollection<KV<usize, ValueInSingleWindow<String>>> = keyed.apply("InValue", Reify::windows_in_value());
/// assert!(p.validate().is_ok());
/// ```
pub struct Reify;

impl Reify {
    /// Each element with its timestamp (`TimestampedValue<T>`).
    pub fn timestamps<T: Element>() -> ReifyTransform<ReifyTimestamps<T>> {
        ReifyTransform(ReifyTimestamps(PhantomData))
    }
    /// Each `KV<K, V>` with its timestamp in the value (`KV<K, TimestampedValue<V>>`).
    pub fn timestamps_in_value<K: Element, V: Element>() -> ReifyTransform<ReifyTimestampsInValue<K, V>> {
        ReifyTransform(ReifyTimestampsInValue(PhantomData))
    }
    /// Each element with its timestamp, window and pane (`ValueInSingleWindow<T>`).
    pub fn windows<T: Element>() -> ReifyTransform<ReifyWindows<T>> {
        ReifyTransform(ReifyWindows(PhantomData))
    }
    /// Each `KV<K, V>` with its timestamp, window and pane in the value
    /// (`KV<K, ValueInSingleWindow<V>>`).
    pub fn windows_in_value<K: Element, V: Element>() -> ReifyTransform<ReifyWindowsInValue<K, V>> {
        ReifyTransform(ReifyWindowsInValue(PhantomData))
    }
    /// The inverse of [`Reify::timestamps`] (Beam's `extractTimestampsFromValues`): each
    /// `TimestampedValue<T>` becomes its value at its timestamp, earlier or later than the
    /// element's (any skew is allowed).
    pub fn extract_timestamps_from_values<T: Element>() -> ReifyTransform<ExtractTimestamps<T>> {
        ReifyTransform(ExtractTimestamps(PhantomData))
    }
}

/// One of [`Reify`]'s transforms: a ParDo of the DoFn it holds.
pub struct ReifyTransform<F>(F);

impl<F: DoFn> PTransform<PCollection<F::In>> for ReifyTransform<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<F::In>) -> Self::Output {
        input.apply("Reify", ParDo::of(self.0))
    }
}

/// See [`Reify::timestamps`].
pub struct ReifyTimestamps<T>(PhantomData<fn(T)>);
/// See [`Reify::timestamps_in_value`].
pub struct ReifyTimestampsInValue<K, V>(PhantomData<fn(K, V)>);
/// See [`Reify::windows`].
pub struct ReifyWindows<T>(PhantomData<fn(T)>);
/// See [`Reify::windows_in_value`].
pub struct ReifyWindowsInValue<K, V>(PhantomData<fn(K, V)>);
/// See [`Reify::extract_timestamps_from_values`].
pub struct ExtractTimestamps<T>(PhantomData<fn(T)>);

macro_rules! phantom_clone {
    ($($name:ident<$($p:ident),*>),*) => {$(
        impl<$($p),*> Clone for $name<$($p),*> {
            fn clone(&self) -> Self {
                $name(PhantomData)
            }
        }
    )*};
}
phantom_clone!(ReifyTimestamps<T>, ReifyTimestampsInValue<K, V>, ReifyWindows<T>, ReifyWindowsInValue<K, V>, ExtractTimestamps<T>);

fn in_window<T, O: Element>(value: T, ctx: &ProcessContext<'_, O>) -> ValueInSingleWindow<T> {
    ValueInSingleWindow { value, timestamp: ctx.timestamp(), window: *ctx.window(), pane: *ctx.pane() }
}

impl<T: Element> DoFn for ReifyTimestamps<T> {
    type In = T;
    type Out = TimestampedValue<T>;
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, TimestampedValue<T>>) -> UserResult {
        let timestamp = ctx.timestamp();
        ctx.output(TimestampedValue::new(e, timestamp));
        Ok(())
    }
}

impl<K: Element, V: Element> DoFn for ReifyTimestampsInValue<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, TimestampedValue<V>>;
    fn process(&mut self, e: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let timestamp = ctx.timestamp();
        ctx.output(KV::new(e.key, TimestampedValue::new(e.value, timestamp)));
        Ok(())
    }
}

impl<T: Element> DoFn for ReifyWindows<T> {
    type In = T;
    type Out = ValueInSingleWindow<T>;
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, ValueInSingleWindow<T>>) -> UserResult {
        let v = in_window(e, ctx);
        ctx.output(v);
        Ok(())
    }
}

impl<K: Element, V: Element> DoFn for ReifyWindowsInValue<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, ValueInSingleWindow<V>>;
    fn process(&mut self, e: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let v = in_window(e.value, ctx);
        ctx.output(KV::new(e.key, v));
        Ok(())
    }
}

impl<T: Element> DoFn for ExtractTimestamps<T> {
    type In = TimestampedValue<T>;
    type Out = T;
    fn process(&mut self, e: TimestampedValue<T>, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        ctx.output_with_timestamp(e.value, e.timestamp)
    }
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        i64::MAX
    }
}

/// Beam's `WithTimestamps`: gives each element the timestamp `f(element)`, in the window it
/// was in (apply a `Window` after it to window by the new timestamps).
///
/// A timestamp earlier than the element's fails the pipeline unless it is within the allowed
/// skew ([`WithTimestamps::with_allowed_timestamp_skew`], zero by default), as in Beam. `f`
/// returns a `Timestamp`, never null, so Beam's null-timestamp error cannot happen.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::transforms::reify::WithTimestamps;
/// let p = Pipeline::create();
/// let logs = p.apply("Logs", Create::of(vec![(1_000i64, "start".to_string())]));
/// let stamped = logs.apply("Stamp", WithTimestamps::of(|l: &(i64, String)| l.0));
/// assert!(p.validate().is_ok());
/// ```
pub struct WithTimestamps<T, F> {
    f: F,
    skew: i64,
    _t: PhantomData<fn(T)>,
}

impl<T: Element, F: Fn(&T) -> Timestamp + Clone + Send + Sync + 'static> WithTimestamps<T, F> {
    /// Timestamps from `f`.
    pub fn of(f: F) -> Self {
        WithTimestamps { f, skew: 0, _t: PhantomData }
    }
    /// How far before the element's timestamp a new timestamp may go (Beam's
    /// `withAllowedTimestampSkew`; `Duration::MAX` for any).
    pub fn with_allowed_timestamp_skew(self, skew: Duration) -> Self {
        WithTimestamps { skew: crate::time::duration_millis(skew), ..self }
    }
}

#[derive(Clone)]
struct AddTimestampsFn<T, F> {
    f: F,
    skew: i64,
    _t: PhantomData<fn(T)>,
}

impl<T: Element, F: Fn(&T) -> Timestamp + Clone + Send + Sync + 'static> DoFn for AddTimestampsFn<T, F> {
    type In = T;
    type Out = T;
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        let timestamp = (self.f)(&e);
        ctx.output_with_timestamp(e, timestamp)
    }
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        self.skew
    }
}

impl<T: Element, F: Fn(&T) -> Timestamp + Clone + Send + Sync + 'static> PTransform<PCollection<T>>
    for WithTimestamps<T, F>
{
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input.apply("AddTimestamps", ParDo::of(AddTimestampsFn { f: self.f, skew: self.skew, _t: PhantomData }))
    }
}
