//! Where keyed state lives: in memory (the operators' own maps), or on local disk beyond a
//! memory budget (`--state-backend disk`).
//!
//! The disk backend is a cache, not a second source of truth. Each stateful operator keeps its
//! hot keys in its own maps, exactly as the memory backend does, and when the job's keyed state
//! passes `--state-memory-budget` it moves its least recently used keys, encoded, into one
//! embedded LSM store per job ([`fjall`]: see `docs/state.md` for the measurement that chose it
//! over RocksDB). A key the input or a timer touches again is read back (and removed from the
//! store) before the operator looks at it, so operators run the same code on either backend.
//! A bounded GroupByKey, whose keys all wait for the end of the input, is Spark's and Flink's
//! spilling batch shuffle: its cold keys leave memory in sorted runs the LSM store merges, and
//! at the end of the input they are read back in key order.
//!
//! Checkpoints do not copy the store. A commit writes what changed (see
//! [`crate::checkpoint`]), reading a changed key that was moved out from the store; the
//! background snapshots fold deltas into immutable packs that later checkpoints reference. So
//! the store holds no state a checkpoint needs, and a restart rebuilds it from the checkpoint.
//! The store's folder is removed when the job ends.

mod runs;
mod time_index;

pub use runs::key_order;
pub use time_index::{IndexEntry, TimeCounts, TimeIndex};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use weir_sdk::options::{StateBackendKind, StateOptions};
use weir_sdk::{Error, Result};

/// A job's state backend, shared by the factories of its stateful operators.
#[derive(Clone, Default)]
pub struct StateBackend {
    disk: Option<Arc<DiskStore>>,
}

impl std::fmt::Debug for StateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.disk {
            None => f.write_str("memory"),
            Some(d) => write!(f, "disk({} bytes in memory, in {})", d.budget, d.parent.display()),
        }
    }
}

impl StateBackend {
    /// The backend `options` ask for; the disk store is opened when the first operator needs it.
    pub fn of(options: &StateOptions) -> Self {
        match options.backend {
            StateBackendKind::Memory => StateBackend { disk: None },
            StateBackendKind::Disk => {
                let parent = options.local_dir.as_ref().map_or_else(std::env::temp_dir, PathBuf::from);
                let budget: usize = options.memory_budget.try_into().unwrap_or(usize::MAX);
                // Buffers kept for reuse hold no more than an eighth of the budget beside it.
                weir_sdk::batch::recycle::limit_kept_bytes(budget / 8);
                StateBackend {
                    disk: Some(Arc::new(DiskStore {
                        parent,
                        budget,
                        opened: OnceLock::new(),
                        instances: AtomicUsize::new(0),
                        used: AtomicUsize::new(0),
                        next_prefix: AtomicU64::new(1),
                        stats: SpillStats::default(),
                    })),
                }
            }
        }
    }

    /// Whether state goes to disk past the budget.
    pub fn is_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The memory backend.
    pub fn memory() -> Self {
        StateBackend::default()
    }

    /// An area of the store for `step` that does not count in the budget's shares (a part of an
    /// instance's state kept beside its keys), or `None` on the memory backend.
    pub fn uncounted_area(&self, step: &str) -> Result<Option<Spill>> {
        let Some(disk) = &self.disk else { return Ok(None) };
        disk.open(step)?;
        Ok(Some(Spill::area(disk, step, false)))
    }

    /// An area of the store's keyspace of time indexes for `step`, not counted in the budget's
    /// shares, or `None` on the memory backend.
    pub fn index_area(&self, step: &str) -> Result<Option<Spill>> {
        Ok(self.uncounted_area(step)?.map(|mut area| {
            area.index = true;
            area
        }))
    }

    /// A spill area for one operator instance of `step`, or `None` on the memory backend.
    pub fn spill(&self, step: &str) -> Result<Option<Spill>> {
        let Some(disk) = &self.disk else { return Ok(None) };
        disk.open(step)?;
        disk.instances.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Spill::area(disk, step, true)))
    }

    /// An equal share of the memory budget among the live stateful instances (the whole
    /// budget when none is live; unbounded on the memory backend).
    pub fn equal_share(&self) -> usize {
        self.disk.as_ref().map_or(usize::MAX, |d| d.budget / d.instances.load(Ordering::Relaxed).max(1))
    }

    /// The memory a part of a stateful instance's state kept beside its keys (a timer index,
    /// elements waiting for side inputs) holds before the rest goes to disk: `1/divisor` of an
    /// equal share of the budget, and at least 1 MiB or the whole budget when that is smaller
    /// (such parts are many, short-lived entries: going to disk and back costs each about as
    /// much as a key's state doing so). Unbounded on the memory backend.
    pub fn part_cap(&self, divisor: usize) -> usize {
        let Some(d) = &self.disk else { return usize::MAX };
        (self.equal_share() / divisor.max(1)).max(d.budget.min(1 << 20))
    }

    /// The disk store's totals, when the backend is disk.
    pub fn stats(&self) -> Option<SpillTotals> {
        self.disk.as_ref().map(|d| d.stats.totals())
    }
}

