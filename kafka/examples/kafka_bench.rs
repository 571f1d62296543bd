//! Kafka benchmarks for Weir, against a running broker (`benchmarks/kafka/bench.sh` starts one
//! and runs them side by side with kcat):
//!
//! ```text
//! kafka_bench topic   BROKER TOPIC PARTITIONS        create a topic
//! kafka_bench read    BROKER TOPIC [OPTIONS...]      read the topic to its end, as bytes: records/s
//! kafka_bench copy    BROKER TOPIC [OPTIONS...]      copy the topic to a new one exactly once, as a
//!                                                    checkpointed streaming query: records/s
//! kafka_bench latency BROKER RATE SECONDS [OPTIONS...]
//!     produce RATE records/s to a new topic for SECONDS while a checkpointed Weir query
//!     copies them to another exactly once; a read_committed consumer of the copy measures each
//!     record's time from produce to committed copy: p50, p99 and max, in the steady state (the
//!     records produced in the first 2 s, while the query starts, are not counted)
//! ```
//! OPTIONS are pipeline options (`--runner timely --workers 2`, `--max-batch-size N`, ...).

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_kafka::{KafkaIO, KafkaRecord};
use weir_sdk::prelude::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: kafka_bench topic BROKER TOPIC PARTITIONS | read BROKER TOPIC [OPTIONS...] | copy BROKER TOPIC \
                 [OPTIONS...] | latency BROKER RATE SECONDS [OPTIONS...]";
    let result = match args.first().map(String::as_str) {
        Some("topic") if args.len() == 4 => topic(&args[1], &args[2], &args[3]),
        Some("read") if args.len() >= 3 => read(&args[1], &args[2], &args[3..]),
        Some("copy") if args.len() >= 3 => copy(&args[1], &args[2], &args[3..]),
        Some("latency") if args.len() >= 4 => latency(&args[1], &args[2], &args[3], &args[4..]),
        _ => Err(usage.to_string()),
    };
    if let Err(e) = result {
        eprintln!("kafka_bench: {e}");
        std::process::exit(1);
    }
}

fn topic(broker: &str, topic: &str, partitions: &str) -> Result<(), String> {
    let n: i32 = partitions.parse().map_err(|e| format!("PARTITIONS {partitions}: {e}"))?;
    weir_kafka::Connection::new(broker).create_topic(topic, n)
}

fn options(extra: &[String]) -> Result<PipelineOptions, String> {
    weir::register();
    PipelineOptions::from_args(extra.iter().map(String::as_str)).map_err(|e| e.to_string())
}

/// The topic's records to its end, as bytes.
fn read_all(p: &Pipeline, broker: &str, topic: &str) -> PCollection<KafkaRecord<Vec<u8>, Vec<u8>>> {
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, Vec<u8>>()
            .with_bootstrap_servers(broker)
            .with_topic(topic)
            .from_earliest()
            .to_latest(),
    )
}

/// Runs `p` to its end, counting the elements of `counted`: how many, and the seconds it took.
fn run_counting<T: weir_sdk::coders::Element>(p: &Pipeline, counted: PCollection<T>) -> Result<(i64, f64), String> {
    let count = weir_sdk::io::CollectHandle::new();
    counted.apply("Count", Count::globally()).apply("Collect", weir_sdk::io::Collect::into(&count));
    let began = Instant::now();
    p.run().and_then(|r| r.wait_until_finish(None)).map_err(|e| e.to_string())?;
    Ok((count.items().iter().sum(), began.elapsed().as_secs_f64()))
}

/// Reads the whole topic as bytes and counts the records.
fn read(broker: &str, topic: &str, extra: &[String]) -> Result<(), String> {
    let p = Pipeline::new(options(extra)?);
    let records = read_all(&p, broker, topic);
    let (n, secs) = run_counting(&p, records)?;
    println!("weir read {n} records in {secs:.3} s: {:.0} records/s", n as f64 / secs);
    Ok(())
}

/// A checkpointed streaming query's options: `extra`, a fresh checkpoint and the processing-time
/// trigger (or `available-now` when `bounded`); the checkpoint's directory.
fn streaming(extra: &[String], bounded: bool) -> Result<(PipelineOptions, std::path::PathBuf), String> {
    let checkpoint =
        std::env::temp_dir().join(format!("kafka-bench-{}-{}", std::process::id(), weir_sdk::time::now_millis()));
    let mut args: Vec<String> = extra.to_vec();
    args.extend(["--checkpoint-dir".into(), checkpoint.display().to_string()]);
    let trigger = if bounded { "available-now" } else { "processing-time" };
    args.extend(["--trigger".into(), trigger.into()]);
    Ok((options(&args)?, checkpoint))
}

