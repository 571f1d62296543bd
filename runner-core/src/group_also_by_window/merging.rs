//! Merging windows (Beam's active window set): a key's new windows merged with its active
//! ones (sessions), their states, trigger states and holds merged into the result's.

use super::*;

/// Working space of [`GroupAlsoByWindow::merge_new_windows`], kept between keys.
#[derive(Default)]
pub(super) struct MergeScratch {
    /// The key's active windows, then its fresh new ones: what is merged.
    pub(super) active: Vec<Window>,
    /// Per new window: whether it still needs a state of its own (it had none and no merge
    /// took it in), and the window it ended up in (itself if none).
    pub(super) unplaced: Vec<bool>,
    pub(super) target: Vec<Window>,
    /// The merge results when there are several (one may merge on in a later merge).
    pub(super) results: WindowSet,
}

impl GroupAlsoByWindow {
    /// [`GroupAlsoByWindow::process_rows`] for merging windows, key by key: the batch's new
    /// windows of a key are merged once, together with the key's active windows (as Beam's
    /// ReduceFnRunner merges once per bundle), and each row goes to the window its own window
    /// was merged into. Rows are bucketed by key with a counting sort, so the maps of windows
    /// stay as small as one key's windows.
    pub(super) fn process_merging_rows(
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
                    LATE => self.counts.dropped.late += self.inputs_of(batch, i)?,
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

    /// Adds the batch's `distinct` windows of the key to its active windows and merges them all
    /// once; leaves in `m.target` the window each ended up in (by its position in `distinct`).
    /// Windows that merge away never get state of their own; a window already active keeps its
    /// state unless something merges into it.
    pub(super) fn merge_new_windows(&mut self, key: &[u8], distinct: &WindowSet, m: &mut MergeScratch) -> Result<()> {
        let new = distinct.windows();
        let existing = self.keys.get(key);
        m.active.clear();
        if let Some(ws) = existing {
            // Sessions: only the active windows the new ones may overlap.
            let hull = if self.strategy.window_fn.merges_overlapping_intervals() { interval_hull(new) } else { None };
            if !hull.is_some_and(|(lo, hi)| ws.active_overlapping(lo, hi, &mut m.active)) {
                ws.active(&mut m.active);
            }
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
        let merges = self
            .strategy
            .window_fn
            .try_merge_windows(&m.active)
            .map_err(|e| weir_sdk::Error::execution(self.step.clone(), format!("merging windows failed: {e}")))?;
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

    pub(super) fn merge_states(&self, merged: &Window, mut states: Vec<WindowState>) -> Result<WindowState> {
        if states.len() == 1 {
            // One window with state grew by windows without (a session absorbing new
            // elements): its state is the merged state, only an end-of-window hold moves.
            let mut state = states.pop().unwrap_or_default();
            if self.strategy.timestamp_combiner == TimestampCombiner::EndOfWindow && state.hold().is_some() {
                state.set_hold(Some(merged.max_timestamp()));
            }
            return Ok(state);
        }
        let mut out = WindowState::default();
        let trigger = self.machine.merge(&states.iter().map(|s| s.trigger(&self.fresh)).collect::<Vec<_>>());
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
        let mut hold = states.iter().filter_map(|s| s.hold()).reduce(|a, b| match self.strategy.timestamp_combiner {
            TimestampCombiner::Earliest => a.min(b),
            TimestampCombiner::Latest => a.max(b),
            TimestampCombiner::EndOfWindow => merged.max_timestamp(),
        });
        if self.strategy.timestamp_combiner == TimestampCombiner::EndOfWindow && hold.is_some() {
            hold = Some(merged.max_timestamp());
        }
        out.set_hold(hold);
        let panes = PaneState {
            added_since_fire: states.iter().map(|s| s.added_since_fire()).sum(),
            trigger,
            pane_index: states.iter().map(|s| s.pane_index()).max().unwrap_or(0),
            non_speculative_index: states.iter().map(|s| s.non_speculative_index()).max().unwrap_or(-1),
            non_early_emitted: states.iter().any(|s| s.non_early_emitted()),
            pt_timer: None,
        };
        out.set_panes(panes, &self.fresh);
        Ok(out)
    }

    /// Puts a (merged) window state in place with its timers and hold. `queued`: the window had
    /// a state just before, so its event timers are queued already (they are never removed
    /// early, and time only moves on), and a session or auction window that absorbs new
    /// elements every batch does not queue them again every batch.
    pub(super) fn install(&mut self, key: &[u8], window: Window, mut state: WindowState, queued: bool) {
        let pt = self.machine.next_processing_time(state.trigger(&self.fresh), self.processing_time);
        state.set_pt_timer(pt, &self.fresh);
        state.updated_in = self.counts.epoch;
        self.counts.changes.updated += 1;
        let hold = state.hold();
        self.counts.bytes += state_bytes(key, &state);
        let entry = self.keys.entry_ref(key).or_default_entry();
        let k = entry.key().clone();
        let windows = entry.into_mut();
        if let Some(old) = windows.get(&window) {
            self.counts.bytes -= state_bytes(&k, old);
            if self.timers.tracked {
                self.timers.holds.remove(old.hold());
            }
        }
        if self.timers.tracked {
            self.timers.holds.add(hold);
        }
        if windows.insert(window, state) {
            self.counts.windows += 1;
        }
        self.mark_changed_key(k.clone(), window);
        if !queued {
            self.window_timers(k.clone(), window);
        }
        if let Some(t) = pt {
            self.timers.processing_timers.insert((t, (k, window)));
        }
    }
}

/// The earliest start and latest end of `windows`, if all are intervals.
fn interval_hull(windows: &[Window]) -> Option<(Timestamp, Timestamp)> {
    windows.iter().try_fold((Timestamp::MAX, Timestamp::MIN), |(lo, hi), w| {
        let iv = w.interval()?;
        Some((lo.min(iv.start), hi.max(iv.end)))
    })
}
