//! One timely worker: the plan built as a dataflow, then epochs until the sources are done.
//!
//! Every plan node becomes one timely operator per worker. A source's share is read by the
//! worker's loop and enters through an input handle; every other node is a `unary_frontier`
//! operator whose input is the concatenation of the edges into it, routed by timely's `Exchange`
//! pact to the worker each record names. An operator runs an epoch once its input frontier has
//! passed it (every worker's data and progress for the epoch has arrived). Its output is split
//! by edge, one stream per consumer input.
//!
//! Epochs follow each other as micro-batches do, with one overlap: a worker reads its sources'
//! slice of epoch `e` once the probe on the dataflow's leaves shows epoch `e - 2` finished on
//! every worker (each operator still runs its epochs in order, each over exactly its own
//! epoch's input and progress). A plan that plays a TestStream runs one epoch at a time: Beam's
//! TestStream is synchronous, its next event played only once its last one's consequences ran.
//! As epochs finish, each process's first worker commits the process's sinks for them.

use crate::checkpoint::{WorkerOffsets, WorkerResume};
use crate::ledger::{Ledger, OpenEpoch, WorkerCheckpoint};
use crate::node::{progress, route, NodeWorker, Pending};
use crate::process::{IdleReport, Process};
use crate::progress::{SourceRows, WorkerProgress};
use crate::wire::Routed;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::core::{Concatenate, Partition};
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Capability, Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;
use weir_runner_core::checkpoint::log::SourceOffsets;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::node::UnitMetrics;
use weir_runner_core::exec::source::SourceState;
use weir_runner_core::plan::Role;
use weir_runner_core::streaming::StreamingTrigger;
use weir_sdk::metrics::MetricQueryResults;
use weir_sdk::time::MAX_TIMESTAMP;
use weir_sdk::{Error, Result};

type Record = (u64, Routed);

/// Epochs a worker may have read but not seen finished everywhere: the sources read epoch `e`
/// while epoch `e - 1` is still running, so a worker that finished its share of `e - 1` early
/// does not wait idle for the others.
const IN_FLIGHT: u64 = 2;
type Builder = timely::container::CapacityContainerBuilder<Vec<Record>>;
/// A process's cumulative metrics, for worker 0: `(0, (process, results))`.
type MetricsRecord = (u32, (u32, MetricQueryResults));
type MetricsBuilder = timely::container::CapacityContainerBuilder<Vec<MetricsRecord>>;
/// A worker's acknowledgement, for worker 0, that it has finished every epoch before one (its
/// state and manifest written, and its process's sinks committed), with the epoch of its
/// latest background snapshot: `(0, (worker, epoch, snapshot))`.
pub(crate) type AckRecord = (u32, (u32, u64, Option<u64>));
pub(crate) type AckBuilder = timely::container::CapacityContainerBuilder<Vec<AckRecord>>;
/// Worker 0's news, for the first worker of every other process, that every epoch before one
/// is committed: `(target, epoch)`.
pub(crate) type CommittedRecord = (u32, u64);
pub(crate) type CommittedBuilder = timely::container::CapacityContainerBuilder<Vec<CommittedRecord>>;
/// A worker's failure, for every worker of the other processes: `(target, (worker, error))`.
/// Without it a process that failed would stop sending, and the others would wait for it.
type FailureRecord = (u32, (u32, String));
type FailureBuilder = timely::container::CapacityContainerBuilder<Vec<FailureRecord>>;
/// A worker's report of how idle it is, for the first worker of every other process:
/// `(target, (worker, report))`.
pub(crate) type IdleRecord = (u32, (u32, IdleReport));
pub(crate) type IdleBuilder = timely::container::CapacityContainerBuilder<Vec<IdleRecord>>;
/// A worker's part of an epoch, for worker 0: `(0, (epoch, row))`.
pub(crate) type ProgressRecord = (u32, (u64, WorkerProgress));
pub(crate) type ProgressBuilder = timely::container::CapacityContainerBuilder<Vec<ProgressRecord>>;

