//! `KafkaIO::read()`: a splittable DoFn per topic partition, over a range of offsets that grows.
//!
//! The read is two steps. The first finds the partitions of the topics (by list or by
//! pattern); while the read is unbounded it keeps looking, every
//! [`KafkaRead::with_partition_discovery_interval`], and outputs each new partition once (the
//! partitions found so far are its restriction, so a restart does not find them again). The
//! second reads each partition as a splittable DoFn whose restriction is a range of offsets:
//! `[start, end)` for a bounded read, `[start, ∞)` while it grows. Its tracker checkpoints the
//! range when a batch (epoch) has read its share, so the offsets still to read are part of
//! the runner's checkpoint, as Spark keeps them: a restart reads every record exactly once.
//!
//! Each record gets its timestamp from the [`TimestampPolicy`]. A partition's watermark is the
//! latest event time it has read less the policy's allowed delay; a partition that has read
//! everything there is moves its watermark on with the clock (less the same delay), so an idle
//! partition does not hold the others back. The read's watermark is the minimum over its
//! partitions, which the runner takes from the restrictions' estimates.

use crate::client::Connection;
use crate::codec::KafkaDecode;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, OwnedMessage, Timestamp as KafkaTimestamp};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_sdk::io::bad_records::{BadRecordPolicy, BadRecords};
use weir_sdk::io::file_io::{Growth, GrowthTracker, PollClaim};
use weir_sdk::splittable::{
    Claims, GrowableOffsetRangeTracker, OffsetRange, ProcessContinuation, SdfContext, SplittableDoFn, SplittableParDo,
    WatermarkEstimator,
};
use weir_sdk::time::{Timestamp, MIN_TIMESTAMP};
use weir_sdk::transforms::par_do::ParDo;
use weir_sdk::{Create, DoFn, Metrics, PBegin, PCollection, PTransform, ProcessContext, UserResult};

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KafkaPartition {
    /// The topic.
    pub topic: String,
    /// The partition's number.
    pub partition: i32,
}

impl std::fmt::Display for KafkaPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Which kind of time a record's timestamp is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KafkaTimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record.
    LogAppendTime,
    /// The record has none.
    NotAvailable,
}

/// A record read from Kafka, with where it was and its decoded key and value (Beam's
/// `KafkaRecord`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KafkaRecord<K, V> {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset in its partition.
    pub offset: i64,
    /// The record's own timestamp, ms since the epoch (see `timestamp_type`).
    pub timestamp: i64,
    /// What `timestamp` is.
    pub timestamp_type: KafkaTimestampType,
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
}

/// Where a read starts in each partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartOffset {
    /// The oldest record still kept.
    Earliest,
    /// After the last record there is when the partition is first read (Kafka's default).
    Latest,
    /// The first record with a timestamp at or after this one, ms (Beam's
    /// `withStartReadTime`).
    Timestamp(Timestamp),
}

/// Where a bounded read stops in each partition (it reads up to here, then ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndOffset {
    /// The end of each partition when the partition is first read.
    Latest,
    /// Before the first record with a timestamp at or after this one, ms (Beam's
    /// `withStopReadTime`).
    Timestamp(Timestamp),
}

/// A record's event time, from what the consumer sees of it.
pub type TimestampFn<K, V> = Arc<dyn Fn(&KafkaRecord<K, V>) -> Timestamp + Send + Sync>;

/// How records get their event time, and how far a partition's watermark stays behind the
/// latest (Beam's `TimestampPolicyFactory`).
pub enum TimestampPolicy<K, V> {
    /// The time the record is read (Beam's default): the watermark is the clock.
    ProcessingTime,
    /// The broker's log-append time (a topic with `message.timestamp.type=LogAppendTime`);
    /// records with another kind of timestamp use theirs.
    LogAppendTime,
    /// The producer's create time; records may come up to `max_delay` out of order.
    CreateTime {
        /// How far behind the latest create time a record may come and still be on time.
        max_delay: Duration,
    },
    /// A function of the record, which may be up to `max_delay` out of order.
    Custom {
        /// The record's event time.
        timestamp: TimestampFn<K, V>,
        /// How far behind the latest event time a record may come and still be on time.
        max_delay: Duration,
    },
}

