//! Streaming deduplicate: the native form of the SDK's `Deduplicate` (as Spark's
//! `dropDuplicatesWithinWatermark`). Keeps the first element of each key and window and
//! remembers the key until the watermark passes its first timestamp plus the duration (or the
//! window expires, if sooner); then the key is forgotten and state stays bounded.
//!
//! It gives exactly what the composite's stateful ParDo expansion gives (same elements kept,
//! same expiry, elements of expired windows dropped as late), with one hash lookup per element
//! instead of a state cell and a timer per key.

use crate::group_also_by_window::{DropCounts, StateChanges};
use crate::operator::{OpContext, Operator};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_sdk::kernel::Batch;
use weir_sdk::runner_api::DedupKernel;
use weir_sdk::time::{Timestamp, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::{Result, WithStepExt};

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
        }
    }

    fn remember(&mut self, key: Key, window: Window, expires: Timestamp) {
        self.expiry.entry(expires).or_default().push((key.clone(), window));
        self.seen.insert((key, window), expires);
    }
}

impl Operator for DedupOperator {
    fn process(&mut self, input: Batch, _: &OpContext<'_>) -> Result<Vec<Batch>> {
        let DedupOperator { strategy, kernel, duration_ms, seen, input_watermark, dropped, changes, .. } = self;
        let (wm, duration) = (*input_watermark, *duration_ms);
        let mut new: Vec<(Key, Window, Timestamp)> = Vec::new();
        let kept = kernel
            .retain(input, &mut |key, window, timestamp| {
                let gc = strategy.gc_time(window);
                if gc < wm {
                    // The window expired: late data never reaches the deduplication.
                    dropped.late += 1;
                    return false;
                }
                if seen.contains_key(&Probe(key, *window)) {
                    return false;
                }
                let key: Key = Arc::from(key);
                let expires = timestamp.saturating_add(duration).min(gc);
                seen.insert((key.clone(), *window), expires);
                new.push((key, *window, expires));
                changes.updated += 1;
                true
            })
            .with_step(&self.step)?;
        for (key, window, expires) in new {
            self.dirty.mark((key.clone(), window));
            self.expiry.entry(expires).or_default().push((key, window));
        }
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
                    self.changes.removed += 1;
                    self.dirty.mark(k);
                }
            }
        }
        Ok(Vec::new())
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
        Ok(out)
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
            match self.seen.get(&(key, window)) {
                Some(expires) => written.push((entry, crate::checkpoint::encode(&self.step, expires)?)),
                None => removed.push(entry),
            }
        }
        Ok(Some((written, removed)))
    }

    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.seen.clear();
        self.expiry.clear();
        self.dirty.forget();
        for (entry, value) in entries {
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
        Ok(())
    }

    fn state_rows(&self) -> usize {
        self.seen.len()
    }

    fn state_bytes(&self) -> usize {
        self.seen.keys().map(|(k, _)| k.len() + 64).sum()
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
}
