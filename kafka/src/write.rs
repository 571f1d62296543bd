//! `KafkaIO::write()`: keys and values to a topic, exactly once by transactions.
//!
//! The write is a [`weir_sdk::io::CommitSink`]: the runner hands it each batch's (epoch's)
//! output when it commits the batch, before it records the commit in its checkpoint. With
//! transactions (the default) the batch goes to Kafka in one transaction, which also commits
//! the batch's id as the offset of a consumer group of the sink's own (Beam's
//! `KafkaExactlyOnceSink` keeps its sequence numbers the same way). A batch replayed after a
//! crash finds its id committed and writes nothing; one whose transaction never committed is
//! written again. The sink's transactional id is the same across restarts of a checkpointed
//! query, so the producer of a restarted run fences the one it replaces and aborts its open
//! transaction. Readers see the output once they read `read_committed` (Weir's read does).
//!
//! Without transactions ([`KafkaWrite::without_transactions`]) the producer is idempotent, and
//! the sink is at least once: a batch replayed after a crash may write its records again.

use crate::client::Connection;
use crate::codec::KafkaEncode;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_sdk::batch::downcast_batch;
use weir_sdk::io::{CommitSink, CommitSinkWriter, WriteCommitted};
use weir_sdk::kernel::Batch;
use weir_sdk::transforms::map::Map;
use weir_sdk::{PCollection, PDone, PTransform, UserResult, KV};

/// Chooses a record's partition from its key, its value and the topic's partition count.
pub type KafkaPartitioner<K, V> = Arc<dyn Fn(&K, &V, i32) -> i32 + Send + Sync>;

/// Writes `KV`s to a topic (see [`crate::KafkaIO::write`]).
pub struct KafkaWrite<K, V> {
    conn: Connection,
    topic: String,
    transactions: bool,
    partitioner: Option<KafkaPartitioner<K, V>>,
    input_timestamp: bool,
}

impl<K: KafkaEncode, V: KafkaEncode> KafkaWrite<K, V> {
    pub(crate) fn new() -> Self {
        KafkaWrite {
            conn: Connection::new(""),
            topic: String::new(),
            transactions: true,
            partitioner: None,
            input_timestamp: false,
        }
    }
    /// Gives each record its element's event time as its create time (Beam's
    /// `withInputTimestamp`), so a read with [`crate::TimestampPolicy::CreateTime`] sees the
    /// event times again. Without it the producer stamps the time it sends. Brokers delete
    /// records older than a topic's retention (7 days by default) by these times.
    pub fn with_input_timestamp(mut self) -> Self {
        self.input_timestamp = true;
        self
    }
    /// The brokers, `host:port[,host:port...]`.
    pub fn with_bootstrap_servers(mut self, servers: &str) -> Self {
        self.conn.bootstrap_servers = servers.to_string();
        self
    }
    /// The topic written (it must exist, or the brokers must create topics when asked).
    pub fn with_topic(mut self, topic: &str) -> Self {
        self.topic = topic.to_string();
        self
    }
    /// A producer setting, passed through to the client (Beam's
    /// `withProducerConfigUpdates`).
    pub fn with_producer_config(mut self, key: &str, value: &str) -> Self {
        self.conn.config.insert(key.to_string(), value.to_string());
        self
    }
    /// How long the brokers may be unreachable before the write fails (30 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.conn.timeout = timeout;
        self
    }
    /// Chooses each record's partition; without one, the client hashes the key (records
    /// without a key are spread).
    pub fn with_partitioner(mut self, f: impl Fn(&K, &V, i32) -> i32 + Send + Sync + 'static) -> Self {
        self.partitioner = Some(Arc::new(f));
        self
    }
    /// Writes without transactions, with the idempotent producer: at least once (a batch
    /// replayed after a crash may be written twice).
    pub fn without_transactions(mut self) -> Self {
        self.transactions = false;
        self
    }
    /// The sink this write commits to: what a runner opens for a run (for tests of the
    /// protocol, and runners of one's own).
    pub fn sink(self) -> Arc<dyn CommitSink> {
        Arc::new(KafkaSink {
            conn: self.conn,
            topic: self.topic,
            transactions: self.transactions,
            partitioner: self.partitioner,
            input_timestamp: self.input_timestamp,
        })
    }
    /// Writes values only, with no key (Beam's `values()`).
    pub fn values(self) -> KafkaWriteValues<V> {
        KafkaWriteValues(KafkaWrite {
            conn: self.conn,
            topic: self.topic,
            transactions: self.transactions,
            partitioner: None,
            input_timestamp: self.input_timestamp,
        })
    }
}