impl<K, V> Clone for TimestampPolicy<K, V> {
    fn clone(&self) -> Self {
        match self {
            TimestampPolicy::ProcessingTime => TimestampPolicy::ProcessingTime,
            TimestampPolicy::LogAppendTime => TimestampPolicy::LogAppendTime,
            TimestampPolicy::CreateTime { max_delay } => TimestampPolicy::CreateTime { max_delay: *max_delay },
            TimestampPolicy::Custom { timestamp, max_delay } => {
                TimestampPolicy::Custom { timestamp: timestamp.clone(), max_delay: *max_delay }
            }
        }
    }
}

impl<K, V> TimestampPolicy<K, V> {
    fn max_delay_ms(&self) -> i64 {
        match self {
            TimestampPolicy::ProcessingTime | TimestampPolicy::LogAppendTime => 0,
            TimestampPolicy::CreateTime { max_delay } | TimestampPolicy::Custom { max_delay, .. } => {
                i64::try_from(max_delay.as_millis()).unwrap_or(i64::MAX)
            }
        }
    }
    fn event_time(&self, r: &KafkaRecord<K, V>, now: Timestamp) -> Timestamp {
        match self {
            TimestampPolicy::ProcessingTime => now,
            TimestampPolicy::LogAppendTime | TimestampPolicy::CreateTime { .. } => match r.timestamp_type {
                KafkaTimestampType::NotAvailable => now,
                _ => r.timestamp,
            },
            TimestampPolicy::Custom { timestamp, .. } => timestamp(r),
        }
    }
    fn describe(&self) -> String {
        match self {
            TimestampPolicy::ProcessingTime => "processing time".into(),
            TimestampPolicy::LogAppendTime => "log-append time".into(),
            TimestampPolicy::CreateTime { max_delay } => format!("create time, {} ms late", max_delay.as_millis()),
            TimestampPolicy::Custom { max_delay, .. } => format!("custom time, {} ms late", max_delay.as_millis()),
        }
    }
}

/// Which topics a read takes.
#[derive(Clone, Debug)]
enum Topics {
    List(Vec<String>),
    Pattern(regex::Regex),
}

impl Topics {
    fn matches(&self, topic: &str) -> bool {
        match self {
            Topics::List(l) => l.iter().any(|t| t == topic),
            Topics::Pattern(p) => p.is_match(topic),
        }
    }
    fn describe(&self) -> String {
        match self {
            Topics::List(l) => l.join(","),
            Topics::Pattern(p) => format!("pattern {}", p.as_str()),
        }
    }
}

/// Reads records from Kafka (see [`crate::KafkaIO::read`]).
pub struct KafkaRead<K, V> {
    conn: Connection,
    topics: Option<Topics>,
    pattern_error: Option<String>,
    start: StartOffset,
    end: Option<EndOffset>,
    policy: TimestampPolicy<K, V>,
    bad_records: BadRecordPolicy,
    discovery: Duration,
    poll_interval: Duration,
    group: Option<String>,
}

