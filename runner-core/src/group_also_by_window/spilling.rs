//! State beyond memory (`--state-backend disk`): past its share of the memory budget, the
//! engine moves its least recently touched keys, all their windows encoded together, to the
//! job's disk store ([`crate::state_backend`]), and reads a key back before anything looks at
//! it: a batch's rows, a timer, the end of the input.
//!
//! The window states move here; their timers and watermark holds are indexes ordered by time
//! that keep their earliest entries in memory and their latest on the store past a cap of their
//! own ([`crate::state_backend::TimeIndex`], [`crate::state_backend::TimeCounts`]), so the
//! output watermark and every due timer are known without reading the disk; a timer of a key on
//! disk reads it back when it fires. A bounded
//! input, whose windows all wait for its end, thus groups any amount of data in a fixed amount
//! of memory: at its end the keys on disk come back in key order, a run at a time.
//!
//! While nothing can fire before the input ends (a bounded input, windows fired by the
//! watermark alone), a batch's rows for a key on disk are not read back: the key's new values
//! gather in memory and leave at the end of the call as a new fragment beside the key's others
//! (as Flink's RocksDB backend appends to a list state without reading it). A key read back
//! later has its fragments merged: the same window's states into one, and windows that merge
//! merged by the window function. Each value is then written once, and a call's memory holds
//! what its rows add, not the whole state of every key they touch.

use super::*;
use crate::state_backend::{Spill, StateBackend};

/// The engine's part of the disk backend.
pub(super) struct Disk {
    backend: StateBackend,
    /// Opened when the engine first passes its budget.
    spill: Option<Spill>,
    /// Counts calls: each resident key notes the last call that touched it.
    tick: u32,
    /// Window states on disk.
    windows: usize,
    /// Keys a batch's rows or a timer found in memory, and read back from disk.
    hits: u64,
    misses: u64,
    /// Keys on disk whose new values this call gathers in memory, to leave as a new fragment at
    /// its end.
    partial: Vec<Key>,
}

/// Most keys read back from disk at a time at the end of the input; a run also holds at most
/// a call's worth of values ([`GroupAlsoByWindow::output_limit`]), encoded.
const RUN: usize = 4096;

/// Most bytes of values one call fires at the end of time, when keys went to disk: what the
/// call's output (decoded, and what the steps after it make of it) adds to the state in
/// memory. An eighth of the engine's share of the budget, and no more than this.
const END_CALL_BYTES: usize = 32 << 20;

/// Most bytes of encoded state one write to the store carries.
const WRITE_BYTES: usize = 8 << 20;

/// A call's worth of values at the end of time (see [`END_CALL_BYTES`]).
fn call_bytes(spill: &Spill) -> usize {
    (spill.budget() / 8).clamp(1, END_CALL_BYTES)
}

/// A key's windows as the disk holds them: each window with its state and the change epoch it
/// was last counted in.
type OnDisk<'a> = Vec<(Window, u64, StateRepr<'a>)>;
type OwnedOnDisk = Vec<(Window, u64, OwnedStateRepr)>;
/// A key's window states read back: each window with its state and its change epoch.
type KeyStates = Vec<(Window, u64, WindowState)>;

impl GroupAlsoByWindow {
    /// The same engine keeping its state where `state` says.
    pub fn with_state(mut self, state: &StateBackend) -> Self {
        if state.is_disk() {
            self.timers.event_timers = crate::state_backend::TimeIndex::new(state, &self.step);
            self.timers.processing_timers = crate::state_backend::TimeIndex::new(state, &self.step);
            self.timers.holds = RunningHolds::new(state, &self.step);
            self.disk = Some(Box::new(Disk {
                backend: state.clone(),
                spill: None,
                tick: 0,
                windows: 0,
                hits: 0,
                misses: 0,
                partial: Vec::new(),
            }));
        }
        self
    }

    /// How many bytes of values one call fires at the end of time once any key went to disk
    /// (an eighth of the engine's share of the budget, at most [`END_CALL_BYTES`]); else no
    /// limit.
    pub(super) fn output_limit(&self) -> Option<usize> {
        self.spill_area().filter(|_| self.has_spilled()).map(call_bytes)
    }

