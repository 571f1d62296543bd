//! The micro-batch runner's own flags: how many partitions a node runs as, and how often a
//! failed batch is retried. The trigger, batch sizes and the checkpoint are runner-core's
//! streaming options ([`weir_runner_core::streaming::StreamingOptions`]), shared with the
//! timely runner.

use weir_runner_core::streaming::StreamingOptions;

/// Options of the micro-batch runner.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq, Default)]
pub struct MicroBatchOptions {
    /// Partitions per stage (0: the number of cores).
    #[arg(long = "parallelism", default_value_t = 0, value_parser = weir_sdk::options::count_within(0, 1024))]
    pub parallelism: usize,
    /// How often a failed batch is retried from the last committed state before the query
    /// fails.
    #[arg(long = "max-batch-retries", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub max_batch_retries: u32,
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
    pub fn claims_per_call(&self, streaming: &StreamingOptions) -> usize {
        streaming.share_of_batch(self.partitions())
    }
}
