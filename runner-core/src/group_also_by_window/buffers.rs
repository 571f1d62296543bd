//! Grouping buffers: a batch's encoded rows bucketed by key (a counting sort over hashes kept
//! between batches), and each key's rows added to its windows' states in one pass.

use super::*;

/// Counting sort of rows into `groups` buckets: `group_of[j]` is the bucket of row `rows[j]`.
/// Fills `starts` with each bucket's start in the sorted rows (plus the end) and `sorted` with
/// the rows, each bucket in arrival order, in buffers the caller keeps (`fill` is working
/// space). No allocation per bucket.
pub(super) fn bucket_into(
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
pub(super) struct WindowSet {
    pub(super) windows: Vec<Window>,
    pub(super) index: hashbrown::HashMap<Window, u32>,
}

impl WindowSet {
    pub(super) const LINEAR: usize = 16;

    pub(super) fn clear(&mut self) {
        self.windows.clear();
        self.index.clear();
    }

    pub(super) fn len(&self) -> usize {
        self.windows.len()
    }

    pub(super) fn position(&self, window: &Window) -> Option<usize> {
        if self.windows.len() <= Self::LINEAR {
            self.windows.iter().position(|w| w == window)
        } else {
            self.index.get(window).map(|&i| i as usize)
        }
    }

    /// The position of `window`, added unless present; and whether it was added.
    pub(super) fn add(&mut self, window: Window) -> (usize, bool) {
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
    pub(super) fn windows(&self) -> &[Window] {
        &self.windows
    }
}

/// Buffers of the grouping pass, kept between batches: a large batch would otherwise allocate
/// (and have the kernel zero) fresh memory for them every time.
#[derive(Default)]
pub(super) struct GroupScratch {
    /// (hash, first row, group) per group.
    pub(super) table: hashbrown::HashTable<(u64, u32, u32)>,
    pub(super) firsts: Vec<u32>,
    pub(super) group_of: Vec<u32>,
    pub(super) kept: Vec<u32>,
    pub(super) starts: Vec<usize>,
    pub(super) fill: Vec<usize>,
    pub(super) sorted: Vec<usize>,
}

impl GroupScratch {
    pub(super) fn clear(&mut self) {
        self.table.clear();
        self.firsts.clear();
        self.group_of.clear();
        self.kept.clear();
    }

    /// Puts row `i`, whose hash is `h`, in the group of the first row `same` accepts among
    /// those with that hash, or in a new group it starts.
    pub(super) fn add(&mut self, h: u64, i: usize, same: impl Fn(usize) -> bool) {
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
    pub(super) fn bucket(&mut self) {
        bucket_into(self.firsts.len(), &self.group_of, &self.kept, &mut self.starts, &mut self.fill, &mut self.sorted);
    }

    /// The rows of group `g`, after [`GroupScratch::bucket`].
    pub(super) fn rows(&self, g: usize) -> &[usize] {
        &self.sorted[self.starts[g]..self.starts[g + 1]]
    }
}

impl GroupAlsoByWindow {
    pub(super) fn process_rows(&mut self, batch: &EncodedKvBatch, out: &mut Vec<EncodedGroup>) -> Result<()> {
        self.read_back_rows(batch)?;
        let mut scratch = std::mem::take(&mut self.work.grouping);
        let result = if self.strategy.needs_merge() {
            self.process_merging_rows(batch, out, &mut scratch)
        } else {
            self.group_rows(batch, out, &mut scratch)
        };
        self.work.grouping = scratch;
        result
    }

    /// Rows of one key and window are added together, in arrival order, so a combining
    /// GroupByKey decodes and encodes its accumulator once per batch, not per element. Rows
    /// are bucketed by group with a counting sort: no allocation per group. The table holds
    /// each group's hash and first row, so a lookup compares hashes before any bytes.
    pub(super) fn group_rows(
        &mut self,
        batch: &EncodedKvBatch,
        out: &mut Vec<EncodedGroup>,
        s: &mut GroupScratch,
    ) -> Result<()> {
        let hasher = hashbrown::DefaultHashBuilder::default();
        s.clear();
        for i in 0..batch.rows.len() {
            let (key, window) = (batch.key(i), batch.rows[i].window);
            if self.strategy.gc_time(&window) < self.watermarks.input() {
                self.counts.dropped.late += self.inputs_of(batch, i)?;
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

    /// Adds rows `idx` of `batch` to the state of `key` and `window`, created first when
    /// `create` (merging creates every window it places before any row is added). Returns
    /// whether the window's trigger fires now.
    pub(super) fn add_rows(
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
        self.mark_changed(key, window);
        let Some(ws) = self.keys.get_mut(key).and_then(|w| w.get_mut(&window)) else {
            return Err(Error::Internal {
                component: "GroupAlsoByWindow".into(),
                message: "window state vanished".into(),
            });
        };
        if ws.closed {
            self.counts.dropped.closed += inputs;
            return Ok(false);
        }
        if ws.updated_in != self.counts.epoch {
            ws.updated_in = self.counts.epoch;
            self.counts.changes.updated += 1;
        }
        let before = ws.values.capacity();
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
        self.counts.bytes = self.counts.bytes + ws.values.capacity() - before;
        ws.count += inputs as usize;
        ws.added(inputs as usize);
        // Element holds (see `element_hold`).
        let old_hold = ws.hold();
        let times = idx.iter().map(|&i| batch.rows[i].timestamp);
        ws.set_hold(element_hold(old_hold, times, combiner, window_fn.as_ref(), &window, output_wm));
        if self.counts_elements {
            self.machine.on_elements(&mut ws.panes_mut(&self.fresh).trigger, inputs as i64, &ctx);
        }
        let fire = self.machine.should_fire(ws.trigger(&self.fresh), &ctx);
        let pt = self.machine.next_processing_time(ws.trigger(&self.fresh), self.processing_time);
        let old_pt = ws.pt_timer();
        ws.set_pt_timer(pt, &self.fresh);
        let new_hold = ws.hold();
        if old_hold == new_hold && old_pt == pt {
            return Ok(fire);
        }
        if self.timers.tracked {
            self.timers.holds.change(old_hold, new_hold);
        }
        if old_pt != pt {
            let k = self.arc_key(key);
            if let Some(t) = old_pt {
                self.timers.processing_timers.remove(&(t, (k.clone(), window)));
            }
            if let Some(t) = pt {
                self.timers.processing_timers.insert((t, (k, window)));
            }
        }
        Ok(fire)
    }
}

/// A window's element hold after elements at `times` join it, from `hold`: at the (shifted)
/// element time for EARLIEST/LATEST, at the end of the window otherwise; none for data already
/// behind the output watermark.
fn element_hold(
    mut hold: Option<Timestamp>,
    times: impl Iterator<Item = Timestamp>,
    combiner: TimestampCombiner,
    window_fn: &dyn weir_sdk::window_fn::WindowFn,
    window: &Window,
    output_wm: Timestamp,
) -> Option<Timestamp> {
    let eow = window.max_timestamp();
    for t in times {
        let h = match combiner {
            TimestampCombiner::EndOfWindow => eow,
            _ => window_fn.output_time(t, window),
        };
        if h < output_wm || h > eow {
            continue;
        }
        hold = Some(match (hold, combiner) {
            (None, _) => h,
            (Some(o), TimestampCombiner::Latest) => o.max(h),
            (Some(o), _) => o.min(h),
        });
    }
    hold
}