/// Runs worker `worker` of the cluster to the end of the pipeline, or until a worker of the
/// process fails (its error is the process's [`Process::take_failure`]), or a stop or cancel:
/// `Err(Cancelled)` then.
pub(crate) fn run(worker: &mut Worker, process: Arc<Process>) -> Result<()> {
    if process.place.peers > process.place.workers {
        if let Err(e) = crate::handshake::run(worker, &process) {
            process.fail(e);
            return Err(Error::Cancelled);
        }
    }
    let me = worker.index();
    let n = process.plan.nodes.len();
    let mut inputs: Vec<(usize, InputHandle<u64, Builder>)> = Vec::new();
    let mut nodes: Vec<Rc<RefCell<NodeWorker>>> = Vec::new();
    let probe = ProbeHandle::new();
    let mut metrics: InputHandle<u64, MetricsBuilder> = InputHandle::new();
    let mut rows: InputHandle<u64, ProgressBuilder> = InputHandle::new();
    let mut acks: InputHandle<u64, AckBuilder> = InputHandle::new();
    let mut failures: InputHandle<u64, FailureBuilder> = InputHandle::new();
    let mut committed: InputHandle<u64, CommittedBuilder> = InputHandle::new();
    let mut idle: InputHandle<u64, IdleBuilder> = InputHandle::new();
    let pending: Option<Pending> = process.checkpoint.as_ref().map(|_| Default::default());
    let dataflow = worker.next_dataflow_index();
    worker.dataflow::<u64, _, _>(|scope| {
        side_streams(scope, &process, (&mut metrics, &mut rows, &mut acks, &mut committed, &mut failures, &mut idle));
        let mut into: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        // Fused chains run as one operator, the head's, with the tail's outputs.
        let mut chain_at: Vec<Option<&[usize]>> = vec![None; n];
        let mut follower = vec![false; n];
        for c in &process.shape.chains {
            chain_at[c[0]] = Some(c.as_slice());
            c[1..].iter().for_each(|&m| follower[m] = true);
        }
        for i in 0..n {
            if follower[i] {
                continue;
            }
            let tail = chain_at[i].and_then(|c| c.last().copied()).unwrap_or(i);
            let name = process.plan.nodes[i].name.clone();
            let out = if process.plan.nodes[i].is_source() {
                let mut handle = InputHandle::new();
                let stream = scope.input_from(&mut handle);
                inputs.push((i, handle));
                stream
            } else {
                let stream = scope.concatenate(std::mem::take(&mut into[i]));
                let node = Rc::new(RefCell::new(NodeWorker::new(process.clone(), i, me, chain_at[i], pending.clone())));
                nodes.push(node.clone());
                node_operator(stream, node, process.clone(), &name)
            };
            let edges = process.shape.edges[tail].len();
            if edges == 0 {
                out.probe_with(&probe);
            } else {
                let parts = out.partition::<timely::container::CapacityContainerBuilder<Vec<Routed>>, _, _>(
                    edges as u64,
                    |(e, r)| (e, r),
                );
                for (e, s) in parts.into_iter().enumerate() {
                    into[process.shape.edges[tail][e].consumer].push(s);
                }
            }
        }
    });
    // The first worker of every other process reports the process's metrics to worker 0.
    let mut reporter = (me == process.place.first && process.place.process_id != 0).then_some(metrics);
    let start = process.start_epoch();
    let mut ledger = Ledger {
        rows: Some(rows),
        open: BTreeMap::new(),
        next: start,
        nodes: nodes.clone(),
        me,
        ck: pending.map(|pending| WorkerCheckpoint::new(pending, acks)),
        shared: process.clone(),
        commit_news: (me == 0 && process.finalizes && process.place.peers > process.place.workers).then_some(committed),
        told: process.start_epoch(),
        idle: (process.ends_incrementally() && process.place.peers > process.place.workers).then_some(idle),
        sources_done: false,
        read_in: None,
    };
    let mut epochs = Epochs {
        worker,
        process: &process,
        me,
        inputs: &mut inputs,
        probe: &probe,
        reporter: &mut reporter,
        ledger: &mut ledger,
    };
    let result = run_resumed(&mut epochs);
    if result.is_err() {
        tell_failure(worker, &process, me, &mut failures);
        // Abandon the dataflow: the other workers are stopping too.
        worker.drop_dataflow(dataflow);
    }
    for node in &nodes {
        node.borrow_mut().finish();
    }
    result
}

