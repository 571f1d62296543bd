//! The GroupAlsoByWindow engine (Beam's `ReduceFnRunner`): grouping by key and window with
//! triggers, panes, lateness, watermark holds, merging windows, and end-of-window and
//! garbage-collection timers (spec §2.6, §3, §4.2).
//!
//! Values live encoded: a buffering GroupByKey appends each value's bytes to its window's
//! buffer, a combining one (Combine.perKey) folds them into one encoded accumulator, so state
//! can be merged, measured and persisted without knowing the element types. Runners feed input
//! batches with [`GroupAlsoByWindow::process`] and move time with [`GroupAlsoByWindow::advance`];
//! both return the panes that fired. Every timer of a watermark fires before the output
//! watermark is recomputed, so an on-time pane is never late downstream.

use crate::trigger::{TriggerContext, TriggerMachine, TriggerState};
use crate::watermark::Watermarks;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::Arc;
use weir_sdk::kernel::{Batch, CombineKernel, EncodedGroup, EncodedKvBatch, GroupKernel};
use weir_sdk::pane::{PaneInfo, Timing};
use weir_sdk::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::trigger::{AccumulationMode, ClosingBehavior, OnTimeBehavior, TimestampCombiner};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::{Error, Result, WithStepExt};

/// How values are kept per key and window.
#[derive(Clone)]
pub enum Values {
    /// Buffer every value (GroupByKey).
    Buffer(Arc<dyn GroupKernel>),
    /// Keep one accumulator (Combine.perKey).
    Combine(Arc<dyn CombineKernel>),
}

/// The state of one key and window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WindowState {
    /// Buffered values, encoded back to back, or the encoded accumulator.
    pub values: Vec<u8>,
    /// Number of values buffered (or added to the accumulator) since the last clear.
    pub count: usize,
    /// Number of values added since the last firing: whether the next pane is non-empty (in
    /// accumulating mode the buffer also holds earlier panes' values).
    pub added_since_fire: usize,
    /// The element hold: the timestamp the next pane will carry.
    pub hold: Option<Timestamp>,
    trigger: TriggerState,
    pane_index: i64,
    non_speculative_index: i64,
    non_early_emitted: bool,
    /// The trigger finished: later data for the window is dropped until it expires.
    pub closed: bool,
    pt_timer: Option<Timestamp>,
    /// The change epoch in which this state was last counted as updated.
    #[serde(skip)]
    updated_in: u64,
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

/// A key of the key map, also held by the timer and hold sets: inline when short (any integer
/// key: no allocation, and comparing it touches no other memory), else shared (no copy per
/// timer). Hashes, compares and orders as its bytes.
#[derive(Clone)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Shared(Arc<[u8]>),
}

/// The longest key kept inline: what fits beside the length in the size of a shared key.
const INLINE_KEY: usize = 22;

impl Key {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..*len as usize],
            Key::Shared(k) => k,
        }
    }
}

impl From<&[u8]> for Key {
    fn from(key: &[u8]) -> Self {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline { len: key.len() as u8, bytes }
        } else {
            Key::Shared(Arc::from(key))
        }
    }
}

impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_bytes().fmt(f)
    }
}

type TimerKey = (Timestamp, Key, Window);

/// The element holds of every window state, as a counted multiset of times: exact at all times
/// (each change of a state's hold moves one count), so the earliest hold is the first entry.
#[derive(Debug, Default, PartialEq, Eq)]
struct Holds(BTreeMap<Timestamp, u32>);

impl Holds {
    fn add(&mut self, hold: Option<Timestamp>) {
        if let Some(t) = hold {
            *self.0.entry(t).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, hold: Option<Timestamp>) {
        let Some(t) = hold else { return };
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.0.entry(t) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// A state's hold moved from `old` to `new`.
    fn change(&mut self, old: Option<Timestamp>, new: Option<Timestamp>) {
        if old != new {
            self.remove(old);
            self.add(new);
        }
    }

    fn earliest(&self) -> Option<Timestamp> {
        self.0.first_key_value().map(|(t, _)| *t)
    }
}

/// The windows of one key, sorted by window. Most keys hold one or a few windows, so a sorted
/// sequence beats a tree map. A ring buffer, because windows mostly arrive at the end and
/// expire at the front: a hot key with thousands of windows does not shift them all on every
/// expiry, so states are kept in place (no allocation, and no pointer to follow, per window).
#[derive(Default)]
struct KeyWindows {
    windows: std::collections::VecDeque<(Window, WindowState)>,
    /// How many of the states are closed: with none, the active (not closed) windows are
    /// listed without reading any state (a cache miss each, for a key with thousands of
    /// windows merged every batch).
    closed: usize,
}

impl KeyWindows {
    fn find(&self, window: &Window) -> std::result::Result<usize, usize> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        // The ends first: timers expire the earliest window, new windows come last.
        match self.windows.front().map(|(w, _)| w.cmp(window)) {
            None | Some(Greater) => return Err(0),
            Some(Equal) => return Ok(0),
            Some(Less) => {}
        }
        let last = self.windows.len() - 1;
        match self.windows.back().map(|(w, _)| w.cmp(window)) {
            Some(Less) => return Err(last + 1),
            Some(Equal) => return Ok(last),
            _ => {}
        }
        self.windows.binary_search_by(|(w, _)| w.cmp(window))
    }
    fn get(&self, window: &Window) -> Option<&WindowState> {
        self.find(window).ok().map(|i| &self.windows[i].1)
    }
    /// The state of `window`, to change anything but whether it is closed (see
    /// [`KeyWindows::close`]).
    fn get_mut(&mut self, window: &Window) -> Option<&mut WindowState> {
        self.find(window).ok().map(|i| &mut self.windows[i].1)
    }
    /// Marks the state of `window` closed; returns it unless there is none.
    fn close(&mut self, window: &Window) -> Option<&mut WindowState> {
        let i = self.find(window).ok()?;
        let ws = &mut self.windows[i].1;
        if !ws.closed {
            ws.closed = true;
            self.closed += 1;
        }
        Some(ws)
    }
    fn contains_key(&self, window: &Window) -> bool {
        self.find(window).is_ok()
    }
    /// Inserts or replaces; returns whether the window is new.
    fn insert(&mut self, window: Window, state: WindowState) -> bool {
        self.closed += usize::from(state.closed);
        match self.find(&window) {
            Ok(i) => {
                let old = std::mem::replace(&mut self.windows[i].1, state);
                self.closed -= usize::from(old.closed);
                false
            }
            Err(i) => {
                self.insert_at(i, window, state);
                true
            }
        }
    }
    /// Inserts a new window at `at` (its place in the order).
    fn insert_at(&mut self, at: usize, window: Window, state: WindowState) {
        if self.windows.capacity() == 0 {
            // Most keys hold one window: room for one, not the four a first insert makes.
            self.windows.reserve_exact(1);
        }
        self.windows.insert(at, (window, state));
    }
    fn remove(&mut self, window: &Window) -> Option<WindowState> {
        let state = self.find(window).ok().and_then(|i| self.windows.remove(i)).map(|(_, s)| s)?;
        self.closed -= usize::from(state.closed);
        Some(state)
    }
    fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
    fn iter(&self) -> impl Iterator<Item = (&Window, &WindowState)> {
        self.windows.iter().map(|(w, s)| (w, s))
    }
    /// The windows whose state is not closed.
    fn active(&self, out: &mut Vec<Window>) {
        if self.closed == 0 {
            out.extend(self.windows.iter().map(|(w, _)| *w));
        } else {
            out.extend(self.windows.iter().filter(|(_, s)| !s.closed).map(|(w, _)| *w));
        }
    }
}

/// What emitting a pane needs besides the window's state.
struct PaneContext<'a> {
    strategy: &'a WindowingStrategy,
    watermarks: Watermarks,
    epoch: u64,
    changes: &'a mut StateChanges,
}

