//! The checkpoint: offset log, commit log and state snapshots (ARCHITECTURE.md, "Exactly once"),
//! in a local directory or an object store (`s3://bucket/prefix`).
//!
//! ```text
//! <root>/lock                    held (flock) by the process running the query: its pid and host
//!                                (an object store: the lease `lease`)
//! <root>/metadata.json           query id and the pipeline's fingerprint
//! <root>/offsets/<batch>         written before a batch is processed: source positions before and
//!                                after it, and how many records it read from each split
//! <root>/state/<batch>/*.arrow   operator state after the batch: Arrow IPC snapshots or deltas,
//!                                with a manifest recording each file's CRC-32
//! <root>/commits/<batch>         written last: the batch is done, with every node's watermarks
//! ```
//! Log entries are JSON envelopes with a format version and a CRC-32 of their body; state files
//! carry a magic header, version and CRC-32. Every file is written atomically (a local file to
//! a temporary name, then renamed; an object whole), so a crash leaves either the old or the
//! new file. A corrupt or truncated file is an error that names it, never wrong output.
//!
//! Opening is runner-core's ([`weir_runner_core::checkpoint::protocol`]): the lock, the
//! fingerprint and the commit log's contiguity. Here a resume also checks that the last offset
//! entry is either the last commit's or the one right after it. Anything else would skip or
//! repeat a batch, so it is an error naming the file.

use serde::{Deserialize, Serialize};
use weir_runner_core::checkpoint::log::{encode_entry, refused};
use weir_runner_core::checkpoint::protocol::{self, commit_key, offsets_key, state_key, Logged, Opening};
use weir_runner_core::checkpoint::state_files::StateFile;
use weir_runner_core::checkpoint::store::{Location, Unflushed};
use weir_runner_core::fingerprint::Fingerprint;
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

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
    /// What the batch's source-reading operators (Kafka's partitions) decided as it ran: added
    /// to the entry once the batch has run, before its sinks commit, so a replay of a batch
    /// whose output a sink already holds reads exactly the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journals: Vec<weir_runner_core::checkpoint::log::NodeJournal>,
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
    /// The partitions that wrote the batch's state. A restart with another number spreads the
    /// state over its own, key group by key group. Entries written before it was recorded lack
    /// it; their partitions were the restart's (any other was refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<usize>,
}

impl Logged for OffsetEntry {
    fn logged_as(&self) -> (u64, Option<usize>) {
        (self.batch_id, None)
    }
}

impl Logged for CommitEntry {
    fn logged_as(&self) -> (u64, Option<usize>) {
        (self.batch_id, None)
    }
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
    cp: protocol::Checkpoint,
    retain: u64,
}

impl Checkpoint {
    /// Opens (or creates) the checkpoint for a pipeline with `fingerprint`, holds it for this
    /// process, and reads what a previous run left. Refuses one written by another pipeline,
    /// held by another process, or whose logs do not form one unbroken run of batches.
    pub(crate) fn open(spec: &str, fingerprint: Fingerprint, new_id: String, retain: u64) -> Result<(Self, Recovered)> {
        let cp =
            protocol::Checkpoint::open(Opening { spec, fingerprint, new_id, process: None, writes_metadata: true })?;
        let offsets = cp.ids("offsets")?;
        weir_runner_core::checkpoint::log::check_contiguous(&offsets, |i| cp.loc.name(&offsets_key(i)))?;
        let committed = match cp.last_commit::<CommitEntry>()? {
            Some(commit) => {
                let c = commit.batch_id;
                let offs: OffsetEntry = cp.read_logged(&offsets_key(c), "an offset log entry", (c, None), || {
                    format!("{} has no offset log entry", cp.loc.name(&commit_key(c)))
                })?;
                Some((offs, commit))
            }
            None => None,
        };
        let next = cp.commits.last().map(|c| c + 1).unwrap_or(0);
        let uncommitted = match offsets.last() {
            Some(&l) if l == next => {
                Some(cp.read_logged(&offsets_key(l), "an offset log entry", (l, None), || "vanished".into())?)
            }
            Some(&l) if l > next => {
                return Err(refused(
                    &cp.loc.name(&commit_key(next)),
                    format!(
                        "missing: {} was logged, but the last commit is {}; only the batch right after the last \
                         commit can be re-run exactly once",
                        cp.loc.name(&offsets_key(l)),
                        cp.commits.last().map_or("none".to_string(), |c| cp.loc.name(&commit_key(*c)))
                    ),
                ))
            }
            _ => None,
        };
        let id = cp.id.clone();
        Ok((Checkpoint { cp, retain: retain.max(1) }, Recovered { id, committed, uncommitted }))
    }

