//! A worker's ledger of its epochs: when each began and what its sources read, until the epoch
//! is finished everywhere and reported; with a checkpoint, its manifests and acknowledgements.

use crate::checkpoint::{WorkerManifest, WorkerOffsets};
use crate::node::{NodeWorker, Pending};
use crate::process::{IdleReport, Process};
use crate::progress::{OperatorState, SourceRows, WorkerProgress};
use crate::worker::{deliver, AckBuilder, CommittedBuilder, IdleBuilder, ProgressBuilder};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use timely::dataflow::InputHandle;
use weir_runner_core::checkpoint::compaction::Snapshots;
use weir_sdk::time::MAX_TIMESTAMP;
use weir_sdk::Result;

/// An epoch a worker read and has not reported: when it began, and what its sources read.
pub(crate) struct OpenEpoch {
    pub(crate) started: Instant,
    pub(crate) started_ms: i64,
    pub(crate) rows: u64,
    pub(crate) wal_ms: u64,
    pub(crate) sources: Vec<SourceRows>,
    pub(crate) max_event_time: Option<i64>,
}

/// A worker's account of its epochs for the progress reports: when each began and what its
/// sources read, until the epoch is seen finished everywhere and its row sent to worker 0.
pub(crate) struct Ledger {
    pub(crate) rows: Option<InputHandle<u64, ProgressBuilder>>,
    /// Epochs this worker read and has not reported, with when and how much.
    pub(crate) open: BTreeMap<u64, OpenEpoch>,
    /// The first epoch not reported yet.
    pub(crate) next: u64,
    pub(crate) nodes: Vec<Rc<RefCell<NodeWorker>>>,
    pub(crate) me: usize,
    /// The process, whose checkpoint the manifests go to.
    pub(crate) shared: Arc<Process>,
    /// With a checkpoint: what the worker writes to it besides its state files.
    pub(crate) ck: Option<WorkerCheckpoint>,
    /// On worker 0 of a cluster whose operators run work after commits: the news of commits to
    /// the other processes.
    pub(crate) commit_news: Option<InputHandle<u64, CommittedBuilder>>,
    /// The commits told so far: every epoch before it.
    pub(crate) told: u64,
    /// In an incremental run of several processes: the reports of how idle this worker is,
    /// to the other processes.
    pub(crate) idle: Option<InputHandle<u64, IdleBuilder>>,
    /// Whether the worker's sources were read to their end at its last read.
    pub(crate) sources_done: bool,
    /// The last epoch in which its sources read anything (or were not done).
    pub(crate) read_in: Option<u64>,
}

/// What a worker writes to the checkpoint besides its state files.
pub(crate) struct WorkerCheckpoint {
    /// What the worker's nodes wrote per epoch, for its manifests.
    pending: Pending,
    /// The acknowledgements to worker 0.
    acks: InputHandle<u64, AckBuilder>,
    /// The worker's last offset log entry. Once its sources are done, the epochs it takes part
    /// in without reading are logged with its final positions, so that every commit has every
    /// worker's offsets.
    pub(crate) last_offsets: Option<WorkerOffsets>,
    /// The epochs whose state files make the worker's state since its latest snapshot, and
    /// the thread that folds them into the next.
    snapshots: Snapshots,
}

impl WorkerCheckpoint {
    pub(crate) fn new(pending: Pending, acks: InputHandle<u64, AckBuilder>) -> Self {
        WorkerCheckpoint { pending, acks, last_offsets: None, snapshots: Snapshots::default() }
    }

    /// Goes on from the chain a restart restored (its snapshot's epoch first): the next
    /// background snapshot folds it with this run's deltas.
    pub(crate) fn restored(&mut self, chain: crate::checkpoint::EpochChain) {
        if !chain.is_empty() {
            self.snapshots.restored(chain);
        }
    }
}

impl Ledger {
    /// In an incremental run, tells every process how idle this worker is now that it has
    /// seen every epoch through `through` finished everywhere: idle after every epoch since
    /// the last one in which it read, received or sent anything, if its sources are read to
    /// their end and none of its nodes has work of its own due.
    pub(crate) fn report_idle(&mut self, through: u64) {
        let p = self.shared.clone();
        if !p.ends_incrementally() {
            return;
        }
        let nodes = self.nodes.iter().map(|n| n.borrow());
        let (active, work) =
            nodes.fold((self.read_in, false), |(a, w), n| (a.max(n.last_active()), w || n.next_work().is_some()));
        let idle = self.sources_done && !work;
        let since = active.map_or(p.start_epoch(), |a| a + 1);
        let report = IdleReport { since: idle.then_some(since), through: Some(through) };
        p.idle_report(self.me, report);
        if let Some(handle) = self.idle.as_mut() {
            for other in (0..p.place.peers / p.place.workers.max(1)).filter(|&q| q != p.place.process_id) {
                handle.send(((other * p.place.workers) as u32, (self.me as u32, report)));
            }
            deliver(handle);
        }
    }

