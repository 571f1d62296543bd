//! Per-epoch checkpoints of a timely cluster (`--checkpoint-dir`, a local directory or an
//! `s3://bucket/prefix` URL every process shares).
//!
//! ```text
//! <root>/lock-<process>                held (flock) by that process, for a local directory
//! <root>/metadata.json                 query id and the pipeline's fingerprint (process 0 writes it)
//! <root>/offsets/<epoch>/<worker>      written by the worker before it sends the epoch's data: its
//!                                      sources' positions before and after, and the records read
//! <root>/state/<epoch>/<worker>/*.arrow  the worker's operator state after the epoch (snapshots
//!                                      or deltas, as the micro-batch runner writes them)
//! <root>/state/<epoch>/<worker>/manifest.json  every node's watermarks and state files: the
//!                                      worker has finished the epoch
//! <root>/commits/<epoch>               written by worker 0 once every worker has finished the
//!                                      epoch and every process has committed its sinks for it
//! ```
//!
//! A restart resumes every worker after the last commit `C`: sources at their positions after
//! `C`, state from the last snapshot at or before `C` and the deltas up to it. Epochs a worker
//! logged after `C` are replayed with exactly the logged reads, so an epoch whose output a sink
//! already committed is recomputed identically and its files rewritten, never duplicated.
//! A restart with another number of workers (or processes) resumes too: every entry says how
//! many workers logged it, each new worker takes its share of the old workers' source splits
//! and its key groups of their state, and an epoch is replayed only if every old worker logged
//! it (see [`EpochLog::resume`]).
//! Every file is a checksummed envelope or an Arrow file listed with its CRC-32, and the checks
//! of the micro-batch checkpoints apply: the fingerprint must match, the logs must have no hole,
//! and a missing or damaged file is an error naming it.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use weir_runner_core::checkpoint::compaction::{snapshot_files, SNAPSHOT_MANIFEST};
use weir_runner_core::checkpoint::log::{self, refused};
use weir_runner_core::checkpoint::protocol::{self, commit_key, state_key, Logged, Opening};
use weir_runner_core::checkpoint::state_files::{Chain, StateFile};
use weir_runner_core::exec::source::{reshare, reshare_counts};
use weir_runner_core::fingerprint::Fingerprint;
use weir_runner_core::operator::Journal;
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

/// What a worker read for an epoch, logged before the epoch's data leaves it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct WorkerOffsets {
    pub epoch: u64,
    pub worker: usize,
    /// How many workers the run that logged the epoch had: each read its share of the splits.
    pub workers: usize,
    pub sources: Vec<log::SourceOffsets>,
    /// The worker's test clock before and after reading, when TestStream drives it.
    pub start_clock: Option<Timestamp>,
    pub clock: Option<Timestamp>,
}

impl WorkerOffsets {
    /// The entry of a later `epoch` in which the worker read nothing: its sources stay where
    /// this entry left them.
    pub(crate) fn idle(&self, epoch: u64) -> WorkerOffsets {
        let sources = self
            .sources
            .iter()
            .map(|s| log::SourceOffsets {
                name: s.name.clone(),
                start: s.end.clone(),
                end: s.end.clone(),
                counts: vec![0; s.counts.len()],
            })
            .collect();
        WorkerOffsets {
            epoch,
            worker: self.worker,
            workers: self.workers,
            sources,
            start_clock: self.clock,
            clock: self.clock,
        }
    }
}

/// One operator (or chain member) of a worker after an epoch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct MemberState {
    pub node: String,
    pub input: Timestamp,
    pub output: Timestamp,
    pub file: Option<StateFile>,
}

/// A worker's manifest of an epoch: the epoch is finished on that worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct WorkerManifest {
    pub epoch: u64,
    pub worker: usize,
    pub members: Vec<MemberState>,
}

/// The record that an epoch is done everywhere, and where its state's snapshots are.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct EpochCommit {
    pub epoch: u64,
    /// The earliest of the workers' snapshots.
    pub snapshot: u64,
    /// How many workers wrote the state (from `snapshot` to `epoch`).
    pub workers: usize,
    /// Per worker, the epoch of its latest snapshot at or before `epoch` (made in the
    /// background, so each worker's its own). Entries written before it was recorded lack it:
    /// every worker's is `snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Vec<u64>>,
}

