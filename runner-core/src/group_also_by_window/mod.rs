//! The GroupAlsoByWindow engine (Beam's `ReduceFnRunner`): grouping by key and window with
//! triggers, panes, lateness, watermark holds, merging windows, and end-of-window and
//! garbage-collection timers.
//!
//! Values live encoded: a buffering GroupByKey appends each value's bytes to its window's
//! buffer, a combining one (Combine.perKey) folds them into one encoded accumulator, so state
//! can be merged, measured and persisted without knowing the element types. Runners feed input
//! batches with [`GroupAlsoByWindow::process`] and move time with [`GroupAlsoByWindow::advance`];
//! both return the panes that fired. Every timer of a watermark fires before the output
//! watermark is recomputed, so an on-time pane is never late downstream.
//!
//! The engine is cut along Beam's lines, a file each: the `key_map` (keys and their windows'
//! states), a window's `state` (64 bytes until its trigger or panes move: most windows fire
//! once or never), the grouping `buffers`, `merging` windows, `panes`, watermark `holds`,
//! `timers`, and the `snapshot` for checkpoints. This file holds the engine's state and its
//! entry points.

use crate::trigger::{TriggerContext, TriggerMachine, TriggerState};
use crate::watermark::Watermarks;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use weir_sdk::kernel::{Batch, CombineKernel, EncodedGroup, EncodedKvBatch, GroupKernel};
use weir_sdk::pane::{PaneInfo, Timing};
use weir_sdk::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::trigger::{AccumulationMode, ClosingBehavior, OnTimeBehavior, TimestampCombiner};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::{Error, Result, WithStepExt};

mod buffers;
mod holds;
mod key_map;
mod merging;
mod panes;
mod snapshot;
mod spilling;
mod state;
mod timers;

use buffers::*;
use holds::*;
use key_map::*;
use panes::*;
use state::*;

pub use snapshot::{engine_entry, rescale_keyed, restore_engine_entry};
pub use state::WindowState;

/// How values are kept per key and window.
#[derive(Clone)]
pub enum Values {
    /// Buffer every value (GroupByKey).
    Buffer(Arc<dyn GroupKernel>),
    /// Keep one accumulator (Combine.perKey).
    Combine(Arc<dyn CombineKernel>),
}

/// State rows (one per key and window) changed since the last count: Spark's
/// `numRowsUpdated` and `numRowsRemoved`. A row both updated and removed counts in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateChanges {
    /// Rows created or changed (each counted once).
    pub updated: u64,
    /// Rows removed (expired, fired for the last time, or merged into another window).
    pub removed: u64,
}

/// What happened to input that was not grouped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Elements whose window had expired (Beam's `droppedDueToLateness`).
    pub late: u64,
    /// Elements for a window whose trigger had finished (`droppedDueToClosedWindow`).
    pub closed: u64,
}

// Every GC time is before the end of time, so at the end of time every window expires.
const _: () = assert!(GLOBAL_WINDOW_MAX_TIMESTAMP < MAX_TIMESTAMP);

/// One GroupByKey's grouping state and time.
pub struct GroupAlsoByWindow {
    step: String,
    strategy: WindowingStrategy,
    machine: TriggerMachine,
    /// The pane state of a window that has not fired, which most windows share (see
    /// [`WindowState`]).
    fresh: PaneState,
    /// Whether elements can change a window's trigger state (a count, a processing-time
    /// delay): if not, adding elements leaves it alone.
    counts_elements: bool,
    values: Values,
    keys: hashbrown::HashMap<Key, KeyWindows>,
    /// The timers and holds of the states in `keys`.
    timers: Timers,
    watermarks: Watermarks,
    processing_time: Timestamp,
    /// What the states hold and how they changed.
    counts: Counts,
    /// Buffers reused across calls.
    work: Work,
    /// Combiner lifting: input rows are partial accumulators with their input counts
    /// ([`weir_sdk::kernel::lifted_value`]), merged instead of added.
    lifted: bool,
    /// The key-window states written or removed since a checkpoint last took them
    /// ([`GroupAlsoByWindow::take_changed_entries`]); not kept until a checkpoint first asks
    /// (a run without checkpoints would keep every state it ever touched).
    dirty: crate::checkpoint::Changed<(Key, Window)>,
    /// The disk backend's part, when state may move to disk (`--state-backend disk`).
    disk: Option<Box<spilling::Disk>>,
    /// Once the input watermark reached the end of time: the output watermark then, held
    /// while windows are left to fire (see [`GroupAlsoByWindow::expire_all`]).
    expiring: Option<Timestamp>,
}

