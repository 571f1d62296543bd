//! Snapshot: the engine's state as encoded entries, one per key and window plus one of
//! engine-wide data, for checkpoints; and back.

use super::*;

impl GroupAlsoByWindow {
    /// The engine's state as entries: one per key and window (its buffer or accumulator,
    /// trigger, pane and hold state), plus the watermarks under the empty key. Timers and holds
    /// are derived from the entries on restore.
    pub fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(self.state_size() + 1);
        out.push(engine_entry(&self.step, self.watermarks, self.processing_time, self.counts.dropped)?);
        for (key, windows) in &self.keys {
            for (window, state) in windows.iter() {
                out.push((
                    crate::checkpoint::entry_key(&self.step, key, window)?,
                    crate::checkpoint::encode(&self.step, &state.repr(&self.fresh))?,
                ));
            }
        }
        self.for_each_spilled(|key, window, state| {
            out.push((
                crate::checkpoint::entry_key(&self.step, key, &window)?,
                crate::checkpoint::encode(&self.step, &state.repr(&self.fresh))?,
            ));
            Ok(())
        })?;
        Ok(out)
    }

    /// The entries written and removed since the last call, as [`GroupAlsoByWindow::state_entries`]
    /// encodes them (the engine-wide entry always among them); `None` at the first call, from
    /// which on changes are kept.
    pub fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        let Some(dirty) = self.dirty.take() else { return Ok(None) };
        let mut written = Vec::with_capacity(dirty.len() + 1);
        written.push(engine_entry(&self.step, self.watermarks, self.processing_time, self.counts.dropped)?);
        let mut removed = Vec::new();
        for (key, window) in dirty {
            let entry = crate::checkpoint::entry_key(&self.step, &key, &window)?;
            match self.keys.get(&key).and_then(|w| w.get(&window)) {
                Some(state) => written.push((entry, crate::checkpoint::encode(&self.step, &state.repr(&self.fresh))?)),
                // A key moved to disk since it changed.
                None => match self.spilled_state(&key, &window)? {
                    Some(state) => {
                        written.push((entry, crate::checkpoint::encode(&self.step, &state.repr(&self.fresh))?))
                    }
                    None => removed.push(entry),
                },
            }
        }
        Ok(Some((written, removed)))
    }

    /// Spreads state as `old.len()` partitions wrote it over `n` (see [`rescale_keyed`]).
    pub fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        rescale_keyed(&self.step, old, n)
    }

    /// The new partition of a state entry's key (see [`crate::operator::Operator::rescale_partition`]).
    pub fn rescale_partition(&self, entry: &[u8], n: usize) -> Result<Option<usize>> {
        crate::checkpoint::keyed_partition(&self.step, entry, n)
    }

    /// Restores state from [`GroupAlsoByWindow::state_entries`], rebuilding timers and holds.
    pub fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.keys.clear();
        self.clear_spilled()?;
        self.expiring = None;
        // The state is what was committed: the next commit writes what changes from here.
        self.dirty.forget();
        self.dirty.keep();
        self.counts.windows = 0;
        self.counts.bytes = 0;
        self.timers.event_timers.clear();
        self.timers.processing_timers.clear();
        self.timers.holds.clear();
        self.timers.tracked = false;
        for (i, (entry, value)) in entries.into_iter().enumerate() {
            // State past the budget leaves memory while it is restored, not after.
            if i % 4096 == 4095 {
                self.evict_over_budget()?;
            }
            if entry.is_empty() {
                (self.watermarks, self.processing_time, self.counts.dropped) =
                    restore_engine_entry(&self.step, &value)?;
                continue;
            }
            let (key, window) = crate::checkpoint::split_entry_key(&self.step, &entry)?;
            let key: Key = Key::from(&key[..]);
            let repr: OwnedStateRepr = crate::checkpoint::decode(&self.step, &value)?;
            let state = WindowState::from_repr(repr, &self.fresh);
            let (closed, pt_timer) = (state.closed, state.pt_timer());
            self.counts.bytes += key_map::state_bytes(&key, &state);
            let windows = self.keys.entry(key.clone()).or_default();
            if let Some(old) = windows.get(&window) {
                // A repeated entry replaces the first (entries come from one map: never).
                self.counts.bytes -= key_map::state_bytes(&key, old);
            }
            if windows.insert(window, state) {
                self.counts.windows += 1;
            }
            if let (Some(t), false) = (pt_timer, closed) {
                self.timers.processing_timers.insert((t, (key.clone(), window)));
            }
        }
        if self.watermarks.input() > MIN_TIMESTAMP {
            self.track()?;
        }
        self.evict_over_budget()?;
        // The map grew for what was restored; what stays is what the budget allows.
        self.keys.shrink_to_fit();
        Ok(())
    }
}

/// Spreads the state of a grouping step as `old.len()` partitions wrote it over `n`, by key;
/// each new partition's engine-wide entry is the old ones' merged: the lowest watermarks, the
/// latest processing time, the drops summed. The layout of both grouping engines (the general
/// one and [`crate::window_aggregation`]).
pub fn rescale_keyed(
    step: &str,
    old: Vec<crate::checkpoint::Entries>,
    n: usize,
) -> Result<Vec<crate::checkpoint::Entries>> {
    crate::checkpoint::spread_keyed(step, old, n, |metas| {
        let mut merged: Meta = (MAX_TIMESTAMP, MAX_TIMESTAMP, MIN_TIMESTAMP, 0, 0);
        for m in metas {
            let (i, o, pt, late, closed): Meta = crate::checkpoint::decode(step, &m)?;
            let a = merged;
            merged = (a.0.min(i), a.1.min(o), a.2.max(pt), a.3 + late, a.4 + closed);
        }
        crate::checkpoint::encode(step, &merged)
    })
}

/// The engine-wide entry of a grouping step's state (under the empty key): its watermarks,
/// processing time and drops. The layout of both grouping engines.
type Meta = (Timestamp, Timestamp, Timestamp, u64, u64);

/// Encodes the engine-wide entry of a grouping step (see [`rescale_keyed`]).
pub fn engine_entry(
    step: &str,
    watermarks: Watermarks,
    processing_time: Timestamp,
    dropped: DropCounts,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let meta: Meta = (watermarks.input(), watermarks.output(), processing_time, dropped.late, dropped.closed);
    Ok((Vec::new(), crate::checkpoint::encode(step, &meta)?))
}

/// Decodes an entry written by [`engine_entry`].
pub fn restore_engine_entry(step: &str, value: &[u8]) -> Result<(Watermarks, Timestamp, DropCounts)> {
    let (input, output, pt, late, closed): Meta = crate::checkpoint::decode(step, value)?;
    Ok((Watermarks::restored(input, output), pt, DropCounts { late, closed }))
}
