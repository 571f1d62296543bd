//! Deduplicate: drop repeated elements (or keys) seen within a duration of event time
//! (Beam's `Deduplicate`).
//!
//! Each distinct element (or key) is remembered in keyed state from its first occurrence until
//! the watermark passes its timestamp plus the duration; an event-time timer then forgets it, so
//! state stays bounded in streaming. Elements are compared by their encoded bytes.
//!
//! The composite expands to a stateful ParDo, and carries a [`DeduplicatePayload`] with which
//! runners may run it as one native operator instead (the micro-batch runner's streaming
//! deduplicate, as Spark's `dropDuplicatesWithinWatermark`), with the same results.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::do_fn::{DoFn, OnTimerContext, ProcessContext, TimerFiring};
use crate::error::UserResult;
use crate::kernel::{downcast_batch, Batch, KeyPartitioner, KvPartitioner};
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::state::{StateAccess, TimeDomain};
use crate::time::Timestamp;
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use crate::window::Window;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The typed edge of a native Deduplicate: the runner decides, element by element, which to
/// keep from each element's encoded key, window and timestamp.
pub trait DedupKernel: Send + Sync {
    /// The elements of `input` (a batch of `KV<K, V>`) that `keep` accepts, in order.
    fn retain(
        &self,
        input: Batch,
        keep: &mut dyn FnMut(&[u8], &Window, Timestamp) -> bool,
    ) -> Result<Batch, CoderError>;
}

struct DedupKernelImpl<K, V>(PhantomData<fn(K, V)>);

impl<K: Element, V: Element> DedupKernel for DedupKernelImpl<K, V> {
    fn retain(
        &self,
        input: Batch,
        keep: &mut dyn FnMut(&[u8], &Window, Timestamp) -> bool,
    ) -> Result<Batch, CoderError> {
        let mut elements = downcast_batch::<KV<K, V>>(input)?;
        let coder = ElementCoder::<K>::new();
        let mut key = Vec::new();
        let mut error = None;
        elements.retain(|wv| {
            if error.is_some() {
                return false;
            }
            key.clear();
            match coder.encode(&wv.value.key, &mut key) {
                Ok(()) => keep(&key, &wv.window, wv.timestamp),
                Err(e) => {
                    error = Some(e);
                    false
                }
            }
        });
        match error {
            Some(e) => Err(e),
            None => Ok(Batch::new(elements)),
        }
    }
}

/// What runners need to run a Deduplicate natively: first element per key and window, each
/// key remembered until the watermark passes its first timestamp plus `duration_ms` (or its
/// window expires, if sooner).
pub struct DeduplicatePayload {
    /// Decides per element, by encoded key.
    pub kernel: Arc<dyn DedupKernel>,
    /// Splits the keyed input by key.
    pub partitioner: Arc<dyn KeyPartitioner>,
    /// How long a key is remembered after its first timestamp, ms.
    pub duration_ms: i64,
}

impl DeduplicatePayload {
    /// The payload for input `KV<K, V>` deduplicated by key.
    pub fn new<K: Element, V: Element>(duration_ms: i64) -> Self {
        DeduplicatePayload {
            kernel: Arc::new(DedupKernelImpl::<K, V>(PhantomData)),
            partitioner: Arc::new(KvPartitioner::<K, V>::default()),
            duration_ms,
        }
    }
}

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
        input
            .apply("KeyByElement", Map::new(|t: T| KV::new(t, ())))
            .apply("Deduplicate", DeduplicateKeyed::<T, ()> { duration: self.duration, _t: PhantomData })
            .apply("Keys", Map::new(|kv: KV<T, ()>| kv.key))
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for DeduplicateKeyed<K, V> {
    type Output = PCollection<KV<K, V>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        let duration_ms = crate::time::duration_millis(self.duration);
        input.pipeline().set_composite_payload(Arc::new(DeduplicatePayload::new::<K, V>(duration_ms)));
        input.apply("DedupFn", ParDo::stateful(DedupFn::<K, V> { duration_ms, _t: PhantomData }))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::DEDUPLICATE)
    }
}
