//! Opening a checkpoint, as every runner does it: on a [`Location`] (a local directory or an
//! `s3://` prefix), held by one process ([`Guard`]: a lock file or a lease), recording the
//! pipeline that writes it (`metadata.json`: the query id and the pipeline's fingerprint), and
//! refusing one it must not resume:
//!
//! - written by another pipeline (the fingerprints differ; the first difference is named);
//! - with a metadata file that cannot be read, or log entries and no metadata file;
//! - with a hole in its commit log, or a log entry that is not the one its name says.
//!
//! The layout under the root is the same for both runners: `commits/<id>` (one entry per
//! committed batch or epoch), `offsets/<id>` (the micro-batch runner's entry, or a folder of one
//! entry per timely worker), `state/<id>/...` (state files and their manifests). What the
//! entries hold is the runner's; how they are opened, checked, named in errors and retired is
//! here, once.

use super::lease::Lease;
use super::lock::{DirLock, STOPPING_HOLDER_PATIENCE};
use super::log::{batch_ids, check_contiguous, encode_entry, parse_entry, refused};
use super::store::Location;
use crate::fingerprint::Fingerprint;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use weir_sdk::{Error, Result};

/// What keeps a second process off a checkpoint.
pub enum Guard {
    /// `flock` on a lock file of a local directory.
    Dir(#[allow(dead_code)] DirLock),
    /// A lease object of an object-store prefix.
    Lease(Lease),
}

impl Guard {
    /// Fails when another process has taken the checkpoint over (a lease that expired while
    /// this one was stalled): it must commit nothing more.
    pub fn check(&self) -> Result<()> {
        match self {
            Guard::Dir(_) => Ok(()),
            Guard::Lease(lease) => lease.check(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Metadata {
    id: String,
    fingerprint: Fingerprint,
}

/// How a runner opens its checkpoint.
pub struct Opening<'a> {
    /// `--checkpoint-dir` as given.
    pub spec: &'a str,
    /// The pipeline that may resume it.
    pub fingerprint: Fingerprint,
    /// The query id to record if the checkpoint is new.
    pub new_id: String,
    /// The process's own lock (or lease) name, `None` for the one process of a query, or the
    /// process's index in a cluster.
    pub process: Option<usize>,
    /// Whether this process records a new checkpoint's metadata (one process of a cluster does).
    pub writes_metadata: bool,
}

/// A checkpoint opened by one process.
pub struct Checkpoint {
    /// Where it lives.
    pub loc: Location,
    /// Held for as long as the query runs.
    pub guard: Guard,
    /// The query's id, kept across restarts.
    pub id: String,
    /// The batches (epochs) of its commit log, in order, with no hole.
    pub commits: Vec<u64>,
}

/// The key of a commit entry.
pub fn commit_key(id: u64) -> String {
    format!("commits/{id}")
}

/// The key of an offset entry (the micro-batch runner's), or of a folder of them (timely's).
pub fn offsets_key(id: u64) -> String {
    format!("offsets/{id}")
}

/// The key of a batch's (epoch's) folder of state files.
pub fn state_key(id: u64) -> String {
    format!("state/{id}")
}

/// A log entry that knows the batch (epoch) it was written for.
pub trait Logged {
    /// Its batch or epoch, and the worker that wrote it, if one did.
    fn logged_as(&self) -> (u64, Option<usize>);
}

impl Checkpoint {
    /// Opens (or creates) the checkpoint `o.spec` for a pipeline with `o.fingerprint`, holds it
    /// for this process, and checks it can be resumed (see the module's list).
    pub fn open(o: Opening<'_>) -> Result<Self> {
        let loc = Location::parse(o.spec)?;
        let suffix = o.process.map_or(String::new(), |p| format!("-{p}"));
        // A process of the previous run may still be stopping: give it a few seconds.
        let guard = match loc.local_dir() {
            Some(dir) => Guard::Dir(DirLock::acquire(dir, &format!("lock{suffix}"), STOPPING_HOLDER_PATIENCE)?),
            None => Guard::Lease(Lease::acquire(&loc, &format!("lease{suffix}"), STOPPING_HOLDER_PATIENCE)?),
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
                if let Some(diff) = meta.fingerprint.first_difference(&o.fingerprint) {
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
                    let offsets = loc.list("offsets").ok()?;
                    batch_ids(offsets, |n| loc.name(&format!("offsets/{n}"))).first().map(|b| offsets_key(*b))
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
                if o.writes_metadata {
                    let meta = Metadata { id: o.new_id.clone(), fingerprint: o.fingerprint };
                    loc.put(meta_key, encode_entry(&loc.name(meta_key), &meta)?)?;
                }
                o.new_id
            }
        };
        check_contiguous(&commits, |c| loc.name(&commit_key(c)))?;
        Ok(Checkpoint { loc, guard, id, commits })
    }

    /// Writes log entry `value` at `key`.
    pub fn write<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.loc.put(key, encode_entry(&self.loc.name(key), value)?)
    }

    /// The log entry at `key`, or `None` when there is none; `what` says what it is in errors.
    pub fn read<T: DeserializeOwned>(&self, key: &str, what: &str) -> Result<Option<T>> {
        match self.loc.get(key)? {
            None => Ok(None),
            Some(bytes) => parse_entry(&self.loc.name(key), &bytes).map(Some).map_err(|e| match e {
                Error::Io { path, message } => Error::Io { path, message: format!("{message} ({what})") },
                e => e,
            }),
        }
    }

    /// The log entry at `key`, written for batch (epoch) `id` by `worker`; a missing entry is
    /// refused with `why_needed`, one written for another batch or worker too.
    pub fn read_logged<T: DeserializeOwned + Logged>(
        &self,
        key: &str,
        what: &str,
        wanted: (u64, Option<usize>),
        why_needed: impl FnOnce() -> String,
    ) -> Result<T> {
        let entry: T =
            self.read(key, what)?.ok_or_else(|| refused(&self.loc.name(key), format!("missing: {}", why_needed())))?;
        self.check_logged(key, &entry, wanted)?;
        Ok(entry)
    }

    /// Refuses `entry`, read at `key`, unless it was written for batch (epoch) `wanted.0` by
    /// worker `wanted.1`.
    pub fn check_logged<T: Logged>(&self, key: &str, entry: &T, wanted: (u64, Option<usize>)) -> Result<()> {
        let found = entry.logged_as();
        if found != wanted {
            let of = |(id, worker): (u64, Option<usize>)| match worker {
                Some(w) => format!("{id} of worker {w}"),
                None => id.to_string(),
            };
            return Err(refused(
                &self.loc.name(key),
                format!(
                    "holds the entry of batch {}, not of batch {}: not written here by the runner",
                    of(found),
                    of(wanted)
                ),
            ));
        }
        Ok(())
    }

    /// The entry of the last commit, if there is one.
    pub fn last_commit<T: DeserializeOwned + Logged>(&self) -> Result<Option<T>> {
        let Some(&c) = self.commits.last() else { return Ok(None) };
        self.read_logged(&commit_key(c), "a commit log entry", (c, None), || "vanished while being read".into())
            .map(Some)
    }

    /// The batch (epoch) ids under `dir` (`offsets`, `state`, `commits`), sorted.
    pub fn ids(&self, dir: &str) -> Result<Vec<u64>> {
        Ok(batch_ids(self.loc.list(dir)?, |n| self.loc.name(&format!("{dir}/{n}"))))
    }

    /// Drops every batch (epoch) before `keep_from` from the logs and the state, commits first:
    /// a commit whose files are gone must never be the last one.
    pub fn retire_before(&self, keep_from: u64) -> Result<()> {
        retire_before(&self.loc, keep_from)
    }

    /// The bytes of state file `file` of `manifest_key`'s folder, which the manifest lists.
    pub fn read_state_file(&self, folder: &str, file: &super::state_files::StateFile) -> Result<(String, Vec<u8>)> {
        super::state_files::check_name(&self.loc.name(&format!("{folder}/manifest.json")), file)?;
        super::state_files::read_file(&self.loc, folder, file)
    }

    /// One operator partition's entries as its chain of state files makes them (see
    /// [`super::state_files::chain_entries`]), each file read and checked against its manifest
    /// entry.
    pub fn read_chain(&self, chain: &[(String, super::state_files::StateFile)]) -> Result<super::Entries> {
        self.read_chain_where(chain, &mut |_| Ok(true))
    }

    /// The entries of [`Checkpoint::read_chain`] whose keys `keep` accepts; the others are
    /// never held (a rescaled restore reads each new partition's keys of the old partitions).
    pub fn read_chain_where(
        &self,
        chain: &[(String, super::state_files::StateFile)],
        keep: &mut super::state_files::Keep<'_>,
    ) -> Result<super::Entries> {
        super::state_files::chain_entries(chain, |folder, f| {
            let (shown, data) = self.read_state_file(folder, f)?;
            super::state_files::decode_file_where(&shown, f, data, keep)
        })
    }
}

/// Drops every batch (epoch) before `keep_from` from the logs and the state at `loc`, commits
/// first: a commit whose files are gone must never be the last one. For a thread that holds
/// the location but not the checkpoint.
pub fn retire_before(loc: &Location, keep_from: u64) -> Result<()> {
    for dir in ["commits", "offsets", "state"] {
        for id in batch_ids(loc.list(dir)?, |n| loc.name(&format!("{dir}/{n}"))) {
            if id >= keep_from {
                break;
            }
            loc.delete_all(&format!("{dir}/{id}"))?;
        }
    }
    Ok(())
}
