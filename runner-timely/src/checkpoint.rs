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
//! Every file is a checksummed envelope or an Arrow file listed with its CRC-32, and the checks
//! of the micro-batch checkpoints apply: the fingerprint must match, the logs must have no hole,
//! and a missing or damaged file is an error naming it.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use weir_runner_core::checkpoint::lease::Lease;
use weir_runner_core::checkpoint::lock::{DirLock, STOPPING_HOLDER_PATIENCE};
use weir_runner_core::checkpoint::log::{
    self, batch_ids, check_contiguous, corrupt, encode_entry, parse_entry, refused,
};
use weir_runner_core::checkpoint::state_files::{apply, check_name, decode_file, StateFile};
use weir_runner_core::checkpoint::store::Location;
use weir_runner_core::fingerprint::Fingerprint;
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

#[derive(Serialize, Deserialize)]
struct Metadata {
    id: String,
    fingerprint: Fingerprint,
}

/// What a worker read for an epoch, logged before the epoch's data leaves it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct WorkerOffsets {
    pub epoch: u64,
    pub worker: usize,
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
        WorkerOffsets { epoch, worker: self.worker, sources, start_clock: self.clock, clock: self.clock }
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

/// The record that an epoch is done everywhere, and where its state's snapshot is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct EpochCommit {
    pub epoch: u64,
    pub snapshot: u64,
}

/// One node member's restored state: watermarks and entries.
pub(crate) struct RestoredMember {
    pub input: Timestamp,
    pub output: Timestamp,
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What a worker resumes with.
#[derive(Default)]
pub(crate) struct WorkerResume {
    /// The sources' positions after the last commit.
    pub sources: Option<Vec<log::SourceOffsets>>,
    pub clock: Option<Timestamp>,
    /// The epochs it logged after the last commit, to replay exactly.
    pub replays: Vec<WorkerOffsets>,
    /// Per node member, its state.
    pub members: HashMap<String, RestoredMember>,
}

/// A cluster's checkpoint, as one process sees it.
pub(crate) struct EpochLog {
    loc: Location,
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
    /// The lock of a local directory, or the lease of an object-store prefix, held by this
    /// process for the run.
    guard: Guard,
}

/// What keeps a second cluster off a checkpoint.
enum Guard {
    /// `flock` on `lock-N` of a local directory.
    Dir(#[allow(dead_code)] DirLock),
    /// The lease `lease-N` of an object-store prefix.
    Lease(Lease),
}

fn offsets_key(epoch: u64, worker: usize) -> String {
    format!("offsets/{epoch}/{worker}")
}
fn state_key(epoch: u64, worker: usize) -> String {
    format!("state/{epoch}/{worker}")
}
fn commit_key(epoch: u64) -> String {
    format!("commits/{epoch}")
}

impl EpochLog {
    /// Opens the checkpoint at `spec` for process `process` of a pipeline with `fingerprint`.
    /// Process 0 records the pipeline in a new checkpoint; every process refuses one written by
    /// another pipeline, one with log entries but no metadata, and one whose commits have holes.
    pub(crate) fn open(
        spec: &str,
        fingerprint: Fingerprint,
        new_id: String,
        process: usize,
        retain: u64,
        interval: u64,
    ) -> Result<Self> {
        let loc = Location::parse(spec)?;
        // A process of the previous run may still be stopping: give it a few seconds.
        let guard = match loc.local_dir() {
            Some(dir) => Guard::Dir(DirLock::acquire(dir, &format!("lock-{process}"), STOPPING_HOLDER_PATIENCE)?),
            None => Guard::Lease(Lease::acquire(&loc, &format!("lease-{process}"), STOPPING_HOLDER_PATIENCE)?),
        };
        let commits = batch_ids(loc.list("commits")?, |n| loc.name(&format!("commits/{n}")));
        let meta_key = "metadata.json";
        let id = match loc.get(meta_key)? {
            Some(bytes) => {
                let meta: Metadata = parse_entry(&loc.name(meta_key), &bytes).map_err(|e| match e {
                    Error::Io { message, path } if message.contains("corrupt") => refused(
                        &path,
                        format!(
                            "{message}; it was written by another version of Weir or damaged, and cannot be \
                             checked against this pipeline; use a new --checkpoint-dir"
                        ),
                    ),
                    e => e,
                })?;
                if let Some(diff) = meta.fingerprint.first_difference(&fingerprint) {
                    return Err(refused(
                        &loc.name(""),
                        format!(
                            "written by a different pipeline, so resuming from it would give wrong results: \
                             {diff}; use a new --checkpoint-dir for this pipeline"
                        ),
                    ));
                }
                meta.id
            }
            None => {
                let logged = commits.first().map(|c| commit_key(*c)).or_else(|| {
                    let epochs = loc.list("offsets").ok()?;
                    epochs
                        .into_iter()
                        .find(|n| matches!(log::log_name(n), log::LogName::Batch(_)))
                        .map(|e| format!("offsets/{e}"))
                });
                if let Some(first) = logged {
                    return Err(refused(
                        &loc.name(meta_key),
                        format!(
                            "missing, but the checkpoint has log entries ({}): without it the pipeline that wrote \
                             them cannot be checked; use a new --checkpoint-dir",
                            loc.name(&first)
                        ),
                    ));
                }
                if process == 0 {
                    loc.put(
                        meta_key,
                        encode_entry(&loc.name(meta_key), &Metadata { id: new_id.clone(), fingerprint })?,
                    )?;
                }
                new_id
            }
        };
        check_contiguous(&commits, |c| loc.name(&commit_key(c)))?;
        let committed = match commits.last() {
            Some(&c) => {
                let key = commit_key(c);
                let bytes = loc.get(&key)?.ok_or_else(|| corrupt(&loc.name(&key), "vanished while being read"))?;
                let entry: EpochCommit = parse_entry(&loc.name(&key), &bytes)?;
                if entry.epoch != c {
                    return Err(refused(
                        &loc.name(&key),
                        format!(
                            "holds the commit of epoch {}, not of epoch {c}: not written here by the runner",
                            entry.epoch
                        ),
                    ));
                }
                Some(entry)
            }
            None => None,
        };
        let start = committed.as_ref().map_or(0, |c| c.epoch + 1);
        let kept_from = commits.first().copied().unwrap_or(0);
        Ok(EpochLog {
            loc,
            retain: retain.max(1),
            interval: interval.max(1),
            id,
            committed,
            start,
            kept_from: Mutex::new(kept_from),
            guard,
        })
    }