impl<K: KafkaDecode, V: KafkaDecode> KafkaRead<K, V> {
    pub(crate) fn new() -> Self {
        KafkaRead {
            conn: Connection::new(""),
            topics: None,
            pattern_error: None,
            start: StartOffset::Latest,
            end: None,
            policy: TimestampPolicy::ProcessingTime,
            bad_records: BadRecordPolicy::Fail,
            discovery: Duration::from_secs(10),
            poll_interval: Duration::from_millis(100),
            group: None,
        }
    }
    /// The brokers, `host:port[,host:port...]` (Beam's `withBootstrapServers`).
    pub fn with_bootstrap_servers(mut self, servers: &str) -> Self {
        self.conn.bootstrap_servers = servers.to_string();
        self
    }
    /// Reads these topics (Beam's `withTopics`).
    pub fn with_topics<S: Into<String>>(mut self, topics: impl IntoIterator<Item = S>) -> Self {
        self.topics = Some(Topics::List(topics.into_iter().map(Into::into).collect()));
        self
    }
    /// Reads one topic (Beam's `withTopic`).
    pub fn with_topic(self, topic: &str) -> Self {
        self.with_topics([topic])
    }
    /// Reads every topic whose whole name matches the regular expression, including topics
    /// created while the read runs (Beam's `withTopicPattern`).
    pub fn with_topic_pattern(mut self, pattern: &str) -> Self {
        match regex::Regex::new(&format!("^(?:{pattern})$")) {
            Ok(r) => self.topics = Some(Topics::Pattern(r)),
            Err(e) => self.pattern_error = Some(format!("invalid topic pattern '{pattern}': {e}")),
        }
        self
    }
    /// A consumer setting, passed through to the client (Beam's `withConsumerConfigUpdates`):
    /// security, timeouts, fetch sizes.
    pub fn with_consumer_config(mut self, key: &str, value: &str) -> Self {
        self.conn.config.insert(key.to_string(), value.to_string());
        self
    }
    /// How long the brokers may be unreachable before the read fails (30 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.conn.timeout = timeout;
        self
    }
    /// Where each partition starts ([`StartOffset::Latest`] unless told).
    pub fn with_start(mut self, start: StartOffset) -> Self {
        self.start = start;
        self
    }
    /// Starts at the oldest record kept.
    pub fn from_earliest(self) -> Self {
        self.with_start(StartOffset::Earliest)
    }
    /// Stops each partition at `end`: a bounded read, and a batch pipeline.
    pub fn with_end(mut self, end: EndOffset) -> Self {
        self.end = Some(end);
        self
    }
    /// Stops each partition where it ends when the read reaches it (a bounded read).
    pub fn to_latest(self) -> Self {
        self.with_end(EndOffset::Latest)
    }
    /// How records get their event time ([`TimestampPolicy::ProcessingTime`] unless told).
    pub fn with_timestamp_policy(mut self, policy: TimestampPolicy<K, V>) -> Self {
        self.policy = policy;
        self
    }
    /// Records whose key or value does not decode: fail naming the topic, partition and
    /// offset (the default), skip them with a count, or keep them in a dead-letter file.
    pub fn with_bad_records(mut self, policy: BadRecordPolicy) -> Self {
        self.bad_records = policy;
        self
    }
    /// How often an unbounded read looks for new partitions (10 s).
    pub fn with_partition_discovery_interval(mut self, every: Duration) -> Self {
        self.discovery = every.max(Duration::from_millis(10));
        self
    }
    /// How long a partition that has read everything waits before it looks again (100 ms).
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }
    /// Also commits the offsets read to this consumer group once the runner has committed
    /// them, for monitoring (Beam's `commitOffsetsInFinalize`); the read itself resumes from
    /// the checkpoint, never from the group.
    pub fn with_consumer_group(mut self, group: &str) -> Self {
        self.group = Some(group.to_string());
        self
    }

    fn describe(&self) -> String {
        let topics = self.topics.as_ref().map_or("no topic".into(), Topics::describe);
        format!(
            "Kafka {} {topics} from {:?} to {:?}, {}",
            self.conn.bootstrap_servers,
            self.start,
            self.end,
            self.policy.describe()
        )
    }
}

/// What both steps of a read share.
struct Shared<K, V> {
    conn: Connection,
    topics: Topics,
    start: StartOffset,
    end: Option<EndOffset>,
    policy: TimestampPolicy<K, V>,
    bad: BadRecords,
    discovery: Duration,
    poll_interval: Duration,
    group: Option<String>,
    /// A consumer for metadata and offset lookups, made when first needed.
    lookup: Mutex<Option<Arc<BaseConsumer>>>,
}

impl<K, V> Shared<K, V> {
    fn lookup(&self) -> Result<Arc<BaseConsumer>, String> {
        let mut slot = self.lookup.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = Arc::new(self.conn.consumer(&[])?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// The partitions of the read's topics, now.
    fn partitions(&self) -> Result<BTreeSet<KafkaPartition>, String> {
        let consumer = self.lookup()?;
        let topic = match &self.topics {
            Topics::List(l) if l.len() == 1 => Some(l[0].as_str()),
            _ => None,
        };
        let meta = self.conn.metadata(&consumer, topic)?;
        let mut out = BTreeSet::new();
        for t in meta.topics() {
            if !self.topics.matches(t.name()) {
                continue;
            }
            if let Some(e) = t.error() {
                // A listed topic that does not exist (yet) has no partitions to read.
                let missing = e == rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
                if missing {
                    continue;
                }
                return Err(format!("Kafka at {}: topic {}: {e:?}", self.conn.bootstrap_servers, t.name()));
            }
            out.extend(
                t.partitions().iter().map(|p| KafkaPartition { topic: t.name().to_string(), partition: p.id() }),
            );
        }
        Ok(out)
    }

    /// The offset of the first record at or after `ts` in `p`, or the partition's end.
    fn offset_for_time(&self, p: &KafkaPartition, ts: Timestamp) -> Result<i64, String> {
        let consumer = self.lookup()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(ts)).map_err(|e| e.to_string())?;
        let found = consumer.offsets_for_times(tpl, self.conn.timeout).map_err(|e| self.conn.unreachable(e))?;
        match found.find_partition(&p.topic, p.partition).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Ok(o),
            _ => self.watermarks(p).map(|w| w.1),
        }
    }

