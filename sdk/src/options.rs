//! Pipeline options, parsed once from kebab-case flags or built in code (DESIGN D11).

use crate::error::{Error, Result};
use clap::{CommandFactory, Parser};

/// Options of the direct runner.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct DirectOptions {
    /// Shuffle the order of bundles and of the elements inside them, so order-dependent
    /// pipelines show up.
    #[arg(long = "direct-shuffle", default_value_t = true, action = clap::ArgAction::Set)]
    pub shuffle: bool,
    /// Seed of the shuffling.
    #[arg(long = "direct-seed", default_value_t = 0)]
    pub seed: u64,
    /// Round-trip every element through its coder (Beam's encodability check).
    #[arg(long = "direct-check-encodability", default_value_t = true, action = clap::ArgAction::Set)]
    pub check_encodability: bool,
    /// Largest number of elements in one bundle.
    #[arg(long = "direct-bundle-size", default_value_t = 1000)]
    pub bundle_size: usize,
}

impl Default for DirectOptions {
    fn default() -> Self {
        DirectOptions { shuffle: true, seed: 0, check_encodability: true, bundle_size: 1000 }
    }
}

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
    #[arg(long = "parallelism", default_value_t = 0)]
    pub parallelism: usize,
    /// Most records read from each source in one batch, shared among its splits (Spark's
    /// `maxOffsetsPerTrigger`): bounds a batch's memory however many splits a source has.
    #[arg(long = "max-batch-size", default_value_t = 100_000)]
    pub max_batch_size: usize,
    /// When batches run.
    #[arg(long = "trigger", value_enum, default_value_t = StreamingTrigger::AvailableNow)]
    pub trigger: StreamingTrigger,
    /// Interval of the processing-time trigger, ms.
    #[arg(long = "trigger-interval-ms", default_value_t = 0)]
    pub trigger_interval_ms: u64,
    /// Directory for the offset log, commit log and state stores; a query restarted with the
    /// same directory resumes exactly once where it stopped.
    #[arg(long = "checkpoint-dir")]
    pub checkpoint_dir: Option<String>,
    /// Committed batches whose state is kept in the checkpoint directory.
    #[arg(long = "min-batches-to-retain", default_value_t = 3)]
    pub min_batches_to_retain: u64,
    /// Every this many batches state stores write a full snapshot; deltas in between.
    #[arg(long = "state-snapshot-interval", default_value_t = 10)]
    pub state_snapshot_interval: u64,
    /// How often a failed batch is retried from the last committed state before the query
    /// fails.
    #[arg(long = "max-batch-retries", default_value_t = 0)]
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
}

/// Options of metrics export.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct MetricsOptions {
    /// A sink to push metrics to (repeatable): e.g. `jsonl`, `console`, `graphite`.
    #[arg(long = "metrics-sink")]
    pub sinks: Vec<String>,
    /// Seconds between pushes (the first is at once, a final one when the pipeline ends).
    #[arg(long = "metrics-push-period", default_value_t = 5)]
    pub push_period_secs: u64,
    /// URL of the HTTP sink.
    #[arg(long = "metrics-http-url")]
    pub http_url: Option<String>,
    /// Host of the Graphite sink.
    #[arg(long = "metrics-graphite-host")]
    pub graphite_host: Option<String>,
    /// Port of the Graphite sink.
    #[arg(long = "metrics-graphite-port", default_value_t = 2003)]
    pub graphite_port: u16,
    /// URL of the Prometheus sink.
    #[arg(long = "metrics-prometheus-url")]
    pub prometheus_url: Option<String>,
    /// File of the JSON-lines sink.
    #[arg(long = "metrics-file")]
    pub file: Option<String>,
    /// Longest a network sink may take to connect and push, ms; it also bounds how long the end
    /// of a pipeline waits for the final push.
    #[arg(long = "metrics-push-timeout-ms", default_value_t = 2_000)]
    pub push_timeout_ms: u64,
    /// `NAME=VAR`: send header NAME, its value read from environment variable VAR, with every
    /// push of the HTTP and Prometheus sinks (repeatable). Values are never printed.
    #[arg(long = "metrics-header-env", value_name = "NAME=VAR")]
    pub header_env: Vec<String>,
    /// Send `Authorization: Bearer <token>` with every push of the HTTP and Prometheus sinks,
    /// the token read from environment variable VAR.
    #[arg(long = "metrics-bearer-token-env", value_name = "VAR")]
    pub bearer_token_env: Option<String>,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            sinks: Vec::new(),
            push_period_secs: 5,
            http_url: None,
            graphite_host: None,
            graphite_port: 2003,
            prometheus_url: None,
            file: None,
            push_timeout_ms: 2_000,
            header_env: Vec::new(),
            bearer_token_env: None,
        }
    }
}