    /// Whether epoch `e` writes full snapshots: the first epoch of a run, and every
    /// `--state-snapshot-interval` epochs.
    pub(crate) fn is_snapshot(&self, e: u64) -> bool {
        e == self.start || e.is_multiple_of(self.interval)
    }

    /// The latest snapshot epoch at or before `e` in this run.
    fn snapshot_of(&self, e: u64) -> u64 {
        self.start.max(e - e % self.interval)
    }

    /// Logs what worker `o.worker` read for epoch `o.epoch`.
    pub(crate) fn write_offsets(&self, o: &WorkerOffsets) -> Result<()> {
        let key = offsets_key(o.epoch, o.worker);
        self.loc.put(&key, encode_entry(&self.loc.name(&key), o)?)
    }

    /// Writes a state file of worker `worker` for `epoch`.
    pub(crate) fn write_state_file(&self, epoch: u64, worker: usize, f: &StateFile, bytes: Vec<u8>) -> Result<()> {
        self.loc.put(&format!("{}/{}", state_key(epoch, worker), f.file), bytes)
    }

    /// Records that worker `m.worker` has finished epoch `m.epoch`.
    pub(crate) fn write_manifest(&self, m: &WorkerManifest) -> Result<()> {
        let key = format!("{}/manifest.json", state_key(m.epoch, m.worker));
        self.loc.put(&key, encode_entry(&self.loc.name(&key), m)?)
    }

    /// Records that `epoch` is done everywhere, then drops what no restart can need: everything
    /// before both its snapshot and the retained epochs.
    pub(crate) fn write_commit(&self, epoch: u64) -> Result<()> {
        // A process whose lease another cluster took over commits nothing more.
        if let Guard::Lease(lease) = &self.guard {
            lease.check()?;
        }
        let snapshot = self.snapshot_of(epoch);
        let key = commit_key(epoch);
        self.loc.put(&key, encode_entry(&self.loc.name(&key), &EpochCommit { epoch, snapshot })?)?;
        let keep_from = snapshot.min((epoch + 1).saturating_sub(self.retain));
        let mut kept = self.kept_from.lock().unwrap_or_else(|e| e.into_inner());
        while *kept < keep_from {
            let e = *kept;
            // Commits go first: a commit whose files are gone must never be the last one.
            for key in [commit_key(e), format!("offsets/{e}"), format!("state/{e}")] {
                self.loc.delete_all(&key)?;
            }
            *kept += 1;
        }
        Ok(())
    }