/// What a worker's epochs run with: the worker, its process and index, its sources' input
/// handles, the probe on the dataflow's leaves, the metrics reporter, and its ledger.
struct Epochs<'a> {
    worker: &'a mut Worker,
    process: &'a Arc<Process>,
    me: usize,
    inputs: &'a mut Vec<(usize, InputHandle<u64, Builder>)>,
    probe: &'a ProbeHandle<u64>,
    reporter: &'a mut Option<InputHandle<u64, MetricsBuilder>>,
    ledger: &'a mut Ledger,
}

/// Restores the worker's nodes from the checkpoint, if there is one, and drives its epochs; an
/// error is the process's failure, and `Err(Cancelled)` is returned.
fn run_resumed(e: &mut Epochs<'_>) -> Result<()> {
    let nodes = e.ledger.nodes.clone();
    let process = e.process.clone();
    let resumed = match process.checkpoint.as_ref() {
        None => Ok(WorkerResume::default()),
        Some(log) => log.resume(e.me).and_then(|mut r| {
            for node in &nodes {
                node.borrow_mut().restore(&mut r.members, r.written_by)?;
                node.borrow_mut().replay_journals(&mut r.journals);
            }
            if let Some(ck) = e.ledger.ck.as_mut() {
                ck.restored(std::mem::take(&mut r.chain));
            }
            Ok(r)
        }),
    };
    match resumed.and_then(|r| drive(e, r)) {
        Err(Error::Cancelled) => Err(Error::Cancelled),
        Err(err) => {
            process.fail(err);
            Err(Error::Cancelled)
        }
        Ok(()) => Ok(()),
    }
}

/// Tells the other processes of this one's failure, whose workers would otherwise wait for it.
fn tell_failure(worker: &mut Worker, process: &Process, me: usize, failures: &mut InputHandle<u64, FailureBuilder>) {
    if let Some(message) = process.own_failure() {
        for target in (0..process.place.peers).filter(|&t| !process.is_local(t)) {
            failures.send((target as u32, (me as u32, message.clone())));
        }
        deliver(failures);
        for _ in 0..8 {
            worker.step();
        }
    }
}

/// The handles of the side streams beside the plan's: metrics, progress rows,
/// acknowledgements, commit news, failures and idle reports.
type SideHandles<'a> = (
    &'a mut InputHandle<u64, MetricsBuilder>,
    &'a mut InputHandle<u64, ProgressBuilder>,
    &'a mut InputHandle<u64, AckBuilder>,
    &'a mut InputHandle<u64, CommittedBuilder>,
    &'a mut InputHandle<u64, FailureBuilder>,
    &'a mut InputHandle<u64, IdleBuilder>,
);

/// Builds the side streams beside the plan's in `scope`.
fn side_streams(scope: timely::dataflow::Scope<'_, u64>, process: &Arc<Process>, handles: SideHandles<'_>) {
    let (metrics, rows, acks, committed, failures, idle) = handles;
    // Every process's metrics reach worker 0, which serves the job's.
    let p = process.clone();
    side_stream(scope, metrics, "Metrics", move |(from, results)| p.metrics.set_remote(from as usize, results));
    // Every worker's part of every epoch reaches worker 0, which reports the epoch.
    let p = process.clone();
    // Its state store figures reach the job's metrics, and every sink, as gauges.
    side_stream(scope, rows, "Progress", move |(epoch, row)| {
        if let Some(report) = p.progress.add(epoch, row) {
            let now = weir_sdk::time::now_millis();
            weir_runner_core::exec::node::UnitMetrics::publish_state_operators(
                &p.metrics,
                &report.state_operators,
                now,
            );
        }
    });
    // Every worker's acknowledgements reach worker 0, which commits the epochs all have
    // finished.
    let p = process.clone();
    side_stream(scope, acks, "Commits", move |(from, through, snapshot)| {
        if let Err(e) = p.acknowledged(from as usize, through, snapshot) {
            p.fail(e);
        }
    });
    // Worker 0's commits reach the other processes, whose operators may run work after them.
    let p = process.clone();
    side_stream(scope, committed, "Committed", move |through| p.set_committed(through));
    // A failure anywhere stops every process, with the error.
    let p = process.clone();
    side_stream(scope, failures, "Failures", move |(from, message)| p.fail_remote(from as usize, message));
    // In an incremental run, how idle each worker is reaches every process.
    let p = process.clone();
    side_stream(scope, idle, "Idle", move |(from, report)| p.idle_report(from as usize, report));
}