/// Emits a pane of the window whose state is `ws` (spec §3.5, §3.6) and releases its hold.
fn emit_pane(
    c: &mut PaneContext<'_>,
    ws: &mut WindowState,
    key: &[u8],
    window: Window,
    is_final: bool,
    out: &mut Vec<EncodedGroup>,
) {
    let (input_wm, output_wm, strategy) = (c.watermarks.input(), c.watermarks.output(), c.strategy);
    if ws.updated_in != c.epoch {
        ws.updated_in = c.epoch;
        c.changes.updated += 1;
    }
    let eow = window.max_timestamp();
    let timing = if output_wm > eow || ws.non_early_emitted {
        Timing::Late
    } else if input_wm <= eow {
        Timing::Early
    } else {
        Timing::OnTime
    };
    let non_empty = ws.added_since_fire > 0;
    ws.added_since_fire = 0;
    let needed = non_empty
        || (timing == Timing::OnTime && strategy.on_time_behavior == OnTimeBehavior::FireAlways)
        || (is_final && strategy.closing_behavior == ClosingBehavior::FireAlways);
    let released = ws.hold.take();
    if needed {
        let non_speculative_index = if timing == Timing::Early { -1 } else { ws.non_speculative_index + 1 };
        let pane = PaneInfo {
            is_first: ws.pane_index == 0,
            is_last: is_final,
            timing,
            index: ws.pane_index,
            non_speculative_index,
        };
        ws.pane_index += 1;
        if timing != Timing::Early {
            ws.non_speculative_index = non_speculative_index;
            ws.non_early_emitted = true;
        }
        let timestamp = match released {
            Some(h) if h <= eow => h,
            _ => eow,
        };
        let discard = is_final || strategy.accumulation_mode == AccumulationMode::Discarding;
        let (values, count) = if discard {
            (std::mem::take(&mut ws.values), std::mem::take(&mut ws.count))
        } else {
            (ws.values.clone(), ws.count)
        };
        out.push(EncodedGroup { key: key.to_vec(), values, count, timestamp, window, pane });
    } else if is_final || strategy.accumulation_mode == AccumulationMode::Discarding {
        ws.values.clear();
        ws.count = 0;
    }
}

// Every GC time is before the end of time, so at the end of time every window expires.
const _: () = assert!(GLOBAL_WINDOW_MAX_TIMESTAMP < MAX_TIMESTAMP);

/// Event timers are kept in buckets of 2^this many milliseconds.
const TIMER_BUCKET_BITS: u32 = 10;

/// What one key and window's state counts for in [`GroupAlsoByWindow::state_bytes`].
fn state_bytes(key: &[u8], state: &WindowState) -> usize {
    key.len() + state.values.len() + 96
}

/// Counting sort of rows into `groups` buckets: `group_of[j]` is the bucket of row `rows[j]`.
/// Fills `starts` with each bucket's start in the sorted rows (plus the end) and `sorted` with
/// the rows, each bucket in arrival order, in buffers the caller keeps (`fill` is working
/// space). No allocation per bucket.
fn bucket_into(
    groups: usize,
    group_of: &[u32],
    rows: &[u32],
    starts: &mut Vec<usize>,
    fill: &mut Vec<usize>,
    sorted: &mut Vec<usize>,
) {
    starts.clear();
    starts.resize(groups + 1, 0);
    for &g in group_of {
        starts[g as usize + 1] += 1;
    }
    for g in 0..groups {
        starts[g + 1] += starts[g];
    }
    fill.clear();
    fill.extend_from_slice(starts);
    sorted.clear();
    sorted.resize(rows.len(), 0);
    for (&g, &i) in group_of.iter().zip(rows) {
        sorted[fill[g as usize]] = i as usize;
        fill[g as usize] += 1;
    }
}

/// Distinct windows, each at its position in the order added: searched linearly while few (a
/// key mostly brings a window or two per batch, where hashing costs more than comparing),
/// through a hash index beyond [`WindowSet::LINEAR`].
#[derive(Default)]
struct WindowSet {
    windows: Vec<Window>,
    index: hashbrown::HashMap<Window, u32>,
}

impl WindowSet {
    const LINEAR: usize = 16;

    fn clear(&mut self) {
        self.windows.clear();
        self.index.clear();
    }

    fn len(&self) -> usize {
        self.windows.len()
    }

    fn position(&self, window: &Window) -> Option<usize> {
        if self.windows.len() <= Self::LINEAR {
            self.windows.iter().position(|w| w == window)
        } else {
            self.index.get(window).map(|&i| i as usize)
        }
    }

    /// The position of `window`, added unless present; and whether it was added.
    fn add(&mut self, window: Window) -> (usize, bool) {
        let n = self.windows.len();
        if n > Self::LINEAR {
            // One hash: found or added through the same entry.
            return match self.index.entry(window) {
                hashbrown::hash_map::Entry::Occupied(e) => (*e.get() as usize, false),
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(n as u32);
                    self.windows.push(window);
                    (n, true)
                }
            };
        }
        if let Some(i) = self.windows.iter().position(|w| *w == window) {
            return (i, false);
        }
        self.windows.push(window);
        if n == Self::LINEAR {
            self.index.extend(self.windows.iter().enumerate().map(|(j, w)| (*w, j as u32)));
        }
        (n, true)
    }

    /// The windows in the order added.
    fn windows(&self) -> &[Window] {
        &self.windows
    }
}

/// Working space of [`GroupAlsoByWindow::merge_new_windows`], kept between keys.
#[derive(Default)]
struct MergeScratch {
    /// The key's active windows, then its fresh new ones: what is merged.
    active: Vec<Window>,
    /// Per new window: whether it still needs a state of its own (it had none and no merge
    /// took it in), and the window it ended up in (itself if none).
    unplaced: Vec<bool>,
    target: Vec<Window>,
    /// The merge results when there are several (one may merge on in a later merge).
    results: WindowSet,
}

/// Buffers of the grouping pass, kept between batches: a large batch would otherwise allocate
/// (and have the kernel zero) fresh memory for them every time.
#[derive(Default)]
struct GroupScratch {
    /// (hash, first row, group) per group.
    table: hashbrown::HashTable<(u64, u32, u32)>,
    firsts: Vec<u32>,
    group_of: Vec<u32>,
    kept: Vec<u32>,
    starts: Vec<usize>,
    fill: Vec<usize>,
    sorted: Vec<usize>,
}

impl GroupScratch {
    fn clear(&mut self) {
        self.table.clear();
        self.firsts.clear();
        self.group_of.clear();
        self.kept.clear();
    }

