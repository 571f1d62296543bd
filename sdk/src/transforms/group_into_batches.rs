//! GroupIntoBatches: batches of a key's values, by count, by byte size, or after a maximum
//! buffering time, as Beam's `GroupIntoBatches` (a stateful ParDo with timers).

use crate::coders::{Coder, Element, ElementCoder};
use crate::do_fn::{DoFn, OnTimerContext, ProcessContext, TimerFiring};
use crate::error::{UserError, UserResult};
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::state::{StateAccess, TimeDomain};
use crate::time::{Timestamp, MAX_TIMESTAMP};
use crate::transforms::par_do::ParDo;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// A key with a shard id (Beam's `ShardedKey`): [`GroupIntoBatches::with_sharded_key`] batches
/// each key per shard, so one hot key's batches are formed in parallel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShardedKey<K> {
    /// The user's key.
    pub key: K,
    /// An opaque id of the shard that batched it.
    #[serde(with = "serde_bytes")]
    pub shard_id: Vec<u8>,
}

/// The weight of a value for [`GroupIntoBatches::of_byte_size_with`].
pub type Weigher<V> = Arc<dyn Fn(&V) -> u64 + Send + Sync>;

/// Beam's `GroupIntoBatches`: `KV<K, V>` into `KV<K, Vec<V>>`, each batch at most `size` values
/// (or `bytes` bytes), per key and window. A batch is output when it is full, when the maximum
/// buffering duration (processing time) has passed since its first value, and at the latest when
/// its window expires. Each batch carries the earliest timestamp of its values, and the
/// watermark is held there while values wait, so batches are never late.
///
/// The input must be keyed with a deterministically encoded key (checked at validation, as for
/// any stateful ParDo).
///
/// ```
/// use std::time::Duration;
/// use weir_sdk::prelude::*;
/// use weir_sdk::transforms::group_into_batches::GroupIntoBatches;
/// let p = Pipeline::create();
/// let rows = p.apply("Rows", Create::of(vec![KV::new("user".to_string(), 1i64), KV::new("user".to_string(), 2)]));
/// let batches: PCollection<KV<String, Vec<i64>>> = rows.apply(
///     "Batch",
///     GroupIntoBatches::of_size(100).with_max_buffering_duration(Duration::from_secs(5)),
/// );
/// assert!(p.validate().is_ok());
/// ```
pub struct GroupIntoBatches<K, V> {
    params: Params<V>,
    _t: PhantomData<fn(K)>,
}

struct Params<V> {
    size: u64,
    bytes: u64,
    weigher: Option<Weigher<V>>,
    max_buffering_ms: i64,
}

impl<V> Clone for Params<V> {
    fn clone(&self) -> Self {
        Params {
            size: self.size,
            bytes: self.bytes,
            weigher: self.weigher.clone(),
            max_buffering_ms: self.max_buffering_ms,
        }
    }
}

impl<K: Element, V: Element> GroupIntoBatches<K, V> {
    /// Batches of at most `size` values (`size` of 0 is taken as 1).
    pub fn of_size(size: u64) -> Self {
        GroupIntoBatches {
            params: Params { size: size.max(1), bytes: u64::MAX, weigher: None, max_buffering_ms: 0 },
            _t: PhantomData,
        }
    }
    /// Batches of at most `bytes` bytes of encoded values (a value larger than that is a batch
    /// of its own).
    pub fn of_byte_size(bytes: u64) -> Self {
        Self::of_byte_size_with(bytes, encoded_size())
    }
    /// Batches of at most `bytes` bytes, each value weighing `weigher(value)`.
    pub fn of_byte_size_with(bytes: u64, weigher: Weigher<V>) -> Self {
        GroupIntoBatches {
            params: Params { size: u64::MAX, bytes, weigher: Some(weigher), max_buffering_ms: 0 },
            _t: PhantomData,
        }
    }
    /// Also limits a batch to `bytes` bytes of encoded values (with [`GroupIntoBatches::of_size`]).
    pub fn with_byte_size(mut self, bytes: u64) -> Self {
        self.params.bytes = bytes;
        self.params.weigher = Some(encoded_size());
        self
    }
    /// Outputs a batch at the latest `d` of processing time after its first value arrived.
    pub fn with_max_buffering_duration(mut self, d: Duration) -> Self {
        self.params.max_buffering_ms = crate::time::duration_millis(d);
        self
    }
    /// Batches per key and shard, outputting `KV<ShardedKey<K>, Vec<V>>` (Beam's
    /// `withShardedKey`): each worker batches the values it holds of a key on its own shard.
    pub fn with_sharded_key(self) -> GroupIntoBatchesSharded<K, V> {
        GroupIntoBatchesSharded { params: self.params, _t: PhantomData }
    }
}