/// The engine's timers and holds.
#[derive(Default)]
struct Timers {
    /// End-of-window and garbage-collection timers, one for every window in memory and on
    /// disk: on the disk backend the latest wait on disk past the index's cap
    /// ([`crate::state_backend::TimeIndex`]). Timers are never removed before they are due: one
    /// whose window is gone fires as a no-op.
    event_timers: crate::state_backend::TimeIndex<(Key, Window)>,
    /// Processing-time timers of triggers, one for each window waiting for one (on disk past
    /// the index's cap, as `event_timers`).
    processing_timers: crate::state_backend::TimeIndex<(Key, Window)>,
    /// The holds of the states in `keys`, while `tracked`.
    holds: RunningHolds,
    /// Whether `event_timers` and `holds` are kept. Not while the input watermark is at its
    /// minimum (a bounded input until it ends): then no event timer is due and no hold holds
    /// the output watermark back further than the input watermark does, so both are derived
    /// from the window states when the watermark first moves (as on restore). A bounded input
    /// thus sets none of the timers and holds that its end would only clear again.
    tracked: bool,
}

/// What the engine's states hold and how they changed, for metrics and checkpoints.
struct Counts {
    /// Number of key-window states in `keys`.
    windows: usize,
    dropped: DropCounts,
    changes: StateChanges,
    /// [`GroupAlsoByWindow::state_bytes`], kept up to date as states change.
    bytes: usize,
    /// Current change epoch: a state whose `updated_in` differs is not counted yet.
    epoch: u64,
}

/// Buffers the engine reuses across calls.
struct Work {
    scratch: EncodedKvBatch,
    grouping: GroupScratch,
    /// Fired groups finished into output bundles during the current call, and the most groups
    /// per bundle (see [`GroupAlsoByWindow::spill`]).
    fired: Vec<Batch>,
    bundle_limit: usize,
}

/// Most groups in one output bundle of [`GroupAlsoByWindow::process_bundles`] and
/// [`GroupAlsoByWindow::advance_bundles`].
pub const FIRED_BUNDLE: usize = 4096;

impl GroupAlsoByWindow {
    /// An empty engine for the step `step` with the input's windowing strategy.
    pub fn new(step: &str, strategy: WindowingStrategy, values: Values) -> Self {
        let machine = TriggerMachine::new(&strategy.trigger);
        GroupAlsoByWindow {
            step: step.to_string(),
            fresh: PaneState::fresh(machine.new_state()),
            counts_elements: machine.counts_elements(),
            machine,
            strategy,
            values,
            keys: hashbrown::HashMap::new(),
            timers: Timers::default(),
            watermarks: Watermarks::new(),
            processing_time: MIN_TIMESTAMP,
            counts: Counts {
                windows: 0,
                dropped: DropCounts::default(),
                changes: StateChanges::default(),
                bytes: 0,
                epoch: 1,
            },
            work: Work {
                scratch: EncodedKvBatch::default(),
                grouping: GroupScratch::default(),
                fired: Vec::new(),
                bundle_limit: usize::MAX,
            },
            lifted: false,
            dirty: Default::default(),
            disk: None,
            expiring: None,
        }
    }

    /// Notes that the state of `key` in `window` may have changed, for the next delta.
    fn mark_changed(&mut self, key: &[u8], window: Window) {
        if self.dirty.is_kept() {
            let k = self.arc_key(key);
            self.mark_changed_key(k, window);
        }
    }

    /// [`GroupAlsoByWindow::mark_changed`] with the key map's own key.
    fn mark_changed_key(&mut self, key: Key, window: Window) {
        self.dirty.mark((key, window));
    }

    /// Takes partial accumulators instead of inputs (combiner lifting; see
    /// [`weir_sdk::kernel::CombineKernel::partial`]). Only for a combining engine whose
    /// windows do not merge and whose timestamp combiner is the end of the window, where
    /// lifting changes no pane, hold or count.
    pub fn lifted(mut self) -> Self {
        self.lifted = matches!(self.values, Values::Combine(_));
        self
    }