    fn read<T: for<'de> Deserialize<'de>>(&self, key: &str, what: &str) -> Result<Option<T>> {
        match self.loc.get(key)? {
            None => Ok(None),
            Some(bytes) => parse_entry(&self.loc.name(key), &bytes).map(Some).map_err(|e| match e {
                Error::Io { path, message } => Error::Io { path, message: format!("{message} ({what})") },
                e => e,
            }),
        }
    }

    /// What worker `worker` resumes with: its sources' positions after the last commit, the
    /// epochs it logged after it, and every node's state and watermarks as of the commit.
    pub(crate) fn resume(&self, worker: usize) -> Result<WorkerResume> {
        let mut r = WorkerResume::default();
        let missing = |key: &str, why: &str| refused(&self.loc.name(key), format!("missing: {why}"));
        if let Some(c) = &self.committed {
            let key = offsets_key(c.epoch, worker);
            let o: WorkerOffsets = self
                .read(&key, "an offset log entry")?
                .ok_or_else(|| missing(&key, &format!("commit {} has no offsets of worker {worker}", c.epoch)))?;
            self.check_entry(&key, (o.epoch, o.worker), (c.epoch, worker))?;
            r.clock = o.clock;
            r.sources = Some(o.sources);
            // Per member: its latest watermarks, and its entries as the files so far make them.
            type Rebuilt = (Timestamp, Timestamp, HashMap<Vec<u8>, Vec<u8>>);
            let mut maps: HashMap<String, Rebuilt> = HashMap::new();
            for e in c.snapshot..=c.epoch {
                let key = format!("{}/manifest.json", state_key(e, worker));
                let m: WorkerManifest = self.read(&key, "a state manifest")?.ok_or_else(|| {
                    missing(&key, &format!("commit {} needs worker {worker}'s state of epoch {e}", c.epoch))
                })?;
                self.check_entry(&key, (m.epoch, m.worker), (e, worker))?;
                for member in m.members {
                    let entry = maps.entry(member.node.clone()).or_default();
                    entry.0 = member.input;
                    entry.1 = member.output;
                    if let Some(f) = &member.file {
                        check_name(&self.loc.name(&key), f)?;
                        let fkey = format!("{}/{}", state_key(e, worker), f.file);
                        let shown = self.loc.name(&fkey);
                        let data = self.loc.get(&fkey)?.ok_or_else(|| corrupt(&shown, "state file is missing"))?;
                        apply(&mut entry.2, f.kind, decode_file(&shown, f, data)?);
                    }
                }
            }
            r.members = maps
                .into_iter()
                .map(|(node, (input, output, map))| {
                    (node, RestoredMember { input, output, entries: map.into_iter().collect() })
                })
                .collect();
        }
        // The epochs this worker logged after the commit, in order; a hole would change what
        // a replayed epoch reads.
        let mut e = self.start;
        while let Some(o) = self.read::<WorkerOffsets>(&offsets_key(e, worker), "an offset log entry")? {
            self.check_entry(&offsets_key(e, worker), (o.epoch, o.worker), (e, worker))?;
            r.replays.push(o);
            e += 1;
        }
        let later = batch_ids(self.loc.list("offsets")?, |n| self.loc.name(&format!("offsets/{n}")));
        for l in later.into_iter().filter(|&l| l > e) {
            if self.loc.get(&offsets_key(l, worker))?.is_some() {
                return Err(refused(
                    &self.loc.name(&offsets_key(e, worker)),
                    format!(
                        "missing: worker {worker} logged epoch {l} ({}) but not epoch {e}; the epochs after the last \
                         commit cannot be replayed exactly once",
                        self.loc.name(&offsets_key(l, worker))
                    ),
                ));
            }
        }
        Ok(r)
    }

    /// Checks that the entry at `key` is the one of `(epoch, worker)` it should be.
    fn check_entry(&self, key: &str, found: (u64, usize), wanted: (u64, usize)) -> Result<()> {
        if found != wanted {
            return Err(refused(
                &self.loc.name(key),
                format!(
                    "holds the entry of epoch {} of worker {}, not of epoch {} of worker {}: not written here by \
                     the runner",
                    found.0, found.1, wanted.0, wanted.1
                ),
            ));
        }
        Ok(())
    }
}
