//! Background snapshots (Spark's state store maintenance): a commit writes only what changed
//! (deltas), and a thread of its own folds a snapshot and the deltas after it into a new
//! snapshot, off the batch's (epoch's) path. A restart then reads the newest snapshot and the
//! few deltas after it.
//!
//! A snapshot made here lives in the folder of the batch it is taken at, next to that batch's
//! deltas: its state files packed into `compacted-<n>.pack` files of about 16 MiB and, written
//! last, [`SNAPSHOT_MANIFEST`], which lists them with their CRC-32s and places in the packs. A folder whose snapshot manifest is missing has no snapshot (a
//! crash in the middle leaves stray files, removed with the folder). The runner records a
//! snapshot in its commit log only once [`Compactor::finished`] reports it, and keeps every
//! folder from it on, so a snapshot read on restart is always whole.

use super::log::{encode_entry, parse_entry};
use super::state_files::{apply, check_name, decode_file, read_file, write_snapshot_into, StateFile};
use super::store::Location;
use crate::progress::StateWrites;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_sdk::Result;

/// The name of a folder's snapshot manifest.
pub const SNAPSHOT_MANIFEST: &str = "snapshot.json";

/// A snapshot to make: the state of every (node, partition) in `sources` (a base folder, then
/// deltas in order), written as a snapshot into `target`.
pub struct Job {
    /// What the snapshot is taken at (a batch or an epoch); [`Done::id`] reports it.
    pub id: u64,
    /// The base folder and its state files (its snapshot manifest's, when it has one, replace
    /// them), then each later folder and its delta files, up to and including `target`.
    pub sources: Vec<(String, Vec<StateFile>)>,
    /// The folder the snapshot goes to.
    pub target: String,
}

/// A finished snapshot.
#[derive(Debug)]
pub struct Done {
    /// [`Job::id`].
    pub id: u64,
    /// Per node, the snapshot's files and bytes and the time spent reading, folding and
    /// writing them.
    pub by_node: HashMap<String, StateWrites>,
    /// How long it took.
    pub took: Duration,
}

/// The maintenance thread of one process's checkpoint, making snapshots in the order asked.
pub struct Compactor {
    jobs: Option<Sender<Job>>,
    done: Receiver<Result<Done>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pending: usize,
}

