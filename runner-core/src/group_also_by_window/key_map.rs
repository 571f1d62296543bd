//! The key map: per key, its windows' states, sorted by window. Keys are stored inline when
//! short (integers, small strings) and shared otherwise, so the timer and hold sets that name a
//! key do not copy it.

use super::*;

/// The longest key kept inline: what fits beside the length in the size of a shared key.
pub(super) const INLINE_KEY: usize = 22;

/// A key of the key map, also held by the timer and hold sets: inline when short (any integer
/// key: no allocation, and comparing it touches no other memory), else shared (no copy per
/// timer). Hashes, compares and orders as its bytes.
#[derive(Clone)]
pub(super) enum Key {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Shared(Arc<[u8]>),
}

impl Key {
    pub(super) fn as_bytes(&self) -> &[u8] {
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

/// The windows of one key, sorted by window. Most keys hold one or a few windows, so a sorted
/// sequence beats a tree map. A ring buffer, because windows mostly arrive at the end and
/// expire at the front: a hot key with thousands of windows does not shift them all on every
/// expiry, so states are kept in place (no allocation, and no pointer to follow, per window).
#[derive(Default)]
pub(super) struct KeyWindows {
    pub(super) windows: std::collections::VecDeque<(Window, WindowState)>,
    /// How many of the states are closed: with none, the active (not closed) windows are
    /// listed without reading any state (a cache miss each, for a key with thousands of
    /// windows merged every batch).
    pub(super) closed: usize,
    /// The last call that touched the key, with the disk backend (which moves the least
    /// recently touched keys to disk).
    pub(super) touched: u32,
}

impl KeyWindows {
    pub(super) fn find(&self, window: &Window) -> std::result::Result<usize, usize> {
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
    pub(super) fn get(&self, window: &Window) -> Option<&WindowState> {
        self.find(window).ok().map(|i| &self.windows[i].1)
    }
    /// The state of `window`, to change anything but whether it is closed (see
    /// [`KeyWindows::close`]).
    pub(super) fn get_mut(&mut self, window: &Window) -> Option<&mut WindowState> {
        self.find(window).ok().map(|i| &mut self.windows[i].1)
    }
    /// Marks the state of `window` closed; returns it unless there is none.
    pub(super) fn close(&mut self, window: &Window) -> Option<&mut WindowState> {
        let i = self.find(window).ok()?;
        let ws = &mut self.windows[i].1;
        if !ws.closed {
            ws.closed = true;
            self.closed += 1;
        }
        Some(ws)
    }
    pub(super) fn contains_key(&self, window: &Window) -> bool {
        self.find(window).is_ok()
    }
    /// Inserts or replaces; returns whether the window is new.
    pub(super) fn insert(&mut self, window: Window, state: WindowState) -> bool {
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
    pub(super) fn insert_at(&mut self, at: usize, window: Window, state: WindowState) {
        if self.windows.capacity() == 0 {
            // Most keys hold one window: room for one, not the four a first insert makes.
            self.windows.reserve_exact(1);
        }
        self.windows.insert(at, (window, state));
    }
    pub(super) fn remove(&mut self, window: &Window) -> Option<WindowState> {
        let state = self.find(window).ok().and_then(|i| self.windows.remove(i)).map(|(_, s)| s)?;
        self.closed -= usize::from(state.closed);
        Some(state)
    }
    pub(super) fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Window, &WindowState)> {
        self.windows.iter().map(|(w, s)| (w, s))
    }
    /// The windows whose state is not closed and that intersect `[lo, hi)`, in order, for a
    /// window function whose windows merge exactly when they overlap (sessions), so that the
    /// active windows are disjoint intervals: walking back from the last window starting before
    /// `hi`, the first active one that ends by `lo` is the last to look at. A key with years of
    /// sessions does not list them all each time it gets a new one. Returns false, listing
    /// nothing, if the key has a window that is not an interval.
    pub(super) fn active_overlapping(&self, lo: Timestamp, hi: Timestamp, out: &mut Vec<Window>) -> bool {
        // Windows order by kind first: all are intervals if the first and last are.
        let interval = |w: Option<&(Window, WindowState)>| w.is_none_or(|(w, _)| matches!(w, Window::Interval(_)));
        if !interval(self.windows.front()) || !interval(self.windows.back()) {
            return false;
        }
        let upper = self.windows.partition_point(|(w, _)| w.interval().is_some_and(|iv| iv.start < hi));
        let from = out.len();
        for (w, s) in self.windows.range(..upper).rev() {
            let Some(iv) = w.interval() else { continue };
            if s.closed {
                continue;
            }
            if iv.end <= lo {
                break;
            }
            out.push(*w);
        }
        out[from..].reverse();
        true
    }
    /// The windows whose state is not closed.
    pub(super) fn active(&self, out: &mut Vec<Window>) {
        if self.closed == 0 {
            out.extend(self.windows.iter().map(|(w, _)| *w));
        } else {
            out.extend(self.windows.iter().filter(|(_, s)| !s.closed).map(|(w, _)| *w));
        }
    }
}

/// What one key and window's state counts for in [`GroupAlsoByWindow::state_bytes`]: what it
/// holds allocated, as near as can be told without asking the allocator: its values' buffer
/// (its capacity, not only what it uses), the key's bytes, the window's slot among its key's,
/// and its key's entry in the key map (each window pays for a whole one).
pub(super) fn state_bytes(key: &[u8], state: &WindowState) -> usize {
    const SLOTS: usize = std::mem::size_of::<(Window, WindowState)>() + std::mem::size_of::<(Key, KeyWindows)>();
    key.len() + state.values.capacity() + SLOTS
}

impl GroupAlsoByWindow {
    /// The shared form of `key`: the key map's own when the key is known.
    pub(super) fn arc_key(&self, key: &[u8]) -> Key {
        self.keys.get_key_value(key).map_or_else(|| Key::from(key), |(k, _)| k.clone())
    }

    /// Creates the state of a new window with its timers.
    pub(super) fn ensure_window(&mut self, key: &[u8], window: Window) {
        // One lookup: a key without windows is never kept, so an empty entry is a new key.
        let entry = self.keys.entry_ref(key).or_default_entry();
        let Err(at) = entry.get().find(&window) else { return };
        let k = entry.key().clone();
        let ws = WindowState::new(self.counts.epoch);
        self.counts.changes.updated += 1;
        self.counts.bytes += state_bytes(key, &ws);
        entry.into_mut().insert_at(at, window, ws);
        self.counts.windows += 1;
        self.mark_changed_key(k.clone(), window);
        self.window_timers(k, window);
    }

    pub(super) fn remove_window(&mut self, key: &[u8], window: &Window) -> Option<WindowState> {
        let (k, windows) = self.keys.get_key_value_mut(key)?;
        let k = k.clone();
        let ws = windows.remove(window)?;
        if windows.is_empty() {
            self.keys.remove(key);
        }
        if self.timers.tracked {
            self.timers.holds.remove(ws.hold());
        }
        self.forget(k, window, &ws);
        Some(ws)
    }

    /// The bookkeeping of a window state leaving the key map, but for its hold.
    pub(super) fn forget(&mut self, key: Key, window: &Window, ws: &WindowState) {
        self.mark_changed_key(key.clone(), *window);
        self.counts.windows -= 1;
        self.counts.bytes -= state_bytes(&key, ws);
        self.counts.changes.removed += 1;
        // Event-time timers are left in place (see the field): merging replaces
        // windows every batch, and removing from the sets cost more than the rest of the merge.
        if let Some(t) = ws.pt_timer() {
            self.timers.processing_timers.remove(&(t, (key, *window)));
        }
    }
}
