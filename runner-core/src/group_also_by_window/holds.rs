//! Watermark holds: each window's state holds the output watermark at the timestamp its pane
//! will carry. The holds of all states are one counted multiset, exact at all times, so the
//! earliest hold is read without a scan.

use super::*;

/// The element holds of every window state, as a counted multiset of times: exact at all times
/// (each change of a state's hold moves one count), so the earliest hold is the first entry.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Holds(BTreeMap<Timestamp, u32>);

impl Holds {
    pub(super) fn add(&mut self, hold: Option<Timestamp>) {
        if let Some(t) = hold {
            *self.0.entry(t).or_insert(0) += 1;
        }
    }

    pub(super) fn remove(&mut self, hold: Option<Timestamp>) {
        let Some(t) = hold else { return };
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.0.entry(t) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
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
            assert_eq!(self.timers.holds, counted, "holds of {}", self.step);
        }
        self.timers.holds.earliest()
    }

    /// Starts tracking event timers and holds (see the field `tracked`): derives them from the
    /// window states.
    pub(super) fn track(&mut self) -> Result<()> {
        self.timers.tracked = true;
        self.timers.holds = self.counted_holds()?;
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