/// Writes values with no key (see [`KafkaWrite::values`]).
pub struct KafkaWriteValues<V>(KafkaWrite<(), V>);

impl KafkaEncode for () {
    fn encode(&self) -> Result<Option<std::borrow::Cow<'_, [u8]>>, String> {
        Ok(None)
    }
}

impl<V: KafkaEncode> PTransform<PCollection<V>> for KafkaWriteValues<V> {
    type Output = PDone;
    fn expand(self, input: PCollection<V>) -> PDone {
        input.apply("WithoutKeys", Map::new(|v: V| KV::new((), v))).apply("Write", self.0)
    }
}

impl<K: KafkaEncode, V: KafkaEncode> PTransform<PCollection<KV<K, V>>> for KafkaWrite<K, V> {
    type Output = PDone;
    fn expand(self, input: PCollection<KV<K, V>>) -> PDone {
        let p = input.pipeline().clone();
        if self.conn.bootstrap_servers.is_empty() {
            p.record_error(&p.current_step(), "a Kafka write needs bootstrap servers: with_bootstrap_servers");
        }
        if self.topic.is_empty() {
            p.record_error(&p.current_step(), "a Kafka write needs a topic: with_topic");
        }
        let sink = KafkaSink {
            conn: self.conn,
            topic: self.topic,
            transactions: self.transactions,
            partitioner: self.partitioner,
            input_timestamp: self.input_timestamp,
        };
        input.apply("Commit", WriteCommitted::to(Arc::new(sink)))
    }
}

struct KafkaSink<K, V> {
    conn: Connection,
    topic: String,
    transactions: bool,
    partitioner: Option<KafkaPartitioner<K, V>>,
    input_timestamp: bool,
}

impl<K: KafkaEncode, V: KafkaEncode> CommitSink for KafkaSink<K, V> {
    fn describe(&self) -> String {
        let how = if self.transactions { "transactional" } else { "at least once" };
        format!("Kafka {} topic {} ({how})", self.conn.bootstrap_servers, self.topic)
    }

    fn open(&self, owner: &str) -> UserResult<Box<dyn CommitSinkWriter>> {
        // The sink's identity: the same for every run of a checkpointed query, another for
        // every other run.
        // A hash stable across builds: a restart by a newer build must find the same marker.
        let h = [owner, &self.topic, &self.conn.bootstrap_servers]
            .iter()
            .fold(weir_sdk::kernel::FNV1A_BASIS, |h, part| weir_sdk::kernel::fnv1a(fnv1a_sep(h), part.as_bytes()));
        let id = format!("weir-sink-{h:016x}");
        let timeout_ms = self.conn.timeout.as_millis().to_string();
        let mut settings = vec![("message.timeout.ms", timeout_ms.as_str()), ("enable.idempotence", "true")];
        if self.transactions {
            settings.push(("transactional.id", id.as_str()));
            settings.push(("transaction.timeout.ms", "60000"));
        }
        let producer: BaseProducer<Deliveries> = self
            .conn
            .client_config(&settings)
            .create_with_context(Deliveries::default())
            .map_err(|e| format!("cannot make a Kafka producer for {}: {e}", self.conn.bootstrap_servers))?;
        let partitions = topic_partitions(&self.conn, &producer, &self.topic)?;
        let marker = if self.transactions {
            producer.init_transactions(self.conn.timeout).map_err(|e| self.conn.unreachable(e))?;
            Some(self.conn.consumer(&[("group.id", id.as_str())])?)
        } else {
            None
        };
        Ok(Box::new(KafkaWriter {
            conn: self.conn.clone(),
            topic: self.topic.clone(),
            partitions,
            partitioner: self.partitioner.clone(),
            input_timestamp: self.input_timestamp,
            producer,
            marker,
            id,
            last_committed: None,
        }))
    }
}

/// A separator between the parts of a hashed identity, so that ("ab", "c") and ("a", "bc")
/// differ.
fn fnv1a_sep(h: u64) -> u64 {
    weir_sdk::kernel::fnv1a(h, &[0xff])
}

