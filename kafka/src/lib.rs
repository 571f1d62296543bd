//! # Kafka for Weir
//!
//! `KafkaIO` reads and writes Apache Kafka topics, with Beam's names where they fit, on every
//! Weir runner.
//!
//! ```no_run
//! use weir_kafka::{KafkaIO, Json, StartOffset, TimestampPolicy};
//! use weir_sdk::prelude::*;
//! # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)] struct Bid { price: u64 }
//!
//! let p = Pipeline::create();
//! let bids = p.apply(
//!     "ReadBids",
//!     KafkaIO::read::<Vec<u8>, Json<Bid>>()
//!         .with_bootstrap_servers("127.0.0.1:9092")
//!         .with_topic("bids")
//!         .with_start(StartOffset::Earliest)
//!         .with_timestamp_policy(TimestampPolicy::CreateTime { max_delay: std::time::Duration::from_secs(5) }),
//! );
//! ```
//!
//! ## Reading
//!
//! [`KafkaIO::read`] is a splittable DoFn per topic partition (see [`mod@read`]): partitions are
//! found, and found again while an unbounded read runs; each is read over a range of offsets
//! that grows. The offsets still to read are the restrictions the runner checkpoints, so a
//! query restarted from its checkpoint reads every record exactly once; the read never
//! resumes from a consumer group. A read with an end ([`KafkaRead::to_latest`],
//! [`KafkaRead::with_end`]) is bounded, and its pipeline runs as a batch.
//!
//! Keys and values decode through [`KafkaDecode`]: `Vec<u8>`, `String` (UTF-8), [`Json`] of any
//! serde type, and `Option` of these for nulls. A record that does not decode goes through the
//! read's bad-record policy: fail naming the topic, partition and offset (the default), skip it
//! with a count (`kafka:bad-records`), or keep it in a dead-letter file.
//!
//! The read reports, per partition, `kafka:records-read/TOPIC-P`, `kafka:bytes-read/TOPIC-P`
//! and the gauge `kafka:offsets-behind-latest/TOPIC-P`; the distribution
//! `kafka:offsets-behind-latest` holds every partition's lag as each read of it ended, so its
//! maximum and mean are Spark's `maxOffsetsBehindLatest` and `avgOffsetsBehindLatest`.
//!
//! ## Writing
//!
//! [`KafkaIO::write`] writes `KV`s (and [`KafkaWrite::values`] values) through
//! [`KafkaEncode`]. On the micro-batch and timely runners each batch (epoch) is one Kafka
//! transaction, committed with the batch, exactly once across crashes and restarts (see
//! [`mod@write`]); on the direct runner each bundle is one. Without transactions the sink is at
//! least once.
//!
//! ## Faults
//!
//! Brokers that cannot be reached fail the read or the write when it starts, within the
//! connection's timeout (30 s unless told), naming the address. A broker lost while the
//! pipeline runs is retried by the client; once it has not answered for the timeout, the
//! query fails naming the broker, the partition and the offset. Restarted from its checkpoint,
//! the query reads on from the checkpointed offsets, and its sink skips the batches it
//! committed.

pub mod client;
pub mod codec;
pub mod read;
pub mod write;

pub use client::Connection;
pub use codec::{Json, KafkaDecode, KafkaEncode};
pub use read::{EndOffset, KafkaPartition, KafkaRead, KafkaRecord, KafkaTimestampType, StartOffset, TimestampPolicy};
pub use write::{KafkaPartitioner, KafkaWrite, KafkaWriteValues};

/// Kafka's read and write (Beam's `KafkaIO`).
pub struct KafkaIO;

impl KafkaIO {
    /// A read of records with keys `K` and values `V`: `KafkaIO::read::<String, Json<Bid>>()`.
    pub fn read<K: KafkaDecode, V: KafkaDecode>() -> KafkaRead<K, V> {
        KafkaRead::new()
    }
    /// A write of `KV<K, V>`s.
    pub fn write<K: KafkaEncode, V: KafkaEncode>() -> KafkaWrite<K, V> {
        KafkaWrite::new()
    }
}