    fn watermarks(&self, p: &KafkaPartition) -> Result<(i64, i64), String> {
        self.watermarks_within(p, self.conn.timeout)
    }

    /// The partition's low and high watermarks, asked of the read's lookup consumer (whose
    /// connection no long-polling fetch holds up), waiting at most `wait`.
    fn watermarks_within(&self, p: &KafkaPartition, wait: Duration) -> Result<(i64, i64), String> {
        let consumer = self.lookup()?;
        consumer.fetch_watermarks(&p.topic, p.partition, wait).map_err(|e| self.conn.unreachable(e))
    }
}

/// The first step of a bounded read: the partitions there are when it starts.
struct ListPartitions<K, V>(Arc<Shared<K, V>>);

impl<K, V> Clone for ListPartitions<K, V> {
    fn clone(&self) -> Self {
        ListPartitions(self.0.clone())
    }
}

impl<K: KafkaDecode, V: KafkaDecode> DoFn for ListPartitions<K, V> {
    type In = String;
    type Out = KafkaPartition;
    fn process(&mut self, _: String, ctx: &mut ProcessContext<'_, KafkaPartition>) -> UserResult {
        let found = self.0.partitions()?;
        if found.is_empty() {
            return Err(format!(
                "Kafka at {} has no topic {}",
                self.0.conn.bootstrap_servers,
                self.0.topics.describe()
            )
            .into());
        }
        found.into_iter().for_each(|p| ctx.output(p));
        Ok(())
    }
}

/// The first step of an unbounded read: watches for partitions, each output once.
struct WatchPartitions<K, V>(Arc<Shared<K, V>>);

impl<K, V> Clone for WatchPartitions<K, V> {
    fn clone(&self) -> Self {
        WatchPartitions(self.0.clone())
    }
}

impl<K: KafkaDecode, V: KafkaDecode> SplittableDoFn for WatchPartitions<K, V> {
    type In = String;
    type Out = KafkaPartition;
    type Restriction = Growth;
    type Tracker = GrowthTracker;
    fn initial_restriction(&self, _: &String) -> UserResult<Growth> {
        Ok(Growth::default())
    }
    fn new_tracker(&self, _: &String, g: Growth) -> GrowthTracker {
        GrowthTracker::new(g)
    }
    fn initial_watermark_estimator(&self, _: &String, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }
    fn unbounded_per_element(&self) -> bool {
        true
    }
    fn process(
        &mut self,
        _: &String,
        tracker: &mut Claims<'_, GrowthTracker>,
        ctx: &mut SdfContext<'_, KafkaPartition>,
    ) -> UserResult<ProcessContinuation> {
        let now = ctx.processing_time();
        let seen = tracker.current_restriction().seen;
        let new: Vec<KafkaPartition> =
            self.0.partitions()?.into_iter().filter(|p| !seen.contains(&p.to_string())).collect();
        if !tracker.try_claim(PollClaim::Poll(now, new.iter().map(ToString::to_string).collect())) {
            return Ok(ProcessContinuation::stop());
        }
        for p in new {
            tracing::info!("Kafka at {}: reading partition {p}", self.0.conn.bootstrap_servers);
            ctx.output(p);
        }
        // The partitions' reads hold the watermark at their event times; the watch only says
        // that no partition found later starts earlier than the clock.
        ctx.set_watermark(now)?;
        Ok(ProcessContinuation::resume().with_resume_delay(self.0.discovery))
    }
    /// What it finds changes as partitions are added: a replayed batch repeats its polls.
    fn reads_a_source(&self) -> bool {
        true
    }
}

/// A consumer assigned to one partition, and where it is.
struct Reader {
    consumer: BaseConsumer,
    /// The offset the consumer returns next.
    next: i64,
    /// A record polled but not claimed (the call was checkpointed): the next call starts with it.
    held: Option<OwnedMessage>,
    /// When the consumer last read a record or found the partition's end.
    last_ok: Instant,
    /// Whether the consumer reached the partition's end and has read nothing since.
    at_end: bool,
    /// When the partition's end was last asked for.
    end_checked: Instant,
}