    /// Puts row `i`, whose hash is `h`, in the group of the first row `same` accepts among
    /// those with that hash, or in a new group it starts.
    fn add(&mut self, h: u64, i: usize, same: impl Fn(usize) -> bool) {
        let g = match self.table.find(h, |e| e.0 == h && same(e.1 as usize)) {
            Some(e) => e.2,
            None => {
                let g = self.firsts.len() as u32;
                self.table.insert_unique(h, (h, i as u32, g), |e| e.0);
                self.firsts.push(i as u32);
                g
            }
        };
        self.group_of.push(g);
        self.kept.push(i as u32);
    }

    /// Sorts the added rows by group (see [`bucket_into`]).
    fn bucket(&mut self) {
        bucket_into(self.firsts.len(), &self.group_of, &self.kept, &mut self.starts, &mut self.fill, &mut self.sorted);
    }

    /// The rows of group `g`, after [`GroupScratch::bucket`].
    fn rows(&self, g: usize) -> &[usize] {
        &self.sorted[self.starts[g]..self.starts[g + 1]]
    }
}

/// One GroupByKey's grouping state and time.
pub struct GroupAlsoByWindow {
    step: String,
    strategy: WindowingStrategy,
    machine: TriggerMachine,
    values: Values,
    keys: hashbrown::HashMap<Key, KeyWindows>,
    /// Number of key-window states in `keys`.
    windows: usize,
    /// End-of-window and garbage-collection timers in buckets of 2^[`TIMER_BUCKET_BITS`] ms
    /// (one allocation per bucket, not per distinct time; sorted when they fire). Timers are
    /// never removed before they are due: one whose window is gone fires as a no-op, and
    /// duplicates fire once.
    event_timers: BTreeMap<Timestamp, Vec<TimerKey>>,
    processing_timers: BTreeSet<TimerKey>,
    /// The holds of the states in `keys`, while `tracked`.
    holds: Holds,
    /// Whether `event_timers` and `holds` are kept. Not while the input watermark is at its
    /// minimum (a bounded input until it ends): then no event timer is due and no hold holds
    /// the output watermark back further than the input watermark does, so both are derived
    /// from the window states when the watermark first moves (as on restore). A bounded input
    /// thus sets none of the timers and holds that its end would only clear again.
    tracked: bool,
    watermarks: Watermarks,
    processing_time: Timestamp,
    dropped: DropCounts,
    scratch: EncodedKvBatch,
    grouping: GroupScratch,
    changes: StateChanges,
    /// [`GroupAlsoByWindow::state_bytes`], kept up to date as states change.
    bytes: usize,
    /// Combiner lifting: input rows are partial accumulators with their input counts
    /// ([`weir_sdk::kernel::lifted_value`]), merged instead of added.
    lifted: bool,
    /// Current change epoch: a state whose `updated_in` differs is not counted yet.
    epoch: u64,
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
        GroupAlsoByWindow {
            step: step.to_string(),
            machine: TriggerMachine::new(&strategy.trigger),
            strategy,
            values,
            keys: hashbrown::HashMap::new(),
            windows: 0,
            event_timers: BTreeMap::new(),
            processing_timers: BTreeSet::new(),
            holds: Holds::default(),
            tracked: false,
            watermarks: Watermarks::new(),
            processing_time: MIN_TIMESTAMP,
            dropped: DropCounts::default(),
            scratch: EncodedKvBatch::default(),
            grouping: GroupScratch::default(),
            changes: StateChanges::default(),
            bytes: 0,
            lifted: false,
            epoch: 1,
            fired: Vec::new(),
            bundle_limit: usize::MAX,
        }
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
        self.dropped
    }

    /// The state rows updated and removed since the previous call (once per batch).
    pub fn take_state_changes(&mut self) -> StateChanges {
        self.epoch += 1;
        std::mem::take(&mut self.changes)
    }

    /// The earliest watermark hold. While the input watermark is at its minimum (holds are
    /// not tracked), the minimum if any state is held: it holds back nothing the input
    /// watermark does not.
    pub fn hold(&self) -> Option<Timestamp> {
        if !self.tracked {
            return (!self.keys.is_empty()).then_some(MIN_TIMESTAMP);
        }
        // Every test run checks the running multiset against a full recount.
        debug_assert_eq!(self.holds, self.counted_holds(), "holds of {}", self.step);
        self.holds.earliest()
    }

    /// Starts tracking event timers and holds (see the field `tracked`): derives them from the
    /// window states.
    fn track(&mut self) {
        self.tracked = true;
        self.holds = self.counted_holds();
        self.event_timers.clear();
        let windows: Vec<(Key, Window)> =
            self.keys.iter().flat_map(|(key, windows)| windows.iter().map(|(w, _)| (key.clone(), *w))).collect();
        for (key, window) in windows {
            self.window_timers(key, window);
        }
    }

    fn counted_holds(&self) -> Holds {
        let mut holds = Holds::default();
        for windows in self.keys.values() {
            debug_assert_eq!(windows.closed, windows.iter().filter(|(_, s)| s.closed).count());
            for (_, ws) in windows.iter() {
                holds.add(ws.hold);
            }
        }
        holds
    }

    /// The earliest processing-time timer, for runners that sleep until it.
    pub fn next_processing_timer(&self) -> Option<Timestamp> {
        self.processing_timers.first().map(|t| t.0)
    }

    /// Number of key-window states held.
    pub fn state_size(&self) -> usize {
        self.windows
    }

    /// Approximate bytes of state held (keys, buffered values or accumulators).
    pub fn state_bytes(&self) -> usize {
        // Every test run checks the running count against a full recount.
        debug_assert_eq!(self.bytes, self.counted_bytes(), "state bytes of {}", self.step);
        self.bytes
    }

    fn counted_bytes(&self) -> usize {
        self.keys.iter().map(|(k, ws)| ws.iter().map(|(_, w)| state_bytes(k, w)).sum::<usize>()).sum()
    }

    /// Recounts [`GroupAlsoByWindow::state_bytes`] from the states.
    fn recount_bytes(&mut self) {
        self.bytes = self.counted_bytes();
    }

    /// The engine's state as entries: one per key and window (its buffer or accumulator,
    /// trigger, pane and hold state), plus the watermarks under the empty key. Timers and holds
    /// are derived from the entries on restore.
    pub fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(self.state_size() + 1);
        let meta = (
            self.watermarks.input(),
            self.watermarks.output(),
            self.processing_time,
            self.dropped.late,
            self.dropped.closed,
        );
        out.push((Vec::new(), crate::checkpoint::encode(&self.step, &meta)?));
        for (key, windows) in &self.keys {
            for (window, state) in windows.iter() {
                out.push((
                    crate::checkpoint::entry_key(&self.step, key, window)?,
                    crate::checkpoint::encode(&self.step, state)?,
                ));
            }
        }
        Ok(out)
    }

    /// Restores state from [`GroupAlsoByWindow::state_entries`], rebuilding timers and holds.
    pub fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.keys.clear();
        self.windows = 0;
        self.event_timers.clear();
        self.processing_timers.clear();
        self.holds = Holds::default();
        self.tracked = false;
        for (entry, value) in entries {
            if entry.is_empty() {
                let (input, output, pt, late, closed): (Timestamp, Timestamp, Timestamp, u64, u64) =
                    crate::checkpoint::decode(&self.step, &value)?;
                self.watermarks = Watermarks::restored(input, output);
                self.processing_time = pt;
                self.dropped = DropCounts { late, closed };
                continue;
            }
            let (key, window) = crate::checkpoint::split_entry_key(&self.step, &entry)?;
            let key: Key = Key::from(&key[..]);
            let state: WindowState = crate::checkpoint::decode(&self.step, &value)?;
            let (closed, pt_timer) = (state.closed, state.pt_timer);
            if self.keys.entry(key.clone()).or_default().insert(window, state) {
                self.windows += 1;
            }
            if let (Some(t), false) = (pt_timer, closed) {
                self.processing_timers.insert((t, key.clone(), window));
            }
        }
        if self.watermarks.input() > MIN_TIMESTAMP {
            self.track();
        }
        self.recount_bytes();
        Ok(())
    }

    /// Whether no state is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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
                self.scratch.extend(*rows);
                return Ok(());
            }
            Err(input) => input,
        };
        match &self.values {
            Values::Buffer(k) => k.encode(input, &mut self.scratch),
            Values::Combine(k) => k.encode(input, &mut self.scratch),
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
        self.bundle_limit = limit;
        self.fired.clear();
        let rest = f(self);
        let mut fired = std::mem::take(&mut self.fired);
        let rest = rest?;
        if fired.is_empty() || !rest.is_empty() {
            fired.push(self.finish(rest)?);
        }
        Ok(fired)
    }

    /// Finishes the fired groups in `out` into an output bundle once there are enough.
    fn spill(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        if out.len() >= self.bundle_limit {
            let groups = std::mem::replace(out, Vec::with_capacity(self.bundle_limit));
            let bundle = self.finish(groups)?;
            self.fired.push(bundle);
        }
        Ok(())
    }

    fn process_inputs(&mut self, inputs: Vec<Batch>, processing_time: Timestamp) -> Result<Vec<EncodedGroup>> {
        self.processing_time = self.processing_time.max(processing_time);
        self.scratch.data.clear();
        self.scratch.rows.clear();
        let mut inputs = inputs;
        // Rows encoded on the way in (a native exchange) are not copied again: the largest
        // such batch goes first and moves into the empty scratch batch (see `encode`).
        inputs.sort_by_key(|b| Reverse(b.downcast_ref::<EncodedKvBatch>().map_or(0, |e| e.rows.len())));
        for input in inputs {
            self.encode(input)?;
        }
        let scratch = std::mem::take(&mut self.scratch);
        let mut out = Vec::new();
        let result = self.process_rows(&scratch, &mut out);
        self.scratch = scratch;
        result?;
        Ok(out)
    }

    fn process_rows(&mut self, batch: &EncodedKvBatch, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let mut scratch = std::mem::take(&mut self.grouping);
        let result = if self.strategy.needs_merge() {
            self.process_merging_rows(batch, out, &mut scratch)
        } else {
            self.group_rows(batch, out, &mut scratch)
        };
        self.grouping = scratch;
        result
    }

    /// Rows of one key and window are added together, in arrival order, so a combining
    /// GroupByKey decodes and encodes its accumulator once per batch, not per element. Rows
    /// are bucketed by group with a counting sort: no allocation per group. The table holds
    /// each group's hash and first row, so a lookup compares hashes before any bytes.
    fn group_rows(&mut self, batch: &EncodedKvBatch, out: &mut Vec<EncodedGroup>, s: &mut GroupScratch) -> Result<()> {
        let hasher = hashbrown::DefaultHashBuilder::default();
        s.clear();
        for i in 0..batch.rows.len() {
            let (key, window) = (batch.key(i), batch.rows[i].window);
            if self.strategy.gc_time(&window) < self.watermarks.input() {
                self.dropped.late += self.inputs_of(batch, i)?;
                continue;
            }
            let h = hasher.hash_one((key, window));
            s.add(h, i, |j| batch.rows[j].window == window && batch.key(j) == key);
        }
        s.bucket();
        for (g, &first) in s.firsts.iter().enumerate() {
            let (key, window) = (batch.key(first as usize), batch.rows[first as usize].window);
            if self.add_rows(key, window, batch, s.rows(g), true)? {
                self.fire(key, window, out)?;
            }
            self.spill(out)?;
        }
        Ok(())
    }

    /// [`GroupAlsoByWindow::process_rows`] for merging windows, key by key: the batch's new
    /// windows of a key are merged once, together with the key's active windows (as Beam's
    /// ReduceFnRunner merges once per bundle), and each row goes to the window its own window
    /// was merged into. Rows are bucketed by key with a counting sort, so the maps of windows
    /// stay as small as one key's windows.
    fn process_merging_rows(
        &mut self,
        batch: &EncodedKvBatch,
        out: &mut Vec<EncodedGroup>,
        s: &mut GroupScratch,
    ) -> Result<()> {
        // Rows by key, in the grouping buffers kept between batches (as `group_rows` does by
        // key and window): each key's first row stands for it.
        let hasher = hashbrown::DefaultHashBuilder::default();
        s.clear();
        for i in 0..batch.rows.len() {
            let key = batch.key(i);
            s.add(hasher.hash_one(key), i, |j| batch.key(j) == key);
        }
        s.bucket();
        let keys = s.firsts.iter().map(|&first| batch.key(first as usize));
        // Per key: its distinct windows (and each row's), the window each ended up in after
        // merging, and its groups (windows after merging): each distinct window's group is
        // found once, then each kept row's group is its window's, bucketed (no allocation per
        // group).
        let (mut distinct, mut distinct_of) = (WindowSet::default(), Vec::new());
        let (mut merging, mut groups) = (MergeScratch::default(), WindowSet::default());
        let (mut group_of_distinct, mut group_of, mut kept) = (Vec::new(), Vec::new(), Vec::new());
        let (mut group_starts, mut fill, mut grouped) = (Vec::new(), Vec::new(), Vec::new());
        /// The group of a distinct window that is past its garbage-collection time.
        const LATE: u32 = u32::MAX;
        for (k, key) in keys.enumerate() {
            let rows = s.rows(k);
            distinct.clear();
            distinct_of.clear();
            for &i in rows {
                distinct_of.push(distinct.add(batch.rows[i].window).0 as u32);
            }
            self.merge_new_windows(key, &distinct, &mut merging)?;
            groups.clear();
            group_of_distinct.clear();
            for &window in &merging.target {
                group_of_distinct.push(if self.strategy.gc_time(&window) < self.watermarks.input() {
                    LATE
                } else {
                    groups.add(window).0 as u32
                });
            }
            group_of.clear();
            kept.clear();
            for (&i, &d) in rows.iter().zip(&distinct_of) {
                match group_of_distinct[d as usize] {
                    LATE => self.dropped.late += self.inputs_of(batch, i)?,
                    g => {
                        group_of.push(g);
                        kept.push(i as u32);
                    }
                }
            }
            bucket_into(groups.len(), &group_of, &kept, &mut group_starts, &mut fill, &mut grouped);
            for (g, &window) in groups.windows().iter().enumerate() {
                if self.add_rows(key, window, batch, &grouped[group_starts[g]..group_starts[g + 1]], false)? {
                    self.fire(key, window, out)?;
                }
                self.spill(out)?;
            }
        }
        Ok(())
    }

    /// The shared form of `key`: the key map's own when the key is known.
    fn arc_key(&self, key: &[u8]) -> Key {
        self.keys.get_key_value(key).map_or_else(|| Key::from(key), |(k, _)| k.clone())
    }

    /// Creates the state of a new window with its timers.
    fn ensure_window(&mut self, key: &[u8], window: Window) {
        // One lookup: a key without windows is never kept, so an empty entry is a new key.
        let entry = self.keys.entry_ref(key).or_default_entry();
        let Err(at) = entry.get().find(&window) else { return };
        let k = entry.key().clone();
        let ws = WindowState {
            non_speculative_index: -1,
            updated_in: self.epoch,
            trigger: self.machine.new_state(),
            ..Default::default()
        };
        self.changes.updated += 1;
        self.bytes += state_bytes(key, &ws);
        entry.into_mut().insert_at(at, window, ws);
        self.windows += 1;
        self.window_timers(k, window);
    }

    fn remove_window(&mut self, key: &[u8], window: &Window) -> Option<WindowState> {
        let (k, windows) = self.keys.get_key_value_mut(key)?;
        let k = k.clone();
        let ws = windows.remove(window)?;
        if windows.is_empty() {
            self.keys.remove(key);
        }
        if self.tracked {
            self.holds.remove(ws.hold);
        }
        self.forget(k, window, &ws);
        Some(ws)
    }

    /// The bookkeeping of a window state leaving the key map, but for its hold.
    fn forget(&mut self, key: Key, window: &Window, ws: &WindowState) {
        self.windows -= 1;
        self.bytes -= state_bytes(&key, ws);
        self.changes.removed += 1;
        // Event-time timers are left in place (see the field): merging replaces
        // windows every batch, and removing from the sets cost more than the rest of the merge.
        if let Some(t) = ws.pt_timer {
            self.processing_timers.remove(&(t, key, *window));
        }
    }

    /// Adds the batch's `distinct` windows of the key to its active windows and merges them all
    /// once; leaves in `m.target` the window each ended up in (by its position in `distinct`).
    /// Windows that merge away never get state of their own; a window already active keeps its
    /// state unless something merges into it.
    fn merge_new_windows(&mut self, key: &[u8], distinct: &WindowSet, m: &mut MergeScratch) -> Result<()> {
        let new = distinct.windows();
        let existing = self.keys.get(key);
        m.active.clear();
        if let Some(ws) = existing {
            ws.active(&mut m.active);
        }
        let old = m.active.len();
        // New windows without state (fresh) are merged with the active ones.
        m.unplaced.clear();
        for w in new {
            let fresh = !existing.is_some_and(|ws| ws.contains_key(w));
            m.unplaced.push(fresh);
            if fresh {
                m.active.push(*w);
            }
        }
        m.target.clear();
        m.target.extend_from_slice(new);
        let merges = self.strategy.window_fn.merge_windows(&m.active);
        m.results.clear();
        if merges.len() > 1 {
            for (_, merged) in &merges {
                m.results.add(*merged);
            }
        }
        // Whether a window may have state: only the key's windows from before do, and merge
        // results (a later merge may take one in). Checked among a few of them, not through the
        // key map (most merges absorb new windows only).
        let (before, few) = (&m.active[..old], old <= WindowSet::LINEAR);
        let may_have_state = |w: &Window| !few || before.contains(w) || m.results.position(w).is_some();
        for (sources, merged) in &merges {
            for w in sources.iter().chain([merged]) {
                if let Some(d) = distinct.position(w) {
                    m.unplaced[d] = false;
                    m.target[d] = *merged;
                }
            }
            let mut states = Vec::new();
            for s in sources.iter().filter(|s| *s != merged && may_have_state(s)) {
                states.extend(self.remove_window(key, s));
            }
            if states.is_empty() {
                // Only stateless (new) windows merged into `merged`: it keeps its own state.
                self.ensure_window(key, *merged);
                continue;
            }
            // The merged window's own state, if it had one: its timers are queued.
            let own = self.remove_window(key, merged);
            let queued = own.is_some();
            states.extend(own);
            let state = self.merge_states(merged, states)?;
            self.install(key, *merged, state, queued);
        }
        if merges.len() > 1 {
            // A window merged into one that merged on (not from Beam's window functions, each
            // of whose windows is in one merge at most): follow the merges. Merged windows only
            // grow, so following them always ends.
            let mut onward: Vec<Option<Window>> = vec![None; m.results.len()];
            for (sources, merged) in &merges {
                for r in sources.iter().filter(|s| *s != merged).filter_map(|s| m.results.position(s)) {
                    onward[r] = Some(*merged);
                }
            }
            if onward.iter().any(Option::is_some) {
                for t in m.target.iter_mut() {
                    for _ in 0..merges.len() {
                        match m.results.position(t).and_then(|r| onward[r]) {
                            Some(next) => *t = next,
                            None => break,
                        }
                    }
                }
            }
        }
        for (w, unplaced) in new.iter().zip(&m.unplaced) {
            if *unplaced {
                self.ensure_window(key, *w);
            }
        }
        Ok(())
    }

    fn merge_states(&self, merged: &Window, mut states: Vec<WindowState>) -> Result<WindowState> {
        if states.len() == 1 {
            // One window with state grew by windows without (a session absorbing new
            // elements): its state is the merged state, only an end-of-window hold moves.
            let mut state = states.pop().unwrap_or_default();
            if self.strategy.timestamp_combiner == TimestampCombiner::EndOfWindow && state.hold.is_some() {
                state.hold = Some(merged.max_timestamp());
            }
            return Ok(state);
        }
        let mut out = WindowState { non_speculative_index: -1, ..Default::default() };
        out.trigger = self.machine.merge(&states.iter().map(|s| &s.trigger).collect::<Vec<_>>());
        match &self.values {
            Values::Buffer(_) => {
                // The largest buffer is moved, the others appended to it: a growing session
                // absorbing a few new elements per batch is not copied every batch.
                if let Some(largest) = (0..states.len()).max_by_key(|&i| states[i].values.len()) {
                    out.values = std::mem::take(&mut states[largest].values);
                }
                for s in &states {
                    out.values.extend_from_slice(&s.values);
                }
            }
            Values::Combine(k) => {
                let with_values: Vec<usize> = (0..states.len()).filter(|&i| states[i].count > 0).collect();
                if let [only] = with_values[..] {
                    // One accumulator merged with empty windows (a session growing): as it is.
                    out.values = std::mem::take(&mut states[only].values);
                } else if !with_values.is_empty() {
                    let accs: Vec<&[u8]> = with_values.iter().map(|&i| states[i].values.as_slice()).collect();
                    out.values = k.merge_accumulators(&accs).with_step(&self.step)?;
                }
            }
        }
        out.count = states.iter().map(|s| s.count).sum();
        out.added_since_fire = states.iter().map(|s| s.added_since_fire).sum();
        out.hold = states.iter().filter_map(|s| s.hold).reduce(|a, b| match self.strategy.timestamp_combiner {
            TimestampCombiner::Earliest => a.min(b),
            TimestampCombiner::Latest => a.max(b),
            TimestampCombiner::EndOfWindow => merged.max_timestamp(),
        });
        if self.strategy.timestamp_combiner == TimestampCombiner::EndOfWindow && out.hold.is_some() {
            out.hold = Some(merged.max_timestamp());
        }
        out.pane_index = states.iter().map(|s| s.pane_index).max().unwrap_or(0);
        out.non_speculative_index = states.iter().map(|s| s.non_speculative_index).max().unwrap_or(-1);
        out.non_early_emitted = states.iter().any(|s| s.non_early_emitted);
        Ok(out)
    }

    /// Puts a (merged) window state in place with its timers and hold. `queued`: the window had
    /// a state just before, so its event timers are queued already (they are never removed
    /// early, and time only moves on), and a session or auction window that absorbs new
    /// elements every batch does not queue them again every batch.
    fn install(&mut self, key: &[u8], window: Window, mut state: WindowState, queued: bool) {
        state.pt_timer = self.machine.next_processing_time(&state.trigger, self.processing_time);
        state.updated_in = self.epoch;
        self.changes.updated += 1;
        let (hold, pt) = (state.hold, state.pt_timer);
        self.bytes += state_bytes(key, &state);
        let entry = self.keys.entry_ref(key).or_default_entry();
        let k = entry.key().clone();
        let windows = entry.into_mut();
        if let Some(old) = windows.get(&window) {
            self.bytes -= state_bytes(&k, old);
            if self.tracked {
                self.holds.remove(old.hold);
            }
        }
        if self.tracked {
            self.holds.add(hold);
        }
        if windows.insert(window, state) {
            self.windows += 1;
        }
        if !queued {
            self.window_timers(k.clone(), window);
        }
        if let Some(t) = pt {
            self.processing_timers.insert((t, k, window));
        }
    }

    /// Adds rows `idx` of `batch` to the state of `key` and `window`, created first when
    /// `create` (merging creates every window it places before any row is added). Returns
    /// whether the window's trigger fires now.
    fn add_rows(
        &mut self,
        key: &[u8],
        window: Window,
        batch: &EncodedKvBatch,
        idx: &[usize],
        create: bool,
    ) -> Result<bool> {
        if create {
            self.ensure_window(key, window);
        }
        let ctx = self.ctx(&window);
        let output_wm = self.watermarks.output();
        let eow = window.max_timestamp();
        let combiner = self.strategy.timestamp_combiner;
        let window_fn = self.strategy.window_fn.clone();
        // Lifted rows: the partial accumulators and the inputs they stand for.
        let mut lifted: Vec<&[u8]> = Vec::new();
        let mut inputs = idx.len() as u64;
        if self.lifted {
            inputs = 0;
            for &i in idx {
                let (count, acc) = weir_sdk::kernel::lifted_value(batch.value(i))
                    .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
                inputs += count;
                lifted.push(acc);
            }
        }
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else {
            return Err(Error::Internal {
                component: "GroupAlsoByWindow".into(),
                message: "window state vanished".into(),
            });
        };
        if ws.closed {
            self.dropped.closed += inputs;
            return Ok(false);
        }
        if ws.updated_in != self.epoch {
            ws.updated_in = self.epoch;
            self.changes.updated += 1;
        }
        let before = ws.values.len();
        match &self.values {
            Values::Buffer(_) => {
                if idx.len() > 1 {
                    ws.values.reserve(idx.iter().map(|&i| batch.value(i).len()).sum());
                }
                for &i in idx {
                    ws.values.extend_from_slice(batch.value(i));
                }
            }
            Values::Combine(k) if self.lifted => {
                if ws.count > 0 {
                    lifted.insert(0, &ws.values);
                }
                ws.values = match lifted[..] {
                    [only] => only.to_vec(),
                    _ => k.merge_accumulators(&lifted).with_step(&self.step)?,
                };
            }
            Values::Combine(k) => {
                let acc = (ws.count > 0).then_some(ws.values.as_slice());
                let mut inputs = idx.iter().map(|&i| batch.value(i));
                ws.values = k.add_inputs(acc, &mut inputs).with_step(&self.step)?;
            }
        }
        self.bytes = self.bytes + ws.values.len() - before;
        ws.count += inputs as usize;
        ws.added_since_fire += inputs as usize;
        // Element holds (spec §4.2): at the (shifted) element time for EARLIEST/LATEST, at the
        // end of the window otherwise; none for data already behind the output watermark.
        let old_hold = ws.hold;
        for &i in idx {
            let h = match combiner {
                TimestampCombiner::EndOfWindow => eow,
                _ => window_fn.output_time(batch.rows[i].timestamp, &window),
            };
            if h < output_wm || h > eow {
                continue;
            }
            ws.hold = Some(match (ws.hold, combiner) {
                (None, _) => h,
                (Some(o), TimestampCombiner::Latest) => o.max(h),
                (Some(o), _) => o.min(h),
            });
        }
        self.machine.on_elements(&mut ws.trigger, inputs as i64, &ctx);
        let fire = self.machine.should_fire(&ws.trigger, &ctx);
        let pt = self.machine.next_processing_time(&ws.trigger, self.processing_time);
        let old_pt = std::mem::replace(&mut ws.pt_timer, pt);
        let new_hold = ws.hold;
        if old_hold == new_hold && old_pt == pt {
            return Ok(fire);
        }
        if self.tracked {
            self.holds.change(old_hold, new_hold);
        }
        if old_pt != pt {
            let k = self.arc_key(key);
            if let Some(t) = old_pt {
                self.processing_timers.remove(&(t, k.clone(), window));
            }
            if let Some(t) = pt {
                self.processing_timers.insert((t, k, window));
            }
        }
        Ok(fire)
    }

    /// Fires the window's trigger if it says so.
    fn maybe_fire(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let ctx = self.ctx(&window);
        let fire = match self.keys.get(key).and_then(|w| w.get(&window)) {
            Some(ws) => !ws.closed && self.machine.should_fire(&ws.trigger, &ctx),
            None => false,
        };
        if fire {
            self.fire(key, window, out)?;
        }
        Ok(())
    }

    /// Fires the window's trigger (it said so): emits a pane, and closes the window if the
    /// trigger finished.
    fn fire(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let ctx = self.ctx(&window);
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else { return Ok(()) };
        self.machine.on_fire(&mut ws.trigger, &ctx);
        let finished = self.machine.is_finished(&ws.trigger);
        self.emit(key, window, finished, out)?;
        if finished {
            self.close(key, window);
        }
        Ok(())
    }

    /// Marks the window closed: its contents are gone and later data is dropped until expiry.
    fn close(&mut self, key: &[u8], window: Window) {
        if let Some(ws) = self.keys.get_mut(key).and_then(|w| w.close(&window)) {
            self.bytes -= ws.values.len();
            ws.values = Vec::new();
            ws.count = 0;
            if let Some(t) = ws.pt_timer.take() {
                self.processing_timers.remove(&(t, self.arc_key(key), window));
            }
        }
    }

    /// Emits a pane of the window (spec §3.5, §3.6) and releases its hold.
    fn emit(&mut self, key: &[u8], window: Window, is_final: bool, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else { return Ok(()) };
        self.bytes -= ws.values.len();
        let hold = ws.hold;
        let mut ctx = PaneContext {
            strategy: &self.strategy,
            watermarks: self.watermarks,
            epoch: self.epoch,
            changes: &mut self.changes,
        };
        emit_pane(&mut ctx, ws, key, window, is_final, out);
        self.bytes += ws.values.len();
        if self.tracked {
            self.holds.change(hold, ws.hold);
        }
        Ok(())
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
        if !self.tracked && wm.input() > MIN_TIMESTAMP && wm.input() < MAX_TIMESTAMP {
            self.track();
        }
        let mut out = Vec::new();
        self.fire_timers(&mut out)?;
        let hold = self.hold();
        self.watermarks.advance(input_watermark, None, hold);
        Ok(out)
    }

    fn fire_timers(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        // Processing-time timers (strictly before now), then event-time timers (strictly before
        // the input watermark), each in timestamp order.
        while let Some((t, key, window)) = self.processing_timers.first().cloned() {
            if t >= self.processing_time {
                break;
            }
            self.processing_timers.remove(&(t, key.clone(), window));
            if let Some(ws) = self.keys.get_mut(&key).and_then(|w| w.get_mut(&window)) {
                ws.pt_timer = None;
            }
            self.maybe_fire(&key, window, out)?;
            self.refresh_pt_timer(&key, window);
            self.spill(out)?;
        }
        if self.watermarks.input() == MAX_TIMESTAMP {
            return self.expire_all(out);
        }
        // Firing a window's timers sets no event timer, so every due timer is taken at once,
        // then fired in (time, key, window) order, each once.
        let (wm, mut due) = (self.watermarks.input(), Vec::new());
        while let Some(mut bucket) = self.event_timers.first_entry() {
            match (*bucket.key()).cmp(&(wm >> TIMER_BUCKET_BITS)) {
                // Every time in the bucket is before the watermark.
                std::cmp::Ordering::Less => due.extend(bucket.remove()),
                // The watermark's own bucket: what is before it.
                std::cmp::Ordering::Equal => {
                    let timers = bucket.get_mut();
                    let mut i = 0;
                    while i < timers.len() {
                        if timers[i].0 < wm {
                            due.push(timers.swap_remove(i));
                        } else {
                            i += 1;
                        }
                    }
                    if timers.is_empty() {
                        bucket.remove();
                    }
                    break;
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        due.sort_unstable();
        due.dedup();
        out.reserve(due.len().min(self.bundle_limit));
        for (_, key, window) in due {
            self.on_event_timer(&key, window, out)?;
            self.spill(out)?;
        }
        Ok(())
    }

    /// Sets the window's event timers: the end of the window, and garbage collection when later.
    fn window_timers(&mut self, key: Key, window: Window) {
        let (eow, gc) = (window.max_timestamp(), self.strategy.gc_time(&window));
        if gc != eow {
            self.event_timer((gc, key.clone(), window));
        }
        self.event_timer((eow, key, window));
    }

    fn event_timer(&mut self, timer: TimerKey) {
        if !self.tracked {
            return;
        }
        self.event_timers.entry(timer.0 >> TIMER_BUCKET_BITS).or_default().push(timer);
    }

    fn refresh_pt_timer(&mut self, key: &[u8], window: Window) {
        let k = self.arc_key(key);
        if let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) {
            if ws.closed {
                return;
            }
            let pt = self.machine.next_processing_time(&ws.trigger, self.processing_time);
            if pt != ws.pt_timer {
                if let Some(t) = ws.pt_timer {
                    self.processing_timers.remove(&(t, k.clone(), window));
                }
                if let Some(t) = pt {
                    self.processing_timers.insert((t, k, window));
                }
                ws.pt_timer = pt;
            }
        }
    }

    /// An event-time timer of the window: classified by the window's state, not by which timer
    /// it was (spec §3.4).
    fn on_event_timer(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        if self.watermarks.input() <= self.strategy.gc_time(&window) {
            if self.keys.get(key).and_then(|w| w.get(&window)).is_some_and(|ws| !ws.closed) {
                self.maybe_fire(key, window, out)?;
            }
            return Ok(());
        }
        // Expiry: the state leaves the map (one lookup), and its last pane is emitted from it.
        if let Some(ws) = self.remove_window(key, &window) {
            self.expire(key, window, ws, out);
        }
        Ok(())
    }

    /// Emits the last pane of an expired window (removed from the key map) unless its trigger
    /// closed it.
    fn expire(&mut self, key: &[u8], window: Window, mut ws: WindowState, out: &mut Vec<EncodedGroup>) {
        if !ws.closed {
            // The last pane of an expiring window removes the row: not also an update.
            ws.updated_in = self.epoch;
            let ctx = self.ctx(&window);
            if self.machine.should_fire(&ws.trigger, &ctx) {
                self.machine.on_fire(&mut ws.trigger, &ctx);
            }
            let mut c = PaneContext {
                strategy: &self.strategy,
                watermarks: self.watermarks,
                epoch: self.epoch,
                changes: &mut self.changes,
            };
            emit_pane(&mut c, &mut ws, key, window, true, out);
        }
    }

    /// The end of time (input watermark at its maximum): every window is past its GC time
    /// (which is at most the global window's end, a day before the end of time) and expires,
    /// and no event timer will be set again. The windows are taken key by key in the key map's
    /// own order instead of in timer order: the same panes, but each key's windows visited once
    /// and in memory order (at the end of a bounded input every window of the whole input fires
    /// here, and in timer order each cost several cache misses).
    fn expire_all(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        self.event_timers.clear();
        self.holds = Holds::default();
        // Nothing is held from here on, so nothing is left to derive.
        self.tracked = true;
        out.reserve(self.windows.min(self.bundle_limit));
        for (key, windows) in std::mem::take(&mut self.keys) {
            for (window, ws) in windows.windows {
                self.forget(key.clone(), &window, &ws);
                self.expire(&key, window, ws, out);
            }
            self.spill(out)?;
        }
        Ok(())
    }

    fn finish(&self, groups: Vec<EncodedGroup>) -> Result<Batch> {
        match &self.values {
            Values::Buffer(k) => k.decode_groups(groups).with_step(&self.step),
            Values::Combine(k) => k.extract(groups).with_step(&self.step),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;
    use weir_sdk::windowed_value::WindowedValue;
    use weir_sdk::KV;

    type Grouped = WindowedValue<KV<i64, Vec<i64>>>;

    fn grouped(batch: Batch) -> Vec<(i64, Vec<i64>, Timestamp, Timing)> {
        let groups = batch.downcast::<Vec<Grouped>>().expect("grouped batch");
        groups.into_iter().map(|g| (g.value.key, g.value.value, g.timestamp, g.pane.timing)).collect()
    }

    /// Fixed 10 ms windows, 5 ms allowed lateness, output at the earliest element.
    fn engine() -> GroupAlsoByWindow {
        let mut strategy = WindowingStrategy::of(Arc::new(weir_sdk::window_fn::FixedWindows::of(
            std::time::Duration::from_millis(10),
        )));
        strategy.allowed_lateness_ms = 5;
        strategy.timestamp_combiner = TimestampCombiner::Earliest;
        GroupAlsoByWindow::new("G", strategy, Values::Buffer(weir_sdk::transforms::group_by_key::kernel::<i64, i64>()))
    }

    fn input(rows: &[(i64, i64, Timestamp)]) -> Batch {
        let window = |t: i64| Window::Interval(weir_sdk::window::IntervalWindow::new(t / 10 * 10, t / 10 * 10 + 10));
        let rows: Vec<WindowedValue<KV<i64, i64>>> = rows
            .iter()
            .map(|&(k, v, t)| WindowedValue {
                value: KV::new(k, v),
                timestamp: t,
                window: window(t),
                pane: PaneInfo::NO_FIRING,
            })
            .collect();
        Batch::new(rows)
    }

    #[test]
    fn state_grouped_before_the_watermark_moves_gets_its_timers_and_holds_when_it_does() {
        // Input while the input watermark is at its minimum (a bounded input), then the
        // watermark moves for the first time, from a restored checkpoint or not.
        for restored in [false, true] {
            let mut gaw = engine();
            let out = gaw.process(input(&[(1, 10, 3), (1, 11, 12), (2, 20, 4)]), 0).unwrap();
            assert!(grouped(out).is_empty());
            assert_eq!(gaw.hold(), Some(MIN_TIMESTAMP), "nothing can pass the input watermark yet");
            if restored {
                let entries = gaw.state_entries().unwrap();
                gaw = engine();
                gaw.restore_entries(entries).unwrap();
            }
            // Both windows' holds are in place: the earliest element of each.
            assert!(grouped(gaw.advance(5, 0).unwrap()).is_empty());
            assert_eq!(gaw.hold(), Some(3));
            assert_eq!(gaw.watermarks().output(), 3);
            // The end-of-window timers of [0, 10) fire; [10, 20) still holds at 12.
            let mut fired = grouped(gaw.advance(10, 0).unwrap());
            fired.sort_by_key(|f| f.0);
            assert_eq!(fired, vec![(1, vec![10], 3, Timing::OnTime), (2, vec![20], 4, Timing::OnTime)]);
            assert_eq!(gaw.hold(), Some(12));
            // Late data within the allowed lateness fires a late pane at once; past the
            // garbage-collection timer of [0, 10) it is dropped.
            let late = grouped(gaw.process(input(&[(1, 13, 5)]), 0).unwrap());
            assert_eq!(late, vec![(1, vec![13], 9, Timing::Late)]);
            assert!(grouped(gaw.advance(15, 0).unwrap()).is_empty());
            assert!(grouped(gaw.process(input(&[(1, 14, 6)]), 0).unwrap()).is_empty());
            assert_eq!(gaw.dropped().late, 1);
            assert_eq!(grouped(gaw.advance(20, 0).unwrap()), vec![(1, vec![11], 12, Timing::OnTime)]);
            assert_eq!(gaw.hold(), None);
            assert_eq!(grouped(gaw.advance(MAX_TIMESTAMP, 0).unwrap()), vec![]);
            assert!(gaw.is_empty());
        }
    }

    #[test]
    fn window_sets_find_every_window_below_and_above_the_linear_limit() {
        let window = |i: i64| Window::Interval(weir_sdk::window::IntervalWindow::new(i * 10, i * 10 + 5));
        let mut set = WindowSet::default();
        for round in 0..2 {
            set.clear();
            for i in 0..40 {
                assert_eq!(set.add(window(i)), (i as usize, true), "round {round}");
                // Adding again finds it where it is.
                assert_eq!(set.add(window(i)), (i as usize, false));
                for j in 0..=i {
                    assert_eq!(set.position(&window(j)), Some(j as usize), "{j} of {i}");
                }
                assert_eq!(set.position(&window(i + 1)), None);
            }
            assert_eq!((set.len(), set.windows()), (40, &(0..40).map(window).collect::<Vec<_>>()[..]));
        }
    }

    #[test]
    fn keys_hash_compare_and_order_as_their_bytes_inline_or_shared() {
        let short: &[u8] = b"k";
        let edge = [7u8; INLINE_KEY];
        let long = [7u8; INLINE_KEY + 1];
        let keys: Vec<Key> = [short, &edge[..], &long[..], b""].iter().map(|k| Key::from(*k)).collect();
        assert!(matches!(keys[0], Key::Inline { .. }) && matches!(keys[1], Key::Inline { .. }));
        assert!(matches!(keys[2], Key::Shared(_)));
        let hasher = hashbrown::DefaultHashBuilder::default();
        for (k, bytes) in keys.iter().zip([short, &edge[..], &long[..], b""]) {
            assert_eq!(&**k, bytes);
            assert_eq!(hasher.hash_one(k), hasher.hash_one(bytes));
        }
        // Found in a map by their bytes, whichever form they take.
        let map: hashbrown::HashMap<Key, usize> = keys.iter().cloned().zip(0..).collect();
        assert_eq!(map.get(&long[..]), Some(&2));
        assert_eq!(map.get(&edge[..]), Some(&1));
        assert_eq!(map.get(&b"x"[..]), None);
        // Ordered as byte strings: a prefix first, across the two forms.
        let mut sorted = keys.clone();
        sorted.sort();
        let order: Vec<&[u8]> = sorted.iter().map(|k| &**k).collect();
        assert_eq!(order, vec![&b""[..], &edge[..], &long[..], short]);
    }

    /// Merges [0, 10) and [20, 30) into [0, 30), which merges on with [40, 50) into [0, 50).
    #[derive(Debug)]
    struct ChainedMerges;

    impl weir_sdk::window_fn::WindowFn for ChainedMerges {
        fn assign_windows(&self, _: Timestamp, window: &Window, out: &mut Vec<Window>) {
            out.push(*window);
        }
        fn is_merging(&self) -> bool {
            true
        }
        fn is_compatible(&self, other: &dyn weir_sdk::window_fn::WindowFn) -> bool {
            other.as_any().is::<ChainedMerges>()
        }
        fn merge_windows(&self, windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
            let w = |a, b| Window::Interval(weir_sdk::window::IntervalWindow::new(a, b));
            if !windows.contains(&w(0, 10)) {
                return Vec::new();
            }
            vec![(vec![w(0, 10), w(20, 30)], w(0, 30)), (vec![w(0, 30), w(40, 50)], w(0, 50))]
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn a_window_merged_into_one_that_merges_on_ends_in_the_last() {
        let strategy = WindowingStrategy::of(Arc::new(ChainedMerges));
        let kernel = weir_sdk::transforms::group_by_key::kernel::<i64, i64>();
        let mut gaw = GroupAlsoByWindow::new("G", strategy, Values::Buffer(kernel));
        assert!(grouped(gaw.process(input(&[(1, 1, 5), (1, 2, 25), (1, 3, 45)]), 0).unwrap()).is_empty());
        // One state: the intermediate [0, 30) keeps none.
        assert_eq!(gaw.state_size(), 1);
        let mut fired = grouped(gaw.advance(60, 0).unwrap());
        fired[0].1.sort();
        assert_eq!(fired, vec![(1, vec![1, 2, 3], 49, Timing::OnTime)]);
        assert!(gaw.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// Issue 16: restoring state entries of any bytes, or real entries with bytes changed,
        /// gives an error naming the step or a state the engine goes on with; never a panic.
        #[test]
        fn restoring_damaged_state_never_panics(
            junk in proptest::collection::vec((proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48)), 0..6),
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
        ) {
            if let Err(e) = engine().restore_entries(junk) {
                proptest::prop_assert!(e.to_string().contains("'G'") || e.to_string().contains(" G"), "{}", e);
            }
            let mut real = engine();
            let _ = real.process(input(&[(1, 10, 3), (1, 11, 12), (2, 20, 4)]), 0).unwrap();
            let _ = real.advance(5, 0).unwrap();
            let mut entries = real.state_entries().unwrap();
            for (e, at, x) in flips {
                let n = entries.len();
                let (k, v) = &mut entries[e % n];
                let target = if at % 2 == 0 || k.is_empty() { v } else { k };
                if !target.is_empty() {
                    let len = target.len();
                    target[at % len] ^= x | 1;
                }
            }
            let mut restored = engine();
            if restored.restore_entries(entries).is_ok() {
                // Whatever was read back runs on to the end of time.
                let _ = restored.advance(MAX_TIMESTAMP, 0);
            }
        }
    }
}