/// The timely operator of one worker's share of a node: it stashes what arrives per epoch and
/// runs an epoch once its input frontier has passed it.
fn node_operator<'s>(
    stream: timely::dataflow::Stream<'s, u64, Vec<Routed>>,
    node: Rc<RefCell<NodeWorker>>,
    process: Arc<Process>,
    name: &str,
) -> timely::dataflow::Stream<'s, u64, Vec<Record>> {
    let pact = Exchange::new(|r: &Routed| r.0 as u64);
    stream.unary_frontier(pact, name, move |_, _| {
        let mut stash: BTreeMap<u64, (Capability<u64>, Vec<crate::wire::Envelope>)> = BTreeMap::new();
        move |(input, frontier), output| {
            input.for_each(|cap, data| {
                // Records sent under no capability make no claim on any epoch.
                let Some(&t) = cap.least() else { return };
                let entry = stash.entry(t).or_insert_with(|| (cap.delayed(&t, 0), Vec::new()));
                entry.1.extend(data.drain(..).map(|(_, env)| env));
            });
            while let Some(&t) = stash.keys().next() {
                if frontier.frontier().less_equal(&t) {
                    break;
                }
                let Some((cap, envelopes)) = stash.remove(&t) else { break };
                let mut out = Vec::new();
                if !process.failed() {
                    if let Err(e) = node.borrow_mut().run_epoch(t, envelopes, &mut out) {
                        process.fail(e);
                        out.clear();
                    }
                }
                output.session(&cap).give_iterator(out.into_iter());
            }
        }
    })
}

/// The worker's epochs: sources read, the epoch closed, the cluster waited for, sinks committed.
fn drive(e: &mut Epochs<'_>, resume: WorkerResume) -> Result<()> {
    let Epochs { worker, process, me, inputs, probe, reporter, ledger } = e;
    let (process, me): (&Arc<Process>, usize) = (process, *me);
    let mut clock = Clock::for_plan(&process.plan);
    let mut sources = open_sources(process, me, inputs, &resume)?;
    if let Some(c) = resume.replays.first().map_or(resume.clock, |r| r.start_clock) {
        clock.set_test_time(c);
    }
    // A source whose one consumer is the head of a fused chain on this worker plans its reads,
    // and leaves the reading to the chain (in cache-sized pieces, each through the whole chain).
    let defer: Vec<bool> = inputs.iter().map(|(i, _)| process.shape.reads_left_to_chains[*i]).collect();
    // Planned reads must be carried out before the next epoch plans more from the same split:
    // by this worker's chains that read them, which run an epoch as soon as every worker has
    // sent it, long before the epoch is finished downstream.
    let readers: Vec<Rc<RefCell<NodeWorker>>> = inputs
        .iter()
        .zip(&defer)
        .filter(|(_, &d)| d)
        .flat_map(|((i, _), _)| process.shape.edges[*i].iter().map(|e| e.consumer))
        .filter_map(|c| ledger.nodes.iter().find(|n| n.borrow().index() == c).cloned())
        .collect();
    let leader = me == process.place.first;
    let synchronous = process.plan.has_test_stream();
    let start = process.start_epoch();
    let mut epoch = start;
    for (_, h) in inputs.iter_mut() {
        h.advance_to(start);
    }
    let mut replays = resume.replays.into_iter();
    loop {
        let started = Instant::now();
        let started_ms = weir_sdk::time::now_millis();
        let replay = replays.next();
        let read = read_epoch(process, me, inputs, &mut sources, &mut clock, &defer, replay.as_ref())?;
        ledger.sources_done = read.summary.done;
        if read.rows > 0 || !read.summary.done {
            ledger.read_in = Some(epoch);
        }
        // The epoch's reads are logged before any of its data leaves the worker.
        let mut wal_ms = 0;
        if let Some(log) = &process.checkpoint {
            let entry = WorkerOffsets {
                epoch,
                worker: me,
                workers: process.place.peers,
                sources: read.logged,
                start_clock: read.start_clock,
                clock: clock.test_time(),
            };
            let t = Instant::now();
            // A replay of an epoch that a run with another number of workers logged keeps their
            // entries: they are what another restart would replay.
            if replay.as_ref().is_none_or(|r| r.workers == process.place.peers) {
                log.write_offsets(&entry)?;
            }
            wal_ms = t.elapsed().as_millis() as u64;
            if let Some(ck) = ledger.ck.as_mut() {
                ck.last_offsets = Some(entry);
            }
        }
        for (k, out) in read.outs.into_iter().enumerate() {
            let handle = &mut inputs[k].1;
            for r in out {
                handle.send(r);
            }
        }
        let open = OpenEpoch {
            started,
            started_ms,
            rows: read.rows,
            wal_ms,
            sources: read.source_rows,
            max_event_time: read.max_event_time,
        };
        ledger.open.insert(epoch, open);
        epoch += 1;
        for (_, h) in inputs.iter_mut() {
            h.advance_to(epoch);
        }
        // At most IN_FLIGHT epochs are unfinished: the next one is read while the last runs.
        // A TestStream is synchronous, as in Beam: its next event is played only once
        // everything its last one caused has run on every worker (a window a watermark closed
        // fired, and what waited on it released), so one epoch runs at a time.
        let in_flight = if synchronous { 1 } else { IN_FLIGHT };
        let wait_for = epoch.saturating_sub(in_flight - 1);
        let last = epoch - 1;
        step_until(worker, process, || {
            !probe.less_than(&wait_for) && readers.iter().all(|n| n.borrow().last_epoch().is_some_and(|e| e >= last))
        })?;
        let frontier = first_unfinished(probe);
        ledger.finished(frontier, leader.then_some(process))?;
        if leader {
            report(process, reporter);
        }
        let Some(wait) = next_epoch(process, ledger, &clock, &read.summary, started)? else { break };
        if let Some(wait) = wait {
            process.job.sleep_unless_stopped(wait);
        }
    }
    finish_epochs(e)
}