impl EpochCommit {
    /// The epoch of worker `w`'s snapshot.
    fn snapshot_of(&self, w: usize) -> u64 {
        self.snapshots.as_ref().and_then(|s| s.get(w)).copied().unwrap_or(self.snapshot)
    }
}

impl Logged for WorkerOffsets {
    fn logged_as(&self) -> (u64, Option<usize>) {
        (self.epoch, Some(self.worker))
    }
}

impl Logged for WorkerManifest {
    fn logged_as(&self) -> (u64, Option<usize>) {
        (self.epoch, Some(self.worker))
    }
}

impl Logged for EpochCommit {
    fn logged_as(&self) -> (u64, Option<usize>) {
        (self.epoch, None)
    }
}

/// One node member's restored state: watermarks, and the state files its entries are read
/// from when the member is restored ([`EpochLog::entries`]).
pub(crate) struct RestoredMember {
    pub input: Timestamp,
    pub output: Timestamp,
    pub files: Chain,
}

/// A worker's state files per epoch, its snapshot's epoch first.
pub(crate) type EpochChain = Vec<(u64, Vec<StateFile>)>;

/// What a worker resumes with.
#[derive(Default)]
pub(crate) struct WorkerResume {
    /// The sources' positions after the last commit.
    pub sources: Option<Vec<log::SourceOffsets>>,
    pub clock: Option<Timestamp>,
    /// The epochs logged after the last commit, to replay exactly: what this worker logged, or
    /// its share of what every worker of a run with another number of workers logged.
    pub replays: Vec<WorkerOffsets>,
    /// Per node member, its state: this worker's own, or, when another number of workers wrote
    /// the state, every one of theirs (by worker) to spread over this run's workers.
    pub members: HashMap<String, Vec<RestoredMember>>,
    /// How many workers wrote the state.
    pub written_by: usize,
    /// When this run goes on from the commit's state ([`EpochLog::continues`]): the worker's
    /// chain of state files, from its snapshot's epoch on, for its background snapshots.
    pub chain: EpochChain,
    /// Per replayed epoch and node, the journals its source-reading operators logged on every
    /// worker, merged: a replay repeats exactly those reads.
    pub journals: HashMap<(u64, String), Journal>,
}

/// A cluster's checkpoint, as one process sees it.
pub(crate) struct EpochLog {
    cp: protocol::Checkpoint,
    /// This run's workers.
    peers: usize,
    retain: u64,
    interval: u64,
    /// The query's id, kept across restarts.
    pub id: String,
    /// The last committed epoch when this run started.
    pub committed: Option<EpochCommit>,
    /// The first epoch of this run.
    pub start: u64,
    /// The first epoch whose files may still exist.
    kept_from: Mutex<u64>,
}

fn offsets_key(epoch: u64, worker: usize) -> String {
    format!("{}/{worker}", protocol::offsets_key(epoch))
}
fn worker_state_key(epoch: u64, worker: usize) -> String {
    format!("{}/{worker}", state_key(epoch))
}
fn journal_key(epoch: u64, worker: usize, node: usize) -> String {
    format!("{}/{JOURNAL}{node}.json", worker_state_key(epoch, worker))
}

/// How a journal's file name in a worker's state folder begins.
const JOURNAL: &str = "journal-";

impl EpochLog {
    /// Opens the checkpoint at `spec` for process `process` of a pipeline with `fingerprint`.
    /// Process 0 records the pipeline in a new checkpoint; every process refuses one written by
    /// another pipeline, one with log entries but no metadata, and one whose commits have holes.
    pub(crate) fn open(
        spec: &str,
        fingerprint: Fingerprint,
        new_id: String,
        (process, peers): (usize, usize),
        retain: u64,
        interval: u64,
    ) -> Result<Self> {
        let cp = protocol::Checkpoint::open(Opening {
            spec,
            fingerprint,
            new_id,
            process: Some(process),
            writes_metadata: process == 0,
        })?;
        let committed = cp.last_commit::<EpochCommit>()?;
        let start = committed.as_ref().map_or(0, |c| c.epoch + 1);
        let kept_from = cp.commits.first().copied().unwrap_or(0);
        let id = cp.id.clone();
        Ok(EpochLog {
            cp,
            peers,
            retain: retain.max(1),
            interval: interval.max(1),
            id,
            committed,
            start,
            kept_from: Mutex::new(kept_from),
        })
    }