/// The topic's partition count; an error naming the topic when the brokers neither have it
/// nor create it.
fn topic_partitions(conn: &Connection, producer: &BaseProducer<Deliveries>, topic: &str) -> Result<i32, String> {
    let began = Instant::now();
    loop {
        let meta = producer.client().fetch_metadata(Some(topic), conn.timeout).map_err(|e| conn.unreachable(e))?;
        if let Some(t) = meta.topics().iter().find(|t| t.name() == topic) {
            if t.error().is_none() && !t.partitions().is_empty() {
                return Ok(t.partitions().len() as i32);
            }
        }
        if began.elapsed() > conn.timeout.min(Duration::from_secs(5)) {
            return Err(format!("Kafka at {} has no topic {topic}, and did not create it", conn.bootstrap_servers));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether `e` says the group coordinator is not there yet (moving, or loading its log).
fn coordinator_not_ready(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::NotCoordinator | C::CoordinatorLoadInProgress | C::CoordinatorNotAvailable)
    )
}

/// Counts the producer's failed deliveries, keeping the first error.
#[derive(Default)]
struct Deliveries {
    failed: Mutex<(u64, Option<String>)>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            f.0 += 1;
            f.1.get_or_insert_with(|| {
                format!("a record to {} partition {} was not delivered: {e}", m.topic(), m.partition())
            });
        }
    }
}

struct KafkaWriter<K, V> {
    conn: Connection,
    topic: String,
    partitions: i32,
    partitioner: Option<KafkaPartitioner<K, V>>,
    input_timestamp: bool,
    producer: BaseProducer<Deliveries>,
    /// With transactions: a consumer of the sink's group, whose offset on the topic's first
    /// partition is the next batch id to write. It is asked before every batch: the broker
    /// holds the truth, also after a commit whose outcome the writer never learnt.
    marker: Option<BaseConsumer>,
    id: String,
    /// The last batch this writer committed, in this run.
    last_committed: Option<u64>,
}

/// The metadata of the sink's marker when every batch commits it (output or not): a marker
/// behind the batch being committed then means the broker lost batches it had acknowledged.
/// A marker without it (written by an older Weir, which committed only batches with output)
/// may lag behind legitimately.
const EVERY_BATCH: &str = "weir:every-batch:v1";

