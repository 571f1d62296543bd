//! Indexes ordered by time (timers, watermark holds, window expiries) that keep their earliest
//! entries in memory and the rest on disk past a cap (`--state-backend disk`).
//!
//! A stateful operator keeps an index entry for each timer, hold and window of every key,
//! including the keys whose state waits on disk. Without this, those entries alone grow with the
//! number of keys: a stateful DoFn's key on disk kept its fire time, output time and expiry in
//! memory, each with a copy of the key. Here an index keeps its entries in memory until they
//! pass its cap, then moves the latest times to the store, under a prefix of its own and in time
//! order. Every entry on disk is at or after a boundary time, and memory always holds the entries
//! before it: whenever the first entry in memory is not before the boundary (or memory empties),
//! the next times on disk come back (up to half the cap, a time's entries together). So the
//! first entry, the one a watermark hold or the next due timer is read from, is always in memory
//! and exact, and an operator reads it without asking the disk. New entries go to memory
//! whatever their time (timers are mostly set just ahead of the watermark, and fire soon): only
//! what overflows the cap goes to disk, in one batch, and removals of entries that may be on
//! disk wait in a small buffer until the next batch.

use super::{Spill, StateBackend};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// An entry of a [`TimeIndex`] (beside its time).
pub trait IndexEntry: Ord + Clone + serde::Serialize + serde::de::DeserializeOwned {
    /// Bytes the entry holds on the heap, beyond its own size.
    fn heap_bytes(&self) -> usize;
}

impl IndexEntry for (Vec<u8>, weir_sdk::window::Window) {
    fn heap_bytes(&self) -> usize {
        self.0.capacity()
    }
}

impl IndexEntry for (Vec<u8>, weir_sdk::window::Window, String, String) {
    fn heap_bytes(&self) -> usize {
        self.0.capacity() + self.2.capacity() + self.3.capacity()
    }
}

/// Memory a B-tree set spends on each entry beside the entry itself (node slack and edges).
const NODE_OVERHEAD: usize = 16;

/// Bytes an entry takes in an index's memory.
fn entry_bytes<E: IndexEntry>(e: &E) -> usize {
    std::mem::size_of::<(Timestamp, E)>() + NODE_OVERHEAD + e.heap_bytes()
}

/// An ordered set of `(time, entry)`, its earliest entries in memory (see the module's notes).
pub struct TimeIndex<E: IndexEntry> {
    mem: BTreeSet<(Timestamp, E)>,
    mem_bytes: usize,
    disk: Option<Box<IndexDisk>>,
    /// A read or write of the store that failed, for the operator to report.
    error: Option<Error>,
}

impl<E: IndexEntry> Default for TimeIndex<E> {
    fn default() -> Self {
        TimeIndex { mem: BTreeSet::new(), mem_bytes: 0, disk: None, error: None }
    }
}

/// The disk part of an index on the disk backend.
struct IndexDisk {
    backend: StateBackend,
    step: String,
    /// Opened when entries first leave memory.
    area: Option<Spill>,
    /// Every entry at or after this time is on disk (or in `pending`), every one before it in
    /// memory; `None` while none is on disk.
    boundary: Option<Timestamp>,
    /// Store writes not made yet: each store key, and whether it is written (else removed).
    pending: BTreeMap<Vec<u8>, bool>,
    pending_bytes: usize,
    /// Entries on disk (writes less removals).
    on_disk: usize,
    /// The hash of each entry written to disk and not read back, with how many writes share it:
    /// a removal of an entry not there stays off the store.
    hashes: hashbrown::HashMap<u64, u32>,
    /// The cap of the entries in memory, as last computed.
    cap: usize,
    /// The last store key a load took (its time's entries may be split between loads); cleared
    /// by a write, which may lie before it.
    taken_to: Option<Vec<u8>>,
    /// Whether anything was written since the disk part was last cleared (a clear of a part
    /// never written reads nothing: a grouping clears its timers on every call at the end of
    /// its input).
    written: bool,
    /// A store key being encoded, kept for reuse.
    scratch: Vec<u8>,
}

