//! The window aggregation beyond memory (`--state-backend disk`): past its share of the memory
//! budget, the aggregation moves whole windows' groups to disk, the windows that fire first
//! first (they take the least new input), each window in an area of the job's disk store of
//! its own ([`crate::state_backend::Spill::sibling`]), keys in key order. A window fires from
//! disk a slice at a time: its groups still in memory join those on disk, and the slices come
//! back in key order, each restored into the table and fired, so a window larger than memory
//! never sits in memory whole. Until its last slice the output watermark is held at the
//! window's end and the aggregation asks to be called again at once
//! ([`Operator::next_processing_timer`]).
//!
//! Until a checkpoint keeps changes, a row for a group on disk starts a new group in memory,
//! and the group's parts (fragments) are merged when it fires or a snapshot reads it, as the
//! general engine defers reads (`group_also_by_window/spilling.rs`): a bounded input's windows
//! then leave memory in sorted runs, each byte written once and read once. Once a checkpoint
//! keeps changes, a row's group on disk is read back before the row is added, so each group is
//! whole in one place and a commit writes whole groups: those changed in memory, and those
//! moved to disk since the last commit, read from there.

use super::*;
use crate::state_backend::{Spill, StateBackend};
use std::collections::BTreeMap;
use weir_sdk::window::Window;

/// The aggregation's part of the disk backend.
pub(super) struct Disk {
    backend: StateBackend,
    /// The aggregation's area, opened with its first input: it counts the aggregation in the
    /// budget's shares. The windows' areas are its siblings.
    area: Option<Spill>,
    /// The windows with groups on disk, in the order of their ends.
    windows: BTreeMap<(Timestamp, Window), OnDisk>,
    /// Group fragments on disk.
    rows: usize,
    /// Bytes written to disk by windows gone.
    spilled_before: usize,
    /// Rows whose group was in memory, and groups read back from disk.
    hits: u64,
    misses: u64,
    /// Whether a checkpoint keeps changes (see the module's text).
    tracking: bool,
    /// Groups moved to disk since the changes were last taken, while changes are kept.
    moved: Vec<(Vec<u8>, Window)>,
}

/// One window's groups on disk.
struct OnDisk {
    spill: Spill,
    rows: usize,
}

/// Most groups read back from disk at a time when a window fires from there.
const RUN: usize = 4096;

/// Most bytes of accumulators one call fires from disk: an eighth of the aggregation's share of
/// the budget, and no more than this.
const CALL_BYTES: usize = 32 << 20;

/// The least a call fires from disk: a call is a unit of work for the runner (a micro-batch), so
/// slices far smaller than this would cost more in calls than they save in memory. (A byte in
/// this crate's tests, whose budgets are a few groups.)
const MIN_CALL_BYTES: usize = if cfg!(test) { 1 } else { 1 << 20 };

/// Most bytes of encoded groups one write to the store carries.
const WRITE_BYTES: usize = 8 << 20;

/// A group as the disk and the checkpoints hold it: its number of inputs and its encoded
/// accumulator.
type Group = (u64, Vec<u8>);

/// Takes each group with its encoded key and window ([`WindowAggregation::for_each_group`]).
pub(super) type GroupVisitor<'a> = dyn FnMut(&[u8], Window, Group) -> Result<()> + 'a;

impl Disk {
    fn area_error(step: &str, e: impl std::fmt::Display) -> Error {
        Error::execution(step.to_string(), format!("disk state store: cannot write a run: {e}"))
    }
}

impl WindowAggregation {
    /// The same aggregation keeping its state where `state` says.
    pub fn with_state(mut self, state: &StateBackend) -> Self {
        if state.is_disk() {
            self.disk = Some(Box::new(Disk {
                backend: state.clone(),
                area: None,
                windows: BTreeMap::new(),
                rows: 0,
                spilled_before: 0,
                hits: 0,
                misses: 0,
                tracking: false,
                moved: Vec::new(),
            }));
        }
        self
    }