impl Reader {
    /// Asks the broker for partition `p`'s end, at most once a second, of the read's lookup
    /// consumer (whose connection no long-polling fetch holds up), and raises `end` to it;
    /// whether the broker answered with it.
    fn ask_end<K, V>(&mut self, shared: &Shared<K, V>, p: &KafkaPartition, end: &AtomicI64) -> bool {
        if self.end_checked.elapsed() < Duration::from_secs(1) {
            return false;
        }
        self.end_checked = Instant::now();
        match shared.watermarks_within(p, shared.conn.timeout.min(Duration::from_secs(2))) {
            Ok((_, high)) => {
                end.fetch_max(high, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }
}

/// The second step: reads one partition's restriction of offsets.
struct ReadPartition<K, V> {
    shared: Arc<Shared<K, V>>,
    /// Each partition's end offset as last seen, for the trackers' split estimates.
    ends: Arc<Mutex<HashMap<KafkaPartition, Arc<AtomicI64>>>>,
    /// This instance's consumers.
    readers: HashMap<KafkaPartition, Reader>,
}

impl<K, V> Clone for ReadPartition<K, V> {
    fn clone(&self) -> Self {
        ReadPartition { shared: self.shared.clone(), ends: self.ends.clone(), readers: HashMap::new() }
    }
}

impl<K, V> Drop for ReadPartition<K, V> {
    fn drop(&mut self) {
        for reader in std::mem::take(&mut self.readers).into_values() {
            close_later(reader);
        }
    }
}

/// Closes `reader`'s consumer on a thread of its own: librdkafka takes about 100 ms to close
/// a client, and a read of many partitions closing them one after the other held the end of a
/// pipeline up by a second.
fn close_later(reader: Reader) {
    let closing = std::thread::Builder::new().name("weir-kafka-close".into()).spawn(move || drop(reader));
    if let Err(e) = closing {
        tracing::warn!("cannot close a Kafka consumer on a thread of its own ({e}); closing it here");
    }
}

impl<K: KafkaDecode, V: KafkaDecode> ReadPartition<K, V> {
    fn end_of(&self, p: &KafkaPartition) -> Arc<AtomicI64> {
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        ends.entry(p.clone()).or_insert_with(|| Arc::new(AtomicI64::new(0))).clone()
    }

    /// This instance's consumer of `p`, positioned at `from`, taken out of the instance while a
    /// call reads (it goes back when the call ends well).
    fn take_reader(&mut self, p: &KafkaPartition, from: i64) -> Result<Reader, String> {
        if let Some(r) = self.readers.remove(p) {
            if r.next == from {
                return Ok(r);
            }
            close_later(r);
        }
        // The end of the partition comes as an event of the consumer's own fetches. A consumer
        // whose prefetched queue is full waits `fetch.queue.backoff.ms` before it fetches
        // again (librdkafka's default, a second, left a call that drained the queue waiting
        // for the broker half the time: 0.55-0.64 of kcat's rate on 5 M records; 10 ms reads
        // faster than kcat with the same memory).
        let consumer =
            self.shared.conn.consumer(&[("enable.partition.eof", "true"), ("fetch.queue.backoff.ms", "10")])?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(from)).map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| format!("cannot read Kafka partition {p}: {e}"))?;
        let now = Instant::now();
        Ok(Reader { consumer, next: from, held: None, last_ok: now, at_end: false, end_checked: now })
    }

    fn decode(&self, p: &KafkaPartition, m: &Polled<'_>) -> UserResult<Option<KafkaRecord<K, V>>> {
        let (timestamp, timestamp_type) = match m.timestamp() {
            KafkaTimestamp::CreateTime(t) => (t, KafkaTimestampType::CreateTime),
            KafkaTimestamp::LogAppendTime(t) => (t, KafkaTimestampType::LogAppendTime),
            KafkaTimestamp::NotAvailable => (MIN_TIMESTAMP, KafkaTimestampType::NotAvailable),
        };
        let place = || format!("Kafka topic {}, partition {}, offset {}", p.topic, p.partition, m.offset());
        let key = match K::decode(m.key()) {
            Ok(k) => k,
            Err(e) => {
                self.shared.bad.handle(&place(), m.key().unwrap_or_default(), &format!("key: {e}"))?;
                return Ok(None);
            }
        };
        let value = match V::decode(m.payload()) {
            Ok(v) => v,
            Err(e) => {
                self.shared.bad.handle(&place(), m.payload().unwrap_or_default(), &format!("value: {e}"))?;
                return Ok(None);
            }
        };
        Ok(Some(KafkaRecord {
            topic: p.topic.clone(),
            partition: p.partition,
            offset: m.offset(),
            timestamp,
            timestamp_type,
            key,
            value,
        }))
    }
}

/// A record of the partition: the one a checkpointed call held back, or one just polled, read
/// in place in the consumer's buffer (only a held record is copied out).
enum Polled<'a> {
    Held(OwnedMessage),
    Fresh(BorrowedMessage<'a>),
}

impl Polled<'_> {
    fn offset(&self) -> i64 {
        match self {
            Polled::Held(m) => m.offset(),
            Polled::Fresh(m) => m.offset(),
        }
    }
    fn key(&self) -> Option<&[u8]> {
        match self {
            Polled::Held(m) => m.key(),
            Polled::Fresh(m) => m.key(),
        }
    }
    fn payload(&self) -> Option<&[u8]> {
        match self {
            Polled::Held(m) => m.payload(),
            Polled::Fresh(m) => m.payload(),
        }
    }
    fn timestamp(&self) -> KafkaTimestamp {
        match self {
            Polled::Held(m) => m.timestamp(),
            Polled::Fresh(m) => m.timestamp(),
        }
    }
    fn owned(self) -> OwnedMessage {
        match self {
            Polled::Held(m) => m,
            Polled::Fresh(m) => m.detach(),
        }
    }
}