impl<E: IndexEntry> TimeIndex<E> {
    /// An index for `step` that keeps entries past its cap on disk when `backend` is the disk
    /// backend, and all of them in memory otherwise.
    pub fn new(backend: &StateBackend, step: &str) -> Self {
        TimeIndex { disk: IndexDisk::new(backend, step), ..TimeIndex::default() }
    }

    /// An entry of the earliest time: the first in memory, which is of the earliest time
    /// anywhere (entries of the same time may wait on disk, in another order).
    pub fn first(&self) -> Option<&(Timestamp, E)> {
        self.mem.first()
    }

    /// The latest time of any entry, in memory or on disk (read from the store when entries
    /// wait there).
    pub fn last_time(&self) -> Result<Option<Timestamp>> {
        let in_memory = self.mem.last().map(|(t, _)| *t);
        let Some(d) = self.disk.as_ref().filter(|d| d.boundary.is_some()) else { return Ok(in_memory) };
        Ok(in_memory.max(d.last_time()?))
    }

    /// Whether the index holds no entry.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// The earliest entries, in time order: those in memory not after any on disk (the entries
    /// after them come back from disk as these leave).
    pub fn iter_first(&self) -> impl Iterator<Item = &(Timestamp, E)> {
        let boundary = self.disk.as_ref().and_then(|d| d.boundary);
        self.mem.iter().take_while(move |(t, _)| boundary.is_none_or(|b| *t <= b))
    }