/// The store of one job: an LSM keyspace in a folder of its own, shared by every operator
/// instance (each under a prefix of its own).
struct DiskStore {
    parent: PathBuf,
    /// `--state-memory-budget`, shared by the live operator instances by need (see
    /// [`Spill::budget`]).
    budget: usize,
    opened: OnceLock<std::result::Result<Opened, String>>,
    instances: AtomicUsize,
    /// The state in memory the live instances last reported ([`Spill::report`]), in all.
    used: AtomicUsize,
    next_prefix: AtomicU64,
    stats: SpillStats,
}

struct Opened {
    /// Dropped before the folder is removed.
    /// The database, its keyspace of key states, and that of time indexes (timers, holds:
    /// written, read back and removed in time order, so their tombstones never lie among the
    /// states' keys that reads look up).
    db: Mutex<Option<(fjall::Database, fjall::Keyspace, fjall::Keyspace)>>,
    dir: PathBuf,
}

impl DiskStore {
    fn open(&self, step: &str) -> Result<&Opened> {
        let opened = self.opened.get_or_init(|| {
            static SEQ: AtomicU64 = AtomicU64::new(0);
            let name = format!("weir-state-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
            let dir = self.parent.join(name);
            type Handles = (fjall::Database, fjall::Keyspace, fjall::Keyspace);
            let open = || -> std::result::Result<Handles, String> {
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                // The store is a cache of state a checkpoint already holds: its journal is
                // never synced. It keeps fjall's default worker threads: with one, memtables
                // were never flushed while keys kept arriving (q9 at 4 M events held 450 MB
                // of them).
                // Its own memory is bounded too: 32 MiB of block cache, memtables of 16 MiB.
                let db = fjall::Database::builder(&dir)
                    .manual_journal_persist(true)
                    .cache_size(32 << 20)
                    .open()
                    .map_err(|e| e.to_string())?;
                // Keys are written once, read once and removed: fewer, larger compactions
                // (level 0 merged at 16 tables, levels 16 times apart) made batch q9 at
                // 20 M events 1.5 times faster than the defaults.
                let options = || {
                    fjall::KeyspaceCreateOptions::default().max_memtable_size(16 << 20).compaction_strategy(Arc::new(
                        fjall::compaction::Leveled::default().with_l0_threshold(16).with_level_ratio_policy(vec![16.0]),
                    ))
                };
                let ks = db.keyspace("state", options).map_err(|e| e.to_string())?;
                // Index entries are small and many: smaller memtables, so that what leaves the
                // indexes' memory does not wait in the store's (16 MiB and the sealed ones).
                let index = db.keyspace("index", || options().max_memtable_size(4 << 20)).map_err(|e| e.to_string())?;
                Ok((db, ks, index))
            };
            open()
                .map(|handles| Opened { db: Mutex::new(Some(handles)), dir: dir.clone() })
                .map_err(|e| format!("cannot open the disk state store in {}: {e}", dir.display()))
        });
        opened.as_ref().map_err(|message| Error::Execution { step: step.to_string(), message: message.clone() })
    }

    fn keyspace(&self, step: &str) -> Result<fjall::Keyspace> {
        self.keyspace_of(step, false)
    }

    /// The keyspace of key states, or of time indexes (`index`).
    fn keyspace_of(&self, step: &str, index: bool) -> Result<fjall::Keyspace> {
        let opened = self.open(step)?;
        let db = opened.db.lock().unwrap_or_else(|p| p.into_inner());
        db.as_ref().map(|(_, ks, i)| if index { i.clone() } else { ks.clone() }).ok_or_else(|| Error::Execution {
            step: step.to_string(),
            message: format!("the disk state store in {} is closed", opened.dir.display()),
        })
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        if let Some(Ok(opened)) = self.opened.get() {
            drop(opened.db.lock().unwrap_or_else(|p| p.into_inner()).take());
            if let Err(e) = std::fs::remove_dir_all(&opened.dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("cannot remove the disk state store {}: {e}", opened.dir.display());
                }
            }
        }
    }
}

/// What the disk store did, over the job's operators: the backend's custom metrics.
#[derive(Default)]
struct SpillStats {
    spilled_bytes: AtomicU64,
    spilled_keys: AtomicU64,
    read_back_bytes: AtomicU64,
    read_back_keys: AtomicU64,
    spill_time_us: AtomicU64,
    read_back_time_us: AtomicU64,
}