/// Per partition metrics: records and bytes read, and how far the read is behind the end.
struct PartitionMetrics {
    records: i64,
    bytes: i64,
}

impl PartitionMetrics {
    fn report(&self, p: &KafkaPartition, behind: Option<i64>) -> UserResult {
        Metrics::counter("kafka", format!("records-read/{p}"))?.inc_by(self.records);
        Metrics::counter("kafka", format!("bytes-read/{p}"))?.inc_by(self.bytes);
        Metrics::counter("kafka", "records-read")?.inc_by(self.records);
        if let Some(b) = behind {
            Metrics::gauge("kafka", format!("offsets-behind-latest/{p}"))?.set(b);
            Metrics::distribution("kafka", "offsets-behind-latest")?.update(b);
        }
        Ok(())
    }
}

impl<K: KafkaDecode, V: KafkaDecode> SplittableDoFn for ReadPartition<K, V> {
    type In = KafkaPartition;
    type Out = KafkaRecord<K, V>;
    type Restriction = OffsetRange;
    type Tracker = GrowableOffsetRangeTracker;

    fn initial_restriction(&self, p: &KafkaPartition) -> UserResult<OffsetRange> {
        let s = &self.shared;
        let from = match s.start {
            StartOffset::Earliest => s.watermarks(p)?.0,
            StartOffset::Latest => s.watermarks(p)?.1,
            StartOffset::Timestamp(t) => s.offset_for_time(p, t)?,
        };
        let to = match s.end {
            None => i64::MAX,
            Some(EndOffset::Latest) => s.watermarks(p)?.1,
            Some(EndOffset::Timestamp(t)) => s.offset_for_time(p, t)?,
        };
        Ok(OffsetRange::new(from, to.max(from)))
    }
    fn new_tracker(&self, p: &KafkaPartition, r: OffsetRange) -> GrowableOffsetRangeTracker {
        let end = self.end_of(p);
        GrowableOffsetRangeTracker::of(r, move || end.load(Ordering::Relaxed))
    }
    fn initial_watermark_estimator(&self, _: &KafkaPartition, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }
    fn unbounded_per_element(&self) -> bool {
        self.shared.end.is_none()
    }
    /// Records carry their own event times, which may be earlier than the partition's.
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        i64::MAX
    }
    fn finalizes_bundles(&self) -> bool {
        self.shared.group.is_some()
    }
    /// A batch reads at most `--max-batch-size` records over the partitions.
    fn reads_a_source(&self) -> bool {
        true
    }

    fn process(
        &mut self,
        p: &KafkaPartition,
        tracker: &mut Claims<'_, GrowableOffsetRangeTracker>,
        ctx: &mut SdfContext<'_, KafkaRecord<K, V>>,
    ) -> UserResult<ProcessContinuation> {
        let range = tracker.current_restriction();
        if range.is_empty() {
            tracker.try_claim(range.to);
            return Ok(ProcessContinuation::stop());
        }
        let shared = self.shared.clone();
        let end = self.end_of(p);
        let delay = shared.policy.max_delay_ms();
        let mut metrics = PartitionMetrics { records: 0, bytes: 0 };
        let mut claimed_to = None;
        let mut reader = self.take_reader(p, range.from)?;
        // How long a call waits for records in flight before it hands back its rest.
        let patience = shared.poll_interval.min(Duration::from_millis(100));
        let began = Instant::now();
        let mut wait = shared.poll_interval.min(Duration::from_millis(50));
        let mut read_any = false;
        let outcome = loop {
            let polled = match reader.held.take() {
                Some(m) => Some(Ok(Polled::Held(m))),
                None => reader.consumer.poll(wait).map(|r| r.map(Polled::Fresh)),
            };
            wait = Duration::ZERO;
            match polled {
                Some(Ok(m)) => {
                    // Once per call is enough: a call lasts a fraction of the timeout, and a
                    // clock read per record cost 2% of a read.
                    if reader.at_end || !read_any {
                        reader.last_ok = Instant::now();
                        read_any = true;
                    }
                    reader.at_end = false;
                    if m.offset() < reader.next {
                        continue;
                    }
                    if !tracker.try_claim(m.offset()) {
                        // Checkpointed (or the end of a bounded range): this record is the
                        // residual's first.
                        reader.held = Some(m.owned());
                        break ProcessContinuation::stop();
                    }
                    reader.next = m.offset() + 1;
                    claimed_to = Some(m.offset());
                    metrics.records += 1;
                    metrics.bytes += (m.payload().map_or(0, <[u8]>::len) + m.key().map_or(0, <[u8]>::len)) as i64;
                    let now = ctx.processing_time();
                    if let Some(record) = self.decode(p, &m)? {
                        let ts = shared.policy.event_time(&record, now);
                        ctx.output_with_timestamp(record, ts)?;
                        ctx.set_watermark(ts.saturating_sub(delay))?;
                    }
                }
                // The consumer reached the partition's end (its last stable offset), as the
                // broker's fetch answer said: no round trip of its own, which would wait behind
                // the consumer's long-polling fetch.
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    reader.last_ok = Instant::now();
                    reader.at_end = true;
                }
                Some(Err(e)) => {
                    if reader.last_ok.elapsed() > shared.conn.timeout {
                        return Err(format!(
                            "lost Kafka at {} reading partition {p} at offset {}: no answer for {} s: {e}",
                            shared.conn.bootstrap_servers,
                            reader.next,
                            shared.conn.timeout.as_secs()
                        )
                        .into());
                    }
                    tracing::warn!("Kafka partition {p}: {e}; retrying");
                    break ProcessContinuation::resume().with_resume_delay(shared.poll_interval);
                }
                None => {
                    // Nothing more now. The fetch position is past the transactions' markers,
                    // which no poll returns: a bounded range may be done.
                    let next = reader.next.max(fetch_position(&reader.consumer, p).unwrap_or(0));
                    if range.to != i64::MAX && next >= range.to {
                        tracker.try_claim(range.to);
                        break ProcessContinuation::stop();
                    }
                    if reader.at_end {
                        // Caught up. The broker still has the partition (asked at most once a
                        // second), so the watermark follows the clock, as Beam's policies do.
                        if reader.ask_end(&shared, p, &end) {
                            reader.last_ok = Instant::now();
                        }
                        end.fetch_max(next, Ordering::Relaxed);
                        if reader.last_ok.elapsed() > shared.conn.timeout {
                            return Err(lost(&shared.conn, &reader.consumer, p, next).into());
                        }
                        if reader.last_ok.elapsed() < Duration::from_secs(2) {
                            ctx.set_watermark(ctx.processing_time().saturating_sub(delay))?;
                        }
                        break ProcessContinuation::resume().with_resume_delay(shared.poll_interval);
                    }
                    if reader.last_ok.elapsed() > shared.conn.timeout {
                        return Err(lost(&shared.conn, &reader.consumer, p, next).into());
                    }
                    // Records in flight: wait for them a little, then hand the rest back.
                    if began.elapsed() < patience {
                        wait = Duration::from_millis(5);
                        continue;
                    }
                    break ProcessContinuation::resume().with_resume_delay(Duration::from_millis(1));
                }
            }
        };
        // The partition's end, for the backlog.
        if !reader.at_end {
            reader.ask_end(&shared, p, &end);
        }
        let behind = (end.load(Ordering::Relaxed) - reader.next).max(0);
        self.readers.insert(p.clone(), reader);
        metrics.report(p, Some(behind))?;
        if let (Some(group), Some(last)) = (shared.group.clone(), claimed_to) {
            let (conn, p) = (shared.conn.clone(), p.clone());
            ctx.after_commit(move || commit_to_group(&conn, &group, &p, last + 1));
        }
        Ok(outcome)
    }
}

