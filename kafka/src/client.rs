//! The connection settings a read and a write share, and the clients made from them.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the brokers are, how long to wait for them, and settings passed through to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// How long a broker may be unreachable: at startup before the pipeline fails, and in a
    /// run before the read or the write fails.
    pub timeout: Duration,
    /// Client settings (librdkafka's names: `security.protocol`, `sasl.mechanism`,
    /// `socket.timeout.ms`, ...), applied last.
    pub config: BTreeMap<String, String>,
}

impl Connection {
    /// Brokers at `bootstrap_servers`, a 30 s timeout, no extra settings.
    pub fn new(bootstrap_servers: &str) -> Self {
        Connection {
            bootstrap_servers: bootstrap_servers.to_string(),
            timeout: Duration::from_secs(30),
            config: BTreeMap::new(),
        }
    }

    /// The client configuration: brokers, then `defaults`, then the user's settings.
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers);
        c.set("socket.connection.setup.timeout.ms", self.timeout.as_millis().max(1000).to_string());
        for (k, v) in defaults {
            c.set(*k, *v);
        }
        for (k, v) in &self.config {
            c.set(k, v);
        }
        c
    }

    /// A consumer that reads assigned partitions only, and commits nothing itself.
    pub fn consumer(&self, extra: &[(&str, &str)]) -> Result<BaseConsumer, String> {
        let mut defaults = vec![
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            ("isolation.level", "read_committed"),
            // librdkafka wants a group even for assigned partitions; this one never joins
            // or commits (a read that commits names its own).
            ("group.id", "weir-assigned"),
        ];
        defaults.extend_from_slice(extra);
        self.client_config(&defaults)
            .create()
            .map_err(|e| format!("cannot make a Kafka consumer for {}: {e}", self.bootstrap_servers))
    }

    /// The cluster's metadata (of `topic`, or of every topic), or an error naming the brokers
    /// when they cannot be reached within the timeout.
    pub fn metadata(&self, consumer: &BaseConsumer, topic: Option<&str>) -> Result<Metadata, String> {
        let m = consumer.fetch_metadata(topic, self.timeout).map_err(|e| self.unreachable(e))?;
        if m.brokers().is_empty() {
            return Err(self.unreachable("no broker answered"));
        }
        Ok(m)
    }

    /// The error of brokers that did not answer in time.
    pub fn unreachable(&self, e: impl std::fmt::Display) -> String {
        format!("cannot reach Kafka at {} within {} s: {e}", self.bootstrap_servers, self.timeout.as_secs_f64())
    }
}

impl Connection {
    /// Creates `topic` with `partitions` partitions (one replica each) unless it exists.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), String> {
        use rdkafka::admin::{NewTopic, TopicReplication};
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let (admin, options) = self.admin()?;
        let results =
            futures_executor::block_on(admin.create_topics([&new], &options)).map_err(|e| self.unreachable(e))?;
        self.admin_results(results, "create topic", &[rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists])
    }

    /// Grows `topic` to `partitions` partitions (Kafka's `CreatePartitions`): a running read
    /// finds the new ones at its next discovery.
    pub fn add_partitions(&self, topic: &str, partitions: usize) -> Result<(), String> {
        let new = rdkafka::admin::NewPartitions::new(topic, partitions);
        let (admin, options) = self.admin()?;
        let results =
            futures_executor::block_on(admin.create_partitions([&new], &options)).map_err(|e| self.unreachable(e))?;
        self.admin_results(results, "add partitions to topic", &[])
    }

    /// Deletes `topic`.
    pub fn delete_topic(&self, topic: &str) -> Result<(), String> {
        let (admin, options) = self.admin()?;
        let results =
            futures_executor::block_on(admin.delete_topics(&[topic], &options)).map_err(|e| self.unreachable(e))?;
        self.admin_results(results, "delete topic", &[])
    }

    fn admin(
        &self,
    ) -> Result<
        (rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>, rdkafka::admin::AdminOptions),
        String,
    > {
        let admin = self
            .client_config(&[])
            .create()
            .map_err(|e| format!("cannot make a Kafka admin client for {}: {e}", self.bootstrap_servers))?;
        let options = rdkafka::admin::AdminOptions::new()
            .operation_timeout(Some(self.timeout))
            .request_timeout(Some(self.timeout));
        Ok((admin, options))
    }

    /// An error naming the first topic the brokers refused `what` for (other than `fine`).
    fn admin_results(
        &self,
        results: Vec<rdkafka::admin::TopicResult>,
        what: &str,
        fine: &[rdkafka::types::RDKafkaErrorCode],
    ) -> Result<(), String> {
        for r in results {
            if let Err((name, e)) = r {
                if !fine.contains(&e) {
                    return Err(format!("Kafka at {}: cannot {what} {name}: {e}", self.bootstrap_servers));
                }
            }
        }
        Ok(())
    }
}
