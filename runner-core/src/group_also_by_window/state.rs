//! The state of one key and window, laid out for the common case: a window that has not fired
//! yet (most windows fire once, at their end, and many never merge or hold more than one
//! value) keeps no trigger or pane state of its own, only its values, count and hold, in 64
//! bytes. Its trigger and pane state is the engine's fresh one until it differs (a pane fired,
//! an element counted, a processing-time target set), and only then is it kept, out of line.
//!
//! Checkpoints see every state whole ([`StateRepr`]), in the layout they always had.

use super::*;

/// No timestamp, in a field that is an `Option<Timestamp>` to its readers: a time no
/// timestamp can be (they lie within [`MIN_TIMESTAMP`]..=[`MAX_TIMESTAMP`]).
const NO_TIME: i64 = i64::MIN;

// Every timestamp stays clear of the sentinel.
const _: () = assert!(MIN_TIMESTAMP > NO_TIME);

/// The state of one key and window.
#[derive(Clone, Debug)]
pub struct WindowState {
    /// Buffered values, encoded back to back, or the encoded accumulator.
    pub values: Vec<u8>,
    /// Number of values buffered (or added to the accumulator) since the last clear.
    pub count: usize,
    /// The element hold (the timestamp the next pane will carry), or [`NO_TIME`].
    hold: i64,
    /// The change epoch in which this state was last counted as updated.
    pub(super) updated_in: u64,
    /// The trigger finished: later data for the window is dropped until it expires.
    pub closed: bool,
    /// The trigger and pane state, once it differs from a fresh window's (see
    /// [`WindowState::settle`]).
    panes: Option<Box<PaneState>>,
}

/// The trigger and pane state of a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PaneState {
    /// Number of values added since the last firing: whether the next pane is non-empty (in
    /// accumulating mode the buffer also holds earlier panes' values). While a window keeps no
    /// pane state of its own, this is its `count`.
    pub(super) added_since_fire: usize,
    pub(super) trigger: TriggerState,
    pub(super) pane_index: i64,
    pub(super) non_speculative_index: i64,
    pub(super) non_early_emitted: bool,
    pub(super) pt_timer: Option<Timestamp>,
}

impl PaneState {
    /// Whether this is the pane state of a window that has not fired and holds `count` values:
    /// what a window keeping none of its own stands for.
    fn is_fresh(&self, count: usize, fresh: &PaneState) -> bool {
        self.added_since_fire == count
            && self.pane_index == fresh.pane_index
            && self.non_speculative_index == fresh.non_speculative_index
            && self.non_early_emitted == fresh.non_early_emitted
            && self.pt_timer == fresh.pt_timer
            && self.trigger == fresh.trigger
    }

    /// The pane state of a window that has not fired: `trigger` is the machine's fresh state.
    pub(super) fn fresh(trigger: TriggerState) -> Self {
        PaneState {
            added_since_fire: 0,
            trigger,
            pane_index: 0,
            non_speculative_index: -1,
            non_early_emitted: false,
            pt_timer: None,
        }
    }
}

impl Default for WindowState {
    fn default() -> Self {
        WindowState { values: Vec::new(), count: 0, hold: NO_TIME, updated_in: 0, closed: false, panes: None }
    }
}

impl WindowState {
    /// A new window's state, counted as updated in `epoch`.
    pub(super) fn new(epoch: u64) -> Self {
        WindowState { updated_in: epoch, ..Default::default() }
    }

    /// The element hold: the timestamp the next pane will carry.
    pub fn hold(&self) -> Option<Timestamp> {
        (self.hold != NO_TIME).then_some(self.hold)
    }

    pub(super) fn set_hold(&mut self, hold: Option<Timestamp>) {
        self.hold = hold.unwrap_or(NO_TIME);
    }

    pub(super) fn take_hold(&mut self) -> Option<Timestamp> {
        let hold = self.hold();
        self.hold = NO_TIME;
        hold
    }

    /// The window's trigger state (`fresh`'s while it keeps none of its own).
    pub(super) fn trigger<'a>(&'a self, fresh: &'a PaneState) -> &'a TriggerState {
        &self.panes.as_deref().unwrap_or(fresh).trigger
    }

    /// The processing time the window's trigger waits for, if any.
    pub(super) fn pt_timer(&self) -> Option<Timestamp> {
        self.panes.as_ref().and_then(|p| p.pt_timer)
    }

    pub(super) fn set_pt_timer(&mut self, pt: Option<Timestamp>, fresh: &PaneState) {
        if pt != self.pt_timer() {
            self.panes_mut(fresh).pt_timer = pt;
            self.settle(fresh);
        }
    }

    /// The index of the window's next pane.
    pub(super) fn pane_index(&self) -> i64 {
        self.panes.as_ref().map_or(0, |p| p.pane_index)
    }

