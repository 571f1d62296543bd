//! The checkpoint directory: offset log, commit log and state snapshots (ARCHITECTURE.md, "Exactly once").
//!
//! ```text
//! <dir>/lock                    held (flock) by the process running the query: its pid and host
//! <dir>/metadata.json           query id and the pipeline's fingerprint
//! <dir>/offsets/<batch>         written before a batch is processed: source positions before and
//!                               after it, and how many records it read from each split
//! <dir>/state/<batch>/*.arrow  operator state after the batch: Arrow IPC snapshots or deltas,
//!                               with a manifest recording each file's CRC-32
//! <dir>/commits/<batch>         written last: the batch is done, with every node's watermarks
//! ```
//! Log entries are JSON envelopes with a format version and a CRC-32 of their body; state files
//! carry a magic header, version and CRC-32. Every file is written to a temporary name and renamed,
//! so a crash leaves either the old or the new file. A corrupt or truncated file is an error that
//! names it, never wrong output.
//!
//! A resume checks, before it reads any state, that the checkpoint is this pipeline's (the
//! fingerprints are equal), that no other process holds it, and that its logs are one unbroken
//! run of batches whose last offset entry is either the last commit's or the one right after it.
//! Anything else would skip or repeat a batch, so it is an error naming the file.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weir_runner_core::checkpoint::lock::DirLock;
use weir_runner_core::checkpoint::log::{self, parse_entry};
use weir_runner_core::checkpoint::state_files::StateFile;
use weir_runner_core::fingerprint::Fingerprint;
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

pub(crate) use weir_runner_core::checkpoint::log::SourceOffsets;

/// An offset log entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct OffsetEntry {
    pub batch_id: u64,
    pub sources: Vec<SourceOffsets>,
    /// The test clock before and after reading, when TestStream drives processing time.
    pub start_clock: Option<Timestamp>,
    /// See `start_clock`.
    pub clock: Option<Timestamp>,
}

/// A commit log entry: every node's (input, output) watermark after the batch, and the batch
/// whose state snapshot the batch's state is read from (with the deltas after it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct CommitEntry {
    pub batch_id: u64,
    pub watermarks: Vec<(String, Timestamp, Timestamp)>,
    /// The latest batch that wrote a full snapshot, at or before this one. Entries written
    /// before it was recorded lack it; their snapshots were every `--state-snapshot-interval`
    /// batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<u64>,
}

/// A log entry, which knows its batch.
trait Logged {
    fn batch_id(&self) -> u64;
}

impl Logged for OffsetEntry {
    fn batch_id(&self) -> u64 {
        self.batch_id
    }
}

impl Logged for CommitEntry {
    fn batch_id(&self) -> u64 {
        self.batch_id
    }
}

#[derive(Serialize, Deserialize, PartialEq)]
struct Metadata {
    id: String,
    fingerprint: Fingerprint,
}

/// What a restart finds.
pub(crate) struct Recovered {
    pub id: String,
    /// The last committed batch, its offsets and commit entry.
    pub committed: Option<(OffsetEntry, CommitEntry)>,
    /// A batch logged but not committed: re-run it with exactly these offsets.
    pub uncommitted: Option<OffsetEntry>,
}

pub(crate) struct Checkpoint {
    root: PathBuf,
    retain: u64,
    /// Held for as long as the query runs: one process per checkpoint directory.
    _lock: DirLock,
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    log::io(&path.display().to_string(), e)
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Error {
    log::corrupt(&path.display().to_string(), why)
}

fn refused(path: &Path, why: impl std::fmt::Display) -> Error {
    log::refused(&path.display().to_string(), why)
}

/// Writes `bytes` to `path` durably and atomically.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    weir_sdk::io::atomic::write_atomic(path, bytes).map_err(|e| io(&e.path, e.source))
}

fn write_entry<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, &log::encode_entry(&path.display().to_string(), value)?)
}

fn read_entry<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    parse_entry(&path.display().to_string(), &bytes)
}

/// The batch ids of the log files in `dir` ([`log::batch_ids`]).
fn batch_ids(dir: &Path) -> Result<Vec<u64>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        names.push(e.map_err(|e| io(dir, e))?.file_name().to_string_lossy().into_owned());
    }
    Ok(log::batch_ids(names, |n| dir.join(n).display().to_string()))
}

