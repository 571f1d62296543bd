//! What the workers of one process share: the plan, its topology, the sinks' writers, the
//! metrics, the job, and the first failure.

use crate::node::{out_edges, OutEdge};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use weir_runner_core::exec::sink::SinkWriter;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::JobMetrics;
use weir_runner_core::plan::topology::Topology;
use weir_runner_core::plan::{PhysicalPlan, Role};
use weir_runner_core::streaming::StreamingOptions;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::kernel::Batch;
use weir_sdk::{Error, Result};

/// A sink's writer in this process, and what the process's workers staged for each epoch not
/// yet committed (a worker may start the next epoch while the last one is being committed).
pub(crate) struct SinkSlot {
    writer: Box<dyn SinkWriter>,
    staged: BTreeMap<u64, Vec<(usize, Batch)>>,
}

impl SinkSlot {
    /// Stages worker `worker`'s input of `epoch`.
    pub(crate) fn stage(&mut self, epoch: u64, worker: usize, batch: Batch) {
        self.staged.entry(epoch).or_default().push((worker, batch));
    }

    /// Notes that the process's workers ran `epoch` here, with or without input: the epoch is
    /// committed either way, so a replayed epoch that writes nothing clears what an earlier
    /// attempt wrote.
    pub(crate) fn ran(&mut self, epoch: u64) {
        self.staged.entry(epoch).or_default();
    }
}

/// A worker's report, in an incremental run ([`Process::ends_incrementally`]), of the epochs it
/// has been idle after: every epoch from `since` through `through` (the last it has seen
/// finished everywhere), when it is idle now; `since` is `None` while it is not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct IdleReport {
    pub(crate) since: Option<u64>,
    pub(crate) through: Option<u64>,
}

/// What a process that was stopped tells the others.
pub(crate) const STOPPED: &str = "it was stopped (a signal, or a stop or cancel of its job) before the run's end";

/// One process of a timely run.
pub(crate) struct Process {
    pub(crate) graph: Arc<PipelineGraph>,
    pub(crate) plan: PhysicalPlan,
    /// How the plan's nodes connect, as this runner runs them.
    pub(crate) shape: Shape,
    /// Per sink node, the process's writer; the process's workers stage into it, and it
    /// commits each epoch once every worker has finished it.
    pub(crate) sinks: Vec<Option<Mutex<SinkSlot>>>,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) job: Arc<Job>,
    /// Batch sizes, the trigger and the checkpoint.
    pub(crate) streaming: StreamingOptions,
    /// Where this process is in the cluster.
    pub(crate) place: Place,
    /// What every process of the cluster must agree on ([`crate::handshake`]).
    pub(crate) fingerprint: weir_runner_core::fingerprint::Fingerprint,
    /// What each epoch did (filled on process 0).
    pub(crate) progress: Arc<crate::progress::Progress>,
    /// The checkpoint, with `--checkpoint-dir`.
    pub(crate) checkpoint: Option<crate::checkpoint::EpochLog>,
    /// How far the epochs are acknowledged and committed, and how idle the workers are.
    pub(crate) commits: Commits,
    /// Whether an operator runs work after the commits (bundle finalization).
    pub(crate) finalizes: bool,
    /// The first error any worker of this process hit, and where it came from.
    failures: Failures,
    /// Whether a worker of this process read its sources drained (Beam's drain; logged, so a
    /// replay is drained too): operators are told so.
    pub(crate) drained: std::sync::atomic::AtomicBool,
}

/// How the plan's nodes connect, as this runner runs them.
pub(crate) struct Shape {
    pub(crate) topology: Topology,
    /// Per node, where its outputs go.
    pub(crate) edges: Vec<Vec<OutEdge>>,
    /// The fused chains of element-wise nodes, each run as one operator.
    pub(crate) chains: Vec<Vec<usize>>,
    /// Per node, whether it is a source whose reads its chain carries out.
    pub(crate) reads_left_to_chains: Vec<bool>,
    /// Per node, whether nothing ever reaches it: a Flatten of no input, and what only such
    /// nodes feed. No record or progress arrives there, so it never runs; its (empty) output
    /// is complete from the start.
    pub(crate) inert: Vec<bool>,
}