/// Weighs a value by its encoded size.
fn encoded_size<V: Element>() -> Weigher<V> {
    let coder = ElementCoder::<V>::new();
    Arc::new(move |v: &V| coder.encoded_len(v).map_or(0, |n| n as u64))
}

/// See [`GroupIntoBatches::with_sharded_key`].
pub struct GroupIntoBatchesSharded<K, V> {
    params: Params<V>,
    _t: PhantomData<fn(K)>,
}

const BATCH: &str = "batch";
const COUNT: &str = "numElementsInBatch";
const BYTES: &str = "numBytesInBatch";
const MIN_TS: &str = "minBufferedTs";
/// Fires when the buffering time has passed (processing time).
const BUFFERING: &str = "endOfBuffering";
/// Holds the watermark at the earliest buffered timestamp, and flushes when the window expires.
const HOLD: &str = "watermarkHold";

struct BatchFn<K, V> {
    params: Params<V>,
    _t: PhantomData<fn(K)>,
}

impl<K, V> Clone for BatchFn<K, V> {
    fn clone(&self) -> Self {
        BatchFn { params: self.params.clone(), _t: PhantomData }
    }
}

/// Takes the buffered batch, if any, with its earliest timestamp, and clears the buffer.
fn take_batch<'a, V: Element, S: StateAccess<'a>>(ctx: &mut S) -> Result<Option<(Vec<V>, Timestamp)>, UserError> {
    let values = ctx.bag_state::<V>(BATCH).read()?;
    let min = ctx.value_state::<Timestamp>(MIN_TS).read()?;
    for id in [BATCH, COUNT, BYTES, MIN_TS] {
        ctx.value_state::<()>(id).clear()?;
    }
    Ok(min.filter(|_| !values.is_empty()).map(|at| (values, at)))
}

