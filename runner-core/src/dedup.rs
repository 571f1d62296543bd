//! Streaming deduplicate: the native form of the SDK's `Deduplicate` (as Spark's
//! `dropDuplicatesWithinWatermark`). Keeps the first element of each key and window and
//! remembers the key until the watermark passes its first timestamp plus the duration (or the
//! window expires, if sooner); then the key is forgotten and state stays bounded.
//!
//! It gives exactly what the composite's stateful ParDo expansion gives (same elements kept,
//! same expiry, elements of expired windows dropped as late), with one hash lookup per element
//! instead of a state cell and a timer per key.
//!
//! With `--state-backend disk`, past its share of the memory budget the operator moves the keys
//! that expire first (those seen longest ago, the least likely to come again) to disk, each
//! move a part of its own ([`crate::state_backend::Spill::sibling`]) knowing the span of its
//! expiries. A key not in memory is looked up in the parts that may hold it (a hash set each,
//! then the store). When the watermark passes a part's earliest expiry its expired keys are
//! forgotten (the whole part once it passes the latest), so every key is forgotten at the same
//! watermark on either backend.

use crate::group_also_by_window::{DropCounts, StateChanges};
use crate::operator::{OpContext, Operator};
use crate::state_backend::{Spill, StateBackend};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_sdk::kernel::Batch;
use weir_sdk::runner_api::DedupKernel;
use weir_sdk::time::{Timestamp, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::{Error, Result, WithStepExt};

/// A key shared by the seen map and the expiry queue.
type Key = Arc<[u8]>;

/// Looks a borrowed key and window up in the seen map (hashes as `(Key, Window)` does).
#[derive(Hash)]
struct Probe<'a>(&'a [u8], Window);

impl hashbrown::Equivalent<(Key, Window)> for Probe<'_> {
    fn equivalent(&self, (key, window): &(Key, Window)) -> bool {
        *self.0 == **key && self.1 == *window
    }
}

/// The streaming deduplicate operator of one partition.
pub struct DedupOperator {
    step: String,
    strategy: WindowingStrategy,
    kernel: Arc<dyn DedupKernel>,
    duration_ms: i64,
    /// Remembered keys and windows, with when each is forgotten.
    seen: hashbrown::HashMap<(Key, Window), Timestamp>,
    /// Keys and windows by expiry (each entry is in `seen` with the same expiry).
    expiry: BTreeMap<Timestamp, Vec<(Key, Window)>>,
    input_watermark: Timestamp,
    dropped: DropCounts,
    changes: StateChanges,
    /// Keys and windows remembered or forgotten since a checkpoint last took them
    /// ([`Operator::take_changed_entries`]); not kept until a checkpoint first asks.
    dirty: crate::checkpoint::Changed<(Key, Window)>,
    /// Approximate bytes of `seen`.
    bytes: usize,
    /// The disk backend's part, when the backend is disk.
    disk: Option<Box<Disk>>,
}

/// The operator's part of the disk backend.
struct Disk {
    backend: StateBackend,
    /// The operator's area, opened with its first key: it counts the operator in the budget's
    /// shares. The parts are its siblings.
    area: Option<Spill>,
    parts: Vec<Part>,
    /// Lookups answered from memory alone (the key in memory, or in no part's set), and by
    /// reading the disk.
    hits: u64,
    misses: u64,
    /// Bytes written by parts gone.
    spilled_before: usize,
}

/// Keys moved to disk together, with the span of their expiries.
struct Part {
    spill: Spill,
    first: Timestamp,
    last: Timestamp,
    rows: usize,
}

/// The memory a remembered key takes beside its bytes (its map slot and queue entry).
const ENTRY_BYTES: usize = 64;

impl Disk {
    /// When `entry` (a checkpoint's entry key) is on disk, when it expires; with whether the
    /// disk was read to know.
    fn find(&self, step: &str, entry: &[u8]) -> Result<(Option<Timestamp>, bool)> {
        let mut read = false;
        for part in self.parts.iter().filter(|p| p.spill.may_hold(entry)) {
            read = true;
            if let Some(v) = part.spill.peek(entry)? {
                return Ok((Some(crate::checkpoint::decode(step, &v)?), true));
            }
        }
        Ok((None, read))
    }
}

