//! State beyond memory (`--state-backend disk`): past its share of the memory budget, the
//! engine moves its least recently touched keys, all their windows encoded together, to the
//! job's disk store ([`crate::state_backend`]), and reads a key back before anything looks at
//! it: a batch's rows, a timer, the end of the input.
//!
//! Only the window states move. Timers and watermark holds stay in memory (a few dozen bytes a
//! window against the buffered values), so the output watermark and every due timer are known
//! without reading the disk; a timer of a key on disk reads it back when it fires. A bounded
//! input, whose windows all wait for its end, thus groups any amount of data in a fixed amount
//! of memory: at its end the keys on disk come back in key order, a run at a time.

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
}

/// Keys read back from disk at a time at the end of the input.
const RUN: usize = 4096;

/// A key's windows as the disk holds them: each window with its state and the change epoch it
/// was last counted in.
type OnDisk<'a> = Vec<(Window, u64, StateRepr<'a>)>;
type OwnedOnDisk = Vec<(Window, u64, OwnedStateRepr)>;

impl GroupAlsoByWindow {
    /// The same engine keeping its state where `state` says.
    pub fn with_state(mut self, state: &StateBackend) -> Self {
        if state.is_disk() {
            self.disk =
                Some(Box::new(Disk { backend: state.clone(), spill: None, tick: 0, windows: 0, hits: 0, misses: 0 }));
        }
        self
    }

    /// How many bytes of values one call fires at the end of time: the engine's share of the
    /// memory budget once any key went to disk; else no limit.
    pub(super) fn output_limit(&self) -> Option<usize> {
        self.spill_area().filter(|_| self.has_spilled()).map(Spill::budget)
    }

    /// The disk backend's figures (see [`crate::operator::Operator::state_backend_metrics`]);
    /// none on the memory backend.
    pub fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        let Some(disk) = &self.disk else { return Vec::new() };
        Spill::metrics(disk.spill.as_ref(), disk.windows, disk.hits, disk.misses)
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

    /// Reads back every key of `batch` that is on disk, and notes the others touched.
    pub(super) fn read_back_rows(&mut self, batch: &EncodedKvBatch) -> Result<()> {
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
        let Some(bytes) = spill.take(key)? else { return Ok(()) };
        disk.misses += 1;
        self.resume_key(key, &bytes)
    }

    /// Puts a key read back from disk (its encoded windows) into the key map.
    fn resume_key(&mut self, key: &[u8], bytes: &[u8]) -> Result<()> {
        let states: OwnedOnDisk = crate::checkpoint::decode(&self.step, bytes)?;
        let mut windows = KeyWindows::default();
        if let Some(d) = self.disk.as_mut() {
            d.windows -= states.len();
            windows.touched = d.tick;
        }
        for (window, updated_in, repr) in states {
            let mut state = WindowState::from_repr(repr, &self.fresh);
            state.updated_in = updated_in;
            self.counts.bytes += state_bytes(key, &state);
            windows.insert(window, state);
        }
        self.keys.insert(Key::from(key), windows);
        Ok(())
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
        let Some(budget) = disk.spill.as_ref().map(Spill::budget) else { return Ok(()) };
        if self.counts.bytes <= budget {
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
        let mut out = Vec::with_capacity(chosen.len());
        let mut moved = 0;
        for key in chosen {
            let Some(windows) = self.keys.remove(&key) else { continue };
            let states: OnDisk<'_> = windows.iter().map(|(w, s)| (*w, s.updated_in, s.repr(&self.fresh))).collect();
            out.push((key.to_vec(), crate::checkpoint::encode(&self.step, &states)?));
            moved += states.len();
            self.counts.bytes -= windows.iter().map(|(_, s)| state_bytes(&key, s)).sum::<usize>();
        }
        disk.windows += moved;
        if let Some(spill) = disk.spill.as_mut() {
            spill.put(out)?;
        }
        Ok(())
    }

    /// Takes up to a run of keys off disk, in key order, into the key map; returns whether any
    /// came.
    pub(super) fn read_back_run(&mut self) -> Result<bool> {
        let Some(disk) = self.disk.as_mut() else { return Ok(false) };
        let Some(spill) = disk.spill.as_mut() else { return Ok(false) };
        let run = spill.take_first(RUN)?;
        if run.is_empty() {
            return Ok(false);
        }
        for (key, bytes) in run {
            self.resume_key(&key, &bytes)?;
        }
        Ok(true)
    }

    /// Calls `f` with each window state on disk, leaving it there.
    pub(super) fn for_each_spilled(&self, mut f: impl FnMut(&[u8], Window, WindowState) -> Result<()>) -> Result<()> {
        let Some(spill) = self.spill_area() else { return Ok(()) };
        spill.for_each(|key, bytes| {
            let states: OwnedOnDisk = crate::checkpoint::decode(&self.step, bytes)?;
            for (window, _, repr) in states {
                f(key, window, WindowState::from_repr(repr, &self.fresh))?;
            }
            Ok(())
        })
    }

    /// The state of `key` in `window` on disk, if there.
    pub(super) fn spilled_state(&self, key: &[u8], window: &Window) -> Result<Option<WindowState>> {
        let Some(bytes) = self.spill_area().map(|s| s.peek(key)).transpose()?.flatten() else { return Ok(None) };
        let states: OwnedOnDisk = crate::checkpoint::decode(&self.step, &bytes)?;
        Ok(states
            .into_iter()
            .find(|(w, _, _)| w == window)
            .map(|(_, _, repr)| WindowState::from_repr(repr, &self.fresh)))
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