/// Checks that `ids` (sorted) have no hole; the error names the first missing file.
fn check_contiguous(dir: &Path, ids: &[u64]) -> Result<()> {
    log::check_contiguous(ids, |i| dir.join(i.to_string()).display().to_string())
}

impl Checkpoint {
    /// Opens (or creates) the checkpoint directory for a pipeline with `fingerprint`, locks it
    /// for this process, and reads what a previous run left. Refuses a directory written by
    /// another pipeline, held by another process, or whose logs do not form one unbroken run of
    /// batches.
    pub(crate) fn open(root: &str, fingerprint: Fingerprint, new_id: String, retain: u64) -> Result<(Self, Recovered)> {
        if root.contains("://") {
            return Err(Error::NotSupported(format!(
                "--checkpoint-dir {root}: the micro-batch runner keeps its checkpoint in a local directory; \
                 object-store checkpoints (s3://) are the timely runner's (--runner timely)"
            )));
        }
        let root = PathBuf::from(root);
        std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
        // A process of the previous run may still be stopping: give it a few seconds.
        let lock = DirLock::acquire(&root, "lock", weir_runner_core::checkpoint::lock::STOPPING_HOLDER_PATIENCE)?;
        let commits_dir = root.join("commits");
        let offsets_dir = root.join("offsets");
        let commits = batch_ids(&commits_dir)?;
        let offsets = batch_ids(&offsets_dir)?;
        let meta_path = root.join("metadata.json");
        let id = if meta_path.exists() {
            let meta: Metadata = read_entry(&meta_path).map_err(|e| match e {
                Error::Io { message, .. } if message.contains("corrupt") => refused(
                    &meta_path,
                    format!(
                        "{message}; it was written by another version of Weir or damaged, and cannot be checked \
                         against this pipeline; use a new --checkpoint-dir"
                    ),
                ),
                e => e,
            })?;
            if let Some(diff) = meta.fingerprint.first_difference(&fingerprint) {
                return Err(refused(
                    &root,
                    format!(
                        "written by a different pipeline, so resuming from it would give wrong results: {diff}; \
                         use a new --checkpoint-dir for this pipeline"
                    ),
                ));
            }
            meta.id
        } else {
            if let Some(first) = commits
                .first()
                .map(|c| commits_dir.join(c.to_string()))
                .or_else(|| offsets.first().map(|o| offsets_dir.join(o.to_string())))
            {
                return Err(refused(
                    &meta_path,
                    format!(
                        "missing, but the checkpoint has log entries ({}): without it the pipeline that wrote \
                         them cannot be checked; use a new --checkpoint-dir",
                        first.display()
                    ),
                ));
            }
            write_entry(&meta_path, &Metadata { id: new_id.clone(), fingerprint })?;
            new_id
        };
        check_contiguous(&commits_dir, &commits)?;
        check_contiguous(&offsets_dir, &offsets)?;
        let cp = Checkpoint { root, retain: retain.max(1), _lock: lock };
        let committed = match commits.last() {
            Some(&c) => {
                let commit: CommitEntry = cp.read_logged(&cp.commit_path(c), c)?;
                if !offsets.contains(&c) {
                    return Err(refused(
                        &cp.offset_path(c),
                        format!("missing: {} has no offset log entry", cp.commit_path(c).display()),
                    ));
                }
                let offs: OffsetEntry = cp.read_logged(&cp.offset_path(c), c)?;
                Some((offs, commit))
            }
            None => None,
        };
        let next = commits.last().map(|c| c + 1).unwrap_or(0);
        let uncommitted = match offsets.last() {
            Some(&l) if l == next => Some(cp.read_logged(&cp.offset_path(l), l)?),
            Some(&l) if l > next => {
                return Err(refused(
                    &cp.commit_path(next),
                    format!(
                        "missing: {} was logged, but the last commit is {}; only the batch right after the last \
                         commit can be re-run exactly once",
                        cp.offset_path(l).display(),
                        commits.last().map_or("none".to_string(), |c| cp.commit_path(*c).display().to_string())
                    ),
                ))
            }
            _ => None,
        };
        Ok((cp, Recovered { id, committed, uncommitted }))
    }

