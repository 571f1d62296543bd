//! KafkaIO against a real Kafka broker (Apache Kafka, or `noida-db`; see `broker/`; started by each test on
//! 127.0.0.1): bounded reads on every runner, the transactional sink's exactly-once protocol,
//! bad records, an unreachable broker, and an unbounded read with windows.

mod broker;

use broker::Broker;
use std::sync::Arc;
use std::time::Duration;
use weir_kafka::{Json, KafkaIO, KafkaRecord, StartOffset, TimestampPolicy};
use weir_sdk::batch::Batch;
use weir_sdk::io::{BadRecordPolicy, Collect, CollectHandle};
use weir_sdk::prelude::*;
use weir_sdk::windowed_value::WindowedValue;

fn options(runner: &str) -> PipelineOptions {
    weir::register();
    let mut args = vec!["--runner", runner];
    if runner == "timely" {
        args.extend(["--workers", "2"]);
    }
    PipelineOptions::from_args(args).unwrap()
}

fn records(n: usize) -> Vec<(Option<String>, String, i32)> {
    (0..n).map(|i| (Some(format!("k{}", i % 5)), format!("v{i}"), (i % 3) as i32)).collect()
}

#[test]
fn a_bounded_read_gives_every_record_once_on_every_runner() {
    let broker = Broker::start();
    broker.create_topic("events", 3);
    broker.produce("events", &records(300));
    for runner in ["direct", "microbatch", "timely"] {
        let p = Pipeline::new(options(runner));
        let got = CollectHandle::new();
        p.apply(
            "Read",
            KafkaIO::read::<Option<String>, String>()
                .with_bootstrap_servers(&broker.address)
                .with_topic("events")
                .from_earliest()
                .to_latest(),
        )
        .apply("Collect", Collect::into(&got));
        p.run().and_then(|r| r.wait_until_finish(None)).unwrap_or_else(|e| panic!("{runner}: {e}"));
        let mut items: Vec<KafkaRecord<Option<String>, String>> = got.items();
        items.sort_by_key(|r| (r.partition, r.offset));
        assert_eq!(items.len(), 300, "{runner}");
        for r in &items {
            let i: usize = r.value[1..].parse().unwrap();
            assert_eq!(r.partition, (i % 3) as i32, "{runner}: {r:?}");
            assert_eq!(r.key.as_deref(), Some(format!("k{}", i % 5).as_str()));
            assert_eq!(r.offset, (i / 3) as i64, "{runner}: {r:?}");
        }
    }
}

/// Records kcat produced on 3 partitions are read with their keys, values, partitions and
/// create times, on the micro-batch runner and on 2 timely workers.
#[test]
fn records_produced_by_kcat_are_read_with_keys_values_partitions_and_timestamps() {
    let broker = Broker::start();
    broker.create_topic("kcat", 3);
    let before = weir_sdk::time::now_millis();
    for p in 0..3 {
        let lines: Vec<String> = (0..50).map(|i| format!("key{p}-{i}:value{p}-{i}")).collect();
        broker::kcat_produce(&broker.address, "kcat", p, &lines);
    }
    let after = weir_sdk::time::now_millis();
    for runner in ["microbatch", "timely"] {
        let p = Pipeline::new(options(runner));
        let got = CollectHandle::new();
        p.apply(
            "Read",
            KafkaIO::read::<String, String>()
                .with_bootstrap_servers(&broker.address)
                .with_topic("kcat")
                .from_earliest()
                .to_latest()
                .with_timestamp_policy(TimestampPolicy::CreateTime { max_delay: Duration::ZERO }),
        )
        .apply("Collect", Collect::into(&got));
        p.run().and_then(|r| r.wait_until_finish(None)).unwrap_or_else(|e| panic!("{runner}: {e}"));
        let mut items: Vec<KafkaRecord<String, String>> = got.items();
        items.sort_by_key(|r| (r.partition, r.offset));
        assert_eq!(items.len(), 150, "{runner}");
        for r in &items {
            let (part, i) = (r.partition, r.offset);
            assert_eq!(r.key, format!("key{part}-{i}"), "{runner}: {r:?}");
            assert_eq!(r.value, format!("value{part}-{i}"), "{runner}: {r:?}");
            assert_eq!(r.timestamp_type, weir_kafka::KafkaTimestampType::CreateTime, "{runner}: {r:?}");
            assert!(
                (before - 1000..=after + 1000).contains(&r.timestamp),
                "{runner}: {r:?} not made in [{before}, {after}]"
            );
        }
    }
}