impl DedupOperator {
    /// The operator for step `step` over input windowed by `strategy`, remembering keys for
    /// `duration_ms` after their first timestamp.
    pub fn new(step: &str, strategy: WindowingStrategy, kernel: Arc<dyn DedupKernel>, duration_ms: i64) -> Self {
        DedupOperator {
            step: step.to_string(),
            strategy,
            kernel,
            duration_ms,
            seen: hashbrown::HashMap::new(),
            expiry: BTreeMap::new(),
            input_watermark: MIN_TIMESTAMP,
            dropped: DropCounts::default(),
            changes: StateChanges::default(),
            dirty: Default::default(),
            bytes: 0,
            disk: None,
        }
    }

    /// The same operator keeping its state where `state` says.
    pub fn with_state(mut self, state: &StateBackend) -> Self {
        if state.is_disk() {
            self.disk = Some(Box::new(Disk {
                backend: state.clone(),
                area: None,
                parts: Vec::new(),
                hits: 0,
                misses: 0,
                spilled_before: 0,
            }));
        }
        self
    }

    fn remember(&mut self, key: Key, window: Window, expires: Timestamp) {
        self.bytes += key.len() + ENTRY_BYTES;
        self.expiry.entry(expires).or_default().push((key.clone(), window));
        self.seen.insert((key, window), expires);
    }

    /// Moves the keys that expire first to disk, as a new part, while the operator holds more
    /// than its share of the memory budget, down to three quarters of it.
    fn evict_over_budget(&mut self) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        if disk.area.is_none() {
            if self.seen.is_empty() {
                return Ok(());
            }
            disk.area = disk.backend.spill(&self.step)?;
        }
        let Some(area) = disk.area.as_mut() else { return Ok(()) };
        let budget = area.budget_for(self.bytes);
        if self.bytes <= budget {
            return Ok(());
        }
        let target = budget / 4 * 3;
        let mut out = Vec::new();
        let (mut first, mut last) = (None, MIN_TIMESTAMP);
        while self.bytes > target {
            let Some((expires, keys)) = self.expiry.pop_first() else { break };
            for (key, window) in keys {
                let k = (key, window);
                if self.seen.get(&k) != Some(&expires) {
                    continue;
                }
                self.seen.remove(&k);
                self.bytes -= (k.0.len() + ENTRY_BYTES).min(self.bytes);
                first.get_or_insert(expires);
                last = expires;
                out.push((
                    crate::checkpoint::entry_key(&self.step, &k.0, &k.1)?,
                    crate::checkpoint::encode(&self.step, &expires)?,
                ));
            }
        }
        area.report(self.bytes);
        let Some(first) = first else { return Ok(()) };
        let mut part = Part { spill: area.sibling(), first, last, rows: out.len() };
        out.sort_unstable_by(|a, b| crate::state_backend::key_order(&a.0, &b.0));
        part.spill.put(out)?;
        disk.parts.push(part);
        Ok(())
    }

    /// Forgets the keys on disk whose expiry the watermark passed.
    fn expire_on_disk(&mut self) -> Result<()> {
        let wm = self.input_watermark;
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        let mut i = 0;
        while i < disk.parts.len() {
            let part = &mut disk.parts[i];
            if part.first >= wm {
                i += 1;
                continue;
            }
            let whole = part.last < wm;
            let (mut gone, mut first) = (Vec::new(), None::<Timestamp>);
            part.spill.for_each(|entry, values| {
                let Some(v) = values.last() else { return Ok(()) };
                let expires: Timestamp = crate::checkpoint::decode(&self.step, v)?;
                if expires < wm {
                    gone.push(entry.to_vec());
                } else {
                    first = Some(first.map_or(expires, |f| f.min(expires)));
                }
                Ok(())
            })?;
            for entry in &gone {
                let (key, window) = crate::checkpoint::split_entry_key(&self.step, entry)?;
                self.dirty.mark((Arc::from(key), window));
            }
            self.changes.removed += gone.len() as u64;
            if whole || first.is_none() {
                let gone = disk.parts.remove(i);
                disk.spilled_before += gone.spill.spilled_total();
                continue;
            }
            for entry in &gone {
                part.spill.take_all(entry)?;
            }
            part.rows -= gone.len().min(part.rows);
            part.first = first.unwrap_or(part.last);
            i += 1;
        }
        Ok(())
    }
}

