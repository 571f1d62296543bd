//! Nexmark on Kafka, as Beam's `--sourceType=KAFKA` and `--sinkType=KAFKA`: events published to
//! a topic as the JSON lines the events files hold (`--export-events kafka://HOST:PORT/TOPIC`),
//! queries that read them from there (`--events-kafka`), and results written to a topic
//! (`--results-kafka`), each the JSON line the results files hold, exactly once.
//!
//! Kafka is the launcher's `kafka` feature (`cargo build --release -p weir-nexmark --features
//! kafka`): it compiles librdkafka, which the main job does not need. Without it the Kafka flags
//! are refused when the launcher starts, saying how to build it.

use crate::model::Event;
use crate::sources::OnMalformed;
use crate::NexmarkConfig;
use weir_sdk::prelude::*;
#[cfg(feature = "kafka")]
use {
    crate::generator::events_in_time_order,
    std::time::Duration,
    weir_kafka::{KafkaDecode, KafkaEncode, KafkaIO, KafkaRecord, TimestampPolicy},
    weir_sdk::kernel::Batch,
    weir_sdk::windowed_value::WindowedValue,
};

/// Whether this launcher reads and writes Kafka; else why not and how to build one that does.
pub fn require() -> Result<(), String> {
    crate::require_feature(cfg!(feature = "kafka"), "Kafka", "kafka")
}

/// Without the `kafka` feature: refused (see [`require`]).
#[cfg(not(feature = "kafka"))]
pub fn export_events(_: &NexmarkConfig, _: &KafkaTopic) -> Result<u64, String> {
    require().map(|()| 0)
}

/// Without the `kafka` feature: refused (see [`require`]).
#[cfg(not(feature = "kafka"))]
pub fn read_events(_: &Pipeline, _: &KafkaTopic, _: bool, _: &OnMalformed) -> Result<PCollection<Event>, String> {
    Err(require().err().unwrap_or_default())
}

/// Without the `kafka` feature: refused (see [`require`]).
#[cfg(not(feature = "kafka"))]
pub fn write_values<V: Element>(_: PCollection<V>, _: &KafkaTopic) -> Result<(), String> {
    require()
}

/// A topic on some brokers: `HOST:PORT[,HOST:PORT...]/TOPIC`, or the same after `kafka://`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaTopic {
    /// The bootstrap servers.
    pub servers: String,
    /// The topic.
    pub topic: String,
}

impl std::str::FromStr for KafkaTopic {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let rest = s.strip_prefix("kafka://").unwrap_or(s);
        match rest.split_once('/') {
            Some((servers, topic))
                if !servers.is_empty()
                    && !topic.is_empty()
                    && !topic.contains('/')
                    && servers.split(',').all(|h| {
                        h.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
                    }) =>
            {
                Ok(KafkaTopic { servers: servers.to_string(), topic: topic.to_string() })
            }
            _ => {
                Err(format!("{s:?} is not a Kafka topic: HOST:PORT/TOPIC (several brokers: HOST:PORT,HOST:PORT/TOPIC)"))
            }
        }
    }
}

impl std::fmt::Display for KafkaTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}/{}", self.servers, self.topic)
    }
}

/// A record's value is one event in Beam's JSON form.
#[cfg(feature = "kafka")]
impl KafkaDecode for Event {
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String> {
        crate::json::parse(bytes.ok_or("a null value, not an event")?)
    }
}

/// Publishes the events of `config` to `to`, in event-time order (the split generators'
/// timelines merged, so that each partition's times only grow and a read's watermark drops
/// none as late), as the JSON lines an events file holds; returns how many. The records go through KafkaIO's write, in blocks, with the
/// idempotent producer. They keep the time they were sent as their create time: the events'
/// own times are years old (unless `--use-wallclock-event-time`), and brokers delete records
/// older than the topic's retention, so a read takes each event's time from its value.
#[cfg(feature = "kafka")]
pub fn export_events(config: &NexmarkConfig, to: &KafkaTopic) -> Result<u64, String> {
    const BLOCK: usize = 10_000;
    let sink = KafkaIO::write::<(), String>()
        .with_bootstrap_servers(&to.servers)
        .with_topic(&to.topic)
        .without_transactions()
        .sink();
    let mut writer = sink.open("nexmark export").map_err(|e| e.to_string())?;
    let mut n = 0u64;
    let mut block = Vec::with_capacity(BLOCK);
    let mut events = events_in_time_order(config).map(|next| next.event).peekable();
    let mut id = 0;
    while events.peek().is_some() {
        block.extend(
            events.by_ref().take(BLOCK).map(|e| WindowedValue::timestamped(KV::new((), e.to_json()), e.date_time())),
        );
        n += block.len() as u64;
        writer.commit(id, vec![Batch::new(std::mem::take(&mut block))]).map_err(|e| e.to_string())?;
        id += 1;
    }
    Ok(n)
}

/// The events in `from`, each at its own event time: the partitions up to their ends as the
/// read starts when `bounded` (a batch run, or a streaming one with `--trigger available-now`),
/// and on as they grow otherwise. The watermark is the least event time over the partitions
/// (the export writes each in event-time order); a record that is not an event goes through
/// `on_malformed`, named by topic, partition and offset.
#[cfg(feature = "kafka")]
pub fn read_events(
    p: &Pipeline,
    from: &KafkaTopic,
    bounded: bool,
    on_malformed: &OnMalformed,
) -> Result<PCollection<Event>, String> {
    let read = KafkaIO::read::<Vec<u8>, Event>()
        .with_bootstrap_servers(&from.servers)
        .with_topic(&from.topic)
        .from_earliest()
        .with_timestamp_policy(TimestampPolicy::Custom {
            timestamp: std::sync::Arc::new(|r: &KafkaRecord<Vec<u8>, Event>| r.value.date_time()),
            max_delay: Duration::ZERO,
        })
        .with_bad_records(on_malformed.clone());
    let read = if bounded { read.to_latest() } else { read };
    Ok(p.apply("ReadKafka", read).apply("Events", Map::new(|r: KafkaRecord<Vec<u8>, Event>| r.value)))
}

/// Writes `values` to `to`, one record each, in one Kafka transaction per batch (epoch), so
/// that a `read_committed` consumer sees each once.
#[cfg(feature = "kafka")]
pub fn write_values<V: KafkaEncode>(values: PCollection<V>, to: &KafkaTopic) -> Result<(), String> {
    values.apply(
        "WriteKafka",
        KafkaIO::write::<(), V>().with_bootstrap_servers(&to.servers).with_topic(&to.topic).values(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_topics_and_refuses_what_is_not_one() {
        let t: KafkaTopic = "kafka://127.0.0.1:9092/events".parse().unwrap();
        assert_eq!(t, KafkaTopic { servers: "127.0.0.1:9092".into(), topic: "events".into() });
        let t: KafkaTopic = "a:1,b:2/results".parse().unwrap();
        assert_eq!(t.servers, "a:1,b:2");
        for bad in ["events", "host/events", "host:x/events", "host:9092/", ":9092/t", "h:1/t/u"] {
            let e = bad.parse::<KafkaTopic>().unwrap_err();
            assert!(e.contains("HOST:PORT/TOPIC"), "{e}");
        }
    }
}