    /// Opens the aggregation's disk area (counting it in the budget's shares).
    pub(super) fn open_disk(&mut self) -> Result<()> {
        if let Some(disk) = self.disk.as_mut().filter(|d| d.area.is_none()) {
            disk.area = disk.backend.spill(&self.step)?;
        }
        Ok(())
    }

    /// Whether `window` has groups on disk.
    pub(super) fn on_disk(&self, window: &Window) -> bool {
        self.disk.as_ref().is_some_and(|d| d.windows.contains_key(&(window.max_timestamp(), *window)))
    }

    /// The window held, in memory or on disk, whose end is the earliest.
    pub(super) fn next_window(&self) -> Option<Window> {
        let memory = self.table.first_window();
        let disk = self.disk.as_ref().and_then(|d| d.windows.first_key_value()).map(|((_, w), _)| *w);
        match (memory, disk) {
            (Some(m), Some(d)) => Some(if (m.max_timestamp(), m) <= (d.max_timestamp(), d) { m } else { d }),
            (m, d) => m.or(d),
        }
    }

    /// Whether a window on disk is due to fire: the aggregation fires a slice of it a call.
    pub(super) fn firing_from_disk(&self) -> bool {
        let input = self.watermarks.input();
        let Some(disk) = &self.disk else { return false };
        disk.windows.first_key_value().is_some_and(|((_, w), _)| self.strategy.gc_time(w) < input)
    }

