//! `NexmarkConfiguration`: every field of Beam's configuration with Beam's defaults, and the suites.

use serde::{Deserialize, Serialize};

/// Where events come from (Beam's `SourceType`). Weir generates events (`Direct`) or reads an
/// events file written by `--export-events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SourceType {
    /// The synthetic generator.
    Direct,
    /// Avro files (Beam only).
    Avro,
    /// Pub/Sub (Beam only).
    Pubsub,
    /// Kafka (Beam only).
    Kafka,
}

/// Where results go (Beam's `SinkType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SinkType {
    /// Count results only.
    CountOnly,
    /// Discard results.
    Devnull,
    /// Pub/Sub (Beam only).
    Pubsub,
    /// Kafka (Beam only).
    Kafka,
    /// Text files.
    Text,
    /// Avro files (Beam only).
    Avro,
    /// BigQuery (Beam only).
    Bigquery,
}

/// Beam's `PubSubMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PubSubMode {
    /// Publish only.
    PublishOnly,
    /// Subscribe only.
    SubscribeOnly,
    /// Both.
    Combined,
}

/// Beam's `PubsubMessageSerializationMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PubsubMessageSerializationMethod {
    /// The event coder.
    Coder,
    /// `toString()`.
    ToString,
}

/// How the bounded side input of the side-input joins is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SideInputType {
    /// Generated in the pipeline.
    Direct,
    /// Read from CSV shards.
    Csv,
}

/// Shape of the event rate over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RateShape {
    /// Alternate between the first and the next rate.
    Square,
    /// Ten steps of a cosine between the two rates.
    Sine,
}

impl RateShape {
    /// Number of steps per rate period (`RateShape.stepLengthSec` divisor).
    pub fn steps(self) -> i64 {
        match self {
            RateShape::Square => 2,
            RateShape::Sine => 10,
        }
    }
}

/// Unit of `firstEventRate` / `nextEventRate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RateUnit {
    /// Events per second.
    PerSecond,
    /// Events per minute.
    PerMinute,
}

impl RateUnit {
    /// Microseconds per unit.
    pub fn us_per_unit(self) -> i64 {
        match self {
            RateUnit::PerSecond => 1_000_000,
            RateUnit::PerMinute => 60_000_000,
        }
    }

    /// `rateToPeriodUs`: the delay between events at `rate` events per unit, rounded.
    pub fn rate_to_period_us(self, rate: i64) -> i64 {
        (self.us_per_unit() + rate / 2) / rate
    }
}

/// How events and results are encoded (Beam's `CoderStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CoderStrategy {
    /// Hand-written coders.
    Hand,
    /// Avro.
    Avro,
    /// Java serialisation.
    Java,
}