    /// The number of inputs row `i` stands for: its count when lifted, else 1.
    fn inputs_of(&self, batch: &EncodedKvBatch, i: usize) -> Result<u64> {
        if !self.lifted {
            return Ok(1);
        }
        let (count, _) = weir_sdk::kernel::lifted_value(batch.value(i))
            .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        Ok(count)
    }

    /// The input and output watermarks.
    pub fn watermarks(&self) -> Watermarks {
        self.watermarks
    }

    /// Elements dropped so far.
    pub fn dropped(&self) -> DropCounts {
        self.counts.dropped
    }

    /// The state rows updated and removed since the previous call (once per batch).
    pub fn take_state_changes(&mut self) -> StateChanges {
        self.counts.epoch += 1;
        std::mem::take(&mut self.counts.changes)
    }

    /// The earliest processing-time timer, for runners that sleep until it.
    pub fn next_processing_timer(&self) -> Option<Timestamp> {
        if self.expiring.is_some() && !self.is_empty() {
            // Windows left to fire at the end of time: at once.
            return Some(MIN_TIMESTAMP);
        }
        self.timers.processing_timers.first().map(|t| t.0)
    }

    /// Number of key-window states held, in memory and on disk.
    pub fn state_size(&self) -> usize {
        self.counts.windows
    }

    /// Approximate bytes of state held in memory (keys, buffered values or accumulators).
    pub fn state_bytes(&self) -> usize {
        // Every test run checks the running count against a full recount.
        debug_assert_eq!(self.counts.bytes, self.counted_bytes(), "state bytes of {}", self.step);
        self.counts.bytes
    }

    fn counted_bytes(&self) -> usize {
        self.keys.iter().map(|(k, ws)| ws.iter().map(|(_, w)| state_bytes(k, w)).sum::<usize>()).sum()
    }