    /// While changes are kept, reads back from disk the groups `batch`'s rows add to (each row
    /// found in memory a cache hit, each group read back a miss).
    pub(super) fn read_back_rows(&mut self, batch: &Batch) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        if !disk.tracking || disk.windows.is_empty() {
            // Every row is added in memory, none waits for the disk.
            disk.hits += batch.len() as u64;
            return Ok(());
        }
        let mut wanted: Vec<(Vec<u8>, Window)> = Vec::new();
        let mut missing = 0u64;
        self.table
            .missing(batch, &mut |key, window| {
                missing += 1;
                let held = disk.windows.get(&(window.max_timestamp(), window));
                if held.is_some_and(|w| w.spill.may_hold(key)) {
                    wanted.push((key.to_vec(), window));
                }
            })
            .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        disk.hits += (batch.len() as u64).saturating_sub(missing);
        wanted.sort_unstable();
        wanted.dedup();
        for (key, window) in wanted {
            let Some(held) = disk.windows.get_mut(&(window.max_timestamp(), window)) else { continue };
            let fragments = held.spill.take_all(&key)?;
            if fragments.is_empty() {
                continue;
            }
            disk.misses += 1;
            held.rows -= fragments.len().min(held.rows);
            disk.rows -= fragments.len().min(disk.rows);
            for f in fragments {
                let (count, acc): Group = crate::checkpoint::decode(&self.step, &f)?;
                self.table
                    .restore(&key, window, count, &acc)
                    .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
            }
        }
        Ok(())
    }

    /// Moves whole windows to disk, those that fire first first, while the table holds more
    /// than the aggregation's share of the budget, down to three quarters of it.
    pub(super) fn evict_over_budget(&mut self) -> Result<()> {
        let mut bytes = self.table.bytes();
        let Some(budget) = self.disk.as_mut().and_then(|d| d.area.as_mut()).map(|a| a.budget_for(bytes)) else {
            return Ok(());
        };
        if bytes <= budget {
            return Ok(());
        }
        let target = budget / 4 * 3;
        let mut windows = Vec::new();
        self.table.window_sizes(&mut |w, b| windows.push((w, b)));
        for (window, size) in windows {
            if bytes <= target {
                break;
            }
            self.write_window(&window)?;
            bytes -= size.min(bytes);
        }
        if let Some(a) = self.disk.as_mut().and_then(|d| d.area.as_mut()) {
            a.report(bytes);
        }
        Ok(())
    }

    /// Moves `window`'s groups in memory to disk, as a new fragment of each: as one sorted run
    /// while changes are not kept, else into the store in writes of at most [`WRITE_BYTES`].
    fn write_window(&mut self, window: &Window) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        let Some(area) = disk.area.as_ref() else { return Ok(()) };
        let held = disk
            .windows
            .entry((window.max_timestamp(), *window))
            .or_insert_with(|| OnDisk { spill: area.sibling(), rows: 0 });
        let mut run = if disk.tracking { None } else { held.spill.start_run()? };
        let (mut batch, mut bytes) = (Vec::new(), 0usize);
        let mut failed: Option<Error> = None;
        let step = &self.step;
        let moved = &mut disk.moved;
        let tracking = disk.tracking;
        let n = self
            .table
            .take_window(window, &mut |key, count, acc| {
                if failed.is_some() {
                    return;
                }
                let value = match crate::checkpoint::encode(step, &(count, acc)) {
                    Ok(v) => v,
                    Err(e) => return failed = Some(e),
                };
                if tracking {
                    moved.push((key.to_vec(), *window));
                }
                match run.as_mut() {
                    Some(run) => {
                        if let Err(e) = run.push(key, &value) {
                            failed = Some(Disk::area_error(step, e));
                        }
                    }
                    None => {
                        bytes += value.len();
                        batch.push((key.to_vec(), value));
                        if bytes >= WRITE_BYTES {
                            if let Err(e) = held.spill.put(std::mem::take(&mut batch)) {
                                failed = Some(e);
                            }
                            bytes = 0;
                        }
                    }
                }
            })
            .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        if let Some(e) = failed {
            return Err(e);
        }
        match run {
            Some(run) => held.spill.finish_run(run)?,
            None => held.spill.put(batch)?,
        }
        held.rows += n;
        disk.rows += n;
        Ok(())
    }

    /// Fires a slice of `window` from disk (its groups in memory join those on disk first) into
    /// `out`, in bundles of at most `limit` groups; returns whether the window is done.
    pub(super) fn fire_from_disk(&mut self, window: Window, limit: usize, out: &mut Vec<Batch>) -> Result<bool> {
        self.write_window(&window)?;
        let Some(disk) = self.disk.as_mut() else { return Ok(true) };
        let key = (window.max_timestamp(), window);
        let Some(held) = disk.windows.get_mut(&key) else { return Ok(true) };
        let call = disk.area.as_ref().map_or(CALL_BYTES, |a| (a.budget() / 8).clamp(MIN_CALL_BYTES, CALL_BYTES));
        let mut taken = 0;
        loop {
            let slice = held.spill.take_first(RUN, call)?;
            if slice.is_empty() {
                if let Some(gone) = disk.windows.remove(&key) {
                    disk.spilled_before += gone.spill.spilled_total();
                }
                return Ok(true);
            }
            disk.misses += slice.len() as u64;
            for (k, fragments) in slice {
                held.rows -= fragments.len().min(held.rows);
                disk.rows -= fragments.len().min(disk.rows);
                for f in fragments {
                    taken += f.len();
                    let (count, acc): Group = crate::checkpoint::decode(&self.step, &f)?;
                    self.table
                        .restore(&k, window, count, &acc)
                        .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
                }
            }
            if self.table.first_window() != Some(window) {
                return Err(Error::execution(
                    self.step.clone(),
                    format!("internal error: window {window:?} read back from disk is not the first to fire"),
                ));
            }
            let fired = self.table.fire_first(PaneInfo::ON_TIME_AND_ONLY_FIRING, limit, out).with_step(&self.step)?;
            self.removed += fired as u64;
            if taken >= call {
                return Ok(false);
            }
        }
    }

    /// Calls `f` with every group, in memory and on disk, as checkpoints hold it (the parts of
    /// a group in both merged).
    pub(super) fn for_each_group(&self, f: &mut GroupVisitor<'_>) -> Result<()> {
        let mut apart: hashbrown::HashMap<(Window, Vec<u8>), Group> = hashbrown::HashMap::new();
        let mut failed = None;
        self.table
            .entries(&mut |key, window, count, acc| {
                if failed.is_some() {
                    return;
                }
                if self.on_disk(&window) {
                    apart.insert((window, key.to_vec()), (count, acc));
                } else if let Err(e) = f(key, window, (count, acc)) {
                    failed = Some(e);
                }
            })
            .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let Some(disk) = &self.disk else { return Ok(()) };
        for (&(_, window), held) in &disk.windows {
            held.spill.for_each(|key, fragments| {
                let mut parts = fragments
                    .iter()
                    .map(|b| crate::checkpoint::decode::<Group>(&self.step, b))
                    .collect::<Result<Vec<_>>>()?;
                parts.extend(apart.remove(&(window, key.to_vec())));
                let group = self.merge_parts(parts)?;
                f(key, window, group)
            })?;
        }
        for ((window, key), group) in apart {
            f(&key, window, group)?;
        }
        Ok(())
    }

    /// One group of its parts.
    fn merge_parts(&self, mut parts: Vec<Group>) -> Result<Group> {
        if parts.len() == 1 {
            return Ok(parts.pop().unwrap_or_default());
        }
        let count = parts.iter().map(|(c, _)| c).sum();
        let accs: Vec<&[u8]> = parts.iter().map(|(_, a)| a.as_slice()).collect();
        let acc = self.kernel.merge_accumulators(&accs).with_step(&self.step)?;
        Ok((count, acc))
    }

    /// Starts keeping changes on disk too: each group's parts are brought together on disk, so
    /// that from now on each group is whole in one place (see the module's text).
    pub(super) fn start_tracking(&mut self) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        disk.tracking = true;
        let windows: Vec<Window> = disk.windows.keys().map(|(_, w)| *w).collect();
        for window in windows {
            self.write_window(&window)?;
        }
        if let Some(disk) = self.disk.as_mut() {
            disk.moved.clear();
        }
        Ok(())
    }

    /// The groups moved to disk since the changes were last taken and still there, encoded as
    /// checkpoints hold them.
    pub(super) fn take_moved(&mut self, written: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let Some(disk) = self.disk.as_mut() else { return Ok(()) };
        let mut moved = std::mem::take(&mut disk.moved);
        moved.sort_unstable();
        moved.dedup();
        let Some(disk) = self.disk.as_ref() else { return Ok(()) };
        for (key, window) in moved {
            let Some(held) = disk.windows.get(&(window.max_timestamp(), window)) else { continue };
            let fragments = held.spill.peek_all(&key)?;
            if fragments.is_empty() {
                // Read back since (then in memory, changed), or fired (then removed).
                continue;
            }
            let parts =
                fragments.iter().map(|b| crate::checkpoint::decode::<Group>(&self.step, b)).collect::<Result<_>>()?;
            let group = self.merge_parts(parts)?;
            written.push((
                crate::checkpoint::entry_key(&self.step, &key, &window)?,
                crate::checkpoint::encode(&self.step, &group)?,
            ));
        }
        Ok(())
    }

    /// Forgets every group on disk, and stops keeping changes (a restore replaces the state).
    pub(super) fn clear_disk(&mut self) {
        if let Some(disk) = self.disk.as_mut() {
            for (_, gone) in std::mem::take(&mut disk.windows) {
                disk.spilled_before += gone.spill.spilled_total();
            }
            disk.rows = 0;
            disk.tracking = false;
            disk.moved.clear();
        }
    }

    /// Group fragments on disk.
    pub(super) fn rows_on_disk(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.rows)
    }

    /// The disk backend's figures (see [`Operator::state_backend_metrics`]); none on the
    /// memory backend.
    pub(super) fn disk_metrics(&self) -> Vec<(&'static str, u64)> {
        let Some(disk) = &self.disk else { return Vec::new() };
        let areas = disk.windows.values().map(|w| &w.spill);
        Spill::metrics(areas, disk.spilled_before, disk.rows, disk.hits, disk.misses)
    }
}