/// Beam's `NexmarkConfiguration`: field names, JSON names and defaults as in Beam.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NexmarkConfig {
    /// Add monitoring transforms and metrics.
    pub debug: bool,
    /// The query to run (set per configuration by the suites).
    pub query: Option<crate::QueryName>,
    /// Where events come from.
    pub source_type: SourceType,
    /// Only write generated events to files with this prefix.
    pub generate_event_file_path_prefix: Option<String>,
    /// Where results go.
    pub sink_type: SinkType,
    /// Export the summary to BigQuery (Beam only).
    pub export_summary_to_big_query: bool,
    /// Pub/Sub mode (Beam only).
    pub pub_sub_mode: PubSubMode,
    /// Pub/Sub message encoding (Beam only).
    pub pubsub_message_serialization_method: PubsubMessageSerializationMethod,
    /// How the side input of the side-input joins is built.
    pub side_input_type: SideInputType,
    /// Rows of the side input: `(i, "i")` for `i` in `[0, sideInputRowCount)`.
    pub side_input_row_count: i64,
    /// CSV shards of the side input.
    pub side_input_num_shards: i32,
    /// CSV prefix of the side input.
    pub side_input_url: Option<String>,
    /// Session gap of SESSION_SIDE_INPUT_JOIN, in seconds.
    pub session_gap_sec: i64,
    /// Number of events; 0 means as many as possible.
    pub num_events: i64,
    /// Parallel generator timelines (= source splits).
    pub num_event_generators: i32,
    /// Shape of the event rate.
    pub rate_shape: RateShape,
    /// First rate, in `rateUnit`.
    pub first_event_rate: i64,
    /// Second rate, in `rateUnit`.
    pub next_event_rate: i64,
    /// Unit of the rates.
    pub rate_unit: RateUnit,
    /// Full period of the rate shape, in seconds.
    pub rate_period_sec: i64,
    /// Seconds of events to preload.
    pub preload_seconds: i64,
    /// Seconds to wait for a job to finish.
    pub stream_timeout: i64,
    /// Streaming: emit each event only when the wall clock reaches it.
    pub is_rate_limited: bool,
    /// Base time = now instead of Beam's fixed base time.
    pub use_wallclock_event_time: bool,
    /// Target person size in bytes.
    pub avg_person_byte_size: i32,
    /// Target auction size in bytes.
    pub avg_auction_byte_size: i32,
    /// Target bid size in bytes.
    pub avg_bid_byte_size: i32,
    /// A bid goes to a hot auction with probability `1 - 1/hotAuctionRatio`.
    pub hot_auction_ratio: i32,
    /// An auction is by a hot seller with probability `1 - 1/hotSellersRatio`.
    pub hot_sellers_ratio: i32,
    /// A bid is by a hot bidder with probability `1 - 1/hotBiddersRatio`.
    pub hot_bidders_ratio: i32,
    /// Window size in seconds.
    pub window_size_sec: i64,
    /// Sliding period in seconds (Q4, Q5).
    pub window_period_sec: i64,
    /// The unbounded source subtracts this from its watermark.
    pub watermark_holdback_sec: i64,
    /// Auctions in flight per generator.
    pub num_in_flight_auctions: i32,
    /// People to choose from at random.
    pub num_active_people: i32,
    /// Coder strategy.
    pub coder_strategy: CoderStrategy,
    /// Busy-spin per event, in milliseconds.
    pub cpu_delay_ms: i64,
    /// Bytes written to state per event.
    pub disk_busy_bytes: i64,
    /// Q2 keeps bids with `auction % auctionSkip == 0`.
    pub auction_skip: i32,
    /// Hot-key / combine fanout for Q4, Q5, Q7.
    pub fanout: i32,
    /// Seconds; Q3 state cleanup timer.
    pub max_auctions_waiting_time: i32,
    /// Unbounded source: maximum extra delay of a held-back event, in seconds.
    pub occasional_delay_sec: i64,
    /// Unbounded source: probability an event is held back (only when rate limited).
    pub prob_delayed_event: f64,
    /// Q10 and Q11 element-count triggers.
    pub max_log_events: i64,
    /// Use Pub/Sub publish time (Beam only).
    pub use_pubsub_publish_time: bool,
    /// 1 = in order; N = events permuted within groups of N.
    pub out_of_order_group_size: i64,
    /// Key buckets of PORTABILITY_BATCH and RESHUFFLE.
    pub num_key_buckets: i32,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        Self {
            debug: true,
            query: None,
            source_type: SourceType::Direct,
            generate_event_file_path_prefix: None,
            sink_type: SinkType::Devnull,
            export_summary_to_big_query: false,
            pub_sub_mode: PubSubMode::Combined,
            pubsub_message_serialization_method: PubsubMessageSerializationMethod::Coder,
            side_input_type: SideInputType::Direct,
            side_input_row_count: 500,
            side_input_num_shards: 3,
            side_input_url: None,
            session_gap_sec: 10 * 60,
            num_events: 100_000,
            num_event_generators: 100,
            rate_shape: RateShape::Sine,
            first_event_rate: 10_000,
            next_event_rate: 10_000,
            rate_unit: RateUnit::PerSecond,
            rate_period_sec: 600,
            preload_seconds: 0,
            stream_timeout: 240,
            is_rate_limited: false,
            use_wallclock_event_time: false,
            avg_person_byte_size: 200,
            avg_auction_byte_size: 500,
            avg_bid_byte_size: 100,
            hot_auction_ratio: 2,
            hot_sellers_ratio: 4,
            hot_bidders_ratio: 4,
            window_size_sec: 10,
            window_period_sec: 5,
            watermark_holdback_sec: 0,
            num_in_flight_auctions: 100,
            num_active_people: 1000,
            coder_strategy: CoderStrategy::Hand,
            cpu_delay_ms: 0,
            disk_busy_bytes: 0,
            auction_skip: 123,
            fanout: 5,
            max_auctions_waiting_time: 600,
            occasional_delay_sec: 3,
            prob_delayed_event: 0.1,
            max_log_events: 100_000,
            use_pubsub_publish_time: false,
            out_of_order_group_size: 1,
            num_key_buckets: 16,
        }
    }
}

