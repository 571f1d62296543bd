//! A Kafka broker for the tests, started on 127.0.0.1 on a free port and stopped when dropped:
//! Apache Kafka itself (KRaft mode, one process both broker and controller) when its jars are
//! here, else `noida-db` (a Kafka-compatible server with real transactions).
//!
//! - Apache Kafka's jars are in `$WEIR_APACHE_KAFKA_LIB`, else `~/.cache/weir-apache-kafka/lib`
//!   (where `.ci/run` puts them: `mvn -q -f kafka/tests/apache-kafka/pom.xml
//!   dependency:copy-dependencies -DoutputDirectory=$HOME/.cache/weir-apache-kafka/lib`); it runs
//!   on the `java` of the PATH. `WEIR_KAFKA_BROKER=noida` picks noida-db even so.
//! - noida-db is `$WEIR_NOIDA_DB`, else `noida-db` on the PATH, else
//!   `~/.cache/weir-noida/bin/noida-db` (where `.ci/run` installs it with `cargo install
//!   noida-db --version 0.2.3 --locked --no-default-features --features kafka --root
//!   ~/.cache/weir-noida`).
//!
//! A test fails, saying how to install them, when there is neither.

#![allow(dead_code)]

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which broker runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Apache Kafka, in KRaft mode.
    Apache,
    /// noida-db.
    Noida,
}

impl Kind {
    /// Apache Kafka when its jars are here (and `WEIR_KAFKA_BROKER` does not say noida).
    pub fn default_here() -> Kind {
        let noida = std::env::var("WEIR_KAFKA_BROKER").is_ok_and(|b| b == "noida");
        if !noida && apache_lib().is_some() {
            Kind::Apache
        } else {
            Kind::Noida
        }
    }
}

/// The directory of Apache Kafka's jars, if they are there.
fn apache_lib() -> Option<PathBuf> {
    let dir = match std::env::var("WEIR_APACHE_KAFKA_LIB") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/weir-apache-kafka/lib"),
    };
    let has_broker = std::fs::read_dir(&dir)
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("kafka_2.13-")))
        .unwrap_or(false);
    has_broker.then_some(dir)
}

/// Starts Apache Kafka on `port` with its data (and configuration) in `data`: formatted on first
/// use, kept across restarts on the same directory.
fn start_apache(port: u16, data: &Path) -> Child {
    let lib = apache_lib().expect("Apache Kafka's jars (see the module's documentation)");
    let classpath = format!("{}/*", lib.display());
    // The controller keeps its port across restarts on the same data.
    let controller_file = data.join("controller-port");
    let controller = match std::fs::read_to_string(&controller_file) {
        Ok(p) => p.trim().parse().unwrap(),
        Err(_) => {
            let p = free_port();
            std::fs::write(&controller_file, p.to_string()).unwrap();
            p
        }
    };
    let logs = data.join("logs");
    let config = data.join("server.properties");
    let properties = format!(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n\
         listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
         advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
         inter.broker.listener.name=PLAINTEXT\nlog.dirs={}\nnum.partitions=1\n\
         offsets.topic.replication.factor=1\noffsets.topic.num.partitions=1\n\
         transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
         transaction.state.log.num.partitions=1\nshare.coordinator.state.topic.replication.factor=1\n\
         share.coordinator.state.topic.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n",
        logs.display()
    );
    std::fs::write(&config, properties).unwrap();
    let java = |main: &str| {
        let mut c = Command::new("java");
        c.args(["-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-cp", &classpath, main]);
        c
    };
    if !logs.join("meta.properties").is_file() {
        let o = java("kafka.tools.StorageTool")
            .args(["format", "-t", "q1Sh-9_ISia_zwGINzRvyQ", "-c"])
            .arg(&config)
            .output()
            .expect("run java (Apache Kafka's storage tool)");
        assert!(o.status.success(), "formatting Apache Kafka's storage: {}", String::from_utf8_lossy(&o.stderr));
    }
    java("kafka.Kafka").arg(&config).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start Apache Kafka")
}

pub struct Broker {
    child: Child,
    pub address: String,
    pub kind: Kind,
    _data: tempfile::TempDir,
}

fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("WEIR_NOIDA_DB") {
        return PathBuf::from(p);
    }
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            let c = dir.join("noida-db");
            if c.is_file() {
                return c;
            }
        }
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cached = PathBuf::from(home).join(".cache/weir-noida/bin/noida-db");
    assert!(
        cached.is_file(),
        "no Kafka-compatible broker: install it with `cargo install noida-db --version 0.2.3 --locked \
         --no-default-features --features kafka --root ~/.cache/weir-noida` (or set WEIR_NOIDA_DB)"
    );
    cached
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Broker {
    /// The broker of [`Kind::default_here`].
    pub fn start() -> Broker {
        Self::start_on(free_port(), tempfile::tempdir().unwrap())
    }

    /// The broker of [`Kind::default_here`] on `port`, keeping its data in `data` (a restart
    /// on the same data keeps the topics).
    pub fn start_on(port: u16, data: tempfile::TempDir) -> Broker {
        Self::start_kind(Kind::default_here(), port, data)
    }

    /// A broker of `kind` on `port`, keeping its data in `data`.
    pub fn start_kind(kind: Kind, port: u16, data: tempfile::TempDir) -> Broker {
        let child = match kind {
            Kind::Apache => start_apache(port, data.path()),
            Kind::Noida => Command::new(binary())
                .args(["start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", &port.to_string()])
                .arg("--data-dir")
                .arg(data.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start noida-db"),
        };
        let address = format!("127.0.0.1:{port}");
        let mut broker = Broker { child, address, kind, _data: data };
        broker.wait_until_ready();
        if kind == Kind::Apache {
            broker.start_transaction_coordinator();
        }
        broker
    }

    /// Has Apache Kafka make its transaction log now, as a transactional producer's first
    /// contact does (a few seconds, loaded): a test that kills a writer at a random point early
    /// in its run would otherwise kill it before it could write anything.
    fn start_transaction_coordinator(&self) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.address)
            .set("transactional.id", format!("warm-up-{}", rand_id()))
            .create()
            .unwrap();
        producer.init_transactions(Duration::from_secs(60)).expect("Apache Kafka's transaction coordinator starts");
        // And the group coordinator (its log is made at the first use of consumer groups).
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &self.address).set("group.id", "warm-up").create().unwrap();
        let began = Instant::now();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition("warm-up", 0);
        while consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)).is_err() {
            assert!(began.elapsed() < Duration::from_secs(60), "Apache Kafka's group coordinator did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the broker answers a metadata request naming itself (Apache Kafka listens
    /// before its controller has elected itself).
    fn wait_until_ready(&mut self) {
        let began = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the {:?} broker on {} exited at start: {status}", self.kind, self.address);
            }
            let listening = TcpStream::connect(&self.address).is_ok();
            if listening {
                let consumer: Result<rdkafka::consumer::BaseConsumer, _> =
                    ClientConfig::new().set("bootstrap.servers", &self.address).create();
                let ready = consumer.is_ok_and(|c| {
                    use rdkafka::consumer::Consumer;
                    c.fetch_metadata(None, Duration::from_secs(2)).is_ok_and(|m| !m.brokers().is_empty())
                });
                if ready {
                    return;
                }
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "the {:?} broker did not come up on {}",
                self.kind,
                self.address
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the broker as an operator would (SIGINT, then SIGKILL after 10 s), keeping its data
    /// directory for a restart. noida-db writes its data out as it stops; a SIGKILL loses what
    /// it acknowledged since it last did.
    pub fn stop(mut self) -> tempfile::TempDir {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let began = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() && began.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self._data, tempfile::tempdir().unwrap())
    }

    /// Kills the broker (SIGKILL), keeping its data directory for a restart: noida-db loses
    /// what it acknowledged since it last wrote its data out (it does so once a second).
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self._data, tempfile::tempdir().unwrap())
    }

    pub fn connection(&self) -> weir_kafka::Connection {
        weir_kafka::Connection::new(&self.address)
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.connection().create_topic(topic, partitions).unwrap();
    }

    /// Produces `records` (key, value, partition) and waits until they are all written.
    pub fn produce(&self, topic: &str, records: &[(Option<String>, String, i32)]) {
        // Delivery is checked: a producer whose metadata does not show a partition yet (just
        // added: Apache Kafka's brokers learn of new partitions asynchronously) fails those
        // records on delivery, and they are sent again with a new producer.
        let mut left: Vec<&(Option<String>, String, i32)> = records.iter().collect();
        let began = Instant::now();
        while !left.is_empty() {
            assert!(began.elapsed() < Duration::from_secs(60), "cannot produce {} records to {topic}", left.len());
            let producer: BaseProducer<Delivered> = ClientConfig::new()
                .set("bootstrap.servers", &self.address)
                .set("linger.ms", "5")
                .create_with_context(Delivered::default())
                .unwrap();
            for (i, (k, v, p)) in left.iter().enumerate() {
                let mut r: BaseRecord<'_, String, String, usize> =
                    BaseRecord::with_opaque_to(topic, i).payload(v).partition(*p);
                if let Some(k) = k {
                    r = r.key(k);
                }
                let mut r = Some(r);
                while let Some(rec) = r.take() {
                    if let Err((_, back)) = producer.send(rec) {
                        producer.poll(Duration::from_millis(10));
                        r = Some(back);
                    }
                }
            }
            producer.flush(Duration::from_secs(30)).unwrap();
            let failed = std::mem::take(&mut *producer.context().failed.lock().unwrap());
            left = failed.into_iter().map(|i| left[i]).collect();
            if !left.is_empty() {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Grows `topic` to `partitions` and waits until the broker's metadata shows them.
    pub fn add_partitions(&self, topic: &str, partitions: usize) {
        self.connection().add_partitions(topic, partitions).unwrap();
        let consumer: rdkafka::consumer::BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &self.address).create().unwrap();
        let began = Instant::now();
        loop {
            use rdkafka::consumer::Consumer;
            let meta = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
            if meta.topics()[0].partitions().len() >= partitions {
                return;
            }
            assert!(began.elapsed() < Duration::from_secs(30), "{topic} does not show {partitions} partitions");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A producer context that remembers which records (by index) failed delivery.
#[derive(Default)]
struct Delivered {
    failed: std::sync::Mutex<Vec<usize>>,
}

impl rdkafka::ClientContext for Delivered {}

impl rdkafka::producer::ProducerContext for Delivered {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, i: usize) {
        if result.is_err() {
            self.failed.lock().unwrap().push(i);
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every record of `topic` a `read_committed` consumer sees now: (partition, offset, value).
pub fn read_all(address: &str, topic: &str, isolation: &str) -> Vec<(i32, i64, String)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("group.id", format!("check-{}", rand_id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let meta = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let partitions = meta.topics()[0].partitions().len() as i32;
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
        ends.push(consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap().1);
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(2) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = Instant::now();
                out.push((m.partition(), m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into()));
            }
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    }
    out.sort();
    out
}

/// `kcat` (Debian's package): the outside client the tests produce and consume with.
pub fn kcat() -> Command {
    let found =
        std::env::var("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join("kcat").is_file())).unwrap_or(false);
    assert!(found, "no kcat on the PATH: install Debian's package (`apt-get install kcat`)");
    Command::new("kcat")
}

/// Produces `lines` (`KEY:VALUE` each) to partition `partition` of `topic` with kcat.
pub fn kcat_produce(address: &str, topic: &str, partition: i32, lines: &[String]) {
    use std::io::Write;
    let mut c = kcat()
        .args(["-b", address, "-P", "-t", topic, "-p", &partition.to_string(), "-K", ":"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    assert!(c.wait().unwrap().success(), "kcat could not produce to {topic}");
}

/// Every value of `topic` as kcat reads it with `isolation.level=read_committed`, to the end.
pub fn kcat_read_committed(address: &str, topic: &str) -> Vec<String> {
    let o = kcat()
        .args(["-b", address, "-C", "-t", topic, "-e", "-q", "-X", "isolation.level=read_committed", "-f", "%s\n"])
        .output()
        .unwrap();
    assert!(o.status.success(), "kcat could not read {topic}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect()
}

pub fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}
