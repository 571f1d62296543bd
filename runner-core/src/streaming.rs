//! The streaming options every runner that runs in batches or epochs reads: when a batch starts
//! (the trigger), how much one reads, and where its checkpoint lives. They belong to no runner:
//! the micro-batch runner's batches and the timely runner's epochs are the same unit of work,
//! so each of those runners registers this group under its own name ([`register_for`]).

/// When the next batch (or epoch) starts: Spark's triggers.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StreamingTrigger {
    /// Batches of everything available now, until all of it is processed, then stop.
    #[default]
    AvailableNow,
    /// One batch of what is available now, then stop.
    Once,
    /// A batch every `--trigger-interval-ms` (at once if the previous one overran), until the
    /// sources are exhausted or the query is stopped.
    ProcessingTime,
}

/// Options of a query run in batches or epochs: the trigger, batch sizes and the checkpoint.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct StreamingOptions {
    /// Most records read from each source in one batch, shared among its splits (Spark's
    /// `maxOffsetsPerTrigger`): bounds a batch's memory however many splits a source has.
    #[arg(long = "max-batch-size", default_value_t = 100_000, value_parser = weir_sdk::options::count_within(1, 1_000_000_000))]
    pub max_batch_size: usize,
    /// When batches run.
    #[arg(long = "trigger", value_enum, default_value_t = StreamingTrigger::AvailableNow)]
    pub trigger: StreamingTrigger,
    /// Interval of the processing-time trigger, ms.
    #[arg(long = "trigger-interval-ms", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub trigger_interval_ms: u64,
    /// Where the offset (or epoch) log, the commit log and the state stores live: a directory,
    /// or an object-store URL, `s3://bucket/prefix`. A query restarted with the same checkpoint
    /// resumes exactly once where it stopped.
    #[arg(long = "checkpoint-dir", value_parser = weir_sdk::options::non_empty())]
    pub checkpoint_dir: Option<String>,
    /// Committed batches whose state is kept in the checkpoint.
    #[arg(long = "min-batches-to-retain", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub min_batches_to_retain: u64,
    /// Commits write deltas of what changed; once this many follow the latest snapshot, a
    /// background thread folds them into a new one.
    #[arg(long = "state-snapshot-interval", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub state_snapshot_interval: u64,
}

impl Default for StreamingOptions {
    fn default() -> Self {
        StreamingOptions {
            max_batch_size: 100_000,
            trigger: StreamingTrigger::AvailableNow,
            trigger_interval_ms: 0,
            checkpoint_dir: None,
            min_batches_to_retain: 3,
            state_snapshot_interval: 10,
        }
    }
}

impl StreamingOptions {
    /// One of `shares` equal parts of `--max-batch-size` (each partition's, each worker's);
    /// unbounded with the once trigger.
    pub fn share_of_batch(&self, shares: usize) -> usize {
        match self.trigger {
            StreamingTrigger::Once => usize::MAX,
            _ => self.max_batch_size.max(1).div_ceil(shares.max(1)).max(1),
        }
    }

    /// Most records one batch reads from a source: `--max-batch-size`, unbounded with the once
    /// trigger.
    pub fn batch_limit(&self) -> usize {
        self.share_of_batch(1)
    }
}

/// Registers the streaming options as read by the runner named `runner` (each runner that runs
/// in batches or epochs calls this from its own registration).
pub fn register_for(runner: &'static str) {
    weir_sdk::options::register_runner_option_group::<StreamingOptions>(&[runner]);
}