impl SpillStats {
    fn totals(&self) -> SpillTotals {
        SpillTotals {
            spilled_bytes: self.spilled_bytes.load(Ordering::Relaxed),
            spilled_keys: self.spilled_keys.load(Ordering::Relaxed),
            read_back_bytes: self.read_back_bytes.load(Ordering::Relaxed),
            read_back_keys: self.read_back_keys.load(Ordering::Relaxed),
            spill_time_ms: self.spill_time_us.load(Ordering::Relaxed) / 1000,
            read_back_time_ms: self.read_back_time_us.load(Ordering::Relaxed) / 1000,
        }
    }
}

/// The disk store's totals since the job started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillTotals {
    /// Bytes of encoded key state written to the store.
    pub spilled_bytes: u64,
    /// Keys moved out of memory.
    pub spilled_keys: u64,
    /// Bytes read back into memory.
    pub read_back_bytes: u64,
    /// Keys read back into memory (cache misses).
    pub read_back_keys: u64,
    /// Time spent writing to the store.
    pub spill_time_ms: u64,
    /// Time spent reading back.
    pub read_back_time_ms: u64,
}

/// Waits (up to 2 s) while the store has memtables waiting to be flushed. A batch does not wait
/// for the store's flushes as single writes do: without this, memtables waiting to be flushed
/// would pile up in memory while state leaves faster than the store's one worker writes it out.
fn wait_for_flushes(ks: &fjall::Keyspace) {
    let waited = std::time::Instant::now();
    while ks.sealed_memtable_count() >= 2 && waited.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// One operator instance's part of the disk store: the keys it moved out, under its own prefix.
/// Knows which keys it holds (by a hash each), so a key never moved out costs no disk lookup.
///
/// A key's state may be on disk in several fragments, each written when the key left memory
/// (see [`Spill::put`]): a grouping that adds values to a key on disk writes the new ones
/// beside the old instead of reading the key back (the store's keys are the prefix, the key's
/// length and bytes, and a sequence number, so a key's fragments lie together, in the order
/// they were written).
pub struct Spill {
    store: Arc<DiskStore>,
    step: String,
    prefix: [u8; 8],
    /// Hash of each key on disk, with how many fragments on disk share it.
    on_disk: hashbrown::HashMap<u64, u32>,
    bytes_on_disk: usize,
    /// Bytes written to disk since the instance started.
    spilled_total: usize,
    /// The next fragment's sequence number.
    next_fragment: u64,
    /// Where [`Spill::take_first`] stopped: the last store key it took. Keys leave in key
    /// order at the end of an input, and each leaves a tombstone behind: the next take starts
    /// after it instead of scanning every tombstone again. Cleared when a key is written.
    taken_to: Option<Vec<u8>>,
    /// Keys that left in sorted runs ([`Spill::put_run`]); opened with the first.
    runs: Option<runs::Runs>,
    /// Whether any key went to the store: runs are then no longer written (a key's fragments
    /// are in runs or in the store, never both).
    store_used: bool,
    /// Whether the instance counts in the budget's shares (not a [`Spill::sibling`]).
    counted: bool,
    /// Whether the area is a time index's ([`StateBackend::index_area`]), in the store's
    /// keyspace of indexes.
    index: bool,
    /// The state in memory this instance last reported ([`Spill::report`]).
    reported: usize,
}

/// Takes one from the count of hash `h` (dropping it at zero); whether it was counted.
fn count_down(counts: &mut hashbrown::HashMap<u64, u32>, h: u64) -> bool {
    let hashbrown::hash_map::Entry::Occupied(mut e) = counts.entry(h) else { return false };
    *e.get_mut() -= 1;
    if *e.get() == 0 {
        e.remove();
    }
    true
}

fn key_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static HASHER: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    HASHER.get_or_init(hashbrown::DefaultHashBuilder::default).hash_one(key)
}

/// A key's fragments, oldest first.
pub type Fragments = Vec<Vec<u8>>;

/// A sorted run being written ([`Spill::start_run`]).
pub struct RunWriter {
    w: runs::Writer,
    hashes: Vec<u64>,
    bytes: usize,
    start: std::time::Instant,
}

impl RunWriter {
    /// Appends `key`'s encoded state (keys in key order, each once).
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        self.w.push(key, value)?;
        self.hashes.push(key_hash(key));
        self.bytes += value.len();
        Ok(())
    }
}

impl Spill {
    /// Another area of the same operator instance, under a prefix of its own, sharing this
    /// one's share of the budget: for an operator that keeps parts of its state apart (a window
    /// aggregation, each window's groups).
    pub fn sibling(&self) -> Spill {
        Spill::area(&self.store, &self.step, false)
    }