/// Where `consumer`'s fetches of partition `p` are: past the records it returned and the
/// transaction markers after them.
fn fetch_position(consumer: &BaseConsumer, p: &KafkaPartition) -> Option<i64> {
    let tpl = consumer.position().ok()?;
    match tpl.find_partition(&p.topic, p.partition).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
    }
}

/// Why partition `p` has given nothing for the connection's timeout, reading at `next`: its
/// topic is gone (deleted) from brokers that still answer, or the brokers are lost.
fn lost(conn: &Connection, consumer: &BaseConsumer, p: &KafkaPartition, next: i64) -> String {
    let secs = conn.timeout.as_secs();
    let wait = conn.timeout.min(Duration::from_secs(2));
    let gone = consumer.fetch_metadata(Some(&p.topic), wait).ok().map(|m| {
        let topic = m.topics().iter().find(|t| t.name() == p.topic);
        topic.is_none_or(|t| t.error().is_some() || t.partitions().iter().all(|x| x.id() != p.partition))
    });
    match gone {
        Some(true) => format!(
            "topic '{}' is gone from Kafka at {} (deleted?): partition {p} gave nothing at offset {next} for {secs} s",
            p.topic, conn.bootstrap_servers
        ),
        _ => format!(
            "lost Kafka at {} reading topic '{}', partition {p} at offset {next}: nothing read for {secs} s",
            conn.bootstrap_servers, p.topic
        ),
    }
}