/// Every option of a pipeline, grouped by area.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(name = "weir", no_binary_name = true, disable_help_subcommand = true)]
pub struct PipelineOptions {
    /// The runner that executes the pipeline.
    #[arg(long, default_value = "microbatch")]
    pub runner: String,
    /// A name for the job, used in logs and metrics.
    #[arg(long = "job-name", default_value = "weir-job")]
    pub job_name: String,
    /// Print the runner's plan to standard output when the pipeline starts.
    #[arg(long = "explain", default_value_t = false)]
    pub explain: bool,
    /// Direct runner options.
    #[command(flatten)]
    pub direct: DirectOptions,
    /// Micro-batch runner options.
    #[command(flatten)]
    pub microbatch: MicroBatchOptions,
    /// Metrics export options.
    #[command(flatten)]
    pub metrics: MetricsOptions,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            runner: "microbatch".into(),
            job_name: "weir-job".into(),
            explain: false,
            direct: DirectOptions::default(),
            microbatch: MicroBatchOptions::default(),
            metrics: MetricsOptions::default(),
        }
    }
}

impl PipelineOptions {
    /// Parses flags such as `["--runner", "direct", "--direct-seed", "7"]` (no program name).
    /// An unknown option is an error listing the valid ones.
    pub fn from_args<I, S>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        PipelineOptions::try_parse_from(args).map_err(|e| {
            let valid = Self::valid_flags().join(", ");
            match e.kind() {
                clap::error::ErrorKind::UnknownArgument => {
                    let arg = e
                        .get(clap::error::ContextKind::InvalidArg)
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "?".into());
                    Error::Options(format!("unknown option '{arg}'; valid options: {valid}"))
                }
                _ => Error::Options(e.render().to_string().trim().to_string()),
            }
        })
    }

    /// Parses the process's command-line arguments (skipping the program name).
    pub fn from_env_args() -> Result<Self> {
        Self::from_args(std::env::args_os().skip(1))
    }

    /// Every valid flag, e.g. `--runner`.
    pub fn valid_flags() -> Vec<String> {
        Self::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|l| l != "--help")
            .collect()
    }

    /// These options with another runner.
    pub fn with_runner(mut self, runner: impl Into<String>) -> Self {
        self.runner = runner.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kebab_case_flags() {
        let o =
            PipelineOptions::from_args(["--runner", "x", "--direct-shuffle", "false", "--direct-seed", "9"]).unwrap();
        assert_eq!(o.runner, "x");
        assert!(!o.direct.shuffle);
        assert_eq!(o.direct.seed, 9);
        assert_eq!(PipelineOptions::from_args(Vec::<String>::new()).unwrap(), PipelineOptions::default());
    }

    #[test]
    fn unknown_option_lists_valid_ones() {
        let e = PipelineOptions::from_args(["--runnr", "direct"]).unwrap_err().to_string();
        assert!(e.contains("unknown option '--runnr'"), "{e}");
        assert!(e.contains("--runner") && e.contains("--direct-seed"), "{e}");
        let e = PipelineOptions::from_args(["--direct-seed", "abc"]).unwrap_err().to_string();
        assert!(e.contains("direct-seed"), "{e}");
    }
}