    /// An empty area of `store` for `step` under a prefix of its own (`counted`: in the
    /// budget's shares).
    fn area(store: &Arc<DiskStore>, step: &str, counted: bool) -> Spill {
        Spill {
            store: store.clone(),
            step: step.to_string(),
            prefix: store.next_prefix.fetch_add(1, Ordering::Relaxed).to_be_bytes(),
            on_disk: hashbrown::HashMap::new(),
            bytes_on_disk: 0,
            spilled_total: 0,
            next_fragment: 0,
            taken_to: None,
            runs: None,
            store_used: false,
            counted,
            index: false,
            reported: 0,
        }
    }

    /// Tells the job's store how much state this instance holds in memory now (its operator
    /// calls it before asking [`Spill::budget`], and after moving state out).
    pub fn report(&mut self, used: usize) {
        if !self.counted {
            return;
        }
        match used >= self.reported {
            true => self.store.used.fetch_add(used - self.reported, Ordering::Relaxed),
            false => self.store.used.fetch_sub(self.reported - used, Ordering::Relaxed),
        };
        self.reported = used;
    }

    /// [`Spill::report`]s `used`, then returns [`Spill::budget`]: what an operator asks before
    /// deciding whether to move state out.
    pub fn budget_for(&mut self, used: usize) -> usize {
        self.report(used);
        self.budget()
    }

    /// This instance's share of the memory budget, by need: what the other live instances
    /// leave of it (as they last reported), and never less than an equal share. A step with
    /// little state leaves the rest to those with much; the instances together may hold more
    /// than the budget only until the others' next report, each of them at most its equal share
    /// over what it held.
    pub fn budget(&self) -> usize {
        let fair = self.store.budget / self.store.instances.load(Ordering::Relaxed).max(1);
        let others = self.store.used.load(Ordering::Relaxed).saturating_sub(self.reported);
        fair.max(self.store.budget.saturating_sub(others))
    }

    /// Whether no key is on disk.
    pub fn is_empty(&self) -> bool {
        self.on_disk.is_empty()
    }

    /// Bytes written to disk since the instance started.
    pub fn spilled_total(&self) -> usize {
        self.spilled_total
    }

    /// Bytes of encoded state on disk.
    pub fn bytes_on_disk(&self) -> usize {
        self.bytes_on_disk
    }

    /// Whether `key` may be on disk (no false negatives).
    pub fn may_hold(&self, key: &[u8]) -> bool {
        !self.on_disk.is_empty() && self.on_disk.contains_key(&key_hash(key))
    }