/// Commits `offset` of `p` to the consumer group `group`, for monitoring.
fn commit_to_group(conn: &Connection, group: &str, p: &KafkaPartition, offset: i64) -> UserResult {
    let consumer = conn.consumer(&[("group.id", group)])?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(offset)).map_err(|e| e.to_string())?;
    consumer
        .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
        .map_err(|e| format!("cannot commit offset {offset} of {p} to consumer group {group}: {e}"))?;
    Ok(())
}

impl<K: KafkaDecode, V: KafkaDecode> PTransform<PBegin> for KafkaRead<K, V> {
    type Output = PCollection<KafkaRecord<K, V>>;
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input.pipeline().clone();
        let describe = self.describe();
        let topics = match (self.pattern_error.clone(), self.topics.clone()) {
            (Some(e), _) => {
                p.record_error(&p.current_step(), e);
                Topics::List(Vec::new())
            }
            (None, Some(t)) => t,
            (None, None) => {
                p.record_error(&p.current_step(), "a Kafka read needs topics: with_topics or with_topic_pattern");
                Topics::List(Vec::new())
            }
        };
        if self.conn.bootstrap_servers.is_empty() {
            p.record_error(&p.current_step(), "a Kafka read needs bootstrap servers: with_bootstrap_servers");
        }
        let bad = BadRecords::new(self.bad_records, "Kafka record", "kafka", "bad-records")
            .with_fail_hint("the read's bad-record policy is fail (with_bad_records)");
        let shared = Arc::new(Shared {
            conn: self.conn,
            topics,
            start: self.start,
            end: self.end,
            policy: self.policy,
            bad,
            discovery: self.discovery,
            poll_interval: self.poll_interval,
            group: self.group,
            lookup: Mutex::new(None),
        });
        let seed = input.apply("Describe", Create::of(vec![describe]));
        let partitions = if shared.end.is_some() {
            seed.apply("ListPartitions", ParDo::of(ListPartitions(shared.clone())))
        } else {
            seed.apply("WatchPartitions", SplittableParDo::of(WatchPartitions(shared.clone())))
        };
        partitions.apply(
            "ReadPartitions",
            SplittableParDo::of(ReadPartition {
                shared,
                ends: Arc::new(Mutex::new(HashMap::new())),
                readers: HashMap::new(),
            }),
        )
    }
}