/// Copies the topic to `TOPIC-copy-<time>` with a checkpointed streaming query, transactions
/// and all, as fast as it goes.
fn copy(broker: &str, topic: &str, extra: &[String]) -> Result<(), String> {
    let (options, checkpoint) = streaming(extra, true)?;
    let out = format!("{topic}-copy-{}", weir_sdk::time::now_millis());
    weir_kafka::Connection::new(broker).create_topic(&out, 1)?;
    let p = Pipeline::new(options);
    let values = read_all(&p, broker, topic).apply("Value", Map::new(|r: KafkaRecord<Vec<u8>, Vec<u8>>| r.value));
    values.apply("Write", KafkaIO::write::<(), Vec<u8>>().with_bootstrap_servers(broker).with_topic(&out).values());
    let (n, secs) = run_counting(&p, values)?;
    let _ = std::fs::remove_dir_all(&checkpoint);
    println!("weir copied {n} records exactly once in {secs:.3} s: {:.0} records/s", n as f64 / secs);
    Ok(())
}

/// Produce at a steady rate, copy with a checkpointed query, and time each record's trip.
fn latency(broker: &str, rate: &str, seconds: &str, extra: &[String]) -> Result<(), String> {
    let rate: u64 = rate.parse().map_err(|e| format!("RATE {rate}: {e}"))?;
    let seconds: u64 = seconds.parse().map_err(|e| format!("SECONDS {seconds}: {e}"))?;
    let conn = weir_kafka::Connection::new(broker);
    let run = weir_sdk::time::now_millis();
    let (input, output) = (format!("lat-in-{run}"), format!("lat-out-{run}"));
    conn.create_topic(&input, 3)?;
    conn.create_topic(&output, 1)?;
    let (options, checkpoint) = streaming(extra, false)?;
    let p = Pipeline::new(options);
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, String>()
            .with_bootstrap_servers(broker)
            .with_topic(&input)
            .from_earliest()
            .with_poll_interval(Duration::from_millis(5)),
    )
    .apply("Value", Map::new(|r: KafkaRecord<Vec<u8>, String>| r.value))
    .apply("Write", KafkaIO::write::<(), String>().with_bootstrap_servers(broker).with_topic(&output).values());
    let running = p.run().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (broker, stop, output) = (broker.to_string(), stop.clone(), output.clone());
        std::thread::spawn(move || consume(&broker, &output, &stop))
    };
    let total = rate * seconds;
    let started = weir_sdk::time::now_millis();
    let produced = produce(broker, &input, rate, total)?;
    // Everything produced arrives within a while, or the copy is too slow for the rate.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::SeqCst);
    let warm = started + WARM_UP_MS;
    let (all, mut trips): (usize, Vec<i64>) = {
        let got = consumer.join().map_err(|_| "the consumer panicked")?;
        (got.len(), got.into_iter().filter(|(sent, _)| *sent >= warm).map(|(_, trip)| trip).collect())
    };
    running.cancel().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&checkpoint);
    if trips.is_empty() {
        return Err("nothing was copied".into());
    }
    trips.sort_unstable();
    let at = |q: f64| trips[((trips.len() - 1) as f64 * q) as usize];
    println!(
        "latency at {rate} records/s for {seconds} s: {all} of {produced} copied; after {} s, p50 {} ms, p99 {} ms, max {} \
         ms",
        WARM_UP_MS / 1000,
        at(0.5),
        at(0.99),
        trips[trips.len() - 1]
    );
    Ok(())
}

/// Produces `total` records at `rate` per second, each value the time it was sent, ms, padded to
/// the size of a Nexmark event (about 200 bytes), so that `copy`'s rate over events is the
/// maximum to compare with.
fn produce(broker: &str, topic: &str, rate: u64, total: u64) -> Result<u64, String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("linger.ms", "1")
        .create()
        .map_err(|e| e.to_string())?;
    let began = Instant::now();
    for i in 0..total {
        let due = began + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let value = format!("{:<200}", weir_sdk::time::now_millis());
        let mut record = Some(BaseRecord::<(), String>::to(topic).payload(&value));
        while let Some(r) = record.take() {
            if let Err((_, back)) = producer.send(r) {
                producer.poll(Duration::from_millis(1));
                record = Some(back);
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).map_err(|e| e.to_string())?;
    Ok(total)
}

/// Records produced this long after the start are timed: the first wait for the query to start.
const WARM_UP_MS: i64 = 2000;

/// Reads `topic`'s committed records until `stop`: when each was produced, and its time since,
/// ms.
fn consume(broker: &str, topic: &str, stop: &AtomicBool) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker)
        .set("group.id", format!("kafka-bench-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[topic]).expect("subscribed");
    let mut trips = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            let now = weir_sdk::time::now_millis();
            if let Some(sent) =
                m.payload().and_then(|v| std::str::from_utf8(v).ok()).and_then(|v| v.trim_end().parse::<i64>().ok())
            {
                trips.push((sent, now - sent));
            }
        }
    }
    trips
}