    /// Reads the log entry of `batch` at `path`, checking that it is that batch's.
    fn read_logged<T: for<'de> Deserialize<'de> + Logged>(&self, path: &Path, batch: u64) -> Result<T> {
        let entry: T = read_entry(path)?;
        if entry.batch_id() != batch {
            return Err(refused(
                path,
                format!(
                    "holds the entry of batch {}, not of batch {batch}: not written here by the engine",
                    entry.batch_id()
                ),
            ));
        }
        Ok(entry)
    }

    fn offset_path(&self, batch: u64) -> PathBuf {
        self.root.join("offsets").join(batch.to_string())
    }
    fn commit_path(&self, batch: u64) -> PathBuf {
        self.root.join("commits").join(batch.to_string())
    }
    /// The folder of a batch's state files.
    pub(crate) fn state_dir(&self, batch: u64) -> PathBuf {
        self.root.join("state").join(batch.to_string())
    }

    /// walCommit: logs the batch's offsets before it is processed.
    pub(crate) fn write_offsets(&self, entry: &OffsetEntry) -> Result<()> {
        write_entry(&self.offset_path(entry.batch_id), entry)
    }

    /// Records which state files a batch wrote, so a missing one is detected.
    pub(crate) fn write_manifest(&self, batch: u64, files: &[StateFile]) -> Result<()> {
        write_entry(&self.state_dir(batch).join("manifest.json"), &files.to_vec())
    }

    /// The state files of `batch`.
    pub(crate) fn read_manifest(&self, batch: u64) -> Result<Vec<StateFile>> {
        let p = self.state_dir(batch).join("manifest.json");
        if !p.exists() {
            return Err(corrupt(&p, "state manifest is missing"));
        }
        read_entry(&p)
    }

    /// Marks the batch done, then drops state and log entries no restart can need: everything
    /// before both the latest snapshot batch and the retained batches.
    pub(crate) fn write_commit(&self, entry: &CommitEntry, latest_snapshot: u64) -> Result<()> {
        write_entry(&self.commit_path(entry.batch_id), entry)?;
        let keep_from = latest_snapshot.min((entry.batch_id + 1).saturating_sub(self.retain));
        for sub in ["state", "offsets", "commits"] {
            for id in batch_ids(&self.root.join(sub))? {
                if id >= keep_from {
                    break;
                }
                let p = self.root.join(sub).join(id.to_string());
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).map_err(|e| io(&p, e))?;
                } else {
                    std::fs::remove_file(&p).map_err(|e| io(&p, e))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn envelope(body: &str) -> Vec<u8> {
        let env =
            serde_json::json!({ "version": log::VERSION, "crc32": crc32fast::hash(body.as_bytes()), "body": body });
        serde_json::to_vec(&env).unwrap()
    }

    /// Parses `bytes` as every kind of checkpoint log file; errors must name the file.
    fn parse_all(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
        let path = "cp/offsets/7";
        let named = |e: Error| e.to_string().contains("cp/offsets/7");
        if let Err(e) = parse_entry::<OffsetEntry>(path, bytes) {
            prop_assert!(named(e));
        }
        if let Err(e) = parse_entry::<CommitEntry>(path, bytes) {
            prop_assert!(named(e));
        }
        if let Err(e) = parse_entry::<Metadata>(path, bytes) {
            prop_assert!(named(e));
        }
        if let Err(e) = parse_entry::<Vec<StateFile>>(path, bytes) {
            prop_assert!(named(e));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Issue 16: any bytes in a log file, metadata or manifest give an entry or an error
        /// naming the file, never a panic: raw bytes, and arbitrary bodies inside a well-formed
        /// envelope with the right checksum.
        #[test]
        fn log_readers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), body in "\\PC{0,120}") {
            parse_all(&bytes)?;
            parse_all(&envelope(&body))?;
        }

        /// Real entries with bytes changed.
        #[test]
        fn damaged_entries_are_refused_or_read(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let entry = OffsetEntry {
                batch_id: 7,
                sources: vec![SourceOffsets { name: "Read".into(), start: Value::Null, end: serde_json::json!([1, 2]), counts: vec![3, 4] }],
                start_clock: None,
                clock: Some(5),
            };
            let body = serde_json::to_string(&entry).unwrap();
            for mut bytes in [envelope(&body), body.into_bytes()] {
                for &(at, x) in &flips {
                    let n = bytes.len();
                    bytes[at % n] ^= x | 1;
                }
                parse_all(&bytes)?;
            }
        }
    }
}