/// Sends the process's metrics to worker 0, from the process's first worker.
fn report(process: &Process, reporter: &mut Option<InputHandle<u64, MetricsBuilder>>) {
    if let Some(r) = reporter.as_mut() {
        r.send((0, (process.place.process_id as u32, process.metrics.local_snapshot())));
        deliver(r);
    }
}

/// The worker's share of every source, read on from the last commit or replaying what the
/// worker logged after it.
fn open_sources(
    process: &Process,
    me: usize,
    inputs: &[(usize, InputHandle<u64, Builder>)],
    resume: &WorkerResume,
) -> Result<Vec<SourceState>> {
    let plan = &process.plan;
    inputs
        .iter()
        .map(|(i, _)| {
            let node = &plan.nodes[*i];
            let Role::Source(spec) = &node.role else {
                return Err(Error::Internal {
                    component: "timely runner".into(),
                    message: format!("{} is not a source", node.name),
                });
            };
            let ops = process.graph.pcollection(node.outputs[0]).ops.clone();
            let mut state = SourceState::of(&node.name, spec, ops).share(me, process.place.peers);
            let at = match resume.replays.first() {
                Some(r) => r.sources.iter().find(|s| s.name == node.name).map(|s| &s.start),
                None => resume.sources.as_ref().and_then(|ss| ss.iter().find(|s| s.name == node.name)).map(|s| &s.end),
            };
            match at {
                Some(pos) => state.restore(pos, 1)?,
                None if resume.sources.is_some() => {
                    return Err(Error::Construction {
                        step: node.name.clone(),
                        message: "the checkpoint's offset log has no entry for this source".into(),
                    })
                }
                None => {}
            }
            Ok(state)
        })
        .collect()
}

/// What the sources did in an epoch, for deciding on the next.
struct ReadSummary {
    /// Every source is read to its end.
    done: bool,
    /// Anything moved (data, a watermark, the clock).
    moved: bool,
    /// A reader gave its whole share: the source may well have more now.
    behind: bool,
}

/// What a worker's sources read for an epoch.
struct EpochRead {
    summary: ReadSummary,
    rows: u64,
    max_event_time: Option<i64>,
    source_rows: Vec<SourceRows>,
    /// For the offset log.
    logged: Vec<SourceOffsets>,
    start_clock: Option<i64>,
    /// Per source, its records for the dataflow: data and progress.
    outs: Vec<Vec<Record>>,
}