    /// Where `key`'s fragments lie: the prefix, the key's length and the key.
    fn key_prefix(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(8 + 4 + key.len() + 8);
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&(key.len() as u32).to_be_bytes());
        k.extend_from_slice(key);
        k
    }

    /// The user key of a store key (see [`Spill::key_prefix`]).
    fn user_key<'k>(&self, stored: &'k [u8]) -> Result<&'k [u8]> {
        let n = stored.get(8..12).map(|b| u32::from_be_bytes(b.try_into().unwrap_or_default()) as usize);
        n.and_then(|n| stored.get(12..12 + n)).ok_or_else(|| self.error("read", "a malformed key in the store"))
    }

    /// The store's keyspace (of time indexes for an index's area) and database, for a write
    /// batch.
    fn store_handles(&self) -> Result<(fjall::Keyspace, fjall::Database)> {
        let ks = self.store.keyspace_of(&self.step, self.index)?;
        let opened = self.store.open(&self.step)?;
        let db = opened.db.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(db, _, _)| db.clone());
        db.map(|db| (ks, db)).ok_or_else(|| self.error("write", "closed"))
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        let dir = self.store.opened.get().and_then(|o| o.as_ref().ok()).map(|o| o.dir.display().to_string());
        Error::Execution {
            step: self.step.clone(),
            message: format!("disk state store in {}: cannot {what}: {e}", dir.unwrap_or_default()),
        }
    }

    /// Moves encoded key states to disk, each as a new fragment of its key (beside any the key
    /// already has there).
    pub fn put(&mut self, states: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        if states.is_empty() {
            return Ok(());
        }
        self.runs_into_store()?;
        self.put_in_store(states)
    }

    /// Moves encoded key states to disk as a sorted run (keys in key order, each once): for a
    /// grouping that reads no key back before its input ends and then reads them all in key
    /// order (see the `runs` module). Into the store instead once the store holds keys.
    #[cfg(test)]
    fn put_run(&mut self, states: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        if states.is_empty() {
            return Ok(());
        }
        let Some(mut run) = self.start_run()? else { return self.put(states) };
        for (key, value) in &states {
            if let Err(e) = run.push(key, value) {
                return Err(self.error("write a run", e));
            }
        }
        self.finish_run(run)
    }

    /// A sorted run to write key by key ([`RunWriter::push`], keys in key order, each once),
    /// then give to [`Spill::finish_run`]; `None` once the store holds keys or the runs are
    /// being read (keys then go to the store).
    pub fn start_run(&mut self) -> Result<Option<RunWriter>> {
        if self.store_used || self.runs.as_ref().is_some_and(runs::Runs::merging) {
            return Ok(None);
        }
        if self.runs.is_none() {
            let dir = self.store.open(&self.step)?.dir.clone();
            let name = format!("{:016x}", u64::from_be_bytes(self.prefix));
            self.runs = Some(runs::Runs::new(dir, name));
        }
        let Some(runs) = self.runs.as_mut() else { return Ok(None) };
        let w = runs.writer().map_err(|e| self.error("write a run", e))?;
        Ok(Some(RunWriter { w, hashes: Vec::new(), bytes: 0, start: std::time::Instant::now() }))
    }

    /// Adds a run written with [`Spill::start_run`].
    pub fn finish_run(&mut self, run: RunWriter) -> Result<()> {
        let RunWriter { w, hashes, bytes, start } = run;
        if let Some(runs) = self.runs.as_mut() {
            if let Err(e) = runs.finish(w) {
                return Err(self.error("write a run", e));
            }
        }
        let n = hashes.len();
        for h in hashes {
            *self.on_disk.entry(h).or_default() += 1;
        }
        self.spilled(bytes, n, start);
        Ok(())
    }

    fn has_runs(&self) -> bool {
        self.runs.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// Moves every key in runs into the store (a key is read back on its own, or the store is
    /// written to: each key's fragments then lie in the store alone, oldest first).
    fn runs_into_store(&mut self) -> Result<()> {
        if !self.has_runs() {
            return Ok(());
        }
        let Some(mut runs) = self.runs.take() else { return Ok(()) };
        let (mut batch, mut bytes) = (Vec::new(), 0);
        // Their hashes and bytes are counted again as the store takes them.
        while let Some((key, value)) = runs.pop().map_err(|e| self.error("read a run", e))? {
            self.forget(key_hash(&key), value.len());
            bytes += value.len();
            batch.push((key, value));
            if bytes >= 8 << 20 {
                self.put_in_store(std::mem::take(&mut batch))?;
                bytes = 0;
            }
        }
        self.put_in_store(batch)?;
        self.runs = Some(runs);
        Ok(())
    }

    /// Writes encoded key states into the store.
    fn put_in_store(&mut self, states: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        if states.is_empty() {
            return Ok(());
        }
        self.store_used = true;
        let start = std::time::Instant::now();
        let ks = self.store.keyspace(&self.step)?;
        let opened = self.store.open(&self.step)?;
        let db = opened.db.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(db, _, _)| db.clone());
        let Some(db) = db else { return Err(self.error("write", "closed")) };
        let mut batch = db.batch();
        let (mut bytes, n) = (0usize, states.len());
        // A key written may lie before where the last take stopped.
        self.taken_to = None;
        for (key, value) in states {
            *self.on_disk.entry(key_hash(&key)).or_default() += 1;
            bytes += value.len();
            let mut stored = self.key_prefix(&key);
            stored.extend_from_slice(&self.next_fragment.to_be_bytes());
            self.next_fragment += 1;
            batch.insert(&ks, stored, value);
        }
        batch.commit().map_err(|e| self.error("write", e))?;
        wait_for_flushes(&ks);
        self.spilled(bytes, n, start);
        Ok(())
    }

    /// `key`'s fragments on disk, oldest first, with their store keys. (Keys are copied out of
    /// the store's slices: a slice shares the block it was read from, and keeping it keeps the
    /// block.)
    fn fragments(&self, key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if !self.may_hold(key) {
            return Ok(Vec::new());
        }
        let ks = self.store.keyspace(&self.step)?;
        let mut out = Vec::new();
        for kv in ks.prefix(self.key_prefix(key)) {
            let (k, v) = kv.into_inner().map_err(|e| self.error("read", e))?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Reads `key`'s fragments back (oldest first) and removes them from disk; none when it is
    /// not there.
    pub fn take_all(&mut self, key: &[u8]) -> Result<Fragments> {
        if self.has_runs() && self.may_hold(key) {
            self.runs_into_store()?;
        }
        let start = std::time::Instant::now();
        let found = self.fragments(key)?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let ks = self.store.keyspace(&self.step)?;
        let h = key_hash(key);
        let (stored, out): (Vec<_>, Vec<_>) = found.into_iter().unzip();
        self.remove_stored(&ks, &stored)?;
        for v in &out {
            self.forget(h, v.len());
        }
        let stats = &self.store.stats;
        stats.read_back_bytes.fetch_add(out.iter().map(|v| v.len() as u64).sum(), Ordering::Relaxed);
        stats.read_back_keys.fetch_add(1, Ordering::Relaxed);
        stats.read_back_time_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Reads `key`'s state back and removes it from disk, for a state kept whole (one
    /// fragment a key); `None` when it is not there.
    pub fn take(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let all = self.take_all(key)?;
        self.whole(all)
    }

    /// The one fragment of a state kept whole, if any.
    fn whole(&self, mut all: Fragments) -> Result<Option<Vec<u8>>> {
        match all.len() {
            0 | 1 => Ok(all.pop()),
            n => Err(self.error("read", format!("{n} fragments of a state kept whole"))),
        }
    }

    fn forget(&mut self, h: u64, bytes: usize) {
        count_down(&mut self.on_disk, h);
        self.bytes_on_disk -= bytes.min(self.bytes_on_disk);
    }

    /// `key`'s fragments, oldest first, left on disk.
    pub fn peek_all(&self, key: &[u8]) -> Result<Fragments> {
        if self.has_runs() {
            let mut out = Vec::new();
            if self.may_hold(key) {
                self.scan_runs(|k, v| {
                    if k == key {
                        out.push(v);
                    }
                    Ok(())
                })?;
            }
            return Ok(out);
        }
        Ok(self.fragments(key)?.into_iter().map(|(_, v)| v).collect())
    }

    /// Reads `key`'s state without removing it, for a state kept whole.
    pub fn peek(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let all = self.peek_all(key)?;
        self.whole(all)
    }

    /// Takes up to `limit` keys off disk, in key order (shorter keys first), each with its
    /// fragments, and no more once they hold `max_bytes` (at least one key).
    pub fn take_first(&mut self, limit: usize, max_bytes: usize) -> Result<Vec<(Vec<u8>, Fragments)>> {
        use std::ops::Bound;
        if self.on_disk.is_empty() {
            return Ok(Vec::new());
        }
        if self.has_runs() {
            return self.take_first_of_runs(limit, max_bytes);
        }
        let start = std::time::Instant::now();
        let ks = self.store.keyspace(&self.step)?;
        let mut out: Vec<(Vec<u8>, Fragments)> = Vec::new();
        let (mut stored, mut taken) = (Vec::new(), 0);
        let from = match self.taken_to.take() {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(self.prefix.to_vec()),
        };
        for kv in ks.range::<Vec<u8>, _>((from, Bound::Unbounded)) {
            let (k, v) = kv.into_inner().map_err(|e| self.error("read", e))?;
            if !k.starts_with(&self.prefix) {
                break;
            }
            let key = self.user_key(&k)?;
            let full = out.len() >= limit || taken >= max_bytes;
            match out.last_mut() {
                Some((last, fragments)) if last.as_slice() == key => fragments.push(v.to_vec()),
                _ if full => break,
                _ => out.push((key.to_vec(), vec![v.to_vec()])),
            }
            taken += v.len();
            // Copied: a slice of the store keeps the whole block it was read from.
            stored.push(k.to_vec());
        }
        self.remove_stored(&ks, &stored)?;
        self.taken_to = stored.pop();
        self.taken(&out, start);
        Ok(out)
    }

    /// Counts `n` key states of `bytes` written to disk since `start`.
    fn spilled(&mut self, bytes: usize, n: usize, start: std::time::Instant) {
        self.bytes_on_disk += bytes;
        self.spilled_total += bytes;
        let stats = &self.store.stats;
        stats.spilled_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        stats.spilled_keys.fetch_add(n as u64, Ordering::Relaxed);
        stats.spill_time_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Forgets the keys taken off disk, and counts them in the store's figures.
    fn taken(&mut self, out: &[(Vec<u8>, Fragments)], start: std::time::Instant) {
        let mut bytes = 0;
        for (k, fragments) in out {
            let h = key_hash(k);
            for f in fragments {
                self.forget(h, f.len());
                bytes += f.len() as u64;
            }
        }
        let stats = &self.store.stats;
        stats.read_back_bytes.fetch_add(bytes, Ordering::Relaxed);
        stats.read_back_keys.fetch_add(out.len() as u64, Ordering::Relaxed);
        stats.read_back_time_us.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// [`Spill::take_first`] from the runs: their merge.
    fn take_first_of_runs(&mut self, limit: usize, max_bytes: usize) -> Result<Vec<(Vec<u8>, Fragments)>> {
        let start = std::time::Instant::now();
        let Some(mut runs) = self.runs.take() else { return Ok(Vec::new()) };
        let mut out: Vec<(Vec<u8>, Fragments)> = Vec::new();
        let mut taken = 0;
        let result = (|| -> std::io::Result<()> {
            while let Some(next) = runs.peek_key()? {
                let same = out.last().is_some_and(|(last, _)| last.as_slice() == next);
                if !same && (out.len() >= limit || taken >= max_bytes) {
                    break;
                }
                let Some((key, value)) = runs.pop()? else { break };
                taken += value.len();
                match out.last_mut() {
                    Some((last, fragments)) if *last == key => fragments.push(value),
                    _ => out.push((key, vec![value])),
                }
            }
            Ok(())
        })();
        self.runs = Some(runs);
        result.map_err(|e| self.error("read a run", e))?;
        self.taken(&out, start);
        Ok(out)
    }

    /// Calls `f` with every record of the runs, in key order, leaving them.
    fn scan_runs(&self, f: impl FnMut(Vec<u8>, Vec<u8>) -> std::io::Result<()>) -> Result<()> {
        match &self.runs {
            Some(runs) => runs.scan(f).map_err(|e| self.error("read a run", e)),
            None => Ok(()),
        }
    }

    /// Removes store keys, in one write. Each was written once (its fragment's sequence number
    /// is its own), so a weak tombstone removes it: one that vanishes with the value it meets
    /// in a compaction instead of travelling down every level.
    fn remove_stored(&self, ks: &fjall::Keyspace, stored: &[Vec<u8>]) -> Result<()> {
        if stored.is_empty() {
            return Ok(());
        }
        let opened = self.store.open(&self.step)?;
        let db = opened.db.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(db, _, _)| db.clone());
        let Some(db) = db else { return Err(self.error("remove", "closed")) };
        let mut batch = db.batch();
        for k in stored {
            batch.remove_weak(ks, k.as_slice());
        }
        batch.commit().map_err(|e| self.error("remove", e))
    }

    /// Calls `f` with every key on disk and its fragments (oldest first), in key order,
    /// leaving them there.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[Vec<u8>]) -> Result<()>) -> Result<()> {
        if self.on_disk.is_empty() {
            return Ok(());
        }
        if self.has_runs() {
            let mut current: Option<(Vec<u8>, Fragments)> = None;
            let mut failed = None;
            self.scan_runs(|key, value| {
                match current.as_mut() {
                    Some((last, fragments)) if *last == key => fragments.push(value),
                    _ => {
                        if let Some((last, fragments)) = current.replace((key, vec![value])) {
                            if let Err(e) = f(&last, &fragments) {
                                failed = Some(e);
                                return Err(std::io::Error::other("stopped"));
                            }
                        }
                    }
                }
                Ok(())
            })
            .or_else(|e| failed.take().map_or(Err(e), Err))?;
            if let Some((last, fragments)) = current {
                f(&last, &fragments)?;
            }
            return Ok(());
        }
        let ks = self.store.keyspace(&self.step)?;
        let mut current: Option<(Vec<u8>, Fragments)> = None;
        for kv in ks.prefix(self.prefix) {
            let (k, v) = kv.into_inner().map_err(|e| self.error("read", e))?;
            let key = self.user_key(&k)?;
            match current.as_mut() {
                Some((last, fragments)) if last.as_slice() == key => fragments.push(v.to_vec()),
                _ => {
                    if let Some((last, fragments)) = current.take() {
                        f(&last, &fragments)?;
                    }
                    current = Some((key.to_vec(), vec![v.to_vec()]));
                }
            }
        }
        if let Some((last, fragments)) = current {
            f(&last, &fragments)?;
        }
        Ok(())
    }

    /// Removes every key state on disk.
    pub fn clear(&mut self) -> Result<()> {
        if let Some(runs) = self.runs.as_mut() {
            if let Err(e) = runs.clear() {
                return Err(self.error("remove a run", e));
            }
        }
        if self.on_disk.is_empty() {
            return Ok(());
        }
        let ks = self.store.keyspace(&self.step)?;
        let keys: Vec<_> = ks
            .prefix(self.prefix)
            .map(|kv| kv.key().map(|k| k.to_vec()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.error("read", e))?;
        self.remove_stored(&ks, &keys)?;
        self.taken_to = None;
        self.on_disk.clear();
        self.bytes_on_disk = 0;
        Ok(())
    }

    /// The backend's figures of an operator instance with this area (`None`: not opened yet)
    /// holding `rows` state rows on disk, after `hits` and `misses` of its cache: the names
    /// every stateful operator reports them under
    /// ([`crate::operator::Operator::state_backend_metrics`]).
    /// An operator that keeps several areas gives them all, with the bytes written by areas it
    /// dropped (`spilled_before`).
    pub fn metrics<'a>(
        areas: impl IntoIterator<Item = &'a Spill>,
        spilled_before: usize,
        rows: usize,
        hits: u64,
        misses: u64,
    ) -> Vec<(&'static str, u64)> {
        let (mut on_disk, mut spilled) = (0, spilled_before);
        for area in areas {
            on_disk += area.bytes_on_disk();
            spilled += area.spilled_total();
        }
        vec![
            ("stateOnDiskBytes", on_disk as u64),
            ("stateOnDiskRows", rows as u64),
            ("spilledBytes", spilled as u64),
            ("cacheHitCount", hits),
            ("cacheMissCount", misses),
        ]
    }

    /// The folder of the store, for tests.
    pub fn dir(&self) -> Option<&Path> {
        self.store.opened.get().and_then(|o| o.as_ref().ok()).map(|o| o.dir.as_path())
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if self.counted {
            self.report(0);
            self.store.instances.fetch_sub(1, Ordering::Relaxed);
        }
        if let Err(e) = self.clear() {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::options::{StateBackendKind, StateOptions};

    fn spill(dir: &Path) -> (StateBackend, Spill) {
        let backend = StateBackend::of(&StateOptions {
            backend: StateBackendKind::Disk,
            memory_budget: 1 << 20,
            local_dir: Some(dir.display().to_string()),
        });
        let spill = backend.spill("step").unwrap().unwrap();
        (backend, spill)
    }

    fn states(keys: &[&str], tag: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<(Vec<u8>, Vec<u8>)> =
            keys.iter().map(|k| (k.as_bytes().to_vec(), format!("{k}@{tag}").into_bytes())).collect();
        v.sort_by(|a, b| key_order(&a.0, &b.0));
        v
    }

    fn text(f: &[Vec<u8>]) -> Vec<String> {
        f.iter().map(|v| String::from_utf8(v.clone()).unwrap()).collect()
    }

    /// Issue 52: the budget goes where the state is. An instance alone, or beside ones that
    /// hold nothing, may use all of it; each keeps at least an equal share.
    #[test]
    fn the_budget_is_shared_by_need_with_an_equal_share_at_least() {
        let dir = tempfile::tempdir().unwrap();
        let (backend, mut a) = spill(dir.path());
        let whole = 1 << 20;
        assert_eq!(a.budget(), whole);
        let mut b = backend.spill("other").unwrap().unwrap();
        // Neither holds anything: each may take it all.
        assert_eq!((a.budget(), b.budget()), (whole, whole));
        a.report(whole / 4);
        assert_eq!(b.budget(), whole / 4 * 3);
        // A holds more than half: B still has its equal share.
        a.report(whole / 4 * 3);
        assert_eq!(b.budget(), whole / 2);
        b.report(whole / 8);
        assert_eq!(a.budget(), whole / 8 * 7);
        // A sibling area (another part of the same instance) reports nothing of its own.
        let mut sibling = a.sibling();
        sibling.report(whole);
        assert_eq!(b.budget(), whole / 2);
        // What a dropped instance held is no longer counted.
        drop(a);
        assert_eq!(b.budget(), whole);
    }

    #[test]
    fn runs_come_back_in_key_order_each_key_s_fragments_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let (_backend, mut spill) = spill(dir.path());
        spill.put_run(states(&["b", "a", "cc"], "1")).unwrap();
        spill.put_run(states(&["a", "d"], "2")).unwrap();
        assert!(spill.has_runs() && !spill.store_used);
        assert!(spill.may_hold(b"a") && !spill.may_hold(b"zz"));
        assert_eq!(text(&spill.peek_all(b"a").unwrap()), ["a@1", "a@2"]);
        let first = spill.take_first(2, usize::MAX).unwrap();
        let got: Vec<(String, Vec<String>)> =
            first.iter().map(|(k, f)| (String::from_utf8(k.clone()).unwrap(), text(f))).collect();
        assert_eq!(
            got,
            [("a".to_string(), vec!["a@1".to_string(), "a@2".to_string()]), ("b".into(), vec!["b@1".into()])]
        );
        let rest = spill.take_first(10, usize::MAX).unwrap();
        let keys: Vec<&[u8]> = rest.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [&b"d"[..], b"cc"]);
        assert!(spill.is_empty() && spill.bytes_on_disk() == 0);
    }

    #[test]
    fn a_key_read_back_on_its_own_moves_the_runs_into_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (_backend, mut spill) = spill(dir.path());
        spill.put_run(states(&["a", "b"], "1")).unwrap();
        spill.put_run(states(&["a"], "2")).unwrap();
        assert_eq!(text(&spill.take_all(b"a").unwrap()), ["a@1", "a@2"]);
        assert!(!spill.has_runs() && spill.store_used);
        // Later runs go to the store too, beside what is there.
        spill.put_run(states(&["b"], "3")).unwrap();
        assert!(!spill.has_runs());
        assert_eq!(text(&spill.take_all(b"b").unwrap()), ["b@1", "b@3"]);
        assert!(spill.is_empty());
    }
}