impl Operator for DedupOperator {
    fn process(&mut self, input: Batch, _: &OpContext<'_>) -> Result<Vec<Batch>> {
        let DedupOperator {
            step, strategy, kernel, duration_ms, seen, input_watermark, dropped, changes, disk, ..
        } = self;
        let (wm, duration) = (*input_watermark, *duration_ms);
        let mut new: Vec<(Key, Window, Timestamp)> = Vec::new();
        let mut failed: Option<Error> = None;
        let kept = kernel
            .retain(input, &mut |key, window, timestamp| {
                let gc = strategy.gc_time(window);
                if gc < wm {
                    // The window expired: late data never reaches the deduplication.
                    dropped.late += 1;
                    return false;
                }
                if seen.contains_key(&Probe(key, *window)) {
                    if let Some(d) = disk.as_mut() {
                        d.hits += 1;
                    }
                    return false;
                }
                if let Some(d) = disk.as_mut() {
                    let found = match d.parts.is_empty() {
                        true => Ok((None, false)),
                        false => crate::checkpoint::entry_key(step, key, window).and_then(|e| d.find(step, &e)),
                    };
                    match found {
                        Ok((found, read)) => {
                            *(if read { &mut d.misses } else { &mut d.hits }) += 1;
                            if found.is_some() {
                                return false;
                            }
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                            return false;
                        }
                    }
                }
                let key: Key = Arc::from(key);
                let expires = timestamp.saturating_add(duration).min(gc);
                seen.insert((key.clone(), *window), expires);
                new.push((key, *window, expires));
                changes.updated += 1;
                true
            })
            .with_step(&self.step)?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (key, window, expires) in new {
            self.bytes += key.len() + ENTRY_BYTES;
            self.dirty.mark((key.clone(), window));
            self.expiry.entry(expires).or_default().push((key, window));
        }
        self.evict_over_budget()?;
        Ok(vec![kept])
    }

    fn advance(&mut self, input_watermark: Timestamp, _: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.input_watermark = self.input_watermark.max(input_watermark);
        // A key is forgotten once the watermark is past its expiry (as its timer would fire).
        while let Some(entry) = self.expiry.first_entry() {
            if *entry.key() >= self.input_watermark {
                break;
            }
            let expires = *entry.key();
            for (key, window) in entry.remove() {
                let k = (key, window);
                if self.seen.get(&k) == Some(&expires) {
                    self.seen.remove(&k);
                    self.bytes -= (k.0.len() + ENTRY_BYTES).min(self.bytes);
                    self.changes.removed += 1;
                    self.dirty.mark(k);
                }
            }
        }
        self.expire_on_disk()?;
        Ok(Vec::new())
    }

    fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        let Some(disk) = &self.disk else { return Vec::new() };
        let rows = disk.parts.iter().map(|p| p.rows).sum();
        let areas = disk.parts.iter().map(|p| &p.spill);
        Spill::metrics(areas, disk.spilled_before, rows, disk.hits, disk.misses)
    }

    fn dropped(&self) -> DropCounts {
        self.dropped
    }

    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(self.seen.len() + 1);
        out.push((Vec::new(), crate::checkpoint::encode(&self.step, &(self.input_watermark, self.dropped.late))?));
        for ((key, window), expires) in &self.seen {
            out.push((
                crate::checkpoint::entry_key(&self.step, key, window)?,
                crate::checkpoint::encode(&self.step, expires)?,
            ));
        }
        for part in self.disk.iter().flat_map(|d| &d.parts) {
            part.spill.for_each(|entry, values| {
                if let Some(v) = values.last() {
                    out.push((entry.to_vec(), v.clone()));
                }
                Ok(())
            })?;
        }
        Ok(out)
    }

    fn rescale_partition(&self, entry: &[u8], n: usize) -> Result<Option<usize>> {
        crate::checkpoint::keyed_partition(&self.step, entry, n)
    }

    /// By key; each new partition's bookkeeping is the lowest watermark, the drops summed.
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        crate::checkpoint::spread_keyed(&self.step, old, n, |metas| {
            let mut merged: (Timestamp, u64) = (weir_sdk::time::MAX_TIMESTAMP, 0);
            for m in metas {
                let (wm, late): (Timestamp, u64) = crate::checkpoint::decode(&self.step, &m)?;
                merged = (merged.0.min(wm), merged.1 + late);
            }
            crate::checkpoint::encode(&self.step, &merged)
        })
    }

    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        let Some(dirty) = self.dirty.take() else { return Ok(None) };
        let meta = crate::checkpoint::encode(&self.step, &(self.input_watermark, self.dropped.late))?;
        let (mut written, mut removed) = (vec![(Vec::new(), meta)], Vec::new());
        for (key, window) in dirty {
            let entry = crate::checkpoint::entry_key(&self.step, &key, &window)?;
            let held = match self.seen.get(&(key, window)) {
                Some(expires) => Some(*expires),
                // Moved to disk since it changed.
                None => match &self.disk {
                    Some(d) => d.find(&self.step, &entry)?.0,
                    None => None,
                },
            };
            match held {
                Some(expires) => written.push((entry, crate::checkpoint::encode(&self.step, &expires)?)),
                None => removed.push(entry),
            }
        }
        Ok(Some((written, removed)))
    }

    fn restore_keeps_changes(&self) -> bool {
        true
    }

    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.seen.clear();
        self.expiry.clear();
        // The state is what was committed: the next commit writes what changes from here.
        self.dirty.forget();
        self.dirty.keep();
        self.bytes = 0;
        if let Some(disk) = self.disk.as_mut() {
            for gone in disk.parts.drain(..) {
                disk.spilled_before += gone.spill.spilled_total();
            }
        }
        for (i, (entry, value)) in entries.into_iter().enumerate() {
            if i % 4096 == 4095 {
                self.evict_over_budget()?;
            }
            if entry.is_empty() {
                let (wm, late): (Timestamp, u64) = crate::checkpoint::decode(&self.step, &value)?;
                self.input_watermark = wm;
                self.dropped.late = late;
                continue;
            }
            let (key, window) = crate::checkpoint::split_entry_key(&self.step, &entry)?;
            let expires: Timestamp = crate::checkpoint::decode(&self.step, &value)?;
            self.remember(Arc::from(key), window, expires);
        }
        self.evict_over_budget()
    }

    fn state_rows(&self) -> usize {
        self.seen.len() + self.disk.iter().flat_map(|d| &d.parts).map(|p| p.rows).sum::<usize>()
    }

    fn state_bytes(&self) -> usize {
        self.bytes
    }

    fn take_state_changes(&mut self) -> StateChanges {
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricsContainerImpl;
    use weir_sdk::kernel::downcast_batch;
    use weir_sdk::kv::KV;
    use weir_sdk::pane::PaneInfo;
    use weir_sdk::runner_api::DeduplicatePayload;
    use weir_sdk::windowed_value::WindowedValue;

    fn batch(items: &[(&str, Timestamp)]) -> Batch {
        let v: Vec<WindowedValue<KV<String, ()>>> = items
            .iter()
            .map(|(k, t)| WindowedValue {
                value: KV::new(k.to_string(), ()),
                timestamp: *t,
                window: Window::Global,
                pane: PaneInfo::NO_FIRING,
            })
            .collect();
        Batch::new(v)
    }

    fn keys(b: Batch) -> Vec<String> {
        downcast_batch::<KV<String, ()>>(b).unwrap().into_iter().map(|wv| wv.value.key).collect()
    }

    fn operator() -> DedupOperator {
        let p = DeduplicatePayload::new::<String, ()>(100);
        DedupOperator::new("Dedup", WindowingStrategy::global(), p.kernel, p.duration_ms)
    }

    #[test]
    fn keeps_first_per_key_forgets_after_expiry_and_survives_a_restore() {
        let metrics = MetricsContainerImpl::new();
        let ctx = OpContext { processing_time: 0, metrics: &metrics, draining: false };
        let mut op = operator();
        let mut committed = crate::operator::testing::Committed::default();
        committed.commit(&mut op);
        let out = op.process(batch(&[("a", 0), ("b", 10), ("a", 20)]), &ctx).unwrap();
        assert_eq!(keys(out.into_iter().next().unwrap()), ["a", "b"]);
        committed.commit(&mut op);
        assert_eq!(op.take_state_changes(), StateChanges { updated: 2, removed: 0 });
        // The watermark passes "a"'s expiry (0 + 100) but not "b"'s (110).
        op.advance(105, &ctx).unwrap();
        assert_eq!(op.state_rows(), 1);
        committed.commit(&mut op);
        assert_eq!(op.take_state_changes(), StateChanges { updated: 0, removed: 1 });
        // Restored from its entries, the operator still remembers "b" and only "b".
        let mut restored = operator();
        restored.restore_entries(op.state_entries().unwrap()).unwrap();
        let out = restored.process(batch(&[("a", 120), ("b", 120)]), &ctx).unwrap();
        assert_eq!(keys(out.into_iter().next().unwrap()), ["a"]);
    }

    /// On the disk backend with a budget of a few keys, random keys and watermarks keep and
    /// forget exactly what the memory backend does, with the same rows and the same changes
    /// for checkpoints, through restores.
    #[test]
    fn on_disk_keys_are_kept_and_forgotten_as_in_memory() {
        use rand::{Rng, SeedableRng};
        let metrics = MetricsContainerImpl::new();
        let ctx = OpContext { processing_time: 0, metrics: &metrics, draining: false };
        let (mut looked_up, mut forgotten_on_disk) = (0, 0);
        for seed in 0..30u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let dir = tempfile::tempdir().unwrap();
            let backend = StateBackend::of(&weir_sdk::options::StateOptions {
                backend: weir_sdk::options::StateBackendKind::Disk,
                memory_budget: rng.random_range(100..1000),
                local_dir: Some(dir.path().display().to_string()),
            });
            let on_disk = || operator().with_state(&backend);
            let (mut memory, mut disk) = (operator(), on_disk());
            let (mut a, mut b) =
                (crate::operator::testing::Committed::default(), crate::operator::testing::Committed::default());
            let mut wm = 0;
            for step in 0..40 {
                let names: Vec<String> =
                    (0..rng.random_range(0..30)).map(|_| format!("k{}", rng.random_range(0..60))).collect();
                let items: Vec<(&str, Timestamp)> =
                    names.iter().map(|k| (k.as_str(), wm + rng.random_range(0..50))).collect();
                let want = keys(memory.process(batch(&items), &ctx).unwrap().remove(0));
                let got = keys(disk.process(batch(&items), &ctx).unwrap().remove(0));
                assert_eq!(got, want, "seed {seed}, step {step}");
                wm += rng.random_range(0..40);
                memory.advance(wm, &ctx).unwrap();
                let before = disk.state_backend_metrics();
                disk.advance(wm, &ctx).unwrap();
                assert_eq!(disk.state_rows(), memory.state_rows(), "seed {seed}, step {step}");
                assert_eq!(disk.take_state_changes(), memory.take_state_changes(), "seed {seed}, step {step}");
                let rows = |m: &[(&str, u64)]| m.iter().find(|(n, _)| *n == "stateOnDiskRows").map_or(0, |(_, v)| *v);
                forgotten_on_disk += rows(&before).saturating_sub(rows(&disk.state_backend_metrics()));
                looked_up +=
                    disk.state_backend_metrics().iter().find(|(n, _)| *n == "cacheMissCount").map_or(0, |(_, v)| *v);
                a.commit(&mut memory);
                b.commit(&mut disk);
                if rng.random_bool(0.1) {
                    let mut entries = disk.state_entries().unwrap();
                    let mut want = memory.state_entries().unwrap();
                    entries.sort();
                    want.sort();
                    assert_eq!(entries, want, "seed {seed}, step {step}: the snapshot");
                    disk = on_disk();
                    b = crate::operator::testing::Committed::restored(&entries);
                    disk.restore_entries(entries).unwrap();
                }
            }
        }
        assert!(
            looked_up > 0 && forgotten_on_disk > 0,
            "{looked_up} found on disk, {forgotten_on_disk} forgotten there"
        );
    }
}
