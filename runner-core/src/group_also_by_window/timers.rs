//! Timers: end-of-window and garbage-collection timers in event time (an index that keeps its
//! latest entries on disk on the disk backend), processing-time timers of triggers, and expiry: every timer a watermark releases fires
//! before the output watermark is recomputed.

use super::*;

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(self.as_bytes())
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let bytes: &serde_bytes::Bytes = serde::Deserialize::deserialize(d)?;
        Ok(Key::from(&bytes[..]))
    }
}

impl crate::state_backend::IndexEntry for (Key, Window) {
    fn heap_bytes(&self) -> usize {
        match &self.0 {
            Key::Inline { .. } => 0,
            // Shared with the key map while the key is in memory; its own once the key is on disk.
            Key::Shared(k) => k.len() + 16,
        }
    }
}

impl GroupAlsoByWindow {
    pub(super) fn fire_timers(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        // Processing-time timers (strictly before now), then event-time timers (strictly before
        // the input watermark), each in timestamp order.
        while let Some((t, (key, window))) = self.timers.processing_timers.first().cloned() {
            if t >= self.processing_time {
                break;
            }
            self.timers.processing_timers.remove(&(t, (key.clone(), window)));
            self.read_back(&key)?;
            if let Some(ws) = self.keys.get_mut(&key).and_then(|w| w.get_mut(&window)) {
                ws.set_pt_timer(None, &self.fresh);
            }
            self.mark_changed_key(key.clone(), window);
            self.maybe_fire(&key, window, out)?;
            self.refresh_pt_timer(&key, window);
            self.spill(out)?;
        }
        if self.watermarks.input() == MAX_TIMESTAMP {
            return self.expire_all(out);
        }
        // Firing a window's timers sets no event timer: every due timer is taken in (time, key,
        // window) order, each once, and fired.
        let wm = self.watermarks.input();
        while self.timers.event_timers.first().is_some_and(|t| t.0 < wm) {
            let Some((_, (key, window))) = self.timers.event_timers.pop_first() else { break };
            self.timers.event_timers.take_error()?;
            self.on_event_timer(&key, window, out)?;
            self.spill(out)?;
        }
        self.timers.event_timers.take_error()?;
        self.timers.processing_timers.take_error()?;
        self.timers.holds.take_error()
    }

    /// Sets the window's event timers: the end of the window, and garbage collection when later.
    pub(super) fn window_timers(&mut self, key: Key, window: Window) {
        let (eow, gc) = (window.max_timestamp(), self.strategy.gc_time(&window));
        if gc != eow {
            self.event_timer((gc, key.clone(), window));
        }
        self.event_timer((eow, key, window));
    }

    pub(super) fn event_timer(&mut self, timer: (Timestamp, Key, Window)) {
        if !self.timers.tracked {
            return;
        }
        self.timers.event_timers.insert((timer.0, (timer.1, timer.2)));
    }

    pub(super) fn refresh_pt_timer(&mut self, key: &[u8], window: Window) {
        let k = self.arc_key(key);
        if let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) {
            if ws.closed {
                return;
            }
            let pt = self.machine.next_processing_time(ws.trigger(&self.fresh), self.processing_time);
            if pt != ws.pt_timer() {
                if let Some(t) = ws.pt_timer() {
                    self.timers.processing_timers.remove(&(t, (k.clone(), window)));
                }
                if let Some(t) = pt {
                    self.timers.processing_timers.insert((t, (k.clone(), window)));
                }
                ws.set_pt_timer(pt, &self.fresh);
                self.dirty.mark((k, window));
            }
        }
    }

    /// An event-time timer of the window: classified by the window's state, not by which timer
    /// it was.
    pub(super) fn on_event_timer(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        self.read_back(key)?;
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
    pub(super) fn expire(&mut self, key: &[u8], window: Window, mut ws: WindowState, out: &mut Vec<EncodedGroup>) {
        if !ws.closed {
            // The last pane of an expiring window removes the row: not also an update.
            ws.updated_in = self.counts.epoch;
            // No trigger is asked or told of this pane: the state goes with the window, and a
            // pane reads none of the trigger's state.
            let mut c = PaneContext {
                strategy: &self.strategy,
                watermarks: self.watermarks,
                epoch: self.counts.epoch,
                changes: &mut self.counts.changes,
                fresh: &self.fresh,
            };
            // The window is gone: its pane state after this last pane is not kept.
            emit_pane(&mut c, &mut ws, key, window, true, out);
        }
    }

    /// The end of time (input watermark at its maximum): every window is past its GC time
    /// (which is at most the global window's end, a day before the end of time) and expires,
    /// and no event timer will be set again. The windows are taken key by key in the key map's
    /// own order instead of in timer order: the same panes, but each key's windows visited once
    /// and in memory order (at the end of a bounded input every window of the whole input fires
    /// here, and in timer order each cost several cache misses).
    ///
    /// With keys on disk (`--state-backend disk`), the firing is cut into calls of about the
    /// engine's memory budget of output each, so the whole input's groups never sit in memory
    /// at once: the keys in memory first, then those on disk, a run at a time in key order.
    /// Until the last call the output watermark is held where it was, and the engine asks for
    /// its next call at once ([`GroupAlsoByWindow::next_processing_timer`]).
    pub(super) fn expire_all(&mut self, out: &mut Vec<EncodedGroup>) -> Result<()> {
        if self.expiring.is_none() {
            self.expiring = Some(self.watermarks.output());
        }
        self.timers.event_timers.clear();
        self.timers.holds.clear();
        // Nothing is held from here on, so nothing is left to derive.
        self.timers.tracked = true;
        let Some(limit) = self.output_limit() else {
            out.reserve(self.counts.windows.min(self.work.bundle_limit));
            for (key, windows) in std::mem::take(&mut self.keys) {
                for (window, ws) in windows.windows {
                    self.forget(key.clone(), &window, &ws);
                    self.expire(&key, window, ws, out);
                }
                self.spill(out)?;
            }
            return Ok(());
        };
        let mut fired = 0;
        loop {
            if self.keys.is_empty() && !self.read_back_run()? {
                return Ok(());
            }
            let run: Vec<Key> = self.keys.keys().take(256).cloned().collect();
            for key in run {
                let Some(windows) = self.keys.remove(&key) else { continue };
                for (window, ws) in windows.windows {
                    fired += ws.values.len();
                    self.forget(key.clone(), &window, &ws);
                    self.expire(&key, window, ws, out);
                }
                self.spill(out)?;
                if fired >= limit && !self.is_empty() {
                    return Ok(());
                }
            }
        }
    }
}