/// Reads every source's share of an epoch (exactly what the worker logged, on a replay).
fn read_epoch(
    process: &Process,
    me: usize,
    inputs: &[(usize, InputHandle<u64, Builder>)],
    sources: &mut [SourceState],
    clock: &mut Clock,
    defer: &[bool],
    replay: Option<&WorkerOffsets>,
) -> Result<EpochRead> {
    let plan = &process.plan;
    // Each worker reads its share of the batch size.
    let max = process.claims_per_call();
    let mut r = EpochRead {
        summary: ReadSummary { done: true, moved: false, behind: false },
        rows: 0,
        max_event_time: None,
        source_rows: Vec::with_capacity(sources.len()),
        logged: Vec::new(),
        start_clock: clock.test_time(),
        outs: Vec::with_capacity(sources.len()),
    };
    for (k, src) in sources.iter_mut().enumerate() {
        let i = inputs[k].0;
        let name = &plan.nodes[i].name;
        let replayed = replay.map(|r| r.sources.iter().find(|s| &s.name == name));
        let counts = replayed.flatten().map(|s| &s.counts[..]);
        let end = replayed.map(|l| l.map_or(&serde_json::Value::Null, |s| &s.end));
        src.prepare_read(end, process.job.is_drain_requested());
        if src.is_drained() {
            process.drained.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let mut metrics = UnitMetrics::default();
        let ops = &process.graph.pcollection(plan.nodes[i].outputs[0]).ops;
        let read = metrics.read(name, &**ops, || src.next(1, max, counts, clock, defer[k], None));
        metrics.publish(&process.metrics, read.is_ok());
        let read = read?;
        r.rows += read.rows as u64;
        // (min, max, sum, count) of the read's timestamps.
        if read.ts_stats.3 > 0 {
            r.max_event_time = r.max_event_time.max(Some(read.ts_stats.1));
        }
        r.source_rows.push(SourceRows { description: name.clone(), num_input_rows: read.rows as u64 });
        r.summary.moved |= read.moved;
        r.summary.behind |= read.full;
        r.summary.done &= read.watermark >= MAX_TIMESTAMP;
        if process.checkpoint.is_some() {
            r.logged.push(SourceOffsets {
                name: name.clone(),
                start: read.start_offset.clone(),
                end: read.end_offset.clone(),
                counts: read.counts.clone(),
            });
        }
        let mut out = Vec::new();
        route(process, i, 0, read.bundles.into_iter().flatten().collect(), me, &mut out)?;
        progress(process, i, me, read.watermark, clock.test_time(), &mut out);
        r.outs.push(out);
    }
    Ok(r)
}

/// Whether another epoch runs after one that began at `started` and read `read`: `None` if
/// not, otherwise how long to wait first (`Some(None)`: not at all).
fn next_epoch(
    process: &Process,
    ledger: &Ledger,
    clock: &Clock,
    read: &ReadSummary,
    started: Instant,
) -> Result<Option<Option<Duration>>> {
    let trigger = process.streaming.trigger;
    let interval = Duration::from_millis(process.streaming.trigger_interval_ms);
    // The sources being done is not the end while operators anywhere have work of their own (a
    // splittable DoFn's pending restrictions, on any worker): the epochs go on until every
    // node's output watermark here is at the end of time, which it is only once every worker's
    // producers said so. Work due now runs in the next epoch at once.
    let next_work = ledger.nodes.iter().filter_map(|n| n.borrow().next_work()).min();
    let now = clock.now();
    let work_due = next_work.is_some_and(|t| t <= now);
    let finished = read.done && ledger.nodes.iter().all(|n| n.borrow().output_watermark() >= MAX_TIMESTAMP);
    // Available-now with a checkpoint is Spark's incremental batch: the run ends once its
    // sources are read to their end and no work is due at any time of this run on any worker;
    // work that waits for the next run (a watched directory's next poll) is checkpointed for it.
    let incremental = process.ends_incrementally() && read.done && next_work.is_none() && process.idle();
    if finished || incremental || (trigger == StreamingTrigger::Once && !work_due) {
        return Ok(None);
    }
    if process.job.is_stop_requested() {
        return Err(Error::Cancelled);
    }
    Ok(Some(match trigger {
        // A source that has fallen behind (a reader gave its whole share) is read on at once.
        StreamingTrigger::ProcessingTime if read.behind => None,
        StreamingTrigger::ProcessingTime => interval.checked_sub(started.elapsed()),
        _ if work_due => None,
        // Done reading: wait only for work due later (at most 10 ms; it may come from another
        // worker); otherwise the next epoch carries the last watermarks through.
        _ if read.done => next_work.map(|t| Duration::from_millis((t - now).clamp(1, 10) as u64)),
        _ if !read.moved => Some(Duration::from_millis(10)),
        _ => None,
    }))
}

/// This worker's sources are done: its inputs close, and it runs what the others still send
/// until the dataflow is complete, committing the epochs as they finish, then the work that
/// waited for the last commits.
fn finish_epochs(e: &mut Epochs<'_>) -> Result<()> {
    let Epochs { worker, process, me, inputs, probe, reporter, ledger } = e;
    let (process, me): (&Arc<Process>, usize) = (process, *me);
    let leader = me == process.place.first;
    inputs.clear();
    step_until(worker, process, || {
        let frontier = first_unfinished(probe);
        if let Err(e) = ledger.finished(frontier, leader.then_some(&**process)) {
            process.fail(e);
        }
        probe.done()
    })?;
    // Work after the last commits (bundle finalization) runs before the worker ends; if the
    // commits do not come within a while, the callbacks are left undone, with a warning (a file
    // read and committed but not cleaned is not read again: the watch has seen it).
    if process.finalizes {
        let through = ledger.next;
        let deadline = Instant::now() + Duration::from_secs(30);
        step_until(worker, process, || {
            ledger.run_committed();
            process.committed() >= through || Instant::now() > deadline
        })?;
        if process.committed() < through {
            tracing::warn!(
                worker = me,
                "the commits of epochs {}..{through} did not arrive within 30 s: their after-commit work \
                 (bundle finalization) was not run",
                process.committed()
            );
        }
    }
    ledger.commit_news.take();
    ledger.idle.take();
    ledger.rows.take();
    ledger.ck.take();
    // The process's final metrics, then the reports end.
    report(process, reporter);
    reporter.take();
    Ok(())
}

/// A side stream beside the plan's: each record `(target worker, message)` sent through
/// `handle` is handed to `receive` on its target worker.
fn side_stream<M: timely::ExchangeData + Clone>(
    scope: timely::dataflow::Scope<'_, u64>,
    handle: &mut InputHandle<u64, timely::container::CapacityContainerBuilder<Vec<(u32, M)>>>,
    name: &str,
    mut receive: impl FnMut(M) + 'static,
) {
    scope.input_from(handle).sink(Exchange::new(|r: &(u32, M)| r.0 as u64), name, move |(input, _)| {
        input.for_each(|_, data| data.drain(..).for_each(|(_, m)| receive(m)));
    });
}

/// Sends what `handle` holds on now. A side stream's exchange buffers records per target until
/// its time moves on, so the time moves: the records are the news, not the times.
pub(crate) fn deliver<D: Clone + 'static>(
    handle: &mut InputHandle<u64, timely::container::CapacityContainerBuilder<Vec<D>>>,
) {
    let next = *handle.time() + 1;
    handle.advance_to(next);
}