    /// The disk backend's figures (see [`crate::operator::Operator::state_backend_metrics`]);
    /// none on the memory backend.
    pub fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        let Some(disk) = &self.disk else { return Vec::new() };
        let mut metrics = Spill::metrics(disk.spill.as_ref(), 0, disk.windows, disk.hits, disk.misses);
        let timers = &self.timers;
        let on_disk = timers.event_timers.on_disk() + timers.processing_timers.on_disk() + timers.holds.on_disk();
        metrics.push(("indexEntriesOnDisk", on_disk as u64));
        metrics
    }

    /// Bytes of window state on disk.
    pub fn spilled_bytes(&self) -> usize {
        self.spill_area().map_or(0, Spill::bytes_on_disk)
    }

    /// Window states on disk.
    pub fn spilled_windows(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.windows)
    }

    fn spill_area(&self) -> Option<&Spill> {
        self.disk.as_ref().and_then(|d| d.spill.as_ref())
    }

    /// Whether any key is on disk.
    pub(super) fn has_spilled(&self) -> bool {
        self.spill_area().is_some_and(|s| !s.is_empty())
    }

    /// Whether rows for keys on disk add their values beside them instead of reading them back
    /// (see the module's text): while nothing fires before the input ends (the input watermark
    /// at its start, windows fired by the watermark alone) and no checkpoint keeps changes.
    fn defers_reads(&self) -> bool {
        use weir_sdk::trigger::Trigger;
        self.expiring.is_none()
            && !self.timers.tracked
            && self.watermarks.input() == MIN_TIMESTAMP
            && !self.dirty.is_kept()
            && matches!(
                self.strategy.trigger,
                Trigger::Default | Trigger::Never | Trigger::AfterWatermark { early: None, .. }
            )
    }

    /// Reads back every key of `batch` that is on disk (or, while reads are deferred, starts
    /// gathering its new values), and notes the others touched.
    pub(super) fn read_back_rows(&mut self, batch: &EncodedKvBatch) -> Result<()> {
        let defers = self.defers_reads();
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        disk.tick = disk.tick.wrapping_add(1);
        let (tick, spilled) = (disk.tick, disk.spill.as_ref().is_some_and(|s| !s.is_empty()));
        for i in 0..batch.rows.len() {
            let key = batch.key(i);
            match self.keys.get_mut(key) {
                Some(windows) if windows.touched == tick => {}
                Some(windows) => {
                    windows.touched = tick;
                    if let Some(d) = self.disk.as_mut() {
                        d.hits += 1;
                    }
                }
                None if spilled && defers => {
                    let Some(d) = self.disk.as_mut() else { continue };
                    if d.spill.as_ref().is_some_and(|s| s.may_hold(key)) {
                        let key = Key::from(key);
                        self.keys.insert(key.clone(), KeyWindows { touched: tick, ..KeyWindows::default() });
                        d.partial.push(key);
                    }
                }
                None if spilled => {
                    self.read_back(key)?;
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Reads `key` back from disk if it is there.
    pub(super) fn read_back(&mut self, key: &[u8]) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        let Some(spill) = disk.spill.as_mut().filter(|s| s.may_hold(key)) else { return Ok(()) };
        if self.keys.contains_key(key) {
            return Ok(());
        }
        let fragments = spill.take_all(key)?;
        if fragments.is_empty() {
            return Ok(());
        }
        disk.misses += 1;
        self.resume_key(key, &fragments)
    }

    /// A key's fragments as one state: each window's states merged, and then, for windows that
    /// merge, the windows the window function merges; with how many window states the
    /// fragments held.
    fn decode_fragments(&self, fragments: &[Vec<u8>]) -> Result<(KeyStates, usize)> {
        let mut out: KeyStates = Vec::new();
        let mut stored = 0;
        for bytes in fragments {
            let states: OwnedOnDisk = crate::checkpoint::decode(&self.step, bytes)?;
            stored += states.len();
            for (window, updated_in, repr) in states {
                let state = WindowState::from_repr(repr, &self.fresh);
                match out.iter_mut().find(|(w, _, _)| *w == window) {
                    Some((_, updated, existing)) => {
                        let older = std::mem::take(existing);
                        *existing = self.merge_states(&window, vec![older, state])?;
                        *updated = (*updated).max(updated_in);
                    }
                    None => out.push((window, updated_in, state)),
                }
            }
        }
        if fragments.len() > 1 && self.strategy.needs_merge() {
            let windows: Vec<Window> = out.iter().map(|(w, _, _)| *w).collect();
            let merges =
                self.strategy.window_fn.try_merge_windows(&windows).map_err(|e| {
                    weir_sdk::Error::execution(self.step.clone(), format!("merging windows failed: {e}"))
                })?;
            for (sources, merged) in merges {
                let (mut states, mut updated) = (Vec::new(), 0);
                let mut i = 0;
                while i < out.len() {
                    if out[i].0 == merged || sources.contains(&out[i].0) {
                        let (_, u, state) = out.swap_remove(i);
                        updated = updated.max(u);
                        states.push(state);
                    } else {
                        i += 1;
                    }
                }
                if !states.is_empty() {
                    let state = self.merge_states(&merged, states)?;
                    out.push((merged, updated, state));
                }
            }
        }
        Ok((out, stored))
    }

    /// Puts a key read back from disk (its fragments) into the key map.
    fn resume_key(&mut self, key: &[u8], fragments: &[Vec<u8>]) -> Result<()> {
        let (states, stored) = self.decode_fragments(fragments)?;
        let mut windows = KeyWindows::default();
        if let Some(d) = self.disk.as_mut() {
            d.windows -= stored.min(d.windows);
            windows.touched = d.tick;
        }
        // A window in several fragments is one state now.
        self.counts.windows -= (stored - states.len()).min(self.counts.windows);
        for (window, updated_in, mut state) in states {
            state.updated_in = updated_in;
            self.counts.bytes += state_bytes(key, &state);
            windows.insert(window, state);
        }
        self.keys.insert(Key::from(key), windows);
        Ok(())
    }

    /// Moves the keys whose new values this call gathered (see [`Self::read_back_rows`]) to
    /// disk, each as a new fragment.
    pub(super) fn flush_partial(&mut self) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        if disk.partial.is_empty() {
            return Ok(());
        }
        let mut keys = std::mem::take(&mut disk.partial);
        keys.sort_unstable();
        keys.dedup();
        self.write_out(keys)
    }

    /// Moves the least recently touched keys to disk while the engine holds more than its
    /// share of the memory budget, down to three quarters of it.
    pub(super) fn evict_over_budget(&mut self) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        // At the end of time keys only leave: those read back fire within a few calls.
        if self.expiring.is_some() {
            return Ok(());
        }
        if disk.spill.is_none() {
            // Opened (and counted in the budget's shares) with the engine's first state.
            if self.keys.is_empty() {
                return Ok(());
            }
            disk.spill = disk.backend.spill(&self.step)?;
        }
        let used = self.counts.bytes;
        let Some(budget) = disk.spill.as_mut().map(|s| s.budget_for(used)) else { return Ok(()) };
        if used <= budget {
            return Ok(());
        }
        let target = budget / 4 * 3;
        let mut by_age: Vec<(u32, usize, &Key)> = self
            .keys
            .iter()
            .map(|(k, w)| (disk.tick.wrapping_sub(w.touched), w.iter().map(|(_, s)| state_bytes(k, s)).sum(), k))
            .collect();
        // Oldest first.
        by_age.sort_unstable_by_key(|a| Reverse(a.0));
        let mut freed = 0;
        let mut chosen: Vec<Key> = Vec::new();
        for (_, bytes, key) in by_age {
            if self.counts.bytes - freed <= target {
                break;
            }
            freed += bytes;
            chosen.push(key.clone());
        }
        // In key order: the store writes them as one sorted run.
        chosen.sort_unstable();
        self.write_out(chosen)?;
        let used = self.counts.bytes;
        if let Some(s) = self.disk.as_mut().and_then(|d| d.spill.as_mut()) {
            s.report(used);
        }
        Ok(())
    }

    /// Moves `keys` from memory to disk: while reads are deferred (see the module's text), as
    /// one sorted run, written key by key (the `runs` of [`crate::state_backend`]); else into
    /// the store, in writes of at most [`WRITE_BYTES`] (the store copies a write into its batch
    /// and memtable: one write of every key leaving would hold a quarter of the budget twice
    /// more).
    fn write_out(&mut self, mut keys: Vec<Key>) -> Result<()> {
        let defers = self.defers_reads();
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        let Some(spill) = disk.spill.as_mut() else { return Ok(()) };
        keys.sort_unstable_by(|a, b| crate::state_backend::key_order(a, b));
        let mut run = if defers { spill.start_run()? } else { None };
        let (mut out, mut bytes) = (Vec::new(), 0);
        let mut moved = 0;
        for key in keys {
            let Some(windows) = self.keys.remove(&key) else { continue };
            if windows.windows.is_empty() {
                continue;
            }
            let states: OnDisk<'_> = windows.iter().map(|(w, s)| (*w, s.updated_in, s.repr(&self.fresh))).collect();
            let encoded = crate::checkpoint::encode(&self.step, &states)?;
            moved += states.len();
            self.counts.bytes -= windows.iter().map(|(_, s)| state_bytes(&key, s)).sum::<usize>();
            drop(states);
            drop(windows);
            match run.as_mut() {
                Some(run) => run.push(&key, &encoded).map_err(|e| {
                    weir_sdk::Error::execution(self.step.clone(), format!("disk state store: cannot write a run: {e}"))
                })?,
                None => {
                    bytes += encoded.len();
                    out.push((key.to_vec(), encoded));
                    if bytes >= WRITE_BYTES {
                        spill.put(std::mem::take(&mut out))?;
                        bytes = 0;
                    }
                }
            }
        }
        disk.windows += moved;
        match run {
            Some(run) => spill.finish_run(run),
            None => spill.put(out),
        }
    }

    /// Takes up to a run of keys off disk, in key order, into the key map; returns whether any
    /// came.
    pub(super) fn read_back_run(&mut self) -> Result<bool> {
        let Some(disk) = self.disk.as_mut() else { return Ok(false) };
        let Some(spill) = disk.spill.as_mut() else { return Ok(false) };
        let run = spill.take_first(RUN, call_bytes(spill))?;
        if run.is_empty() {
            return Ok(false);
        }
        disk.misses += run.len() as u64;
        for (key, fragments) in run {
            self.resume_key(&key, &fragments)?;
        }
        Ok(true)
    }

    /// Calls `f` with each window state on disk, leaving it there.
    pub(super) fn for_each_spilled(&self, mut f: impl FnMut(&[u8], Window, WindowState) -> Result<()>) -> Result<()> {
        let Some(spill) = self.spill_area() else { return Ok(()) };
        spill.for_each(|key, fragments| {
            for (window, _, state) in self.decode_fragments(fragments)?.0 {
                f(key, window, state)?;
            }
            Ok(())
        })
    }

    /// The state of `key` in `window` on disk, if there.
    pub(super) fn spilled_state(&self, key: &[u8], window: &Window) -> Result<Option<WindowState>> {
        let Some(spill) = self.spill_area() else { return Ok(None) };
        let fragments = spill.peek_all(key)?;
        if fragments.is_empty() {
            return Ok(None);
        }
        Ok(self.decode_fragments(&fragments)?.0.into_iter().find(|(w, _, _)| w == window).map(|(_, _, s)| s))
    }

    /// Removes every key from disk (a restore replaces the state).
    pub(super) fn clear_spilled(&mut self) -> Result<()> {
        if let Some(disk) = self.disk.as_mut() {
            disk.windows = 0;
            if let Some(spill) = disk.spill.as_mut() {
                spill.clear()?;
            }
        }
        Ok(())
    }
}