    /// Runs the operators' work that waited for the epochs committed so far (bundle
    /// finalization); on worker 0, first tells the other processes of new commits.
    pub(crate) fn run_committed(&mut self) {
        let through = self.shared.committed();
        if !self.shared.finalizes {
            return;
        }
        if let Some(handle) = self.commit_news.as_mut().filter(|_| through > self.told) {
            let p = &self.shared;
            for other in (0..p.place.peers / p.place.workers.max(1)).filter(|&q| q != p.place.process_id) {
                handle.send(((other * p.place.workers) as u32, through));
            }
            deliver(handle);
            self.told = through;
        }
        for n in &self.nodes {
            n.borrow_mut().committed_through(through);
        }
    }

    /// Closes every epoch before `frontier` that this worker took part in: the ones its
    /// sources read, and (once they are done) the later ones its operators ran. On the
    /// process's first worker (`leader`), the process's sinks commit them; with a checkpoint,
    /// the worker's manifests record them and worker 0 hears they are done here. Each epoch's
    /// row goes to the progress reports.
    pub(crate) fn finished(&mut self, frontier: u64, leader: Option<&Process>) -> Result<()> {
        let seen = self.nodes.iter().filter_map(|n| n.borrow().last_epoch()).max();
        let last = self.open.keys().next_back().copied().max(seen).map_or(self.next, |e| e + 1);
        let until = frontier.min(last);
        if let Some(p) = leader {
            p.commit_sinks(frontier)?;
        }
        self.run_committed();
        if self.next >= until {
            return Ok(());
        }
        let mut background = HashMap::new();
        if let (Some(ck), Some(log)) = (self.ck.as_mut(), self.shared.checkpoint.as_ref()) {
            for epoch in self.next..until {
                if let Some(last) = ck.last_offsets.as_ref().filter(|l| l.epoch < epoch) {
                    let idle = last.idle(epoch);
                    log.write_offsets(&idle)?;
                    ck.last_offsets = Some(idle);
                }
                let members = ck.pending.borrow_mut().remove(&epoch).unwrap_or_default();
                let files = members.iter().filter_map(|m| m.file.clone()).collect();
                log.write_manifest(&WorkerManifest { epoch, worker: self.me, members })?;
                // A run's first epoch writes whole snapshots: the chain starts afresh there.
                ck.snapshots.wrote(epoch, files, log.is_snapshot(epoch));
            }
            background = ck.snapshots.finished();
            ck.snapshots.ask(&log.location(), log.interval(), |e| log.state_folder(e, self.me))?;
            ck.acks.send((0, (self.me as u32, until, ck.snapshots.latest())));
            deliver(&mut ck.acks);
        }
        self.report_idle(until - 1);
        let Some(rows) = self.rows.as_mut() else {
            self.next = until;
            return Ok(());
        };
        let (state_rows, state_bytes) =
            self.nodes.iter().map(|n| n.borrow().state()).fold((0, 0), |(r, b), (x, y)| (r + x, b + y));
        let watermark = self.nodes.iter().filter_map(|n| n.borrow().leaf_watermark()).min().unwrap_or(MAX_TIMESTAMP);
        for epoch in self.next..until {
            let mut operators: Vec<OperatorState> =
                self.nodes.iter().filter_map(|n| n.borrow_mut().operator_state(epoch)).collect();
            // Background snapshots finished by now count in the first epoch reported.
            for o in operators.iter_mut() {
                if let Some(made) = background.remove(&o.operator_name) {
                    for (k, v) in made.custom_metrics() {
                        *o.custom_metrics.entry(k).or_default() += v;
                    }
                }
            }
            let open = self.open.remove(&epoch);
            let row = WorkerProgress {
                worker: self.me,
                process: self.shared.place.process_id,
                input_rows: open.as_ref().map_or(0, |o| o.rows),
                duration_ms: open.as_ref().map_or(0, |o| o.started.elapsed().as_millis() as u64),
                state_rows,
                state_bytes,
                started_ms: open.as_ref().map_or_else(weir_sdk::time::now_millis, |o| o.started_ms),
                wal_commit_ms: open.as_ref().map_or(0, |o| o.wal_ms),
                watermark,
                max_event_time: open.as_ref().and_then(|o| o.max_event_time),
                operators,
                sources: open.map(|o| o.sources).unwrap_or_default(),
            };
            rows.send((0, (epoch, row)));
        }
        deliver(rows);
        self.next = until;
        Ok(())
    }
}