    /// The non-speculative index of the window's last pane that was not early (-1: none).
    pub(super) fn non_speculative_index(&self) -> i64 {
        self.panes.as_ref().map_or(-1, |p| p.non_speculative_index)
    }

    /// Whether a pane that was not early was emitted.
    pub(super) fn non_early_emitted(&self) -> bool {
        self.panes.as_ref().is_some_and(|p| p.non_early_emitted)
    }

    /// Counts `n` values added (besides `count`, which the caller moves).
    pub(super) fn added(&mut self, n: usize) {
        if let Some(p) = &mut self.panes {
            p.added_since_fire += n;
        }
    }

    /// Values added since the last firing.
    pub(super) fn added_since_fire(&self) -> usize {
        self.panes.as_ref().map_or(self.count, |p| p.added_since_fire)
    }

    /// The window's pane state, a copy of `fresh`'s while it keeps none of its own.
    pub(super) fn panes(&self, fresh: &PaneState) -> PaneState {
        match &self.panes {
            Some(p) => (**p).clone(),
            None => PaneState { added_since_fire: self.count, ..fresh.clone() },
        }
    }

    /// The window's own pane state, made from `fresh`'s if it keeps none yet. Call
    /// [`WindowState::settle`] after changing it.
    pub(super) fn panes_mut(&mut self, fresh: &PaneState) -> &mut PaneState {
        let count = self.count;
        self.panes.get_or_insert_with(|| Box::new(PaneState { added_since_fire: count, ..fresh.clone() }))
    }

    /// Keeps `panes` as the window's pane state, or none if it is a fresh window's.
    pub(super) fn set_panes(&mut self, panes: PaneState, fresh: &PaneState) {
        if panes.is_fresh(self.count, fresh) {
            self.panes = None;
            return;
        }
        match &mut self.panes {
            Some(p) => **p = panes,
            None => self.panes = Some(Box::new(panes)),
        }
    }

    /// Lets go of the window's own pane state where it is the same as a fresh window's.
    pub(super) fn settle(&mut self, fresh: &PaneState) {
        if self.panes.as_ref().is_some_and(|p| p.is_fresh(self.count, fresh)) {
            self.panes = None;
        }
    }

    /// Whether the window keeps pane state of its own (for tests of the layout).
    #[cfg(test)]
    pub(super) fn has_own_panes(&self) -> bool {
        self.panes.is_some()
    }

    /// The whole state, as checkpoints hold it.
    pub(super) fn repr<'a>(&'a self, fresh: &'a PaneState) -> StateRepr<'a> {
        let panes = self.panes.as_deref().unwrap_or(fresh);
        StateRepr {
            values: &self.values,
            count: self.count,
            added_since_fire: self.added_since_fire(),
            hold: self.hold(),
            trigger: &panes.trigger,
            pane_index: panes.pane_index,
            non_speculative_index: panes.non_speculative_index,
            non_early_emitted: panes.non_early_emitted,
            closed: self.closed,
            pt_timer: panes.pt_timer,
        }
    }

    /// A state from its checkpoint form.
    pub(super) fn from_repr(repr: OwnedStateRepr, fresh: &PaneState) -> Self {
        let mut state = WindowState {
            values: repr.values,
            count: repr.count,
            hold: NO_TIME,
            updated_in: 0,
            closed: repr.closed,
            panes: Some(Box::new(PaneState {
                added_since_fire: repr.added_since_fire,
                trigger: repr.trigger,
                pane_index: repr.pane_index,
                non_speculative_index: repr.non_speculative_index,
                non_early_emitted: repr.non_early_emitted,
                pt_timer: repr.pt_timer,
            })),
        };
        state.set_hold(repr.hold);
        state.settle(fresh);
        state
    }
}

/// A window state as checkpoints hold it: every field, in this order.
#[derive(Serialize)]
pub(super) struct StateRepr<'a> {
    /// As bytes: the same encoding as a sequence of `u8` in postcard, copied at once.
    #[serde(with = "serde_bytes")]
    values: &'a [u8],
    count: usize,
    added_since_fire: usize,
    hold: Option<Timestamp>,
    trigger: &'a TriggerState,
    pane_index: i64,
    non_speculative_index: i64,
    non_early_emitted: bool,
    closed: bool,
    pt_timer: Option<Timestamp>,
}

/// [`StateRepr`], read back.
#[derive(Deserialize)]
pub(super) struct OwnedStateRepr {
    #[serde(with = "serde_bytes")]
    values: Vec<u8>,
    count: usize,
    added_since_fire: usize,
    hold: Option<Timestamp>,
    trigger: TriggerState,
    pane_index: i64,
    non_speculative_index: i64,
    non_early_emitted: bool,
    closed: bool,
    pt_timer: Option<Timestamp>,
}