/// Where a process is in the cluster.
pub(crate) struct Place {
    /// Workers in the cluster.
    pub(crate) peers: usize,
    /// This process's workers: `first..first + workers`.
    pub(crate) first: usize,
    pub(crate) workers: usize,
    /// This process's index in the cluster.
    pub(crate) process_id: usize,
}

/// On worker 0, what the workers have acknowledged.
#[derive(Default)]
struct Acks {
    /// Per worker, the first epoch it has not acknowledged finishing (its state and, for a
    /// process's first worker, the process's sinks).
    through: Vec<u64>,
    /// Per worker, the epochs of the background snapshots it has made that a commit may still
    /// name, in order.
    snapshots: Vec<Vec<u64>>,
    /// The first epoch not yet committed.
    committed: u64,
}

/// How far the epochs are acknowledged and committed, and how idle the workers are.
pub(crate) struct Commits {
    /// On worker 0: what the workers have acknowledged, and the first epoch not yet committed.
    acks: Mutex<Acks>,
    /// The first epoch not known committed here (every epoch before it is): with a checkpoint,
    /// its commit record written by worker 0 (which tells the other processes); without one,
    /// this process's sinks committed.
    committed: std::sync::atomic::AtomicU64,
    /// An incremental run's account of idle workers ([`Process::idle`]): per worker, its latest
    /// report.
    idle: Mutex<Vec<IdleReport>>,
}

/// The first error any worker of a process hit, and where it came from.
#[derive(Default)]
struct Failures {
    failure: Mutex<Option<Error>>,
    /// Whether that error came from another process.
    remote_failure: std::sync::atomic::AtomicBool,
    /// Whether that other process was stopped (rather than failed).
    remote_stop: std::sync::atomic::AtomicBool,
}

impl Process {
    /// What one worker's splittable DoFn claims per epoch: its share of `--max-batch-size`,
    /// as sources read theirs (no bound with the once trigger).
    pub(crate) fn claims_per_call(&self) -> usize {
        self.streaming.share_of_batch(self.place.peers)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        graph: Arc<PipelineGraph>,
        plan: PhysicalPlan,
        metrics: Arc<JobMetrics>,
        job: Arc<Job>,
        streaming: StreamingOptions,
        process_id: usize,
        processes: usize,
        workers: usize,
        owner: &str,
        fingerprint: weir_runner_core::fingerprint::Fingerprint,
        progress: Arc<crate::progress::Progress>,
        checkpoint: Option<crate::checkpoint::EpochLog>,
    ) -> Result<Self> {
        let peers = workers * processes;
        let topology = Topology::of(&plan);
        let mut sinks = Vec::with_capacity(plan.nodes.len());
        for n in &plan.nodes {
            sinks.push(match &n.role {
                Role::Sink(factory) => {
                    // The first process claims the sink's place; the others write into it.
                    let mut writer = if process_id == 0 { factory.open(owner, peers)? } else { factory.join(peers)? };
                    // Each process commits its own workers' partitions.
                    // Up to the last epoch logged, an earlier run may have had other workers.
                    let relaid = match &checkpoint {
                        Some(log) => log.last_logged()?,
                        None => None,
                    };
                    writer.own_partitions(process_id * workers..(process_id + 1) * workers, relaid);
                    Some(Mutex::new(SinkSlot { writer, staged: BTreeMap::new() }))
                }
                _ => None,
            });
        }
        let mut process = Process {
            graph,
            plan,
            shape: Shape {
                topology,
                edges: Vec::new(),
                chains: Vec::new(),
                reads_left_to_chains: Vec::new(),
                inert: Vec::new(),
            },
            sinks,
            metrics,
            job,
            streaming,
            place: Place { peers, first: process_id * workers, workers, process_id },
            fingerprint,
            progress,
            commits: Commits {
                acks: Mutex::new(Acks::default()),
                committed: Default::default(),
                idle: Mutex::new(vec![IdleReport::default(); peers]),
            },
            finalizes: false,
            checkpoint,
            failures: Failures::default(),
            drained: Default::default(),
        };
        let start = process.start_epoch();
        // A run going on from the last commit's chains names their snapshots until it makes
        // its own.
        let snapshots = match process.checkpoint.as_ref().and_then(|c| c.restored_snapshots()) {
            Some(at) => at.into_iter().map(|s| vec![s]).collect(),
            None => vec![Vec::new(); peers],
        };
        *process.commits.acks.lock().unwrap_or_else(|e| e.into_inner()) =
            Acks { through: vec![start; peers], snapshots, committed: start };
        process.commits.committed = start.into();
        process.finalizes = process.plan.nodes.iter().any(|n| n.after_commit);
        process.shape.edges = out_edges(&process);
        process.shape.chains = process.plan.fused_chains();
        process.shape.reads_left_to_chains =
            process.plan.reads_left_to_chains(&process.shape.topology, &process.shape.chains);
        // Nodes come producers first.
        let mut inert = vec![false; process.plan.nodes.len()];
        for (i, n) in process.plan.nodes.iter().enumerate() {
            inert[i] = !n.is_source()
                && n.inputs.iter().chain(&n.side_inputs).all(|&pc| inert[process.shape.topology.producer(pc)]);
        }
        process.shape.inert = inert;
        Ok(process)
    }

