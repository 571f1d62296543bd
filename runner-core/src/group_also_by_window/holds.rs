//! Watermark holds: each window's state holds the output watermark at the timestamp its pane
//! will carry. The holds of all states are one counted multiset, exact at all times, so the
//! earliest hold is read without a scan (on the disk backend its latest times wait on disk past
//! a cap, [`crate::state_backend::TimeCounts`]).

use super::*;

/// The element holds of every window state, as a counted multiset of times: exact at all times
/// (each change of a state's hold moves one count), so the earliest hold is the first entry.
#[derive(Default)]
pub(super) struct RunningHolds(crate::state_backend::TimeCounts);

impl RunningHolds {
    pub(super) fn new(backend: &crate::state_backend::StateBackend, step: &str) -> Self {
        RunningHolds(crate::state_backend::TimeCounts::new(backend, step))
    }

    pub(super) fn add(&mut self, hold: Option<Timestamp>) {
        if let Some(t) = hold {
            self.0.add(t);
        }
    }

    pub(super) fn remove(&mut self, hold: Option<Timestamp>) {
        if let Some(t) = hold {
            self.0.remove(t);
        }
    }

    /// A state's hold moved from `old` to `new`.
    pub(super) fn change(&mut self, old: Option<Timestamp>, new: Option<Timestamp>) {
        if old != new {
            self.remove(old);
            self.add(new);
        }
    }

    pub(super) fn earliest(&self) -> Option<Timestamp> {
        self.0.earliest()
    }

    /// The counts of a recount, replacing these.
    pub(super) fn reset_to(&mut self, counted: Holds) {
        self.0.clear();
        for (t, n) in counted.0 {
            self.0.add_n(t, n);
        }
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// Whether these equal a recount (all of it while none is on disk, else its earliest).
    /// Debug builds and tests check the running counts with it.
    #[cfg(any(debug_assertions, test))]
    pub(super) fn equal(&self, counted: &Holds) -> bool {
        match self.0.in_memory() {
            Some(counts) => *counts == counted.0,
            None => self.earliest() == counted.earliest(),
        }
    }

    pub(super) fn on_disk(&self) -> usize {
        self.0.on_disk()
    }

    pub(super) fn take_error(&mut self) -> Result<()> {
        self.0.take_error()
    }
}

/// A recount of the holds of every state ([`GroupAlsoByWindow::counted_holds`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Holds(BTreeMap<Timestamp, u32>);

impl Holds {
    pub(super) fn add(&mut self, hold: Option<Timestamp>) {
        if let Some(t) = hold {
            *self.0.entry(t).or_insert(0) += 1;
        }
    }

    #[cfg(any(debug_assertions, test))]
    pub(super) fn earliest(&self) -> Option<Timestamp> {
        self.0.first_key_value().map(|(t, _)| *t)
    }
}

impl GroupAlsoByWindow {
    /// The earliest watermark hold. While the input watermark is at its minimum (holds are
    /// not tracked), the minimum if any state is held: it holds back nothing the input
    /// watermark does not.
    pub fn hold(&self) -> Option<Timestamp> {
        if let Some(held) = self.expiring.filter(|_| !self.is_empty()) {
            return Some(held);
        }
        if !self.timers.tracked {
            return (!self.is_empty()).then_some(MIN_TIMESTAMP);
        }
        // Every test run checks the running multiset against a full recount.
        #[cfg(debug_assertions)]
        if let Ok(counted) = self.counted_holds() {
            assert!(self.timers.holds.equal(&counted), "holds of {}: {counted:?}", self.step);
        }
        self.timers.holds.earliest()
    }

    /// Starts tracking event timers and holds (see the field `tracked`): derives them from the
    /// window states.
    pub(super) fn track(&mut self) -> Result<()> {
        self.timers.tracked = true;
        let counted = self.counted_holds()?;
        self.timers.holds.reset_to(counted);
        self.timers.event_timers.clear();
        let mut windows: Vec<(Key, Window)> =
            self.keys.iter().flat_map(|(key, windows)| windows.iter().map(|(w, _)| (key.clone(), *w))).collect();
        self.for_each_spilled(|key, window, _| {
            windows.push((Key::from(key), window));
            Ok(())
        })?;
        for (key, window) in windows {
            self.window_timers(key, window);
        }
        Ok(())
    }

    /// The holds of every state, in memory and on disk.
    pub(super) fn counted_holds(&self) -> Result<Holds> {
        let mut holds = Holds::default();
        for windows in self.keys.values() {
            debug_assert_eq!(windows.closed, windows.iter().filter(|(_, s)| s.closed).count());
            for (_, ws) in windows.iter() {
                holds.add(ws.hold());
            }
        }
        self.for_each_spilled(|_, _, ws| {
            holds.add(ws.hold());
            Ok(())
        })?;
        Ok(holds)
    }
}