impl<K: KafkaEncode, V: KafkaEncode> KafkaWriter<K, V> {
    /// The next batch id the sink has not committed, and whether every batch before it was
    /// committed ([`EVERY_BATCH`]).
    fn committed_through(&self, marker: &BaseConsumer) -> Result<(u64, bool), String> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, 0);
        // A coordinator that is moving or still loading (a broker's first use of consumer
        // groups creates their log) answers so for a while: asked again until the timeout.
        let began = Instant::now();
        let got = loop {
            match marker.committed_offsets(tpl.clone(), self.conn.timeout) {
                Ok(got) => break got,
                Err(e) if began.elapsed() < self.conn.timeout && coordinator_not_ready(&e) => {
                    tracing::debug!("{}: {e}; asking again", self.place());
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(self.conn.unreachable(e)),
            }
        };
        let found = got.find_partition(&self.topic, 0);
        let every = found.as_ref().is_some_and(|e| e.metadata() == EVERY_BATCH);
        Ok(match found.map(|e| e.offset()) {
            Some(Offset::Offset(o)) if o > 0 => (o as u64, every),
            _ => (0, false),
        })
    }

    /// An error if the broker's record of the sink's commits (`next`, the first batch it does
    /// not have) has lost batches Weir committed before `batch_id`.
    fn check_no_gap(&self, batch_id: u64, next: u64, every_batch: bool) -> Result<(), String> {
        let lost_from = match self.last_committed {
            // Committed in this run, and forgotten since.
            Some(last) if next <= last => Some((next, last)),
            // Every batch commits the marker, so the runner committed those before this one.
            _ if every_batch && next < batch_id => Some((next, batch_id - 1)),
            _ => None,
        };
        match lost_from {
            Some((from, to)) => Err(format!(
                "{} ({}): the broker's record of the sink's commits ends before batch {from}, but batches {from} to \
                 {to} were committed to it: the broker lost writes it had acknowledged (does it keep what it \
                 acknowledges?), and their output with them; not writing on",
                self.place(),
                self.id
            )),
            None => Ok(()),
        }
    }

    fn send_all(&self, batches: Vec<Batch>) -> UserResult<u64> {
        let mut sent = 0;
        for b in batches {
            for wv in downcast_batch::<KV<K, V>>(b)? {
                let key = wv.value.key.encode().map_err(|e| format!("Kafka topic {}: key: {e}", self.topic))?;
                let value = wv.value.value.encode().map_err(|e| format!("Kafka topic {}: value: {e}", self.topic))?;
                let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
                if let Some(k) = key.as_deref() {
                    record = record.key(k);
                }
                if let Some(v) = value.as_deref() {
                    record = record.payload(v);
                }
                // Kafka's timestamps are milliseconds since the epoch, not negative.
                if self.input_timestamp && (0..weir_sdk::time::MAX_TIMESTAMP).contains(&wv.timestamp) {
                    record = record.timestamp(wv.timestamp);
                }
                if let Some(f) = &self.partitioner {
                    let p = f(&wv.value.key, &wv.value.value, self.partitions);
                    if !(0..self.partitions).contains(&p) {
                        return Err(format!(
                            "the partitioner of Kafka topic {} chose partition {p} of {}",
                            self.topic, self.partitions
                        )
                        .into());
                    }
                    record = record.partition(p);
                }
                let began = Instant::now();
                loop {
                    match self.producer.send(record) {
                        Ok(()) => break,
                        Err((
                            rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                            r,
                        )) => {
                            if began.elapsed() > self.conn.timeout {
                                return Err(self.conn.unreachable("the producer's queue stayed full").into());
                            }
                            record = r;
                            self.producer.poll(Duration::from_millis(10));
                        }
                        Err((e, _)) => return Err(format!("{}: {e}", self.place()).into()),
                    }
                }
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// Where the writer writes, for errors: the brokers and the topic.
    fn place(&self) -> String {
        format!("Kafka at {}, topic {}", self.conn.bootstrap_servers, self.topic)
    }

    fn delivery_error(&self) -> Option<String> {
        let mut f = self.producer.context().failed.lock().unwrap_or_else(|e| e.into_inner());
        let (n, first) = std::mem::take(&mut *f);
        (n > 0).then(|| format!("{n} records not delivered; the first: {}", first.unwrap_or_default()))
    }
}

impl<K: KafkaEncode, V: KafkaEncode> CommitSinkWriter for KafkaWriter<K, V> {
    fn commit(&mut self, batch_id: u64, batches: Vec<Batch>) -> UserResult {
        let Some(marker) = self.marker.as_ref() else {
            self.send_all(batches)?;
            self.producer.flush(self.conn.timeout).map_err(|e| self.conn.unreachable(e))?;
            return match self.delivery_error() {
                Some(e) => Err(format!("{}: {e}", self.place()).into()),
                None => Ok(()),
            };
        };
        let (next, every_batch) = self.committed_through(marker)?;
        self.check_no_gap(batch_id, next, every_batch)?;
        if next > batch_id {
            tracing::info!("Kafka topic {}: batch {batch_id} was committed before; not writing it again", self.topic);
            return Ok(());
        }
        let tx = |e: rdkafka::error::KafkaError| format!("{} ({}), batch {batch_id}: {e}", self.place(), self.id);
        self.producer.begin_transaction().map_err(tx)?;
        let written = (|| -> UserResult {
            self.send_all(batches)?;
            let mut offsets = TopicPartitionList::new();
            let mut marked = offsets.add_partition(&self.topic, 0);
            marked.set_offset(Offset::Offset(batch_id as i64 + 1)).map_err(tx)?;
            marked.set_metadata(EVERY_BATCH);
            let group = marker.group_metadata().ok_or("the sink's consumer has no group")?;
            self.producer.send_offsets_to_transaction(&offsets, &group, self.conn.timeout).map_err(tx)?;
            self.producer.commit_transaction(self.conn.timeout).map_err(tx)?;
            Ok(())
        })();
        if let Err(e) = written {
            let _ = self.producer.abort_transaction(self.conn.timeout);
            let _ = self.delivery_error();
            return Err(e);
        }
        self.last_committed = Some(batch_id);
        Ok(())
    }

    /// With transactions, every batch commits the marker, output or not.
    fn every_batch(&self) -> bool {
        self.marker.is_some()
    }
}