    /// The first epoch of this run: the one after the checkpoint's last commit.
    pub(crate) fn start_epoch(&self) -> u64 {
        self.checkpoint.as_ref().map_or(0, |c| c.start)
    }

    /// On worker 0: worker `worker` has finished every epoch before `through`, and made a
    /// snapshot of its state at `snapshot` in the background. Commits the epochs every worker
    /// has finished, each naming every worker's latest snapshot at or before it.
    pub(crate) fn acknowledged(&self, worker: usize, through: u64, snapshot: Option<u64>) -> Result<()> {
        let Some(log) = &self.checkpoint else { return Ok(()) };
        let mut acks = self.commits.acks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = acks.through.get_mut(worker) {
            *a = (*a).max(through);
        }
        if let (Some(s), Some(made)) = (snapshot, acks.snapshots.get_mut(worker)) {
            if made.last().is_none_or(|&l| l < s) {
                made.push(s);
            }
        }
        let done = acks.through.iter().copied().min().unwrap_or(0);
        let start = self.start_epoch();
        while acks.committed < done {
            let epoch = acks.committed;
            let named: Vec<u64> = acks
                .snapshots
                .iter_mut()
                .map(|made| {
                    // The latest at or before the epoch; the earlier ones are never named again.
                    let upto = made.partition_point(|&s| s <= epoch);
                    let latest = upto.checked_sub(1).map_or(start, |i| made[i]);
                    made.drain(..upto.saturating_sub(1));
                    latest
                })
                .collect();
            log.write_commit(epoch, named)?;
            acks.committed += 1;
        }
        self.set_committed(acks.committed);
        Ok(())
    }

    /// Whether the run ends as Spark's incremental batch does (available-now with a
    /// checkpoint): once its sources are read to their end and no worker has work left that is
    /// due in this run; work that waits for the next run (a watched directory's next poll) is
    /// checkpointed for it.
    pub(crate) fn ends_incrementally(&self) -> bool {
        self.streaming.trigger == weir_runner_core::streaming::StreamingTrigger::AvailableNow
            && self.checkpoint.is_some()
    }

    /// Takes worker `worker`'s report of how idle it is (the latest report, by the epochs it
    /// covers, wins).
    pub(crate) fn idle_report(&self, worker: usize, report: IdleReport) {
        let mut all = self.commits.idle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = all.get_mut(worker).filter(|r| r.through.is_none_or(|t| report.through >= Some(t))) {
            *r = report;
        }
    }