    /// Entries on disk.
    pub fn on_disk(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.on_disk)
    }

    /// Adds an entry; whether it was not in memory. (An entry that may be on disk moves to
    /// memory: one entry is never in both, where its copies could leave one at a time.)
    pub fn insert(&mut self, entry: (Timestamp, E)) -> bool {
        let bytes = entry_bytes(&entry.1);
        if let Some(d) = self.disk.as_mut() {
            if d.boundary.is_some_and(|b| entry.0 >= b) {
                // A removal staged only when the entry may be there.
                d.stage(&entry, false, &mut self.error);
            }
        }
        if !self.mem.insert(entry) {
            return false;
        }
        self.mem_bytes += bytes;
        if self.disk.as_ref().is_some_and(|d| self.mem_bytes > d.cap) {
            self.spill();
        }
        true
    }

    /// Removes an entry; whether it was there. (An entry that may be on disk counts as there:
    /// its removal goes to disk with the next batch.)
    pub fn remove(&mut self, entry: &(Timestamp, E)) -> bool {
        let mut found = false;
        if self.mem.remove(entry) {
            self.mem_bytes -= entry_bytes(&entry.1).min(self.mem_bytes);
            found = true;
        }
        if let Some(d) = self.disk.as_mut() {
            if d.boundary.is_some_and(|b| entry.0 >= b) {
                d.stage(entry, false, &mut self.error);
                found = true;
            }
        }
        self.refill();
        found
    }

    /// Removes and returns an entry of the earliest time ([`TimeIndex::first`]).
    pub fn pop_first(&mut self) -> Option<(Timestamp, E)> {
        let first = self.mem.pop_first()?;
        self.mem_bytes -= entry_bytes(&first.1).min(self.mem_bytes);
        self.refill();
        Some(first)
    }

    /// Removes every entry, in memory and on disk.
    pub fn clear(&mut self) {
        self.mem.clear();
        self.mem_bytes = 0;
        IndexDisk::clear_part(&mut self.disk, &mut self.error);
    }

    /// A read or write of the store that failed since the last call: the index may then miss
    /// entries, and the operator must fail.
    pub fn take_error(&mut self) -> Result<()> {
        self.error.take().map_or(Ok(()), Err)
    }

    /// Moves the latest times in memory to disk, down to half the cap, keeping the earliest
    /// time (so memory keeps the first entry); the boundary moves down to the earliest time
    /// moved.
    fn spill(&mut self) {
        let Some(d) = self.disk.as_mut() else { return };
        // The cap follows the number of stateful instances (an equal share of the budget).
        d.cap = d.compute_cap();
        if self.mem_bytes <= d.cap {
            return;
        }
        // Entries leave one by one, latest first, the first always staying: at one time
        // (fixed windows: every key's timer at the window's end) a time's entries may be split
        // between memory and disk.
        while self.mem_bytes > d.cap / 2 && self.mem.len() > 1 {
            let Some(entry) = self.mem.pop_last() else { break };
            self.mem_bytes -= entry_bytes(&entry.1).min(self.mem_bytes);
            d.stage(&entry, true, &mut self.error);
            d.boundary = Some(d.boundary.map_or(entry.0, |b| b.min(entry.0)));
        }
        if let Err(e) = d.flush() {
            self.error.get_or_insert(e);
        }
    }

    /// Brings the next entries back from disk while the first entry in memory is after the
    /// boundary (or memory is empty) and entries wait there: up to half the cap at a time, in
    /// time order. (An entry both in memory and on disk is one entry again.)
    fn refill(&mut self) {
        let Some(d) = self.disk.as_mut() else { return };
        while let Some(b) = d.boundary {
            if self.mem.first().is_some_and(|(t, _)| *t <= b) {
                return;
            }
            match d.load::<E>(false) {
                Ok(entries) => {
                    for entry in entries {
                        let bytes = entry_bytes(&entry.1);
                        if self.mem.insert(entry) {
                            self.mem_bytes += bytes;
                        }
                    }
                }
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
    }
}

/// A counted multiset of times (the watermark holds of a grouping's windows: how many windows
/// hold each time), its earliest times in memory and the latest on disk past a cap, as a
/// [`TimeIndex`] keeps its entries. On disk a time's count is a set of signed parts, summed when
/// they come back: moving a count out writes it as one part, and a change to a time with no
/// count in memory writes a part of +1 or -1, so nothing on disk is read to change it.
#[derive(Default)]
pub struct TimeCounts {
    /// Counts in memory: with the parts on disk, each time's count.
    mem: BTreeMap<Timestamp, u32>,
    disk: Option<Box<IndexDisk>>,
    /// The next part's number (each part on disk is a store key of its own).
    next_part: u64,
    error: Option<Error>,
}

/// Bytes a count in memory takes (its entry and the tree's share of a node).
const COUNT_BYTES: usize = 40;

impl IndexEntry for (u64, i64) {
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl TimeCounts {
    /// A multiset for `step` that keeps its latest times on disk past its cap when `backend` is
    /// the disk backend.
    pub fn new(backend: &StateBackend, step: &str) -> Self {
        TimeCounts { disk: IndexDisk::new(backend, step), ..TimeCounts::default() }
    }

    /// Adds one to `t`'s count.
    pub fn add(&mut self, t: Timestamp) {
        self.add_n(t, 1);
    }

    /// Adds `n` to `t`'s count.
    pub fn add_n(&mut self, t: Timestamp, n: u32) {
        *self.mem.entry(t).or_insert(0) += n;
        if self.disk.as_ref().is_some_and(|d| self.mem.len() * COUNT_BYTES > d.cap) {
            self.spill();
        }
    }

    /// Takes one from `t`'s count.
    pub fn remove(&mut self, t: Timestamp) {
        match self.mem.entry(t) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
            std::collections::btree_map::Entry::Vacant(_) => {
                // Counted on disk only.
                if let Some(d) = self.disk.as_mut().filter(|d| d.boundary.is_some_and(|b| t >= b)) {
                    let part = (self.next_part, -1i64);
                    self.next_part += 1;
                    d.stage(&(t, part), true, &mut self.error);
                }
            }
        }
        self.refill();
    }

    /// The earliest time with a count.
    pub fn earliest(&self) -> Option<Timestamp> {
        self.mem.first_key_value().map(|(t, _)| *t)
    }

    /// Times with a count on disk (parts written less parts read back).
    pub fn on_disk(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.on_disk)
    }

    /// The counts, when none is on disk (for tests that check them against a recount).
    pub fn in_memory(&self) -> Option<&BTreeMap<Timestamp, u32>> {
        self.disk.as_ref().is_none_or(|d| d.boundary.is_none()).then_some(&self.mem)
    }

    /// Removes every count, in memory and on disk.
    pub fn clear(&mut self) {
        self.mem.clear();
        IndexDisk::clear_part(&mut self.disk, &mut self.error);
    }

    /// A read or write of the store that failed since the last call.
    pub fn take_error(&mut self) -> Result<()> {
        self.error.take().map_or(Ok(()), Err)
    }

    /// Moves the latest times' counts to disk, down to half the cap, keeping the earliest.
    fn spill(&mut self) {
        let Some(d) = self.disk.as_mut() else { return };
        d.cap = d.compute_cap();
        while self.mem.len() > 1 && self.mem.len() * COUNT_BYTES > d.cap / 2 {
            let Some((t, n)) = self.mem.pop_last() else { break };
            let part = (self.next_part, i64::from(n));
            self.next_part += 1;
            d.stage(&(t, part), true, &mut self.error);
            d.boundary = Some(d.boundary.map_or(t, |b| b.min(t)));
        }
        if let Err(e) = d.flush() {
            self.error.get_or_insert(e);
        }
    }

    /// Brings the next times' parts back from disk, summed into the counts, while the earliest
    /// count in memory is not before the boundary (or memory has none) and parts wait there.
    fn refill(&mut self) {
        let Some(d) = self.disk.as_mut() else { return };
        while let Some(b) = d.boundary {
            if self.mem.first_key_value().is_some_and(|(t, _)| *t < b) {
                return;
            }
            match d.load::<(u64, i64)>(true) {
                Ok(parts) => {
                    let mut sums: BTreeMap<Timestamp, i64> = BTreeMap::new();
                    for (t, (_, n)) in parts {
                        *sums.entry(t).or_insert(0) += n;
                    }
                    for (t, n) in sums {
                        let total = i64::from(self.mem.get(&t).copied().unwrap_or(0)) + n;
                        match u32::try_from(total) {
                            Ok(0) => {
                                self.mem.remove(&t);
                            }
                            Ok(n) => {
                                self.mem.insert(t, n);
                            }
                            Err(_) => {
                                let e = d.error("read a hold count", format!("a count of {total} at {t}"));
                                self.error.get_or_insert(e);
                                return;
                            }
                        }
                    }
                }
                Err(e) => {
                    self.error.get_or_insert(e);
                    return;
                }
            }
        }
    }
}

