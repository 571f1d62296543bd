//! What travels on the dataflow's edges: envelopes addressed to one worker of one consumer.
//!
//! Every record on a timely stream is `(target worker, Envelope)`; timely's `Exchange` pact
//! routes it by its target, which the producer computed with the consumer's exchange (Weir's key
//! hash, round robin, forward or broadcast). An envelope carries either a batch for one input
//! slot of the consumer, or the producer's progress for the epoch: its output watermark and its
//! processing-time clock. Every producer worker sends its progress to every consumer worker in
//! every epoch it runs, so a consumer's input watermark is the minimum over all upstream workers
//! of what they said last (a watermark per operator across workers).
//!
//! Batches between workers of one process move as they are; a batch for a worker in another
//! process is encoded with the collection's coder by its producer, and decoded by its consumer
//! with the same coder (every process builds the same plan).

use serde::de::{Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::Timestamp;

/// A record on an edge: the worker it is for, and what it carries.
pub(crate) type Routed = (u32, Envelope);

/// Where an envelope goes in its consumer, and from whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Address {
    /// The producing plan node.
    pub(crate) producer: u32,
    /// The producing worker.
    pub(crate) from: u32,
    /// The consumer's input: `Main(port)` or `Side(index)`.
    pub(crate) slot: WireSlot,
}

/// A consumer's input slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireSlot {
    /// Main input `port`.
    Main(u32),
    /// Side input `index`.
    Side(u32),
}

impl From<weir_runner_core::plan::topology::Slot> for WireSlot {
    fn from(slot: weir_runner_core::plan::topology::Slot) -> Self {
        use weir_runner_core::plan::topology::Slot;
        match slot {
            Slot::Main(p) => WireSlot::Main(p as u32),
            Slot::Side(k) => WireSlot::Side(k as u32),
        }
    }
}

/// One record of an edge.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub(crate) to: Address,
    pub(crate) body: Body,
}

/// What an envelope carries.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) enum Body {
    /// A batch for the slot.
    Data(WireBatch),
    /// The producer worker's output watermark after the epoch, and its processing-time clock
    /// (TestStream's test clock; `None` on the wall clock).
    Progress { watermark: Timestamp, clock: Option<Timestamp> },
}

/// A batch on the wire: as it is between workers of one process, encoded between processes.
#[derive(Clone)]
pub(crate) enum WireBatch {
    /// A batch in memory, with the coder that encodes it should it leave the process.
    Local(Batch, Arc<dyn CollectionOps>),
    /// A batch encoded by its producer.
    Encoded(Vec<u8>),
}

impl WireBatch {
    /// The batch, decoded with `ops` if it came encoded.
    pub(crate) fn into_batch(self, ops: &dyn CollectionOps) -> std::result::Result<Batch, String> {
        match self {
            WireBatch::Local(b, _) => Ok(b),
            WireBatch::Encoded(bytes) => ops.decode_batch(&bytes).map_err(|e| e.to_string()),
        }
    }
}

impl Serialize for WireBatch {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            WireBatch::Encoded(bytes) => s.serialize_bytes(bytes),
            // Producers encode what leaves the process themselves (and report a coder error as
            // the step's); this is the fallback should timely serialize a local batch.
            WireBatch::Local(b, ops) => {
                let bytes = ops.encode_batch(b).map_err(serde::ser::Error::custom)?;
                s.serialize_bytes(&bytes)
            }
        }
    }
}

impl<'de> Deserialize<'de> for WireBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = WireBatch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an encoded batch")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> std::result::Result<WireBatch, E> {
                Ok(WireBatch::Encoded(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> std::result::Result<WireBatch, E> {
                Ok(WireBatch::Encoded(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<WireBatch, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(WireBatch::Encoded(v))
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}
