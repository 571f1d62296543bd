//! Deduplicate: drop repeated elements (or keys) seen within a duration of event time
//! (Beam's `Deduplicate`).
//!
//! Each distinct element (or key) is remembered in keyed state from its first occurrence until
//! the watermark passes its timestamp plus the duration; an event-time timer then forgets it, so
//! state stays bounded in streaming. Elements are compared by their encoded bytes.

use crate::coders::Element;
use crate::do_fn::{DoFn, OnTimerContext, ProcessContext, TimerFiring};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::state::{StateAccess, TimeDomain};
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use std::marker::PhantomData;
use std::time::Duration;

/// The default duration elements are remembered: 10 minutes, as Beam's.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(600);

/// Entry points: `Deduplicate::values()`, `Deduplicate::keyed_values()`.
pub struct Deduplicate;

impl Deduplicate {
    /// Removes repeated elements.
    pub fn values<T: Element>() -> DeduplicateValues<T> {
        DeduplicateValues { duration: DEFAULT_DURATION, _t: PhantomData }
    }
    /// Keeps the first `KV` of each key.
    pub fn keyed_values<K: Element, V: Element>() -> DeduplicateKeyed<K, V> {
        DeduplicateKeyed { duration: DEFAULT_DURATION, _t: PhantomData }
    }
}

/// See [`Deduplicate::values`].
pub struct DeduplicateValues<T> {
    duration: Duration,
    _t: PhantomData<fn(T)>,
}

impl<T> DeduplicateValues<T> {
    /// How long after an element's timestamp (in event time) it is remembered.
    pub fn with_duration(mut self, d: Duration) -> Self {
        self.duration = d;
        self
    }
}

/// See [`Deduplicate::keyed_values`].
pub struct DeduplicateKeyed<K, V> {
    duration: Duration,
    _t: PhantomData<fn(K, V)>,
}

impl<K, V> DeduplicateKeyed<K, V> {
    /// How long after a key's first timestamp (in event time) it is remembered.
    pub fn with_duration(mut self, d: Duration) -> Self {
        self.duration = d;
        self
    }
}

/// Emits the first element of each key and remembers the key until its expiry.
pub struct DedupFn<K, V> {
    duration_ms: i64,
    _t: PhantomData<fn(K, V)>,
}

impl<K, V> Clone for DedupFn<K, V> {
    fn clone(&self) -> Self {
        DedupFn { duration_ms: self.duration_ms, _t: PhantomData }
    }
}

impl<K: Element, V: Element> DoFn for DedupFn<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, V>;
    fn process(&mut self, e: KV<K, V>, ctx: &mut ProcessContext<'_, KV<K, V>>) -> UserResult {
        if ctx.value_state::<bool>("seen").read()?.is_some() {
            return Ok(());
        }
        ctx.value_state::<bool>("seen").write(&true)?;
        let expiry = ctx.timestamp().saturating_add(self.duration_ms);
        ctx.timer("expire", TimeDomain::EventTime).with_no_output_timestamp().set_relative_to(expiry)?;
        ctx.output(e);
        Ok(())
    }
    fn on_timer(&mut self, _: &TimerFiring, ctx: &mut OnTimerContext<'_, KV<K, V>>) -> UserResult {
        ctx.value_state::<bool>("seen").clear()
    }
}

impl<T: Element> PTransform<PCollection<T>> for DeduplicateValues<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let duration_ms = crate::time::duration_millis(self.duration);
        input
            .apply("KeyByElement", Map::new(|t: T| KV::new(t, ())))
            .apply("Deduplicate", ParDo::stateful(DedupFn::<T, ()> { duration_ms, _t: PhantomData }))
            .apply("Keys", Map::new(|kv: KV<T, ()>| kv.key))
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for DeduplicateKeyed<K, V> {
    type Output = PCollection<KV<K, V>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        let duration_ms = crate::time::duration_millis(self.duration);
        input.apply("Deduplicate", ParDo::stateful(DedupFn::<K, V> { duration_ms, _t: PhantomData }))
    }
}