/// A store key's time part: the time with its sign bit flipped, so that bytes order as times.
fn time_bytes(t: Timestamp) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of(bytes: &[u8]) -> Option<Timestamp> {
    let b: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as Timestamp)
}

impl IndexDisk {
    /// The disk part of an index of `step`, on the disk backend.
    fn new(backend: &StateBackend, step: &str) -> Option<Box<IndexDisk>> {
        backend.is_disk().then(|| {
            let mut d = IndexDisk {
                backend: backend.clone(),
                step: step.to_string(),
                area: None,
                boundary: None,
                pending: BTreeMap::new(),
                pending_bytes: 0,
                on_disk: 0,
                hashes: hashbrown::HashMap::new(),
                cap: 0,
                taken_to: None,
                written: false,
                scratch: Vec::new(),
            };
            d.cap = d.compute_cap();
            Box::new(d)
        })
    }

    fn compute_cap(&self) -> usize {
        // Three indexes of a stateful step partition each keep a sixteenth of its equal share.
        self.backend.part_cap(16)
    }

    fn area(&mut self) -> Result<&mut Spill> {
        if self.area.is_none() {
            self.area = self.backend.index_area(&self.step)?;
        }
        self.area.as_mut().ok_or_else(|| Error::Internal {
            component: "time index".into(),
            message: "a disk index on the memory backend".into(),
        })
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        match &self.area {
            Some(area) => area.error(what, e),
            None => {
                Error::Execution { step: self.step.clone(), message: format!("disk state store: cannot {what}: {e}") }
            }
        }
    }

