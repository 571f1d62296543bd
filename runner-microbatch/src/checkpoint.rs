//! The checkpoint directory: offset log, commit log and state snapshots (DESIGN D6, D8).
//!
//! ```text
//! <dir>/metadata.json           query id and the plan's fingerprint
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

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

const VERSION: u32 = 1;

/// One source's entry in the offset log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct SourceOffsets {
    pub name: String,
    pub start: Value,
    pub end: Value,
    pub counts: Vec<usize>,
}

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

/// A commit log entry: every node's (input, output) watermark after the batch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct CommitEntry {
    pub batch_id: u64,
    pub watermarks: Vec<(String, Timestamp, Timestamp)>,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    version: u32,
    crc32: u32,
    body: String,
}

#[derive(Serialize, Deserialize, PartialEq)]
struct Metadata {
    id: String,
    fingerprint: Vec<String>,
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
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.display().to_string(), message: e.to_string() }
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Io { path: path.display().to_string(), message: format!("corrupt checkpoint file: {why}") }
}

/// Writes `bytes` to `path` atomically (temporary file, then rename).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
    }
    crate::fault::point("before-rename");
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn write_entry<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let body = serde_json::to_string(value).map_err(|e| io(path, e))?;
    let env = Envelope { version: VERSION, crc32: crc32fast::hash(body.as_bytes()), body };
    write_atomic(path, serde_json::to_string(&env).map_err(|e| io(path, e))?.as_bytes())
}

fn read_entry<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    let env: Envelope = serde_json::from_str(&text).map_err(|e| corrupt(path, e))?;
    if env.version != VERSION {
        return Err(corrupt(path, format!("format version {} (this build reads {VERSION})", env.version)));
    }
    if crc32fast::hash(env.body.as_bytes()) != env.crc32 {
        return Err(corrupt(path, "checksum mismatch"));
    }
    serde_json::from_str(&env.body).map_err(|e| corrupt(path, e))
}

fn batch_ids(dir: &Path) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    if !dir.exists() {
        return Ok(ids);
    }
    for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let e = e.map_err(|e| io(dir, e))?;
        if let Some(id) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

impl Checkpoint {
    /// Opens (or creates) the checkpoint directory for a plan with `fingerprint`, and reads
    /// what a previous run left.
    pub(crate) fn open(root: &str, fingerprint: Vec<String>, new_id: String, retain: u64) -> Result<(Self, Recovered)> {
        let root = PathBuf::from(root);
        std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
        let meta_path = root.join("metadata.json");
        let id = if meta_path.exists() {
            let meta: Metadata = read_entry(&meta_path)?;
            if meta.fingerprint != fingerprint {
                return Err(Error::Construction {
                    step: "checkpoint".into(),
                    message: format!(
                        "the checkpoint at {} was written by a different pipeline: its stateful operators and \
                         partitioning are {:?}, this pipeline's are {:?}; use a new --checkpoint-dir",
                        root.display(),
                        meta.fingerprint,
                        fingerprint
                    ),
                });
            }
            meta.id
        } else {
            write_entry(&meta_path, &Metadata { id: new_id.clone(), fingerprint })?;
            new_id
        };
        let cp = Checkpoint { root, retain: retain.max(1) };
        let commits = batch_ids(&cp.root.join("commits"))?;
        let offsets = batch_ids(&cp.root.join("offsets"))?;
        let committed = match commits.last() {
            Some(&c) => {
                let commit: CommitEntry = read_entry(&cp.commit_path(c))?;
                let offs: OffsetEntry = read_entry(&cp.offset_path(c))?;
                Some((offs, commit))
            }
            None => None,
        };
        let next = commits.last().map(|c| c + 1).unwrap_or(0);
        let uncommitted = match offsets.last() {
            Some(&l) if l >= next => Some(read_entry(&cp.offset_path(l))?),
            _ => None,
        };
        Ok((cp, Recovered { id, committed, uncommitted }))
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
    pub(crate) fn write_manifest(&self, batch: u64, files: &[crate::state_store::StateFile]) -> Result<()> {
        write_entry(&self.state_dir(batch).join("manifest.json"), &files.to_vec())
    }

    /// The state files of `batch`.
    pub(crate) fn read_manifest(&self, batch: u64) -> Result<Vec<crate::state_store::StateFile>> {
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