#[test]
fn the_transactional_sink_writes_each_batch_once() {
    let broker = Broker::start();
    broker.create_topic("out", 2);
    let sink = KafkaIO::write::<String, String>().with_bootstrap_servers(&broker.address).with_topic("out").sink();
    let batch = |xs: &[&str]| {
        Batch::new(
            xs.iter().map(|x| WindowedValue::timestamped(KV::new(x.to_string(), x.to_string()), 0)).collect::<Vec<_>>(),
        )
    };
    let mut w = sink.open("query one").unwrap();
    w.commit(0, vec![batch(&["a", "b"])]).unwrap();
    // A replay of batch 0 (the runner crashed before its checkpoint recorded the commit).
    w.commit(0, vec![batch(&["a", "b"])]).unwrap();
    w.commit(1, vec![batch(&["c"])]).unwrap();
    drop(w);
    // A restarted run of the same query replays batch 1, then goes on.
    let mut again = sink.open("query one").unwrap();
    again.commit(1, vec![batch(&["c"])]).unwrap();
    again.commit(2, vec![batch(&["d"])]).unwrap();
    // Another query (no checkpoint in common) writes its own batch 0.
    sink.open("query two").unwrap().commit(0, vec![batch(&["e"])]).unwrap();
    let mut values: Vec<String> =
        broker::read_all(&broker.address, "out", "read_committed").into_iter().map(|r| r.2).collect();
    values.sort();
    assert_eq!(values, ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_pipeline_writes_to_kafka_and_reads_it_back() {
    let broker = Broker::start();
    broker.create_topic("words", 2);
    for runner in ["direct", "microbatch", "timely"] {
        let topic = format!("words-{runner}");
        broker.create_topic(&topic, 2);
        let p = Pipeline::new(options(runner));
        let words: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
        p.apply("Words", Create::of(words.clone())).apply(
            "Write",
            KafkaIO::write::<(), String>().with_bootstrap_servers(&broker.address).with_topic(&topic).values(),
        );
        p.run().and_then(|r| r.wait_until_finish(None)).unwrap_or_else(|e| panic!("{runner}: {e}"));
        let mut got: Vec<String> =
            broker::read_all(&broker.address, &topic, "read_committed").into_iter().map(|r| r.2).collect();
        got.sort();
        let mut want = words;
        want.sort();
        assert_eq!(got, want, "{runner}");
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Bid {
    price: u64,
}

#[test]
fn a_record_that_does_not_decode_fails_naming_where_or_is_skipped() {
    let broker = Broker::start();
    broker.create_topic("bids", 1);
    let recs: Vec<(Option<String>, String, i32)> =
        vec![(None, r#"{"price":1}"#.into(), 0), (None, "not json".into(), 0), (None, r#"{"price":3}"#.into(), 0)];
    broker.produce("bids", &recs);
    let read = |policy: BadRecordPolicy| {
        let p = Pipeline::new(options("microbatch"));
        let got = CollectHandle::new();
        p.apply(
            "Read",
            KafkaIO::read::<Vec<u8>, Json<Bid>>()
                .with_bootstrap_servers(&broker.address)
                .with_topic("bids")
                .from_earliest()
                .to_latest()
                .with_bad_records(policy),
        )
        .apply("Prices", Map::new(|r: KafkaRecord<Vec<u8>, Json<Bid>>| r.value.0.price))
        .apply("Collect", Collect::into(&got));
        let result = p.run().and_then(|r| r.wait_until_finish(None).map(|_| r.metrics()));
        (result, got.items())
    };
    let (failed, _) = read(BadRecordPolicy::Fail);
    let Err(e) = failed else { panic!("a bad record fails the read") };
    let e = e.to_string();
    assert!(e.contains("Kafka topic bids, partition 0, offset 1") && e.contains("not json"), "{e}");
    let (skipped, mut prices) = read(BadRecordPolicy::Skip);
    let metrics = skipped.unwrap();
    prices.sort();
    assert_eq!(prices, [1, 3]);
    let bad: i64 = metrics
        .all_metrics()
        .counters
        .iter()
        .filter(|c| c.key.name.name == "bad-records")
        .map(|c| c.committed.unwrap_or(c.attempted))
        .sum();
    assert_eq!(bad, 1);
}

#[test]
fn an_unreachable_broker_fails_the_read_and_the_write_naming_it() {
    let address = format!("127.0.0.1:{}", broker::free_port());
    let p = Pipeline::new(options("microbatch"));
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, Vec<u8>>()
            .with_bootstrap_servers(&address)
            .with_topic("nothing")
            .with_timeout(Duration::from_secs(2)),
    )
    .apply("Collect", Collect::into(&CollectHandle::new()));
    let began = std::time::Instant::now();
    let Err(e) = p.run().and_then(|r| r.wait_until_finish(None)) else { panic!("no broker") };
    let e = e.to_string();
    assert!(e.contains(&address) && e.contains("cannot reach Kafka"), "{e}");
    assert!(began.elapsed() < Duration::from_secs(30), "{:?}", began.elapsed());
    let sink = KafkaIO::write::<String, String>()
        .with_bootstrap_servers(&address)
        .with_topic("out")
        .with_timeout(Duration::from_secs(2))
        .sink();
    let Err(e) = sink.open("q") else { panic!("no broker") };
    let e = e.to_string();
    assert!(e.contains(&address), "{e}");
}

#[test]
fn an_unbounded_read_windows_by_create_time_and_ends_windows_as_partitions_go_idle() {
    let broker = Broker::start();
    broker.create_topic("clicks", 2);
    // Two windows of 10 s, by the records' create times (set by the producer below).
    let p = Pipeline::new(options("microbatch"));
    let got: CollectHandle<(i64, i64)> = CollectHandle::new();
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, String>()
            .with_bootstrap_servers(&broker.address)
            .with_topic("clicks")
            .with_start(StartOffset::Earliest)
            .with_timestamp_policy(TimestampPolicy::Custom {
                timestamp: Arc::new(|r: &KafkaRecord<Vec<u8>, String>| r.value.parse::<i64>().unwrap_or(0)),
                max_delay: Duration::ZERO,
            }),
    )
    .apply("Window", Window::into(FixedWindows::of(Duration::from_secs(10))))
    .apply("One", Map::new(|_r: KafkaRecord<Vec<u8>, String>| KV::new(0i64, 1i64)))
    .apply("Count", Sum::per_key())
    .apply("WithStart", WithWindowStart)
    .apply("Collect", Collect::into(&got));
    let result = p.run().unwrap();
    let recs: Vec<(Option<String>, String, i32)> = (0..40).map(|i| (None, (i * 500).to_string(), i % 2)).collect();
    broker.produce("clicks", &recs);
    let began = std::time::Instant::now();
    while got.items().len() < 2 && began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    result.cancel().unwrap();
    let mut items = got.items();
    items.sort();
    assert_eq!(items, [(0, 20), (10_000, 20)]);
}

/// Each count with its window's start.
#[derive(Clone)]
struct WithWindowStart;

impl PTransform<PCollection<KV<i64, i64>>> for WithWindowStart {
    type Output = PCollection<(i64, i64)>;
    fn expand(self, input: PCollection<KV<i64, i64>>) -> PCollection<(i64, i64)> {
        input.apply("Start", ParDo::of(StartFn))
    }
}

#[derive(Clone)]
struct StartFn;

impl DoFn for StartFn {
    type In = KV<i64, i64>;
    type Out = (i64, i64);
    fn process(&mut self, kv: KV<i64, i64>, ctx: &mut ProcessContext<'_, (i64, i64)>) -> UserResult {
        let start = ctx.window().interval().map(|w| w.start).unwrap_or(-1);
        ctx.output((start, kv.value));
        Ok(())
    }
}

/// Partitions added to a topic while an unbounded read runs are found and read.
#[test]
fn partitions_added_while_a_read_runs_are_read() {
    let broker = Broker::start();
    broker.create_topic("grow", 1);
    let p = Pipeline::new(options("microbatch"));
    let got: CollectHandle<KafkaRecord<Vec<u8>, String>> = CollectHandle::new();
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, String>()
            .with_bootstrap_servers(&broker.address)
            .with_topic("grow")
            .from_earliest()
            .with_partition_discovery_interval(Duration::from_millis(200)),
    )
    .apply("Collect", Collect::into(&got));
    let result = p.run().unwrap();
    let wait_for = |n: usize| {
        let began = std::time::Instant::now();
        while got.items().len() < n && began.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    broker.produce("grow", &(0..10).map(|i| (None, format!("a{i}"), 0)).collect::<Vec<_>>());
    wait_for(10);
    broker.add_partitions("grow", 3);
    broker.produce("grow", &(0..20).map(|i| (None, format!("b{i}"), 1 + i % 2)).collect::<Vec<_>>());
    wait_for(30);
    result.cancel().unwrap();
    let mut by_partition = std::collections::BTreeMap::new();
    for r in got.items() {
        *by_partition.entry(r.partition).or_insert(0) += 1;
    }
    assert_eq!(by_partition, [(0, 10), (1, 10), (2, 10)].into_iter().collect());
}

/// The child of the kill test: copies topic `in` to topic `out` (each value, tagged) on the
/// micro-batch runner (or another) with a checkpoint, until it is killed. Runs only when the
/// kill test starts this test binary with `WEIR_KAFKA_CHILD=BROKER,CHECKPOINT_DIR[,RUNNER]`.
#[test]
fn kill_test_child() {
    let Ok(args) = std::env::var("WEIR_KAFKA_CHILD") else { return };
    let mut parts = args.split(',');
    let (address, checkpoint) = (parts.next().unwrap(), parts.next().unwrap());
    let runner = parts.next().unwrap_or("microbatch");
    let timeout = Duration::from_secs(parts.next().map_or(30, |s| s.parse().unwrap()));
    weir::register();
    let mut args = vec!["--runner", runner];
    if runner == "timely" {
        args.extend(["--workers", "2"]);
    }
    let options = PipelineOptions::from_args(
        [&args[..], &["--checkpoint-dir", checkpoint, "--max-batch-size", "100", "--trigger-interval-ms", "20"]]
            .concat(),
    )
    .unwrap();
    let p = Pipeline::new(options);
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, String>()
            .with_bootstrap_servers(address)
            .with_topic("in")
            .from_earliest()
            .with_timeout(timeout)
            .with_poll_interval(Duration::from_millis(20)),
    )
    // A millisecond a record, so that the kills fall while it copies.
    .apply(
        "Tag",
        Map::new(|r: KafkaRecord<Vec<u8>, String>| {
            std::thread::sleep(Duration::from_millis(1));
            format!("{}@{}-{}", r.value, r.partition, r.offset)
        }),
    )
    .apply(
        "Write",
        KafkaIO::write::<(), String>().with_bootstrap_servers(address).with_topic("out").with_timeout(timeout).values(),
    );
    let r = p.run().unwrap();
    let e = r.wait_until_finish(None);
    panic!("the copy ended: {e:?}");
}

/// SIGKILLs of a running copy from topic to topic at random points, each followed by a restart
/// from the checkpoint, give the output of an uninterrupted run: every record once, none lost.
#[test]
fn a_killed_copy_resumes_from_its_checkpoint_exactly_once() {
    kill_rounds(4);
}

/// The long form: `cargo test -p weir-kafka --test kafka -- --ignored`.
#[test]
#[ignore]
fn ten_kills_of_a_copy_lose_and_duplicate_nothing() {
    kill_rounds(10);
}

/// A batch whose output the sink committed, replayed after a crash before the checkpoint
/// recorded it, reads exactly what it read before, though the partitions hold more by then: the
/// sink skips the replay, so a replay that read more would lose the difference.
#[test]
fn a_batch_replayed_after_its_sink_committed_reads_what_it_read_before() {
    replayed_after_the_sink_committed("microbatch");
}

/// The same on a timely cluster of 2 workers: each epoch's reads are journaled per worker.
#[test]
fn an_epoch_replayed_after_its_sink_committed_reads_what_it_read_before() {
    replayed_after_the_sink_committed("timely");
}

fn replayed_after_the_sink_committed(runner: &str) {
    let broker = Broker::start();
    broker.create_topic("in", 3);
    broker.create_topic("out", 1);
    let input: Vec<(Option<String>, String, i32)> = (0..240i32).map(|i| (None, format!("r{i}"), i % 3)).collect();
    broker.produce("in", &input[..60]);
    let checkpoint = tempfile::tempdir().unwrap();
    let child = |crash: Option<&str>| {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "kill_test_child", "--nocapture", "--test-threads", "1"])
            .env("WEIR_KAFKA_CHILD", format!("{},{},{runner}", broker.address, checkpoint.path().display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(at) = crash {
            c.env("WEIR_CRASH_AT", at);
        }
        c.spawn().unwrap()
    };
    // The first batch that reads what the partitions hold commits its transaction, and the
    // process dies before the checkpoint's commit log has the batch. (A first batch may read
    // nothing yet, Apache Kafka's first fetch taking longer than its poll: the next run
    // replays it, and dies after the next batch.)
    let mut first = 0;
    for batch in 0..5 {
        let status = child(Some(&format!("sink-commit:{batch}"))).wait().unwrap();
        assert!(!status.success());
        first = broker::read_all(&broker.address, "out", "read_committed").len();
        if first > 0 {
            break;
        }
    }
    assert!(first > 0, "no crashed batch committed anything to the sink");
    broker.produce("in", &input[60..]);
    let mut c = child(None);
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(60)
        && broker::read_all(&broker.address, "out", "read_committed").len() < input.len()
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    c.kill().unwrap();
    c.wait().unwrap();
    assert_copied_once(&input, &broker);
}

/// The broker stopped while a checkpointed copy runs, and started again on the same data: the
/// copy either rides it out (the client reconnects) or fails loudly, naming the broker, and a
/// restart from its checkpoint finishes it; either way every record is copied once.
#[test]
fn a_broker_lost_mid_run_is_survived_or_fails_loudly_and_resumes_exactly_once() {
    let port = broker::free_port();
    let mut broker = Broker::start_on(port, tempfile::tempdir().unwrap());
    broker.create_topic("in", 3);
    broker.create_topic("out", 1);
    let input: Vec<(Option<String>, String, i32)> = (0..1500i32).map(|i| (None, format!("r{i}"), i % 3)).collect();
    broker.produce("in", &input);
    let checkpoint = tempfile::tempdir().unwrap();
    let address = broker.address.clone();
    let child = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "kill_test_child", "--nocapture", "--test-threads", "1"])
            .env("WEIR_KAFKA_CHILD", format!("{address},{},microbatch,5", checkpoint.path().display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut c = child();
    std::thread::sleep(Duration::from_millis(800));
    let data = broker.stop();
    std::thread::sleep(Duration::from_secs(3));
    broker = Broker::start_on(port, data);
    // The child ends only if it failed: it names the broker it lost.
    let began = std::time::Instant::now();
    let mut failed = None;
    while began.elapsed() < Duration::from_secs(40)
        && broker::read_all(&broker.address, "out", "read_committed").len() < input.len()
    {
        if let Some(status) = c.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(!status.success());
            assert!(err.contains(&address), "the failure does not name the broker: {err}");
            failed = Some(err);
            c = child();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = c.kill();
    let _ = c.wait();
    eprintln!("the copy {}", if failed.is_some() { "failed and was restarted" } else { "rode out the outage" });
    assert_copied_once(&input, &broker);
}

/// Topic `out` holds every value of `input` exactly once.
fn assert_copied_once(input: &[(Option<String>, String, i32)], broker: &Broker) {
    let got: Vec<String> =
        broker::read_all(&broker.address, "out", "read_committed").into_iter().map(|r| r.2).collect();
    let mut counts = std::collections::BTreeMap::new();
    for v in &got {
        *counts.entry(v.split('@').next().unwrap().to_string()).or_insert(0) += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "written more than once: {twice:?}");
    let missing: Vec<_> = input.iter().map(|r| &r.1).filter(|v| !counts.contains_key(*v)).collect();
    assert!(missing.is_empty(), "lost {} records: {:?}", missing.len(), &missing[..missing.len().min(10)]);
    assert_eq!(got.len(), input.len());
    // The same, as an outside client sees it, reading committed records only.
    let mut seen = broker::kcat_read_committed(&broker.address, "out");
    let mut got = got;
    seen.sort();
    got.sort();
    assert_eq!(seen, got, "kcat reads other records than the test's consumer");
}

fn kill_rounds(rounds: usize) {
    let broker = Broker::start();
    broker.create_topic("in", 3);
    broker.create_topic("out", 2);
    let n = 3000;
    let input: Vec<(Option<String>, String, i32)> = (0..n).map(|i| (None, format!("r{i}"), (i % 3) as i32)).collect();
    broker.produce("in", &input[..n / 2]);
    let checkpoint = tempfile::tempdir().unwrap();
    let child = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "kill_test_child", "--nocapture", "--test-threads", "1"])
            .env("WEIR_KAFKA_CHILD", format!("{},{}", broker.address, checkpoint.path().display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut seed = broker::rand_id();
    let mut copied = 0;
    for round in 0..rounds {
        if round == rounds / 2 {
            broker.produce("in", &input[n / 2..]);
        }
        let mut c = child();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        // While no run has written anything yet (a loaded machine starts a writer slowly), each
        // run lives 1.5 s longer than the one before.
        let slow_start = if copied == 0 { 1500 * round as u64 } else { 0 };
        std::thread::sleep(Duration::from_millis(300 + (seed >> 33) % 1200 + slow_start));
        c.kill().unwrap();
        c.wait().unwrap();
        copied = broker::read_all(&broker.address, "out", "read_committed").len();
        eprintln!("round {round}: killed with {copied} records copied");
    }
    if rounds < 2 {
        broker.produce("in", &input[n / 2..]);
    }
    // The killed runs made progress (so the kills fell mid-run), and left work to do.
    let before = broker::read_all(&broker.address, "out", "read_committed").len();
    eprintln!("{before} of {n} records copied before the last run");
    assert!(before > 0, "no killed run wrote anything");
    let mut c = child();
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_secs(90)
        && broker::read_all(&broker.address, "out", "read_committed").len() < n
    {}
    // Anything more it would write comes now.
    std::thread::sleep(Duration::from_secs(1));
    c.kill().unwrap();
    c.wait().unwrap();
    assert_copied_once(&input, &broker);
}

/// A topic deleted while a read runs fails the read within its timeout (not twice it), saying
/// the topic is gone from the broker, which still answers (not that the broker was lost).
#[test]
fn a_topic_deleted_mid_read_fails_the_read_naming_it_within_its_timeout() {
    let broker = Broker::start();
    broker.create_topic("doomed", 3);
    broker.produce("doomed", &records(20));
    let timeout = Duration::from_secs(4);
    let p = Pipeline::new(options("microbatch"));
    let got: CollectHandle<KafkaRecord<Vec<u8>, String>> = CollectHandle::new();
    p.apply(
        "Read",
        KafkaIO::read::<Vec<u8>, String>()
            .with_bootstrap_servers(&broker.address)
            .with_topic("doomed")
            .with_start(StartOffset::Earliest)
            .with_timeout(timeout),
    )
    .apply("Collect", Collect::into(&got));
    let result = p.run().unwrap();
    let began = std::time::Instant::now();
    while got.items().len() < 20 && began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got.items().len(), 20);
    broker.connection().delete_topic("doomed").unwrap();
    let deleted_at = std::time::Instant::now();
    let e = result
        .wait_until_finish(Some(Duration::from_secs(120)))
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|e| e.to_string());
    let took = deleted_at.elapsed();
    assert!(e.contains("topic 'doomed' is gone") && e.contains(&broker.address), "{e}");
    // Within the stated timeout, give or take a poll and a batch.
    assert!(took < timeout * 2, "failed {took:?} after the deletion, with a {timeout:?} timeout: {e}");
    eprintln!("failed {took:?} after the deletion: {e}");
}

/// A broker that loses commits it acknowledged (noida-db SIGKILLed keeps only what it wrote out
/// in its last second) is noticed: the sink's next commit fails naming the batches lost, in the
/// run that wrote them and in a restarted one, rather than writing on past the gap. A broker
/// that kept everything is written on exactly once.
#[test]
fn a_broker_that_loses_acknowledged_commits_fails_the_sink_naming_the_gap() {
    // noida-db: Apache Kafka keeps what it acknowledged in the page cache across a SIGKILL.
    let port = broker::free_port();
    let broker = Broker::start_kind(broker::Kind::Noida, port, tempfile::tempdir().unwrap());
    broker.create_topic("out", 1);
    let sink = KafkaIO::write::<String, String>().with_bootstrap_servers(&broker.address).with_topic("out").sink();
    let batch = |x: u64| Batch::new(vec![WindowedValue::timestamped(KV::new(x.to_string(), x.to_string()), 0)]);
    let mut w = sink.open("lossy").unwrap();
    for b in 0..3 {
        w.commit(b, vec![batch(b)]).unwrap();
    }
    // Batch 3 wrote nothing: every batch commits the marker all the same.
    w.commit(3, Vec::new()).unwrap();
    // Written out by the broker, then three more batches it acknowledges, then a SIGKILL
    // before its next write-out.
    std::thread::sleep(Duration::from_millis(2500));
    for b in 4..7 {
        w.commit(b, vec![batch(b)]).unwrap();
    }
    let data = broker.kill();
    let broker = Broker::start_kind(broker::Kind::Noida, port, data);
    let kept: Vec<String> =
        broker::read_all(&broker.address, "out", "read_committed").into_iter().map(|r| r.2).collect();
    let lost = !kept.contains(&"6".to_string());
    eprintln!("the broker kept {kept:?}");
    // The run that committed them, and a restarted one that resumes at batch 7.
    let outcomes =
        [w.commit(7, vec![batch(7)]), sink.open("lossy").and_then(|mut again| again.commit(7, vec![batch(7)]))];
    for outcome in outcomes {
        match (lost, outcome) {
            (true, Err(e)) => {
                let e = e.to_string();
                assert!(e.contains("lost writes it had acknowledged") && e.contains("to 6"), "{e}");
            }
            (false, Ok(())) => {}
            (lost, outcome) => panic!("lost: {lost} (kept {kept:?}), the commit of batch 7: {outcome:?}"),
        }
    }
    if !lost {
        let mut values: Vec<String> =
            broker::read_all(&broker.address, "out", "read_committed").into_iter().map(|r| r.2).collect();
        values.sort();
        assert_eq!(values, ["0", "1", "2", "4", "5", "6", "7"]);
    }
}