    /// Stages the write (`put`) or removal of an entry.
    fn stage<E: IndexEntry>(&mut self, entry: &(Timestamp, E), put: bool, error: &mut Option<Error>) {
        let prefix = match self.area() {
            Ok(area) => area.prefix,
            Err(e) => {
                error.get_or_insert(e);
                return;
            }
        };
        // The store key is encoded into a buffer kept for reuse: most removals are of entries in
        // memory alone (a stateful DoFn moves its key's timer with each element), and they
        // allocate nothing.
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        key.extend_from_slice(&prefix);
        key.extend_from_slice(&time_bytes(entry.0));
        key = match postcard::to_extend(&entry.1, key) {
            Ok(key) => key,
            Err(e) => {
                error.get_or_insert(self.error("encode an index entry", e));
                return;
            }
        };
        // Only a removal of an entry that may be on disk goes there.
        let h = super::key_hash(&key[8..]);
        if put {
            self.taken_to = None;
            self.written = true;
            *self.hashes.entry(h).or_default() += 1;
            self.on_disk += 1;
        } else if super::count_down(&mut self.hashes, h) {
            self.on_disk = self.on_disk.saturating_sub(1);
        } else {
            self.scratch = key;
            return;
        }
        self.pending_bytes += key.len();
        self.pending.insert(key, put);
        if self.pending_bytes >= (self.cap / 4).max(16 << 10) {
            if let Err(e) = self.flush() {
                error.get_or_insert(e);
            }
        }
    }

    /// The latest time on disk, with the staged writes and removals.
    fn last_time(&self) -> Result<Option<Timestamp>> {
        let Some(area) = self.area.as_ref() else { return Ok(None) };
        let staged = self.pending.iter().rev().find(|(_, put)| **put).map(|(k, _)| k.clone());
        let ks = area.store_handles()?.0;
        let mut stored = None;
        for kv in ks.prefix(area.prefix).rev() {
            let k = kv.key().map_err(|e| self.error("read an index", e))?;
            if self.pending.get(&*k) != Some(&false) {
                stored = Some(k.to_vec());
                break;
            }
        }
        // Store keys order as their times.
        let last = staged.max(stored);
        Ok(last.and_then(|k| time_of(&k[8..])))
    }

