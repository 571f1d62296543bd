//! # weir-runner-timely: the physical plan on Timely Dataflow
//!
//! Users who outgrow one machine run the same pipeline with `--runner timely`, on Timely
//! Dataflow, threads and processes with timely's conventions: `--workers W` per process,
//! `--processes N`, `--process-id I`, `--hostfile FILE`. Timely is SPMD: every process runs the
//! same program and builds the same plan, so no user closure is ever serialized; only batches
//! are, with their collections' coders, when they cross processes.
//!
//! This crate is a scheduler over runner-core's plan (see ARCHITECTURE.md), like the others:
//!
//! - one micro-batch is one timely epoch, and epochs run one at a time across the cluster;
//! - every plan node is one timely operator per worker, which runs the runner-core operator for
//!   an epoch once its input frontier has passed that epoch (`worker.rs`);
//! - an exchange is timely's `Exchange` pact over records each addressed to one worker by the
//!   consumer's runner-core exchange (Weir's key hash, round robin, forward, broadcast for side
//!   inputs) (`wire.rs`);
//! - each upstream worker sends its output watermark with its data for every epoch, so a
//!   node's input watermark is the minimum over every upstream worker, and chained stateful
//!   aggregations stay correct across workers (`node.rs`);
//! - bounded sources' splits are spread over all workers, and unbounded sources' splits are
//!   assigned to workers;
//! - sinks stage per epoch and commit once every worker has finished the epoch;
//! - with `--checkpoint-dir` (a directory or an `s3://bucket/prefix` URL), every epoch is
//!   checkpointed: reads logged before they are sent, state after each operator's epoch, a
//!   commit record once every worker and every process's sinks are done, and a restart resumes
//!   after the last commit, replaying the logged epochs after it exactly, with the same or
//!   another number of workers and processes (sources' splits dealt anew, state spread key group
//!   by key group) (`checkpoint.rs`);
//! - a run ends once every node's output watermark is at the end of time, or, with the
//!   available-now trigger and a checkpoint (Spark's incremental batch), once every worker has
//!   been idle after one same epoch: no worker alone can tell, as work may still be on its way
//!   to it (`process.rs`, `Process::idle`);
//! - a lost process, or an error in any worker, stops every process with the error.
//!
//! Batch sizes, the trigger and its interval are the streaming options every streaming runner
//! shares (`--max-batch-size` is shared among the workers).

#![deny(missing_docs)]

mod checkpoint;
mod cluster;
mod handshake;
mod ledger;
mod node;
pub mod options;
mod process;
pub mod progress;
mod wire;
mod worker;

pub use options::TimelyOptions;
pub use progress::{EpochProgress, WorkerProgress};

use progress::Progress;

use process::Process;
use std::sync::Arc;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::JobMetrics;
use weir_runner_core::plan::PhysicalPlan;
use weir_runner_core::streaming::StreamingOptions;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::runner::{PipelineResult, Runner};
use weir_sdk::{Error, PipelineOptions, Result};

/// The name `--runner` selects the timely runner by.
pub const NAME: &str = "timely";

/// The timely runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimelyRunner;

impl Runner for TimelyRunner {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<Box<dyn PipelineResult>> {
        Ok(Box::new(self.start(graph, options)?))
    }

    fn explain(&self, graph: &PipelineGraph, options: &PipelineOptions) -> Result<String> {
        Ok(translate(graph, options)?.explain(options.get::<TimelyOptions>().peers()))
    }
}