    /// Whether epoch `e` writes full snapshots: the first epoch of a run that does not go on
    /// from a commit's state as the same number of workers wrote it (the first run, or one with
    /// another number of workers: a new layout). A run that goes on writes deltas on the
    /// restored chains. Later snapshots are made in the background.
    pub(crate) fn is_snapshot(&self, e: u64) -> bool {
        e == self.start && self.continues().is_none()
    }

    /// The commit whose state chains this run goes on writing deltas onto: the last one, when
    /// as many workers as this run has wrote it.
    pub(crate) fn continues(&self) -> Option<&EpochCommit> {
        self.committed.as_ref().filter(|c| c.workers == self.peers)
    }

    /// Per worker, the epoch of the snapshot its restored chain starts at, for a run that goes
    /// on from the last commit's state ([`EpochLog::continues`]).
    pub(crate) fn restored_snapshots(&self) -> Option<Vec<u64>> {
        self.continues().map(|c| (0..self.peers).map(|w| c.snapshot_of(w)).collect())
    }

    /// `--state-snapshot-interval`: epochs after a snapshot before the next is made.
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }

    /// The folder of worker `worker`'s state of `epoch`.
    pub(crate) fn state_folder(&self, epoch: u64, worker: usize) -> String {
        worker_state_key(epoch, worker)
    }

    /// Where the checkpoint lives.
    pub(crate) fn location(&self) -> weir_runner_core::checkpoint::store::Location {
        self.cp.loc.clone()
    }

    /// Logs what worker `o.worker` read for epoch `o.epoch`.
    pub(crate) fn write_offsets(&self, o: &WorkerOffsets) -> Result<()> {
        self.cp.write(&offsets_key(o.epoch, o.worker), o)
    }

    /// Writes a state file of worker `worker` for `epoch`.
    pub(crate) fn write_state_file(&self, epoch: u64, worker: usize, f: &StateFile, bytes: Vec<u8>) -> Result<()> {
        self.cp.loc.put_listed(&format!("{}/{}", worker_state_key(epoch, worker), f.file), bytes)
    }

    /// Logs what the source-reading operators of worker `worker`'s share of node `node` (a chain's
    /// head) decided as they ran `epoch`: before the epoch's output can reach a sink.
    pub(crate) fn write_journals(&self, epoch: u64, worker: usize, node: usize, j: &[log::NodeJournal]) -> Result<()> {
        self.cp.write(&journal_key(epoch, worker, node), &j.to_vec())
    }

    /// The journals every one of `workers` logged for `epoch`, merged by node. A node whose
    /// journal some worker did not log is left out: that worker never finished the epoch, so no
    /// sink has its output, and the replay reads afresh. (Merging only the others' would hold
    /// the watermark where they left it, past the missing worker's unread records.)
    fn journals_of(&self, epoch: u64, workers: usize) -> Result<HashMap<String, Journal>> {
        let mut by_node: HashMap<String, Vec<Journal>> = HashMap::new();
        for w in 0..workers {
            let folder = worker_state_key(epoch, w);
            for name in self.cp.loc.list(&folder)? {
                if !name.starts_with(JOURNAL) || !name.ends_with(".json") {
                    continue;
                }
                let key = format!("{folder}/{name}");
                let Some(js) = self.cp.read::<Vec<log::NodeJournal>>(&key, "a journal")? else { continue };
                for j in js {
                    by_node.entry(j.name).or_default().push(j.journal);
                }
            }
        }
        Ok(by_node.into_iter().filter(|(_, js)| js.len() == workers).map(|(n, js)| (n, Journal::merge(js))).collect())
    }

    /// Records that worker `m.worker` has finished epoch `m.epoch`.
    pub(crate) fn write_manifest(&self, m: &WorkerManifest) -> Result<()> {
        // The state files it names were written without flushing their folder.
        self.cp.loc.sync_folder(&worker_state_key(m.epoch, m.worker))?;
        self.cp.write(&format!("{}/manifest.json", worker_state_key(m.epoch, m.worker)), m)
    }

    /// Records that `epoch` is done everywhere, with each worker's latest snapshot at or before
    /// it (`snapshots`), then drops what no restart can need: everything before both the
    /// earliest of those snapshots and the retained epochs.
    pub(crate) fn write_commit(&self, epoch: u64, snapshots: Vec<u64>) -> Result<()> {
        // A process whose lease another cluster took over commits nothing more.
        self.cp.guard.check()?;
        // A run that went on from a commit's chains may name their snapshots, before its start.
        let first = self.continues().map_or(self.start, |c| c.snapshot);
        let snapshot = snapshots.iter().copied().min().unwrap_or(self.start).max(first);
        let entry = EpochCommit { epoch, snapshot, workers: self.peers, snapshots: Some(snapshots) };
        self.cp.write(&commit_key(epoch), &entry)?;
        let keep_from = snapshot.min((epoch + 1).saturating_sub(self.retain));
        let mut kept = self.kept_from.lock().unwrap_or_else(|e| e.into_inner());
        if *kept < keep_from {
            self.cp.retire_before(keep_from)?;
            *kept = keep_from;
        }
        Ok(())
    }

    /// The last epoch any worker logged, if any: a sink may have written output of the epochs
    /// up to it as a run with another number of workers laid it out.
    pub(crate) fn last_logged(&self) -> Result<Option<u64>> {
        Ok(self.cp.ids("offsets")?.last().copied())
    }

    /// What worker `worker` resumes with: its sources' positions after the last commit, the
    /// epochs logged after it, and every node's state and watermarks as of the commit. A
    /// checkpoint written by another number of workers is dealt anew: each source's splits,
    /// and, key group by key group, the state (by the node, see `NodeWorker::restore`).
    pub(crate) fn resume(&self, worker: usize) -> Result<WorkerResume> {
        let mut r = WorkerResume { written_by: self.peers, ..WorkerResume::default() };
        if let Some(c) = &self.committed {
            let missing = || format!("commit {} has no offsets of worker {worker}", c.epoch);
            let o = self.logged_for(c.epoch, worker)?.ok_or_else(|| {
                refused(&self.cp.loc.name(&offsets_key(c.epoch, worker)), format!("missing: {}", missing()))
            })?;
            r.clock = o.clock;
            r.sources = Some(o.sources);
            let writers: Vec<usize> = if c.workers == self.peers { vec![worker] } else { (0..c.workers).collect() };
            for w in writers {
                let (members, chain) = self.state_of(c, w)?;
                for (node, member) in members {
                    r.members.entry(node).or_default().push(member);
                }
                if c.workers == self.peers {
                    r.chain = chain;
                }
            }
            r.written_by = c.workers;
        }
        // The epochs logged after the commit, in order; a hole would change what a replayed
        // epoch reads.
        let mut e = self.start;
        while let Some(o) = self.logged_for(e, worker)? {
            // The replay rewrites the epoch's state: a snapshot made of it before is no more.
            self.cp.loc.delete_all(&format!("{}/{SNAPSHOT_MANIFEST}", worker_state_key(e, worker)))?;
            for (node, j) in self.journals_of(e, o.workers)? {
                r.journals.insert((e, node), j);
            }
            r.replays.push(o);
            e += 1;
        }
        self.forget_unreplayed(e, worker)?;
        Ok(r)
    }

    /// Worker `w`'s state as of commit `c`, per node member: its latest watermarks, and the
    /// snapshot and the deltas after it that make its entries.
    fn state_of(&self, c: &EpochCommit, w: usize) -> Result<(HashMap<String, RestoredMember>, EpochChain)> {
        let mut members: HashMap<String, RestoredMember> = HashMap::new();
        let mut chain = Vec::new();
        let start = c.snapshot_of(w);
        for e in start..=c.epoch {
            let folder = worker_state_key(e, w);
            let m: WorkerManifest =
                self.cp.read_logged(&format!("{folder}/manifest.json"), "a state manifest", (e, Some(w)), || {
                    format!("commit {} needs worker {w}'s state of epoch {e}", c.epoch)
                })?;
            // The first epoch's state is its background snapshot, if one was made there.
            let snapshot = match e == start {
                true => snapshot_files(&self.cp.loc, &folder)?,
                false => None,
            };
            let listed: Vec<StateFile> = match &snapshot {
                Some(files) => files.clone(),
                None => m.members.iter().filter_map(|member| member.file.clone()).collect(),
            };
            chain.push((e, listed));
            for member in m.members {
                let entry = members.entry(member.node.clone()).or_insert_with(|| RestoredMember {
                    input: member.input,
                    output: member.output,
                    files: Vec::new(),
                });
                entry.input = member.input;
                entry.output = member.output;
                if let (None, Some(f)) = (&snapshot, member.file) {
                    entry.files.push((folder.clone(), f));
                }
            }
            for f in snapshot.into_iter().flatten() {
                let Some(entry) = members.get_mut(&f.node) else {
                    return Err(log::corrupt(
                        &self.cp.loc.name(&format!("{folder}/{SNAPSHOT_MANIFEST}")),
                        format!("has state of step {}, which the epoch's manifest does not list", f.node),
                    ));
                };
                entry.files.push((folder.clone(), f));
            }
        }
        Ok((members, chain))
    }

    /// A restored member's entries, read from its files.
    pub(crate) fn entries(&self, member: &RestoredMember) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.cp.read_chain(&member.files)
    }

    /// A restored member's entries whose keys `keep` accepts, in key order (a rescale: every
    /// worker spreading the state over this run's workers must see it alike).
    pub(crate) fn entries_where(
        &self,
        member: &RestoredMember,
        keep: &mut weir_runner_core::checkpoint::state_files::Keep<'_>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut entries = self.cp.read_chain_where(&member.files, keep)?;
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }

    /// Worker `w`'s entry of epoch `e`, checked.
    fn entry(&self, e: u64, w: usize) -> Result<Option<WorkerOffsets>> {
        let key = offsets_key(e, w);
        let Some(o) = self.cp.read::<WorkerOffsets>(&key, "an offset log entry")? else { return Ok(None) };
        self.cp.check_logged(&key, &o, (e, Some(w)))?;
        Ok(Some(o))
    }

    /// What worker `worker` of this run reads in epoch `e` as logged: its own entry when as many
    /// workers as this run has logged the epoch; its share of every worker's entries when
    /// another number did; `None` if the epoch was not logged (by that other number of
    /// workers: not by all of them, so no sink has its output).
    fn logged_for(&self, e: u64, worker: usize) -> Result<Option<WorkerOffsets>> {
        let own = self.entry(e, worker)?;
        let layout = match &own {
            Some(o) => o.workers,
            None => match self.entry(e, 0)? {
                Some(o) => o.workers,
                None => return Ok(None),
            },
        };
        if layout == self.peers {
            return Ok(own);
        }
        let mut all = Vec::with_capacity(layout);
        for w in 0..layout {
            match self.entry(e, w)? {
                Some(o) if o.workers == layout => all.push(o),
                Some(o) => {
                    return Err(refused(
                        &self.cp.loc.name(&offsets_key(e, w)),
                        format!("logged by {} workers, where worker 0's entry says {layout}", o.workers),
                    ))
                }
                None => return Ok(None),
            }
        }
        self.reshare(all, worker).map(Some)
    }

    /// Worker `worker`'s share of the reads that every worker of another run logged for one
    /// epoch (`all`, by worker).
    fn reshare(&self, all: Vec<WorkerOffsets>, worker: usize) -> Result<WorkerOffsets> {
        let share = (worker, self.peers);
        let first = &all[0];
        let mut sources = Vec::with_capacity(first.sources.len());
        for s in &first.sources {
            let of_each = all
                .iter()
                .map(|o| {
                    o.sources.iter().find(|x| x.name == s.name).ok_or_else(|| {
                        refused(
                            &self.cp.loc.name(&offsets_key(o.epoch, o.worker)),
                            format!("no entry for source {}, which worker 0 logged", s.name),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let starts: Vec<&serde_json::Value> = of_each.iter().map(|x| &x.start).collect();
            let ends: Vec<&serde_json::Value> = of_each.iter().map(|x| &x.end).collect();
            let counts: Vec<&[usize]> = of_each.iter().map(|x| &x.counts[..]).collect();
            let counts = reshare_counts(&counts, share).ok_or_else(|| {
                refused(
                    &self.cp.loc.name(&offsets_key(first.epoch, 0)),
                    format!("the counts source {} logged on {} workers do not fit together", s.name, all.len()),
                )
            })?;
            sources.push(log::SourceOffsets {
                name: s.name.clone(),
                start: reshare(&s.name, &starts, share)?,
                end: reshare(&s.name, &ends, share)?,
                counts,
            });
        }
        Ok(WorkerOffsets {
            epoch: first.epoch,
            worker,
            // Who logged it: a replay keeps their entries.
            workers: all.len(),
            sources,
            start_clock: first.start_clock,
            clock: first.clock,
        })
    }

    /// Removes what the workers of another run logged for epoch `from` and later (no sink has
    /// their output, or they would be replayed), so that this run's entries of those epochs
    /// are never mixed with theirs: worker `worker` removes the entries of the indices it
    /// stands for (`i % peers == worker`), its own among them, before it logs anything. A
    /// hole in its own entries is refused.
    fn forget_unreplayed(&self, from: u64, worker: usize) -> Result<()> {
        for l in self.cp.ids("offsets")?.into_iter().filter(|&l| l >= from) {
            let folder = protocol::offsets_key(l);
            let mut indices: Vec<usize> = self.cp.loc.list(&folder)?.iter().filter_map(|n| n.parse().ok()).collect();
            indices.sort_unstable();
            for i in indices.into_iter().filter(|i| i % self.peers == worker) {
                // What a worker wrote of an epoch not replayed is recomputed: a journal left
                // there must not steer the run that reaches the epoch again.
                for name in self.cp.loc.list(&worker_state_key(l, i))? {
                    if name.starts_with(JOURNAL) {
                        self.cp.loc.delete_all(&format!("{}/{name}", worker_state_key(l, i)))?;
                    }
                }
                let key = offsets_key(l, i);
                let Some(o) = self.cp.read::<WorkerOffsets>(&key, "an offset log entry")? else { continue };
                if o.workers != self.peers {
                    self.cp.loc.delete_all(&key)?;
                } else if i == worker {
                    return Err(refused(
                        &self.cp.loc.name(&offsets_key(from, worker)),
                        format!(
                            "missing: worker {worker} logged epoch {l} ({}) but not epoch {from}; the epochs after the \
                             last commit cannot be replayed exactly once",
                            self.cp.loc.name(&key)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(claims: usize, hold: Option<Timestamp>) -> Vec<log::NodeJournal> {
        let runs = vec![weir_sdk::splittable::ClaimRun { restriction: claims as u64, claims }];
        vec![log::NodeJournal { name: "Read".into(), journal: Journal { runs, hold } }]
    }

    /// An epoch's journal is replayed only when every worker that ran the epoch logged its own:
    /// a worker that died before logging never finished the epoch, and merging only the others'
    /// would hold the watermark past its unread records.
    #[test]
    fn a_journal_some_worker_did_not_log_is_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().display().to_string();
        let log = EpochLog::open(&spec, Fingerprint::default(), "q".into(), (0, 2), 3, 10).unwrap();
        log.write_journals(4, 0, 7, &journal(5, Some(100))).unwrap();
        assert!(log.journals_of(4, 2).unwrap().is_empty());
        log.write_journals(4, 1, 7, &journal(3, Some(40))).unwrap();
        let merged = log.journals_of(4, 2).unwrap();
        let j = &merged["Read"];
        assert_eq!(j.hold, Some(40));
        assert_eq!(j.runs.iter().map(|r| r.claims).sum::<usize>(), 8);
    }
}