impl<K: Element, V: Element> DoFn for BatchFn<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, Vec<V>>;

    fn process(&mut self, kv: KV<K, V>, ctx: &mut ProcessContext<'_, KV<K, Vec<V>>>) -> UserResult {
        let ts = ctx.timestamp();
        let key = kv.key;
        let weight = self.params.weigher.as_ref().map(|w| w(&kv.value));
        if let Some(w) = weight {
            let stored = ctx.value_state::<u64>(BYTES).read()?.unwrap_or(0);
            if stored > 0 && stored.saturating_add(w) > self.params.bytes {
                // Adding the value would overflow the byte limit: the batch so far goes first.
                if let Some((values, at)) = take_batch::<V, _>(ctx)? {
                    ctx.output_with_timestamp(KV::new(key.clone(), values), at)?;
                }
                ctx.timer(BUFFERING, TimeDomain::ProcessingTime).clear()?;
                ctx.timer(HOLD, TimeDomain::EventTime).clear()?;
            }
            let stored = ctx.value_state::<u64>(BYTES).read()?.unwrap_or(0);
            ctx.value_state::<u64>(BYTES).write(&stored.saturating_add(w))?;
        }
        ctx.bag_state::<V>(BATCH).add(&kv.value)?;
        let count = ctx.value_state::<u64>(COUNT).read()?.unwrap_or(0) + 1;
        ctx.value_state::<u64>(COUNT).write(&count)?;
        let old_min = ctx.value_state::<Timestamp>(MIN_TS).read()?;
        let min = old_min.map_or(ts, |m| m.min(ts));
        if old_min != Some(min) {
            ctx.value_state::<Timestamp>(MIN_TS).write(&min)?;
            // The hold follows the earliest buffered value; it fires (and flushes) as the window
            // expires.
            ctx.timer(HOLD, TimeDomain::EventTime).with_output_timestamp(min).set_relative_to(MAX_TIMESTAMP)?;
        }
        if count == 1 && self.params.max_buffering_ms > 0 {
            let d = Duration::from_millis(self.params.max_buffering_ms as u64);
            ctx.timer(BUFFERING, TimeDomain::ProcessingTime).offset(d).with_output_timestamp(ts).set_relative()?;
        }
        let bytes = ctx.value_state::<u64>(BYTES).read()?.unwrap_or(0);
        if count >= self.params.size || (weight.is_some() && bytes >= self.params.bytes) {
            if let Some((values, at)) = take_batch::<V, _>(ctx)? {
                ctx.output_with_timestamp(KV::new(key, values), at)?;
            }
            ctx.timer(BUFFERING, TimeDomain::ProcessingTime).clear()?;
            ctx.timer(HOLD, TimeDomain::EventTime).clear()?;
        }
        Ok(())
    }

    fn on_timer(&mut self, timer: &TimerFiring, ctx: &mut OnTimerContext<'_, KV<K, Vec<V>>>) -> UserResult {
        if let Some((values, at)) = take_batch::<V, _>(ctx)? {
            let key = ctx.key::<K>()?;
            ctx.output_with_timestamp(KV::new(key, values), at)?;
        }
        if timer.id == BUFFERING {
            ctx.timer(HOLD, TimeDomain::EventTime).clear()?;
        } else {
            ctx.timer(BUFFERING, TimeDomain::ProcessingTime).clear()?;
        }
        Ok(())
    }

    fn on_window_expiration(&mut self, ctx: &mut OnTimerContext<'_, KV<K, Vec<V>>>) -> UserResult {
        if let Some((values, at)) = take_batch::<V, _>(ctx)? {
            let key = ctx.key::<K>()?;
            ctx.output_with_timestamp(KV::new(key, values), at)?;
        }
        Ok(())
    }

    fn allowed_timestamp_skew_millis(&self) -> i64 {
        // A batch goes out at its earliest value's timestamp, held by the hold timer.
        i64::MAX
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for GroupIntoBatches<K, V> {
    type Output = PCollection<KV<K, Vec<V>>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input.apply("GroupIntoBatches", ParDo::stateful(BatchFn { params: self.params, _t: PhantomData }))
    }
}

/// Keys each value by its key and this instance's shard.
struct AssignShard<K, V> {
    shard: Option<Vec<u8>>,
    _t: PhantomData<fn(K, V)>,
}

impl<K, V> Clone for AssignShard<K, V> {
    fn clone(&self) -> Self {
        // Every copy (one per worker) is a shard of its own.
        AssignShard { shard: None, _t: PhantomData }
    }
}

impl<K: Element, V: Element> DoFn for AssignShard<K, V> {
    type In = KV<K, V>;
    type Out = KV<ShardedKey<K>, V>;
    fn process(&mut self, kv: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let shard = self.shard.get_or_insert_with(|| {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut id = std::process::id().to_le_bytes().to_vec();
            id.extend_from_slice(&n.to_le_bytes());
            id
        });
        ctx.output(KV::new(ShardedKey { key: kv.key, shard_id: shard.clone() }, kv.value));
        Ok(())
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for GroupIntoBatchesSharded<K, V> {
    type Output = PCollection<KV<ShardedKey<K>, Vec<V>>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input
            .apply("AssignShard", ParDo::of(AssignShard { shard: None, _t: PhantomData }))
            .apply("GroupIntoBatches", ParDo::stateful(BatchFn { params: self.params, _t: PhantomData }))
    }
}