/// A configuration the generator cannot run with, naming the flag and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Nexmark configuration: --{} ({field}) = {value}: {reason}", camel_to_kebab(field))]
pub struct ConfigError {
    /// The offending field (Beam's name).
    pub field: &'static str,
    /// Its value.
    pub value: String,
    /// Why it is invalid.
    pub reason: String,
}

/// `firstEventRate` → `first-event-rate`: the launcher's flag of a field.
pub fn camel_to_kebab(field: &str) -> String {
    let mut out = String::with_capacity(field.len() + 4);
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A year of seconds: the longest window, period, gap, delay or timeout a field may ask for
/// (longer ones overflow event times in milliseconds or keep state without end).
const YEAR_SEC: i64 = 365 * 86_400;
/// The most bytes a generated person, auction or bid may average (each is built in memory).
const MAX_BYTE_SIZE: i64 = 1 << 20;

impl NexmarkConfig {
    /// Checks every field against the range the generator and the queries can run with: what
    /// they divide by, draw bounded numbers with, allocate or turn into milliseconds. The error
    /// names the flag, the value and the range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn within(field: &'static str, v: i64, lo: i64, hi: i64) -> Result<(), ConfigError> {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError { field, value: v.to_string(), reason: format!("must be within [{lo}, {hi}]") })
            }
        }
        let us_per_unit = self.rate_unit.us_per_unit();
        let ranges: [(&'static str, i64, i64, i64); 30] = [
            ("numEvents", self.num_events, 0, 1_000_000_000_000),
            ("numEventGenerators", self.num_event_generators.into(), 1, 10_000),
            // The generator spaces event times in whole microseconds, rounded (a larger rate
            // would space them by none).
            ("firstEventRate", self.first_event_rate, 1, 2 * us_per_unit),
            ("nextEventRate", self.next_event_rate, 1, 2 * us_per_unit),
            ("ratePeriodSec", self.rate_period_sec, 1, YEAR_SEC),
            ("preloadSeconds", self.preload_seconds, 0, YEAR_SEC),
            ("streamTimeout", self.stream_timeout, 0, YEAR_SEC),
            ("avgPersonByteSize", self.avg_person_byte_size.into(), 1, MAX_BYTE_SIZE),
            ("avgAuctionByteSize", self.avg_auction_byte_size.into(), 1, MAX_BYTE_SIZE),
            ("avgBidByteSize", self.avg_bid_byte_size.into(), 1, MAX_BYTE_SIZE),
            ("hotAuctionRatio", self.hot_auction_ratio.into(), 1, 1_000_000),
            ("hotSellersRatio", self.hot_sellers_ratio.into(), 1, 1_000_000),
            ("hotBiddersRatio", self.hot_bidders_ratio.into(), 1, 1_000_000),
            ("windowSizeSec", self.window_size_sec, 1, YEAR_SEC),
            ("windowPeriodSec", self.window_period_sec, 1, YEAR_SEC),
            ("watermarkHoldbackSec", self.watermark_holdback_sec, 0, YEAR_SEC),
            ("numInFlightAuctions", self.num_in_flight_auctions.into(), 1, 10_000_000),
            ("numActivePeople", self.num_active_people.into(), 1, 100_000_000),
            ("cpuDelayMs", self.cpu_delay_ms, 0, 60_000),
            ("diskBusyBytes", self.disk_busy_bytes, 0, 1 << 30),
            ("auctionSkip", self.auction_skip.into(), 1, 1_000_000),
            ("fanout", self.fanout.into(), 1, 10_000),
            ("maxAuctionsWaitingTime", self.max_auctions_waiting_time.into(), 1, YEAR_SEC),
            ("occasionalDelaySec", self.occasional_delay_sec, 0, YEAR_SEC),
            ("maxLogEvents", self.max_log_events, 1, 1_000_000_000),
            ("outOfOrderGroupSize", self.out_of_order_group_size, 1, 1_000_000),
            ("numKeyBuckets", self.num_key_buckets.into(), 1, 1_000_000),
            // Q13's side input is built in memory, one row per key.
            ("sideInputRowCount", self.side_input_row_count, 1, 1_000_000),
            ("sideInputNumShards", self.side_input_num_shards.into(), 1, 10_000),
            ("sessionGapSec", self.session_gap_sec, 1, YEAR_SEC),
        ];
        for (field, v, lo, hi) in ranges {
            within(field, v, lo, hi)?;
        }
        // The queries of sliding windows (Q4, Q5) put each element in size / period windows.
        let sliding =
            matches!(self.query, Some(crate::QueryName::AveragePriceForCategory | crate::QueryName::HotItems));
        if sliding && self.window_size_sec / self.window_period_sec > 1_000 {
            return Err(ConfigError {
                field: "windowPeriodSec",
                value: self.window_period_sec.to_string(),
                reason: format!(
                    "puts each element in {} sliding windows of {} s; at most 1000 (a longer period, or a shorter \
                     --window-size-sec)",
                    self.window_size_sec / self.window_period_sec,
                    self.window_size_sec
                ),
            });
        }
        if !(0.0..=1.0).contains(&self.prob_delayed_event) {
            return Err(ConfigError {
                field: "probDelayedEvent",
                value: self.prob_delayed_event.to_string(),
                reason: "must be within [0, 1]".into(),
            });
        }
        if self.num_events > 0 && self.num_events < i64::from(self.num_event_generators) {
            return Err(ConfigError {
                field: "numEventGenerators",
                value: self.num_event_generators.to_string(),
                reason: "must not exceed numEvents (every generator needs at least one event)".into(),
            });
        }
        Ok(())
    }
}