impl Compactor {
    /// Starts the thread for the checkpoint at `loc`.
    pub fn start(loc: Location) -> Result<Self> {
        let (jobs, rx) = channel::<Job>();
        let (tx, done) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-state-snapshots".into())
            .spawn(move || {
                for job in rx {
                    if stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    if tx.send(make_snapshot(&loc, job)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| weir_sdk::Error::Internal {
                component: "checkpoint".into(),
                message: format!("cannot start the state snapshot thread: {e}"),
            })?;
        Ok(Compactor { jobs: Some(jobs), done, stop, thread: Some(thread), pending: 0 })
    }

    /// Asks for a snapshot; made after those asked before.
    pub fn submit(&mut self, job: Job) {
        if let Some(jobs) = &self.jobs {
            if jobs.send(job).is_ok() {
                self.pending += 1;
            }
        }
    }

    /// Snapshots asked for and not reported yet.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The snapshots finished (or failed) since the last call, in the order asked.
    pub fn finished(&mut self) -> Vec<Result<Done>> {
        let out: Vec<_> = self.done.try_iter().collect();
        self.pending -= out.len().min(self.pending);
        out
    }
}

impl Drop for Compactor {
    /// Stops after the snapshot being made: those not started are dropped (the commit log
    /// never named them).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A runner's (or a worker's) state since its latest snapshot, and the thread that folds it
/// into the next: the folders written since that snapshot, with their state files, that
/// snapshot's first.
#[derive(Default)]
pub struct Snapshots {
    chain: Vec<(u64, Vec<StateFile>)>,
    compactor: Option<Compactor>,
    latest: Option<u64>,
}

impl Snapshots {
    /// Records the state files batch (epoch) `id` wrote; `whole` when they are whole snapshots,
    /// from which on the chain starts afresh.
    pub fn wrote(&mut self, id: u64, files: Vec<StateFile>, whole: bool) {
        if whole {
            self.chain.clear();
        }
        self.chain.push((id, files));
    }

    /// Starts the chain from what a restart read: the snapshot's folder, then the deltas'.
    pub fn restored(&mut self, chain: Vec<(u64, Vec<StateFile>)>) {
        self.chain = chain;
    }

    /// The latest snapshot the thread finished, if any.
    pub fn latest(&self) -> Option<u64> {
        self.latest
    }

    /// Takes the snapshots the thread finished: the latest becomes [`Snapshots::latest`] and
    /// the chain starts at it. Returns each step's snapshot files, bytes and time. A failed one is
    /// logged, and the next starts from the one before.
    pub fn finished(&mut self) -> HashMap<String, StateWrites> {
        let mut by_node: HashMap<String, StateWrites> = HashMap::new();
        let Some(compactor) = &mut self.compactor else { return by_node };
        for done in compactor.finished() {
            match done {
                Ok(d) => {
                    tracing::debug!(at = d.id, took_ms = d.took.as_millis() as u64, "state snapshot written");
                    for (node, made) in d.by_node {
                        by_node.entry(node).or_default().add_snapshots(&made);
                    }
                    if let Some(at) = self.chain.iter().position(|(id, _)| *id == d.id) {
                        self.chain.drain(..at);
                        self.latest = Some(d.id);
                    }
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "a background state snapshot failed; the next one starts from the one before"
                ),
            }
        }
        by_node
    }

    /// Asks for a snapshot at the chain's last batch once more than `interval` batches follow
    /// its first, if none is being made; `folder` names a batch's folder in `loc`.
    pub fn ask(&mut self, loc: &Location, interval: u64, folder: impl Fn(u64) -> String) -> Result<()> {
        let Some(&(last, _)) = self.chain.last() else { return Ok(()) };
        if self.chain.len() as u64 <= interval.max(1) {
            return Ok(());
        }
        let compactor = match &mut self.compactor {
            Some(c) => c,
            None => self.compactor.insert(Compactor::start(loc.clone())?),
        };
        if compactor.pending() == 0 {
            let sources = self.chain.iter().map(|(id, files)| (folder(*id), files.clone())).collect();
            compactor.submit(Job { id: last, sources, target: folder(last) });
        }
        Ok(())
    }
}

/// The files of `folder`'s snapshot, if it has one.
pub fn snapshot_files(loc: &Location, folder: &str) -> Result<Option<Vec<StateFile>>> {
    let key = format!("{folder}/{SNAPSHOT_MANIFEST}");
    match loc.get(&key)? {
        None => Ok(None),
        Some(bytes) => {
            let files: Vec<StateFile> = parse_entry(&loc.name(&key), &bytes)?;
            for f in &files {
                check_name(&loc.name(&key), f)?;
            }
            Ok(Some(files))
        }
    }
}

/// Reads state file `f` of `folder` and applies it to `map`.
fn read_into(loc: &Location, folder: &str, f: &StateFile, map: &mut HashMap<Vec<u8>, Vec<u8>>) -> Result<()> {
    let (shown, data) = read_file(loc, folder, f)?;
    apply(map, f.kind, decode_file(&shown, f, data)?);
    Ok(())
}

/// Makes the snapshot of `job`, one (node, partition) at a time: only one partition's state is
/// in memory at once.
fn make_snapshot(loc: &Location, job: Job) -> Result<Done> {
    let began = Instant::now();
    // Each (node, partition)'s files, in the order they apply.
    let mut parts: BTreeMap<(String, usize), Vec<(&str, StateFile)>> = BTreeMap::new();
    for (i, (folder, files)) in job.sources.iter().enumerate() {
        let own = if i == 0 { snapshot_files(loc, folder)? } else { None };
        for f in own.unwrap_or_else(|| files.clone()) {
            parts.entry((f.node.clone(), f.partition)).or_default().push((folder, f));
        }
    }
    let mut written = Vec::with_capacity(parts.len());
    let mut by_node: HashMap<String, StateWrites> = HashMap::new();
    // Each partition's file is written straight into the pack being filled, which leaves at
    // about PACK_BYTES: the snapshot is never in memory whole, nor twice.
    let mut pack = Pack { at: job.target.as_str(), number: 0, bytes: Vec::new() };
    for ((node, partition), files) in parts {
        let part_began = Instant::now();
        let mut map = HashMap::new();
        for (folder, f) in &files {
            read_into(loc, folder, f, &mut map)?;
        }
        if map.is_empty() {
            continue;
        }
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = map.into_iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let name = pack.name();
        let f = write_snapshot_into(&node, partition, &rows, (Some(&name), &mut pack.bytes))?;
        drop(rows);
        if pack.bytes.len() as u64 >= PACK_BYTES {
            pack.write(loc)?;
        }
        by_node.entry(node).or_default().snapshot_made(&f, part_began.elapsed());
        written.push(f);
    }
    pack.write(loc)?;
    loc.sync_folder(&job.target)?;
    weir_sdk::testing::fault::point_at("snapshot-manifest", job.id);
    let key = format!("{}/{SNAPSHOT_MANIFEST}", job.target);
    loc.put(&key, encode_entry(&loc.name(&key), &written)?)?;
    Ok(Done { id: job.id, by_node, took: began.elapsed() })
}

/// Most bytes of snapshot files packed into one file.
const PACK_BYTES: u64 = 16 << 20;

/// A pack is flushed to the disk every this many bytes as it is written (see
/// [`Location::put_paced`]).
const SYNC_BYTES: usize = 1 << 20;

/// The pack file being filled: `compacted-<number>.pack` of folder `at`.
struct Pack<'a> {
    at: &'a str,
    number: usize,
    bytes: Vec<u8>,
}

impl Pack<'_> {
    fn name(&self) -> String {
        format!("compacted-{}.pack", self.number)
    }

    /// Writes the pack (nothing if empty) and starts the next.
    fn write(&mut self, loc: &Location) -> Result<()> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        let key = format!("{}/{}", self.at, self.name());
        loc.put_paced(&key, std::mem::take(&mut self.bytes), SYNC_BYTES)?;
        self.number += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::state_files::{read_file, write_snapshot};

    /// Issue 52: a snapshot larger than a pack is written as several packs of about
    /// [`PACK_BYTES`], each partition's file readable at its place, with the state as folded.
    #[test]
    fn a_snapshot_larger_than_a_pack_is_written_in_packs_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::Local(dir.path().to_path_buf());
        // Three partitions of about 7 MiB each, the second with a delta after its snapshot.
        let rows = |p: usize, from: usize| -> Vec<(Vec<u8>, Vec<u8>)> {
            (from..from + 7 * 1024).map(|i| (format!("{p}-{i:06}").into_bytes(), vec![p as u8; 1024])).collect()
        };
        let mut base = Vec::new();
        for p in 0..3 {
            let (f, bytes) = write_snapshot("G", p, &rows(p, 0)).unwrap();
            loc.put_listed(&format!("0/{}", f.file), bytes).unwrap();
            base.push(f);
        }
        let (mut delta, bytes) = write_snapshot("G", 1, &rows(1, 7 * 1024)).unwrap();
        delta.kind = crate::checkpoint::state_files::FileKind::Delta;
        delta.file = "delta-of-1.arrow".into();
        loc.put_listed("1/delta-of-1.arrow", bytes).unwrap();
        let job = Job { id: 1, sources: vec![("0".into(), base), ("1".into(), vec![delta])], target: "1".into() };
        let done = make_snapshot(&loc, job).unwrap();
        assert_eq!(done.id, 1);

        let files = snapshot_files(&loc, "1").unwrap().expect("a snapshot manifest");
        let packs: std::collections::BTreeSet<&str> = files.iter().map(|f| f.file.as_str()).collect();
        assert_eq!(packs.into_iter().collect::<Vec<_>>(), ["compacted-0.pack", "compacted-1.pack"]);
        for f in &files {
            let (shown, data) = read_file(&loc, "1", f).unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> =
                decode_file(&shown, f, data).unwrap().into_iter().map(|(k, v)| (k, v.unwrap())).collect();
            let mut want = rows(f.partition, 0);
            if f.partition == 1 {
                want.extend(rows(1, 7 * 1024));
            }
            want.sort();
            assert_eq!(got.len(), want.len(), "partition {}", f.partition);
            assert!(got == want, "partition {}'s rows differ", f.partition);
        }
        assert_eq!(files.len(), 3);
    }
}