    /// Whether no state is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && !self.has_spilled()
    }

    fn ctx(&self, window: &Window) -> TriggerContext {
        TriggerContext {
            input_watermark: self.watermarks.input(),
            processing_time: self.processing_time,
            window_max: window.max_timestamp(),
        }
    }

    /// Encodes `input` after what the scratch batch holds.
    fn encode(&mut self, input: Batch) -> Result<()> {
        let input = match input.downcast::<EncodedKvBatch>() {
            Ok(rows) => {
                self.work.scratch.extend(*rows);
                return Ok(());
            }
            Err(input) => input,
        };
        match &self.values {
            Values::Buffer(k) => k.encode(input, &mut self.work.scratch),
            Values::Combine(k) => k.encode(input, &mut self.work.scratch),
        }
        .with_step(&self.step)
    }

    /// Groups a batch of `KV` input, which arrived at `processing_time`, and returns the panes
    /// that fired.
    pub fn process(&mut self, input: Batch, processing_time: Timestamp) -> Result<Batch> {
        self.process_many(vec![input], processing_time)
    }

    /// Groups several batches that arrived together as one: each key and window's values of
    /// all of them are added in one step (a combining GroupByKey decodes and encodes each
    /// accumulator once, merging windows merge once per key). Returns the panes that fired.
    pub fn process_many(&mut self, inputs: Vec<Batch>, processing_time: Timestamp) -> Result<Batch> {
        let mut fired = self.bundled(usize::MAX, |gaw| gaw.process_inputs(inputs, processing_time))?;
        Ok(fired.pop().expect("one bundle"))
    }

    /// [`GroupAlsoByWindow::process_many`], with the panes that fired in bundles of at most
    /// [`FIRED_BUNDLE`] groups, each finished as soon as it fills: the groups of a large firing
    /// (every window of a bounded input at its end) never sit in one buffer, and a consumer
    /// takes them in cache-sized bundles.
    pub fn process_bundles(&mut self, inputs: Vec<Batch>, processing_time: Timestamp) -> Result<Vec<Batch>> {
        self.bundled(FIRED_BUNDLE, |gaw| gaw.process_inputs(inputs, processing_time))
    }

    /// Runs `f` with fired groups finished in bundles of at most `limit`; returns the bundles
    /// (at least one, possibly empty).
    fn bundled(&mut self, limit: usize, f: impl FnOnce(&mut Self) -> Result<Vec<EncodedGroup>>) -> Result<Vec<Batch>> {
        self.work.bundle_limit = limit;
        self.work.fired.clear();
        let rest = f(self);
        let mut fired = std::mem::take(&mut self.work.fired);
        let rest = rest?;
        if fired.is_empty() || !rest.is_empty() {
            fired.push(self.finish(rest)?);
        }
        Ok(fired)
    }

    /// Finishes the fired groups in `out` into an output bundle once there are enough.
    fn spill(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        if out.len() >= self.work.bundle_limit {
            let groups = std::mem::replace(out, Vec::with_capacity(self.work.bundle_limit));
            let bundle = self.finish(groups)?;
            self.work.fired.push(bundle);
        }
        Ok(())
    }

    fn process_inputs(&mut self, inputs: Vec<Batch>, processing_time: Timestamp) -> Result<Vec<EncodedGroup>> {
        self.processing_time = self.processing_time.max(processing_time);
        self.work.scratch.data.clear();
        self.work.scratch.rows.clear();
        let mut inputs = inputs;
        // Rows encoded on the way in (a native exchange) are not copied again: the largest
        // such batch goes first and moves into the empty scratch batch (see `encode`).
        inputs.sort_by_key(|b| Reverse(b.downcast_ref::<EncodedKvBatch>().map_or(0, |e| e.rows.len())));
        // Room for all of them at once: appended one by one, the buffers would grow (and be
        // copied into fresh pages) once per input, as many times as there are producers.
        let encoded = inputs.iter().filter_map(|b| b.downcast_ref::<EncodedKvBatch>());
        let (bytes, rows) = encoded.fold((0, 0), |(d, r), e| (d + e.data.len(), r + e.rows.len()));
        for (k, input) in inputs.into_iter().enumerate() {
            self.encode(input)?;
            if k == 0 {
                self.work.scratch.data.reserve(bytes.saturating_sub(self.work.scratch.data.len()));
                self.work.scratch.rows.reserve(rows.saturating_sub(self.work.scratch.rows.len()));
            }
        }
        let scratch = std::mem::take(&mut self.work.scratch);
        let mut out = Vec::new();
        let result = self.process_rows(&scratch, &mut out);
        self.work.scratch = scratch;
        result?;
        self.flush_partial()?;
        self.evict_over_budget()?;
        Ok(out)
    }

    fn finish(&self, groups: Vec<EncodedGroup>) -> Result<Batch> {
        match &self.values {
            Values::Buffer(k) => k.decode_groups(groups).with_step(&self.step),
            Values::Combine(k) => k.extract(groups).with_step(&self.step),
        }
    }

    /// Moves the input watermark to `input_watermark` and processing time to `processing_time`,
    /// fires every due timer in timestamp order, then recomputes the output watermark. Returns
    /// the panes that fired.
    pub fn advance(&mut self, input_watermark: Timestamp, processing_time: Timestamp) -> Result<Batch> {
        let mut fired = self.bundled(usize::MAX, |gaw| gaw.advance_to(input_watermark, processing_time))?;
        Ok(fired.pop().expect("one bundle"))
    }

    /// [`GroupAlsoByWindow::advance`], with the panes that fired in bundles of at most
    /// [`FIRED_BUNDLE`] groups (see [`GroupAlsoByWindow::process_bundles`]).
    pub fn advance_bundles(&mut self, input_watermark: Timestamp, processing_time: Timestamp) -> Result<Vec<Batch>> {
        self.bundled(FIRED_BUNDLE, |gaw| gaw.advance_to(input_watermark, processing_time))
    }

    fn advance_to(&mut self, input_watermark: Timestamp, processing_time: Timestamp) -> Result<Vec<EncodedGroup>> {
        self.processing_time = self.processing_time.max(processing_time);
        let before = self.watermarks.output();
        // Input first (the output is recomputed after the timers fired).
        let mut wm = self.watermarks;
        wm.advance(input_watermark, None, Some(before));
        self.watermarks = wm;
        // At the end of time every window expires at once, timers and holds unused.
        if !self.timers.tracked && wm.input() > MIN_TIMESTAMP && wm.input() < MAX_TIMESTAMP {
            self.track()?;
        }
        let mut out = Vec::new();
        self.fire_timers(&mut out)?;
        let hold = self.hold();
        self.watermarks.advance(input_watermark, None, hold);
        self.evict_over_budget()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