    /// Where the checkpoint lives.
    pub(crate) fn location(&self) -> weir_runner_core::checkpoint::store::Location {
        self.cp.loc.clone()
    }

    /// How the checkpoint is named in messages: its directory or URL.
    pub(crate) fn name(&self) -> String {
        self.cp.loc.name("")
    }

    /// walCommit: logs the batch's offsets before it is processed.
    pub(crate) fn write_offsets(&self, entry: &OffsetEntry) -> Result<()> {
        self.cp.write(&offsets_key(entry.batch_id), entry)
    }

    /// The state files of `batch` (its folder, and the files its manifest lists); when `base`,
    /// its snapshot's if the snapshot thread made one there.
    pub(crate) fn state_files(&self, batch: u64, base: bool) -> Result<(String, Vec<StateFile>)> {
        let folder = state_key(batch);
        let snapshot = match base {
            true => weir_runner_core::checkpoint::compaction::snapshot_files(&self.cp.loc, &folder)?,
            false => None,
        };
        let files = match snapshot {
            Some(files) => files,
            None => self.read_manifest(&folder)?,
        };
        Ok((folder, files))
    }

    /// One operator partition's entries as its chain of state files makes them, those whose
    /// keys `keep` accepts.
    pub(crate) fn read_chain_where(
        &self,
        chain: &weir_runner_core::checkpoint::state_files::Chain,
        keep: &mut weir_runner_core::checkpoint::state_files::Keep<'_>,
    ) -> Result<weir_runner_core::checkpoint::Entries> {
        self.cp.read_chain_where(chain, keep)
    }

    /// The state files `folder`'s manifest lists.
    fn read_manifest(&self, folder: &str) -> Result<Vec<StateFile>> {
        let files: Vec<StateFile> =
            self.cp.read(&format!("{folder}/manifest.json"), "a state manifest")?.ok_or_else(|| {
                weir_runner_core::checkpoint::log::corrupt(
                    &self.cp.loc.name(&format!("{folder}/manifest.json")),
                    "state manifest is missing",
                )
            })?;
        Ok(files)
    }

    /// Marks the batch done. Returns the first batch a restart can need (before both the
    /// latest snapshot batch and the retained batches): the caller drops the ones before it
    /// with [`protocol::retire_before`], off the batch's path.
    pub(crate) fn write_commit(&self, entry: &CommitEntry, latest_snapshot: u64) -> Result<u64> {
        // A process whose lease another has taken over commits nothing more.
        self.cp.guard.check()?;
        self.cp.write(&commit_key(entry.batch_id), entry)?;
        Ok(latest_snapshot.min((entry.batch_id + 1).saturating_sub(self.retain)))
    }
}

/// Writes state file (or pack of them) `name` of batch `batch` at `loc`, leaving its flush to
/// [`flush_state`] (`None`: an object store's, durable already).
pub(crate) fn write_state_file(loc: &Location, batch: u64, name: &str, bytes: Vec<u8>) -> Result<Option<Unflushed>> {
    loc.put_unflushed(&format!("{}/{name}", state_key(batch)), bytes)
}

/// Writes the manifest of batch `batch` at `loc`, which lists the state files it wrote so a
/// missing one is detected, leaving its flush to [`flush_state`]. It needs no atomic rename: no
/// reader looks at a batch's folder before the commit log records the batch, and the commit log
/// entry is written only once the folder is flushed.
pub(crate) fn write_manifest(loc: &Location, batch: u64, files: &[StateFile]) -> Result<Option<Unflushed>> {
    let key = format!("{}/manifest.json", state_key(batch));
    loc.put_unflushed(&key, encode_entry(&loc.name(&key), &files.to_vec())?)
}

/// Makes batch `batch`'s state folder at `loc` durable: its files (written by
/// [`write_state_file`] and [`write_manifest`]), then the folder's entries.
pub(crate) fn flush_state(loc: &Location, batch: u64, files: Vec<Unflushed>) -> Result<()> {
    for f in files {
        f.flush()?;
    }
    loc.sync_folder(&state_key(batch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;
    use weir_runner_core::checkpoint::log::{self, parse_entry};
    use weir_sdk::Error;

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
                journals: Vec::new(),
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