/// Beam's `NexmarkSuite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// One configuration, the defaults; the query comes from `--query`.
    Default,
    /// Every query once, 100,000 events (10,000 for Q4, Q6, Q9).
    Smoke,
    /// SMOKE × 100 events.
    Stress,
    /// SMOKE × 10,000 events.
    FullThrottle,
    /// Q10 only, rate limited, small.
    SmallLogger,
    /// Q10 only, rate limited, long running.
    LongRunningLogger,
}

impl Suite {
    /// Parses a suite name, case-insensitively, with `-` or `_`.
    pub fn parse(name: &str) -> Option<Suite> {
        match name.to_ascii_uppercase().replace('-', "_").as_str() {
            "DEFAULT" => Some(Suite::Default),
            "SMOKE" => Some(Suite::Smoke),
            "STRESS" => Some(Suite::Stress),
            "FULL_THROTTLE" => Some(Suite::FullThrottle),
            "SMALL_LOGGER" => Some(Suite::SmallLogger),
            "LONG_RUNNING_LOGGER" => Some(Suite::LongRunningLogger),
            _ => None,
        }
    }

    /// The suite's configurations, before command-line overrides.
    pub fn configurations(self) -> Vec<NexmarkConfig> {
        let smoke = |multiplier: i64| -> Vec<NexmarkConfig> {
            crate::QueryName::ALL
                .iter()
                .map(|&query| {
                    let small = query.builds_on_winning_bids();
                    NexmarkConfig {
                        query: Some(query),
                        num_events: if small { 10_000 } else { 100_000 } * multiplier,
                        ..NexmarkConfig::default()
                    }
                })
                .collect()
        };
        let logger = || NexmarkConfig {
            query: Some(crate::QueryName::LogToShardedFiles),
            is_rate_limited: true,
            source_type: SourceType::Pubsub,
            num_events: 0,
            avg_person_byte_size: 500,
            avg_auction_byte_size: 500,
            avg_bid_byte_size: 500,
            window_size_sec: 30,
            occasional_delay_sec: 360,
            prob_delayed_event: 0.001,
            use_wallclock_event_time: true,
            first_event_rate: 100,
            next_event_rate: 100,
            max_log_events: 15_000,
            ..NexmarkConfig::default()
        };
        match self {
            Suite::Default => vec![NexmarkConfig::default()],
            Suite::Smoke => smoke(1),
            Suite::Stress => smoke(100),
            Suite::FullThrottle => smoke(10_000),
            Suite::SmallLogger => vec![logger()],
            Suite::LongRunningLogger => vec![NexmarkConfig {
                num_event_generators: 10,
                window_size_sec: 300,
                first_event_rate: 60_000,
                next_event_rate: 60_000,
                ..logger()
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{NexmarkConfig, Suite};
    use crate::QueryName;

    #[test]
    fn defaults_serialise_with_beams_field_names() {
        let json = serde_json::to_value(NexmarkConfig::default()).expect("serialises");
        assert_eq!(json["numEvents"], 100_000);
        assert_eq!(json["numEventGenerators"], 100);
        assert_eq!(json["rateShape"], "SINE");
        assert_eq!(json["sinkType"], "DEVNULL");
        assert_eq!(json["hotAuctionRatio"], 2);
        assert_eq!(json["probDelayedEvent"], 0.1);
        let back: NexmarkConfig = serde_json::from_value(json).expect("parses back");
        assert_eq!(back, NexmarkConfig::default());
    }

    #[test]
    fn suites_follow_beam() {
        let smoke = Suite::Smoke.configurations();
        assert_eq!(smoke.len(), QueryName::ALL.len());
        for c in &smoke {
            let small = matches!(c.query.map(QueryName::number), Some(4 | 6 | 9));
            assert_eq!(c.num_events, if small { 10_000 } else { 100_000 }, "{:?}", c.query);
        }
        assert_eq!(Suite::Stress.configurations()[9].num_events, 1_000_000);
        assert_eq!(Suite::FullThrottle.configurations()[0].num_events, 1_000_000_000);
        let long = &Suite::parse("long-running-logger").expect("known suite").configurations()[0];
        assert_eq!((long.num_event_generators, long.window_size_sec, long.first_event_rate), (10, 300, 60_000));
        assert!(long.is_rate_limited && long.use_wallclock_event_time);
        assert_eq!(Suite::parse("nope"), None);
    }

    #[test]
    fn queries_parse_by_number_or_name() {
        assert_eq!(QueryName::parse("7"), Some(QueryName::HighestBid));
        assert_eq!(QueryName::parse("highest-bid"), Some(QueryName::HighestBid));
        assert_eq!(QueryName::parse("RESHUFFLE").map(QueryName::number), Some(16));
        assert_eq!(QueryName::parse("17"), None);
        assert_eq!(QueryName::parse("Q7"), None);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = NexmarkConfig { num_event_generators: 0, ..NexmarkConfig::default() };
        let err = bad.validate().expect_err("zero generators");
        assert_eq!(err.field, "numEventGenerators");
        assert!(
            err.to_string().contains("--num-event-generators (numEventGenerators) = 0: must be within [1, 10000]"),
            "{err}"
        );
        let bad = NexmarkConfig { avg_bid_byte_size: i32::MAX, ..NexmarkConfig::default() };
        assert_eq!(bad.validate().expect_err("huge bids").field, "avgBidByteSize");
        let bad = NexmarkConfig { prob_delayed_event: 1.5, ..NexmarkConfig::default() };
        assert_eq!(bad.validate().expect_err("probability").field, "probDelayedEvent");
        assert!(NexmarkConfig::default().validate().is_ok());
    }
}