/// The first epoch not finished everywhere (`u64::MAX` once all are).
fn first_unfinished(probe: &ProbeHandle<u64>) -> u64 {
    probe.with_frontier(|f| f.first().copied().unwrap_or(u64::MAX))
}

/// How long a worker waiting for an epoch goes on after a stop is asked (see [`step_until`]).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Steps the worker until `ready` holds, or a worker of this process fails (the failure is the
/// process's to report), or the job is cancelled, or a stop was asked [`STOP_GRACE`] ago.
fn step_until(worker: &mut Worker, process: &Process, mut ready: impl FnMut() -> bool) -> Result<()> {
    let mut stopping: Option<Instant> = None;
    loop {
        if process.failed() || process.job.is_cancelled() {
            return Err(Error::Cancelled);
        }
        // A stop lets the running epoch finish, but a worker waiting for it may wait on another
        // that has already stopped (and left the dataflow): after a grace period it stops too,
        // and what did not commit is replayed by the next run.
        if process.job.is_stop_requested() && stopping.get_or_insert_with(Instant::now).elapsed() > STOP_GRACE {
            return Err(Error::Cancelled);
        }
        // A peer is gone: nothing more will arrive from it.
        if let Some(e) = crate::cluster::lost_error() {
            process.fail(e);
            return Err(Error::Cancelled);
        }
        if ready() {
            return Ok(());
        }
        worker.step_or_park(Some(Duration::from_millis(5)));
    }
}
