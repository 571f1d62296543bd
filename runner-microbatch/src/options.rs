//! The micro-batch runner's flags: partitions, batch sizes, the trigger, checkpoints.

/// When the micro-batch engine starts a batch (Spark's triggers).
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

/// Options of the micro-batch runner.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct MicroBatchOptions {
    /// Partitions per stage (0: the number of cores).
    #[arg(long = "parallelism", default_value_t = 0, value_parser = weir_sdk::options::count_within(0, 1024))]
    pub parallelism: usize,
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
    /// Directory for the offset log, commit log and state stores; a query restarted with the
    /// same directory resumes exactly once where it stopped. The timely runner also takes an
    /// object-store URL, `s3://bucket/prefix`.
    #[arg(long = "checkpoint-dir", value_parser = weir_sdk::options::non_empty())]
    pub checkpoint_dir: Option<String>,
    /// Committed batches whose state is kept in the checkpoint directory.
    #[arg(long = "min-batches-to-retain", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub min_batches_to_retain: u64,
    /// Every this many batches state stores write a full snapshot; deltas in between.
    #[arg(long = "state-snapshot-interval", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub state_snapshot_interval: u64,
    /// How often a failed batch is retried from the last committed state before the query
    /// fails.
    #[arg(long = "max-batch-retries", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub max_batch_retries: u32,
}

impl Default for MicroBatchOptions {
    fn default() -> Self {
        MicroBatchOptions {
            parallelism: 0,
            max_batch_size: 100_000,
            trigger: StreamingTrigger::AvailableNow,
            trigger_interval_ms: 0,
            checkpoint_dir: None,
            min_batches_to_retain: 3,
            state_snapshot_interval: 10,
            max_batch_retries: 0,
        }
    }
}

impl MicroBatchOptions {
    /// The number of partitions: `parallelism`, or the number of cores when 0.
    pub fn partitions(&self) -> usize {
        if self.parallelism > 0 {
            self.parallelism
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }

    /// What one partition of a splittable DoFn claims per batch: its share of
    /// `--max-batch-size`, as sources read theirs (no bound with the once trigger).
    pub fn claims_per_call(&self) -> usize {
        self.share_of_batch(self.partitions())
    }

    /// One of `shares` equal parts of `--max-batch-size` (each partition's, each worker's);
    /// unbounded with the once trigger.
    pub fn share_of_batch(&self, shares: usize) -> usize {
        match self.trigger {
            StreamingTrigger::Once => usize::MAX,
            _ => self.max_batch_size.max(1).div_ceil(shares.max(1)).max(1),
        }
    }
}