impl TimelyRunner {
    /// Translates and starts `graph` on this process's part of the cluster, returning the
    /// handle: the job's state and metrics, and (on process 0) each epoch's progress.
    pub fn start(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<TimelyQuery> {
        let t = options.get::<TimelyOptions>().into_owned();
        t.validate()?;
        let t = cluster::resolve(&t)?;
        // The micro-batch runner's own flags (--parallelism, --max-batch-retries) are refused
        // on the command line by the options registry, naming the runner they belong to.
        let streaming = options.get::<StreamingOptions>().into_owned();
        let plan = translate(&graph, options)?;
        let mut fingerprint = handshake::fingerprint(&graph, &plan, options);
        let checkpoint = open_checkpoint(&graph, &plan, &t, &streaming, &mut fingerprint)?;
        let metrics = JobMetrics::with_committed();
        let m = metrics.clone();
        let run_id = format!("{:016x}", rand::random::<u64>());
        let id = checkpoint.as_ref().map_or_else(|| run_id.clone(), |c| c.id.clone());
        let progress = Arc::new(Progress::new(t.peers(), id, run_id));
        let p_progress = progress.clone();
        // Process 0 serves the job's metrics and pushes them; the others report to it.
        let mut job_options = options.clone();
        if t.process_id != 0 {
            job_options.metrics.sinks.clear();
        }
        let run = cluster::next_run();
        // Process 0 serves the live page (`--ui-port`), with every epoch's progress.
        let page = match t.process_id {
            0 => weir_runner_core::ui::serve(options, NAME, (&graph, &plan), &metrics, || false)?.map(|(ui, page)| {
                let p = page.clone();
                progress.listen(Box::new(move |e| p.push(serde_json::to_value(e).unwrap_or_default())));
                (ui, page)
            }),
            _ => None,
        };
        let ui = page.as_ref().map(|(ui, _)| ui.clone());
        let on_page = page.map(|(_, page)| page);
        let run_job = move |job: Arc<Job>| -> Result<()> {
            cluster::running(run, &job);
            // A checkpointed query's sinks belong to the query, across restarts.
            let owner = match &checkpoint {
                Some(log) => format!("query {}", log.id),
                None => format!("timely run {:016x}", rand::random::<u64>()),
            };
            let process = Arc::new(Process::new(
                graph,
                plan,
                m,
                job,
                streaming,
                t.process_id,
                t.processes,
                t.workers,
                &owner,
                fingerprint,
                p_progress,
                checkpoint,
            )?);
            let p = process.clone();
            cluster::watch_connections();
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cluster::execute(&t, run, move |worker| worker::run(worker, p.clone()))
            }));
            // Taken now, so that a later run in this process starts clean.
            let lost_peer = cluster::lost_process();
            outcome(&process, ran, lost_peer)
        };
        let result = Job::spawn("weir-timely", metrics, &job_options, move |job| {
            let stopping = job.clone();
            let outcome = run_job(job);
            if let Some(page) = &on_page {
                weir_runner_core::ui::ended(page, &outcome, stopping.is_stop_requested());
            }
            outcome
        })?;
        Ok(TimelyQuery { result, progress, run, ui })
    }
}

/// The epoch log of a checkpointed run (`--checkpoint-dir`), opened at the epoch every process
/// must resume from (added to the handshake's fingerprint).
fn open_checkpoint(
    graph: &PipelineGraph,
    plan: &weir_runner_core::plan::PhysicalPlan,
    t: &TimelyOptions,
    streaming: &StreamingOptions,
    fingerprint: &mut weir_runner_core::fingerprint::Fingerprint,
) -> Result<Option<checkpoint::EpochLog>> {
    let Some(dir) = &streaming.checkpoint_dir else { return Ok(None) };
    let log = checkpoint::EpochLog::open(
        dir,
        // State moves key group by key group: any number of workers resumes it.
        weir_runner_core::fingerprint::Fingerprint::of_plan(graph, plan).with_key_groups(),
        format!("{:016x}", rand::random::<u64>()),
        (t.process_id, t.peers()),
        streaming.min_batches_to_retain,
        streaming.state_snapshot_interval,
    )?;
    // Every process must resume from the same epoch.
    fingerprint.push("checkpoint resumes at epoch", log.start.to_string());
    Ok(Some(log))
}

/// How one worker ended: what it returned, or its panic's message.
type WorkerOutcome = std::result::Result<Result<()>, String>;

