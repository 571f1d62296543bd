//! The micro-batch runner's own flags: how many threads run a batch, how many partitions a
//! node runs as, and how often a failed batch is retried. The trigger, batch sizes and the
//! checkpoint are runner-core's streaming options
//! ([`weir_runner_core::streaming::StreamingOptions`]), shared with the timely runner.

use weir_runner_core::streaming::StreamingOptions;

/// Partitions per worker thread by default when there are several: enough that the threads
/// balance a stage whose partitions differ in weight (Nexmark's WinningBids, whose hot auctions
/// make one partition of two carry 53% of the work), and each partition's state small enough
/// to stay in cache: on 2 cores, in one side-by-side series, Nexmark q5, q8 and q9 at 4 M events
/// ran 1.87, 1.73 and 1.80 times as fast as one thread with 16 partitions against 1.71, 1.62 and
/// 1.46 with 2, using 4% more CPU than one thread where 2 partitions used 19% more. With one
/// thread, extra partitions only cost (3-10% on the same queries).
pub const PARTITIONS_PER_THREAD: usize = 8;

/// Options of the micro-batch runner.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq, Default)]
pub struct MicroBatchOptions {
    /// Worker threads that run a batch, at most one per core (0: the number of cores).
    #[arg(long = "parallelism", default_value_t = 0, value_parser = weir_sdk::options::count_within(0, 1024))]
    pub parallelism: usize,
    /// Partitions per stage, which the threads take up one at a time within each stage (0:
    /// one with one worker thread, else eight per worker thread, as Spark's shuffle partitions
    /// outnumber its cores: while one thread runs a partition made heavy by hot keys, the
    /// others run the rest instead of waiting). The threads counted are those that run:
    /// `--parallelism`, at most one per core.
    #[arg(long = "partitions", default_value_t = 0, value_parser = weir_sdk::options::count_within(0, 4096))]
    pub partitions: usize,
    /// How often a failed batch is retried from the last committed state before the query
    /// fails.
    #[arg(long = "max-batch-retries", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub max_batch_retries: u32,
}

impl MicroBatchOptions {
    /// The number of worker threads: `parallelism`, or the number of cores when 0.
    pub fn threads(&self) -> usize {
        if self.parallelism > 0 {
            self.parallelism
        } else {
            cores()
        }
    }

    /// The worker threads that run a batch: [`MicroBatchOptions::threads`], at most one per
    /// core (more would only take turns on the cores).
    pub fn running_threads(&self) -> usize {
        self.threads().min(cores())
    }

    /// The number of partitions: `--partitions`, else one for one running thread and
    /// [`PARTITIONS_PER_THREAD`] per running thread for more (so `--parallelism 4` on 2 cores
    /// runs as `--parallelism 2` does, not with the smaller partitions of 4 threads' worth).
    pub fn partitions(&self) -> usize {
        match (self.partitions, self.running_threads()) {
            (0, 1) => 1,
            (0, threads) => threads * PARTITIONS_PER_THREAD,
            (partitions, _) => partitions,
        }
    }

    /// What one partition of a splittable DoFn claims per batch: its share of
    /// `--max-batch-size`, as sources read theirs (no bound with the once trigger).
    pub fn claims_per_call(&self, streaming: &StreamingOptions) -> usize {
        streaming.share_of_batch(self.partitions())
    }
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