    /// Whether every worker has been idle after one same epoch: nothing read, received or
    /// sent by any of them in it or since, every source read to its end and no work of its
    /// own due. Nothing can happen after that epoch any more, on any worker. A worker alone
    /// cannot tell: work may still be on its way to it (a splittable DoFn's restrictions
    /// another worker sends), or queued on another worker.
    pub(crate) fn idle(&self) -> bool {
        let all = self.commits.idle.lock().unwrap_or_else(|e| e.into_inner());
        let (mut since, mut through) = (0, u64::MAX);
        for r in all.iter() {
            let (Some(s), Some(t)) = (r.since, r.through) else { return false };
            (since, through) = (since.max(s), through.min(t));
        }
        since <= through
    }

    /// The first epoch not known committed here.
    pub(crate) fn committed(&self) -> u64 {
        self.commits.committed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every epoch before `through` is committed.
    pub(crate) fn set_committed(&self, through: u64) {
        self.commits.committed.fetch_max(through, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether worker `w` runs in this process.
    pub(crate) fn is_local(&self, w: usize) -> bool {
        (self.place.first..self.place.first + self.place.workers).contains(&w)
    }

    /// Records a worker's failure (the first one wins).
    pub(crate) fn fail(&self, e: Error) {
        let mut f = self.failures.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// Records that worker `worker` of another process failed with `message` (or was stopped).
    pub(crate) fn fail_remote(&self, worker: usize, message: String) {
        self.failures.remote_failure.store(true, std::sync::atomic::Ordering::SeqCst);
        if message == STOPPED {
            self.failures.remote_stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let process = worker / self.place.workers.max(1);
        self.fail(Error::Execution {
            step: "timely cluster".into(),
            message: format!("process {process} failed (worker {worker}): {message}"),
        });
    }

    /// Why this process left the run early, as the other processes are told it: its own
    /// failure, or a stop (a signal) that ends its part of the run (`None` when it has not
    /// failed or stopped, or failed because another process did). Without the news the others
    /// would wait for this process's next epoch for ever.
    pub(crate) fn own_failure(&self) -> Option<String> {
        if self.failures.remote_failure.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let failure = self.failures.failure.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|e| e.to_string());
        failure.or_else(|| self.job.is_stop_requested().then(|| STOPPED.to_string()))
    }

    /// Whether this process's failure is another process's stop that this process shares: a
    /// terminal's Ctrl-C reaches every process of a local cluster a moment apart, so the news
    /// of another's stop may come just before this process's own signal, which it waits for
    /// briefly. The run then ends stopped here too, not failed.
    pub(crate) fn stopped_with_the_others(&self) -> bool {
        if !self.failures.remote_stop.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while !self.job.is_stop_requested() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.job.is_stop_requested()
    }

    /// Whether a worker of this process has failed.
    pub(crate) fn failed(&self) -> bool {
        self.failures.failure.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The first failure, taken.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failures.failure.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Commits every sink's output of the epochs before `frontier` (every worker has finished
    /// them), in order.
    pub(crate) fn commit_sinks(&self, frontier: u64) -> Result<()> {
        for (i, sink) in self.sinks.iter().enumerate() {
            let Some(sink) = sink else { continue };
            let mut metrics = weir_runner_core::exec::node::UnitMetrics::default();
            let result = metrics.measure(&self.plan.nodes[i].name, || {
                let mut slot = sink.lock().unwrap_or_else(|e| e.into_inner());
                let later = slot.staged.split_off(&frontier);
                let done = std::mem::replace(&mut slot.staged, later);
                (|| {
                    for (epoch, batches) in done {
                        for (w, b) in batches {
                            slot.writer.stage(w, b)?;
                        }
                        slot.writer.commit(epoch, None)?;
                        weir_sdk::testing::fault::set_batch(epoch);
                        weir_sdk::testing::fault::point("sink-commit");
                    }
                    Ok(())
                })()
            });
            metrics.publish(&self.metrics, result.is_ok());
            result?;
        }
        // Without a checkpoint, an epoch is as committed as it gets once the sinks have it.
        if self.checkpoint.is_none() {
            self.set_committed(frontier);
        }
        Ok(())
    }
}