/// How a run of this process ended: its first failure (cancelled, when it stopped because
/// another process did), else a worker that panicked or stopped (naming a lost peer process,
/// when one was), else success.
fn outcome(
    process: &Process,
    ran: std::thread::Result<Result<Vec<WorkerOutcome>>>,
    lost_peer: Option<(usize, String)>,
) -> Result<()> {
    if let Some(e) = process.take_failure() {
        if process.stopped_with_the_others() {
            return Err(Error::Cancelled);
        }
        return Err(e);
    }
    let lost = |detail: String| match lost_peer {
        Some((i, ref why)) => cluster::lost(i, why),
        None => Error::Execution { step: "timely cluster".into(), message: format!("a worker stopped: {detail}") },
    };
    let results = match ran {
        Ok(Ok(results)) => results,
        Ok(Err(e)) => return Err(e),
        Err(panic) => return Err(lost(weir_sdk::panic::panic_message(&*panic))),
    };
    for r in results {
        match r {
            Ok(r) => r?,
            Err(panic) => return Err(lost(panic)),
        }
    }
    Ok(())
}

/// A pipeline running on the timely runner: the job's state and metrics (the whole cluster's
/// on process 0), and the progress of each epoch.
pub struct TimelyQuery {
    result: Box<dyn PipelineResult>,
    progress: Arc<Progress>,
    /// This run's index in the process (the same on every process of the cluster).
    run: u64,
    /// The live page serving this query (`--ui-port`, process 0).
    ui: Option<Arc<weir_runner_core::ui::LiveUi>>,
}

impl TimelyQuery {
    /// The latest epochs (up to 100), oldest first, each with one row per worker. Process 0
    /// reports them; on the other processes there are none.
    pub fn recent_progress(&self) -> Vec<EpochProgress> {
        self.progress.recent()
    }

    /// The latest epoch's progress.
    pub fn last_progress(&self) -> Option<EpochProgress> {
        self.progress.recent().pop()
    }

    /// The address of the live page serving this query, when `--ui-port` was given (process 0).
    pub fn ui_address(&self) -> Option<std::net::SocketAddr> {
        self.ui.as_ref().map(|u| u.addr())
    }

    /// Calls `listener` with every epoch's progress from now on (on process 0).
    pub fn add_listener(&self, listener: impl Fn(&EpochProgress) + Send + Sync + 'static) {
        self.progress.listen(Box::new(listener));
    }
}

impl PipelineResult for TimelyQuery {
    fn state(&self) -> weir_sdk::runner::PipelineState {
        self.result.state()
    }
    fn wait_until_finish(&self, timeout: Option<std::time::Duration>) -> Result<weir_sdk::runner::PipelineState> {
        self.result.wait_until_finish(timeout)
    }
    fn cancel(&self) -> Result<weir_sdk::runner::PipelineState> {
        self.result.cancel()
    }
    fn stop(&self) -> Result<weir_sdk::runner::PipelineState> {
        self.result.stop()
    }
    fn drain(&self) -> Result<weir_sdk::runner::PipelineState> {
        // Every process drains its own workers' sources: the local cluster's others are told.
        cluster::drain_local(self.run)?;
        self.result.drain()
    }
    fn metrics(&self) -> weir_sdk::metrics::MetricResults {
        self.result.metrics()
    }
}

/// The timely runner's translation: every native composite, combines lifted.
fn translate(graph: &PipelineGraph, options: &PipelineOptions) -> Result<PhysicalPlan> {
    use weir_runner_core::plan::translate::{translate, Natives, Translation};
    let natives = Natives::all_with_read(options.read_via);
    translate(graph, &Translation::of(NAME, natives, true, options.get::<TimelyOptions>().peers(), options))
}

/// Registers the timely runner under the name `timely`.
pub fn register() {
    weir_sdk::options::register_runner_option_group::<TimelyOptions>(&[NAME]);
    weir_runner_core::streaming::register_for(NAME);
    weir_sdk::runner::register_runner(Arc::new(TimelyRunner));
}