    /// Makes the staged writes and removals in one batch.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let area = self.area()?;
        let (ks, db) = area.store_handles()?;
        let mut batch = db.batch();
        for (key, put) in pending {
            match put {
                true => batch.insert(&ks, key, []),
                // A store key may have been written more than once: a strong tombstone.
                false => batch.remove(&ks, key),
            }
        }
        batch.commit().map_err(|e| self.error("write an index", e))?;
        super::wait_for_flushes(&ks);
        Ok(())
    }

    /// Takes the next entries off disk in time order, up to half the cap (a time's entries
    /// together when `whole_times`), and moves the boundary to the time of the next one
    /// (`None`: the disk part emptied).
    fn load<E: IndexEntry>(&mut self, whole_times: bool) -> Result<Vec<(Timestamp, E)>> {
        let Some(boundary) = self.boundary else { return Ok(Vec::new()) };
        self.flush()?;
        let half = self.cap / 2;
        let taken_to = self.taken_to.take();
        let area = self.area()?;
        let prefix = area.prefix;
        let (ks, db) = area.store_handles()?;
        let mut from = prefix.to_vec();
        from.extend_from_slice(&time_bytes(boundary));
        // Within a time split between loads, from where the last load stopped (its entries
        // left tombstones there).
        let from = match taken_to {
            Some(k) if k > from => Bound::Excluded(k),
            _ => Bound::Included(from),
        };
        let (mut out, mut taken, mut bytes, mut next) = (Vec::new(), Vec::new(), 0usize, None);
        for kv in ks.range::<Vec<u8>, _>((from, Bound::Unbounded)) {
            let k = kv.key().map_err(|e| self.error("read an index", e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            let malformed = || self.error("read an index", "a malformed entry");
            let t = time_of(&k[8..]).ok_or_else(malformed)?;
            if bytes >= half && (!whole_times || out.last().is_some_and(|(l, _): &(Timestamp, E)| *l != t)) {
                next = Some(t);
                break;
            }
            let e: E = postcard::from_bytes(&k[16..]).map_err(|e| self.error("read an index entry", e))?;
            bytes += entry_bytes(&e);
            out.push((t, e));
            super::count_down(&mut self.hashes, super::key_hash(&k[8..]));
            taken.push(k.to_vec());
        }
        let mut batch = db.batch();
        for k in &taken {
            batch.remove(&ks, k.as_slice());
        }
        batch.commit().map_err(|e| self.error("remove from an index", e))?;
        self.on_disk = self.on_disk.saturating_sub(out.len());
        if next.is_none() {
            self.on_disk = 0;
        }
        self.boundary = next;
        self.taken_to = taken.pop();
        Ok(out)
    }

    /// Removes every entry of `disk`, noting a failure in `error`.
    fn clear_part(disk: &mut Option<Box<IndexDisk>>, error: &mut Option<Error>) {
        if let Some(Err(e)) = disk.as_mut().map(|d| d.clear()) {
            error.get_or_insert(e);
        }
    }

    /// Removes every entry on disk.
    fn clear(&mut self) -> Result<()> {
        self.pending.clear();
        self.pending_bytes = 0;
        self.on_disk = 0;
        self.hashes.clear();
        self.taken_to = None;
        self.boundary = None;
        if !std::mem::take(&mut self.written) {
            return Ok(());
        }
        let area = self.area()?;
        let prefix = area.prefix;
        let (ks, db) = area.store_handles()?;
        let keys: Vec<Vec<u8>> = ks
            .prefix(prefix)
            .map(|kv| kv.key().map(|k| k.to_vec()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.error("read an index", e))?;
        let mut batch = db.batch();
        for k in &keys {
            batch.remove(&ks, k.as_slice());
        }
        batch.commit().map_err(|e| self.error("remove from an index", e))
    }
}

impl Drop for IndexDisk {
    fn drop(&mut self) {
        if let Err(e) = self.clear() {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::options::{StateBackendKind, StateOptions};
    use weir_sdk::window::Window;

    type E = (Vec<u8>, Window);

    fn disk(dir: &std::path::Path) -> StateBackend {
        StateBackend::of(&StateOptions {
            backend: StateBackendKind::Disk,
            memory_budget: 16 << 10,
            local_dir: Some(dir.display().to_string()),
        })
    }

    fn entry(t: i64, k: u32) -> (Timestamp, E) {
        (t, (format!("key-{k:06}").into_bytes(), Window::Global))
    }

    /// Issue 52: past its cap, an index keeps its latest entries on disk, and reads back as
    /// the same ordered set as one kept in memory, through inserts, removals and pops in any
    /// order.
    #[test]
    fn an_index_past_its_cap_keeps_its_latest_entries_on_disk_and_stays_exact() {
        let dir = tempfile::tempdir().unwrap();
        let backend = disk(dir.path());
        let mut index: TimeIndex<E> = TimeIndex::new(&backend, "step");
        let mut model: BTreeSet<(Timestamp, E)> = BTreeSet::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut max_on_disk = 0;
        for round in 0..40_000 {
            let r = next();
            // Half the entries spread over 5,000 times, half on 20 (fixed windows: many keys'
            // timers at one time).
            let t = if r & 1 == 0 { (r % 5_000) as i64 - 100 } else { (r % 20) as i64 * 250 };
            let e = entry(t, (r >> 20) as u32 % 3_000);
            match r >> 60 {
                0..=8 => {
                    let new = model.insert(e.clone());
                    let added = index.insert(e);
                    // An entry added on disk counts as new.
                    assert!(added || !new, "round {round}");
                }
                9..=12 => {
                    // Removes only entries the index holds, as operators do.
                    if let Some(e) = model.iter().nth((r >> 8) as usize % model.len().max(1)).cloned() {
                        model.remove(&e);
                        assert!(index.remove(&e), "round {round}");
                    }
                }
                _ => match index.pop_first() {
                    // An entry of the earliest time (not necessarily the first of that time).
                    Some(e) => {
                        assert_eq!(Some(e.0), model.first().map(|f| f.0), "round {round}");
                        assert!(model.remove(&e), "round {round}: {e:?} was not held");
                    }
                    None => assert!(model.is_empty(), "round {round}"),
                },
            }
            index.take_error().unwrap();
            assert_eq!(index.first().map(|e| e.0), model.first().map(|e| e.0), "round {round}");
            if let Some(e) = index.first() {
                assert!(model.contains(e), "round {round}");
            }
            if round % 97 == 0 {
                assert_eq!(index.last_time().unwrap(), model.last().map(|(t, _)| *t), "round {round}");
            }
            max_on_disk = max_on_disk.max(index.on_disk());
        }
        assert!(max_on_disk > 1_000, "the index never went to disk: {max_on_disk}");
        // Drained in time order, every entry once.
        let mut drained = Vec::new();
        while let Some(e) = index.pop_first() {
            drained.push(e);
        }
        index.take_error().unwrap();
        assert!(drained.windows(2).all(|w| w[0].0 <= w[1].0));
        drained.sort();
        assert_eq!(drained, model.into_iter().collect::<Vec<_>>());
        assert_eq!(index.on_disk(), 0);
    }

    /// Past its cap, a counted multiset keeps its latest times' counts on disk as parts, and its
    /// earliest time is always a recount's, through adds and removes in any order.
    #[test]
    fn counts_past_their_cap_stay_exact() {
        let dir = tempfile::tempdir().unwrap();
        let backend = disk(dir.path());
        let mut counts = TimeCounts::new(&backend, "step");
        let mut model: BTreeMap<Timestamp, u32> = BTreeMap::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut most = 0;
        for round in 0..60_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Times drift forward as holds do, with removals of held times anywhere.
            if rng % 10 < 6 || model.is_empty() {
                let t = (round / 20) as i64 + (rng >> 40) as i64 % 2_000;
                *model.entry(t).or_insert(0) += 1;
                counts.add(t);
            } else {
                let i = (rng >> 20) as usize % model.len().min(if rng.is_multiple_of(3) { 5 } else { usize::MAX });
                let t = *model.keys().nth(i).unwrap();
                let n = model.get_mut(&t).unwrap();
                *n -= 1;
                if *n == 0 {
                    model.remove(&t);
                }
                counts.remove(t);
            }
            counts.take_error().unwrap();
            assert_eq!(counts.earliest(), model.keys().next().copied(), "round {round}");
            most = most.max(counts.on_disk());
        }
        assert!(most > 100, "the counts never went to disk: {most}");
        // Drained from the earliest: every count comes back whole.
        while let Some(t) = counts.earliest() {
            let n = model.remove(&t).unwrap_or_else(|| panic!("{t} is not held"));
            for _ in 0..n {
                counts.remove(t);
            }
            counts.take_error().unwrap();
            assert_eq!(counts.earliest(), model.keys().next().copied());
        }
        assert!(model.is_empty());
    }

    #[test]
    fn a_cleared_index_is_empty_on_disk_too() {
        let dir = tempfile::tempdir().unwrap();
        let backend = disk(dir.path());
        let mut index: TimeIndex<E> = TimeIndex::new(&backend, "step");
        for i in 0..20_000 {
            index.insert(entry(i, i as u32));
        }
        assert!(index.on_disk() > 0);
        index.clear();
        index.take_error().unwrap();
        assert!(index.is_empty());
        assert_eq!(index.pop_first(), None);
        index.insert(entry(5, 1));
        assert_eq!(index.pop_first(), Some(entry(5, 1)));
        assert_eq!(index.pop_first(), None);
    }

    /// Entries all at one time (every key's timer at a fixed window's end) go to disk past the
    /// cap too, and come back a part at a time.
    #[test]
    fn entries_of_one_time_go_to_disk_and_come_back_in_parts() {
        let dir = tempfile::tempdir().unwrap();
        let backend = disk(dir.path());
        let mut index: TimeIndex<E> = TimeIndex::new(&backend, "step");
        for i in 0..5_000 {
            index.insert(entry(7, i));
        }
        assert!(index.on_disk() > 4_000, "{}", index.on_disk());
        assert!(index.mem.len() < 1_000);
        index.insert(entry(9, 0));
        index.insert(entry(8, 0));
        let drained: Vec<_> = std::iter::from_fn(|| index.pop_first()).collect();
        index.take_error().unwrap();
        assert_eq!(drained.len(), 5_002);
        assert!(drained[..5_000].iter().all(|e| e.0 == 7));
        assert_eq!(&drained[5_000..], &[entry(8, 0), entry(9, 0)]);
    }
}
