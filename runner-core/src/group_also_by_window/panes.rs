//! Panes: when a window's trigger fires, its values (or accumulator) go out as a pane with its
//! timing, index and timestamp; the state is then kept (accumulating) or cleared (discarding).

use super::*;

/// What emitting a pane needs besides the window's state.
pub(super) struct PaneContext<'a> {
    pub(super) strategy: &'a WindowingStrategy,
    pub(super) watermarks: Watermarks,
    pub(super) epoch: u64,
    pub(super) changes: &'a mut StateChanges,
    pub(super) fresh: &'a PaneState,
}

/// Emits a pane of the window whose state is `ws` and releases its hold. Returns the window's
/// pane state after the pane, for a window that stays to keep ([`WindowState::set_panes`]); an
/// expiring one drops it with the window, no allocation made for it.
pub(super) fn emit_pane(
    c: &mut PaneContext<'_>,
    ws: &mut WindowState,
    key: &[u8],
    window: Window,
    is_final: bool,
    out: &mut Vec<EncodedGroup>,
) -> PaneState {
    let (input_wm, output_wm, strategy) = (c.watermarks.input(), c.watermarks.output(), c.strategy);
    if ws.updated_in != c.epoch {
        ws.updated_in = c.epoch;
        c.changes.updated += 1;
    }
    let eow = window.max_timestamp();
    let mut panes = ws.panes(c.fresh);
    let timing = if output_wm > eow || panes.non_early_emitted {
        Timing::Late
    } else if input_wm <= eow {
        Timing::Early
    } else {
        Timing::OnTime
    };
    let non_empty = panes.added_since_fire > 0;
    panes.added_since_fire = 0;
    let needed = non_empty
        || (timing == Timing::OnTime && strategy.on_time_behavior == OnTimeBehavior::FireAlways)
        || (is_final && strategy.closing_behavior == ClosingBehavior::FireAlways);
    let released = ws.take_hold();
    if needed {
        let non_speculative_index = if timing == Timing::Early { -1 } else { panes.non_speculative_index + 1 };
        let pane = PaneInfo {
            is_first: panes.pane_index == 0,
            is_last: is_final,
            timing,
            index: panes.pane_index,
            non_speculative_index,
        };
        panes.pane_index += 1;
        if timing != Timing::Early {
            panes.non_speculative_index = non_speculative_index;
            panes.non_early_emitted = true;
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
    panes
}

impl GroupAlsoByWindow {
    /// Fires the window's trigger if it says so.
    pub(super) fn maybe_fire(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let ctx = self.ctx(&window);
        let fire = match self.keys.get(key).and_then(|w| w.get(&window)) {
            Some(ws) => !ws.closed && self.machine.should_fire(ws.trigger(&self.fresh), &ctx),
            None => false,
        };
        if fire {
            self.fire(key, window, out)?;
        }
        Ok(())
    }

    /// Fires the window's trigger (it said so): emits a pane, and closes the window if the
    /// trigger finished.
    pub(super) fn fire(&mut self, key: &[u8], window: Window, out: &mut Vec<EncodedGroup>) -> Result<()> {
        let ctx = self.ctx(&window);
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else { return Ok(()) };
        self.machine.on_fire(&mut ws.panes_mut(&self.fresh).trigger, &ctx);
        let finished = self.machine.is_finished(ws.trigger(&self.fresh));
        self.emit(key, window, finished, out)?;
        if finished {
            self.close(key, window);
        }
        Ok(())
    }

    /// Marks the window closed: its contents are gone and later data is dropped until expiry.
    pub(super) fn close(&mut self, key: &[u8], window: Window) {
        self.mark_changed(key, window);
        if let Some(ws) = self.keys.get_mut(key).and_then(|w| w.close(&window)) {
            self.counts.bytes -= ws.values.capacity();
            ws.values = Vec::new();
            ws.count = 0;
            let pt = ws.pt_timer();
            ws.set_pt_timer(None, &self.fresh);
            if let Some(t) = pt {
                self.timers.processing_timers.remove(&(t, (self.arc_key(key), window)));
            }
        }
    }

    /// Emits a pane of the window and releases its hold.
    pub(super) fn emit(
        &mut self,
        key: &[u8],
        window: Window,
        is_final: bool,
        out: &mut Vec<EncodedGroup>,
    ) -> Result<()> {
        self.mark_changed(key, window);
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else { return Ok(()) };
        self.counts.bytes -= ws.values.capacity();
        let hold = ws.hold();
        let mut ctx = PaneContext {
            strategy: &self.strategy,
            watermarks: self.watermarks,
            epoch: self.counts.epoch,
            changes: &mut self.counts.changes,
            fresh: &self.fresh,
        };
        let panes = emit_pane(&mut ctx, ws, key, window, is_final, out);
        ws.set_panes(panes, &self.fresh);
        self.counts.bytes += ws.values.capacity();
        if self.timers.tracked {
            self.timers.holds.change(hold, ws.hold());
        }
        Ok(())
    }
}
