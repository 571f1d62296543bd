//! Nexmark on Kafka, end to end, against a real Kafka-compatible broker (`noida-db`, started on
//! 127.0.0.1): events published with `--export-events kafka://…`, queries reading them with
//! `--events-kafka` and writing results with `--results-kafka`, in batch and in streaming, and a
//! streaming query SIGKILLed at random points and resumed from its checkpoint, whose results a
//! `read_committed` consumer then sees exactly as an uninterrupted run's.

#[path = "../../kafka/tests/broker/mod.rs"]
mod broker;
mod common;

use broker::Broker;
use common::{differences, nexmark, run_and_kill, text};
use std::collections::BTreeMap;
use std::time::Duration;

const EVENTS: &str = "40000";

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Publishes the events to topic `events` (3 partitions).
fn export(broker: &Broker) {
    broker.create_topic("events", 3);
    let o = nexmark(
        &strings(&["--num-events", EVENTS, "--export-events", &format!("kafka://{}/events", broker.address)]),
        &[],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("wrote {EVENTS} events")), "{}", text(&o));
}

/// The result lines of topic `topic`, read committed, with how often each appears.
fn results(broker: &Broker, topic: &str) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    for (_, _, v) in broker::read_all(&broker.address, topic, "read_committed") {
        *lines.entry(v).or_insert(0) += 1;
    }
    lines
}

/// A query over the events topic, writing results to topic `to`.
fn query(broker: &Broker, q: &str, to: &str, extra: &[&str]) -> Vec<String> {
    let mut a = strings(&["--query", q, "--num-events", EVENTS, "--max-batch-size", "2000"]);
    a.extend(strings(&["--events-kafka", &format!("{}/events", broker.address)]));
    a.extend(strings(&["--results-kafka", &format!("{}/{to}", broker.address)]));
    a.extend(strings(extra));
    a
}

/// The same query over the events file and over the topic, in batch and in streaming, gives the
/// same results; those written to Kafka are the JSON lines a results file holds.
#[test]
fn queries_read_events_from_kafka_and_write_results_to_kafka() {
    let broker = Broker::start();
    export(&broker);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.json");
    let o =
        nexmark(&strings(&["--num-events", EVENTS, "--export-events", file.to_str().unwrap()]), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let from_file = dir.path().join("results");
    let o = nexmark(
        &strings(&["--query", "5", "--events-file", file.to_str().unwrap(), "--results", from_file.to_str().unwrap()]),
        &[],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = common::results(&from_file);
    assert!(!expected.is_empty());
    for (topic, extra) in [("batch", &[][..]), ("streaming", &["--streaming"][..])] {
        broker.create_topic(topic, 1);
        let o = nexmark(&query(&broker, "5", topic, extra), &[]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(results(&broker, topic), expected, "{topic}");
    }
}

/// Records of the events topic that are not events are skipped by default, and counted in the
/// summary and the perf record, naming the topic, as malformed lines of an events file are; a
/// checkpoint of a read over the topic resumes only with the trigger it was written with.
#[test]
fn malformed_event_records_are_counted_and_another_trigger_s_checkpoint_is_refused_naming_it() {
    let broker = Broker::start();
    export(&broker);
    broker.produce("events", &[(None, "not an event".into(), 0), (None, "{\"also\": 1}".into(), 1)]);
    let dir = tempfile::tempdir().unwrap();
    let perf = dir.path().join("perf.jsonl");
    let mut a = strings(&["--query", "0", "--num-events", EVENTS, "--perf-file", perf.to_str().unwrap()]);
    a.extend(strings(&["--events-kafka", &format!("{}/events", broker.address)]));
    let o = nexmark(&a, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains(EVENTS) && out.contains("2 malformed event record(s)"), "{out}");
    assert!(out.contains(&format!("kafka://{}/events", broker.address)), "{out}");
    let record: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&perf).unwrap().trim()).unwrap();
    assert!(record["errors"][0].as_str().unwrap().contains("2 malformed"), "{record}");
    // A checkpoint written with --trigger available-now (the topic read to its latest offsets)
    // is refused by a run with --trigger processing-time (read on as it grows), naming the
    // triggers; the run must not hang either way.
    let cp = dir.path().join("cp").display().to_string();
    let mut a = strings(&["--query", "5", "--streaming", "--checkpoint-dir", &cp]);
    a.extend(strings(&["--events-kafka", &format!("{}/events", broker.address)]));
    let o = nexmark(&a, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    a.extend(strings(&["--trigger", "processing-time"]));
    let mut child = nexmark(&a, &[]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let began = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("a run over another trigger's checkpoint was not refused within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("written by a different pipeline") && out.contains("--trigger available-now"), "{out}");
    assert!(out.contains("the topic on as it grows"), "{out}");
}

/// A streaming query from Kafka to Kafka, SIGKILLed `kills` times at random points and resumed
/// from its checkpoint each time, leaves in its results topic exactly what an uninterrupted
/// run writes: each result once, none lost.
fn killed_and_resumed(q: &str, runner: &[&str], kills: usize) {
    let broker = Broker::start();
    export(&broker);
    broker.create_topic("reference", 1);
    let streaming = [&["--streaming"][..], runner].concat();
    let o = nexmark(&query(&broker, q, "reference", &streaming), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = results(&broker, "reference");
    assert!(expected.len() > 3, "too small a reference: {expected:?}");
    broker.create_topic("results", 1);
    let cp = tempfile::tempdir().unwrap();
    let cp = cp.path().join("cp").display().to_string();
    let args = query(&broker, q, "results", &[&streaming[..], &["--checkpoint-dir", &cp]].concat());
    let mut seed = broker::rand_id();
    let mut landed = 0;
    for _ in 0..kills {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if run_and_kill(&args, Duration::from_millis(150 + (seed >> 33) % 1500)) {
            landed += 1;
        }
    }
    let o = nexmark(&args, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let got = results(&broker, "results");
    if got != expected {
        let diff = differences(&expected, &got);
        panic!("after {landed} kills mid-run: {diff:#?}");
    }
    assert!(landed > 0, "no kill landed mid-run");
}

#[test]
fn a_killed_streaming_query_from_kafka_to_kafka_resumes_exactly_once_on_microbatch() {
    killed_and_resumed("5", &["--runner", "microbatch", "--parallelism", "2"], 4);
}

/// The partitions a process reads may reach it only after its first epoch: the cluster's run
/// (available-now, checkpointed) goes on until no worker has any left, and the run after the
/// last kill writes every result.
#[test]
fn a_killed_streaming_query_from_kafka_to_kafka_resumes_exactly_once_on_a_timely_cluster() {
    killed_and_resumed("5", &["--runner", "timely", "--processes", "2", "--workers", "1"], 4);
}

/// The long form: `cargo test -p weir-nexmark --features kafka --test kafka -- --ignored`. Queries whose
/// results do not depend on where batches end: a stateful join's (query 3) take the time of the
/// later of its two sides, which depends on how much of each partition a batch reads.
#[test]
#[ignore]
fn ten_kills_of_a_streaming_query_from_kafka_to_kafka_lose_and_duplicate_nothing() {
    killed_and_resumed("5", &["--runner", "microbatch", "--parallelism", "2"], 10);
    killed_and_resumed("8", &["--runner", "microbatch", "--parallelism", "2"], 10);
    killed_and_resumed("5", &["--runner", "timely", "--processes", "2", "--workers", "1"], 10);
}
