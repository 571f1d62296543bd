//! Stateful ParDo: per key and window state, event- and processing-time timers with output
//! timestamps that hold the watermark, and garbage collection at window expiry.

use crate::do_fn_runner::{guarded, DoFnRunner};
use crate::group_also_by_window::{DropCounts, StateChanges};
use crate::metrics::MetricsContainerImpl;
use crate::operator::{OpContext, Operator};
use crate::side_inputs::{Pushback, SideInputs, SideState};
use crate::state_backend::TimeIndex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weir_sdk::do_fn::TimerFiring;
use weir_sdk::graph::{ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{Batch, CollectionOps, ErasedDoFn, KeyedStateEnv};
use weir_sdk::state::{KeyedState, StateTime, TimeDomain, DEFERRED_INPUT};
use weir_sdk::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::Result;

type Kw = (Vec<u8>, Window);
type TimerKey = (Timestamp, Vec<u8>, Window, String, String);
/// A timer in an index ordered by time: (key, window, family, id).
type TimerEntry = (Vec<u8>, Window, String, String);

/// The operator's bookkeeping: input watermark, processing time, late drops.
type Meta = (Timestamp, Timestamp, u64);
/// The bookkeeping as older checkpoints wrote it, with the waiting elements and side inputs.
type LegacyMeta = (Timestamp, Timestamp, u64, Vec<Vec<u8>>, crate::side_inputs::SidesSnapshot);
/// The waiting elements and side inputs an older bookkeeping entry held.
type LegacySides = (Vec<Vec<u8>>, crate::side_inputs::SidesSnapshot);

/// How the keys of entries that belong to no key and window begin (waiting elements, side
/// inputs): ten bytes that no entry key of a key and window begins with (they are not a
/// varint, which [`crate::checkpoint::entry_key`] begins with).
const UNKEYED: [u8; 10] = [0xff; 10];

/// Marks `key` as an unkeyed entry's.
fn unkeyed(key: &mut Vec<u8>) {
    key.splice(0..0, UNKEYED);
}

/// The bookkeeping entry's value, and the waiting elements and side inputs an older checkpoint
/// kept in it. A newer entry is too short for the older layout (it ends where their lengths
/// would begin), so it never reads as one.
fn decode_meta(step: &str, value: &[u8]) -> Result<(Meta, Option<LegacySides>)> {
    match crate::checkpoint::decode::<LegacyMeta>(step, value) {
        Ok((wm, pt, late, pushback, sides)) => Ok(((wm, pt, late), Some((pushback, sides)))),
        Err(_) => Ok((crate::checkpoint::decode::<Meta>(step, value)?, None)),
    }
}

/// The state of every key and window, with timer, hold and expiry indexes. The indexes have an
/// entry for every key and window, including those on disk: on the disk backend they keep their
/// latest entries on disk past a cap of their own ([`TimeIndex`]).
#[derive(Default)]
struct Store {
    states: HashMap<Kw, KeyedState>,
    /// Per domain: (fire time, (key, window, family, id)).
    event: TimeIndex<TimerEntry>,
    processing: TimeIndex<TimerEntry>,
    /// (output timestamp, (key, window, family, id)) of timers that hold the watermark.
    holds: TimeIndex<TimerEntry>,
    /// The holds of timers that are the operator's own deferred input
    /// ([`weir_sdk::state::DEFERRED_INPUT`]): their windows stay open until they fire.
    deferred: TimeIndex<TimerEntry>,
    /// (expiry, (key, window)) of every key and window with state.
    expiry: TimeIndex<Kw>,
    /// Rows counted as updated since the last count, and the counts.
    counted: HashSet<Kw>,
    /// Rows written or removed since the last checkpoint took them
    /// ([`Operator::take_changed_entries`]); not kept until a checkpoint first asks (a run
    /// without checkpoints would keep every key it ever touched).
    dirty: crate::checkpoint::Changed<Kw>,
    changes: StateChanges,
    /// The disk backend's part (`--state-backend disk`): keys and windows past the budget
    /// wait on disk (their timer, hold and expiry index entries too, past the indexes' caps).
    disk: Option<Box<StoreDisk>>,
}

/// What a stateful ParDo keeps of the disk backend.
struct StoreDisk {
    backend: crate::state_backend::StateBackend,
    step: String,
    /// Opened when the state first passes the budget.
    spill: Option<crate::state_backend::Spill>,
    /// Keys and windows on disk.
    rows: usize,
    /// Keys and windows user code or a timer touched since the last eviction: they stay.
    recent: HashSet<Kw>,
    /// A read from disk that failed, for the call to report.
    error: Option<weir_sdk::Error>,
    hits: u64,
    misses: u64,
}

impl Store {
    /// A store keeping its state where `backend` says, for `step`.
    fn new(backend: &crate::state_backend::StateBackend, step: &str) -> Self {
        let disk = backend.is_disk().then(|| {
            Box::new(StoreDisk {
                backend: backend.clone(),
                step: step.to_string(),
                spill: None,
                rows: 0,
                recent: HashSet::new(),
                error: None,
                hits: 0,
                misses: 0,
            })
        });
        Store {
            disk,
            event: TimeIndex::new(backend, step),
            processing: TimeIndex::new(backend, step),
            holds: TimeIndex::new(backend, step),
            deferred: TimeIndex::new(backend, step),
            expiry: TimeIndex::new(backend, step),
            ..Store::default()
        }
    }

    /// Reads the state of `kw` back from disk if it is there, and notes it touched.
    fn resident(&mut self, kw: &Kw) {
        let Some(d) = self.disk.as_mut() else { return };
        if !d.recent.contains(kw) {
            d.recent.insert(kw.clone());
        }
        if self.states.contains_key(kw) {
            d.hits += 1;
            return;
        }
        let Some(spill) = d.spill.as_mut() else { return };
        let read = (|| -> Result<Option<KeyedState>> {
            let key = crate::checkpoint::entry_key(&d.step, &kw.0, &kw.1)?;
            if !spill.may_hold(&key) {
                return Ok(None);
            }
            spill.take(&key)?.map(|bytes| crate::checkpoint::decode(&d.step, &bytes)).transpose()
        })();
        match read {
            Ok(Some(state)) => {
                d.rows -= 1;
                d.misses += 1;
                self.states.insert(kw.clone(), state);
            }
            Ok(None) => {}
            Err(e) => {
                d.error.get_or_insert(e);
            }
        }
    }

    /// The state of `kw` on disk, if there.
    fn spilled(&self, kw: &Kw) -> Result<Option<KeyedState>> {
        let Some((d, spill)) = self.disk.as_ref().and_then(|d| d.spill.as_ref().map(|s| (d, s))) else {
            return Ok(None);
        };
        let key = crate::checkpoint::entry_key(&d.step, &kw.0, &kw.1)?;
        spill.peek(&key)?.map(|bytes| crate::checkpoint::decode(&d.step, &bytes)).transpose()
    }

    /// A failed read from disk since the last call.
    fn take_error(&mut self) -> Result<()> {
        if let Some(e) = self.disk.as_mut().and_then(|d| d.error.take()) {
            return Err(e);
        }
        self.event.take_error()?;
        self.processing.take_error()?;
        self.holds.take_error()?;
        self.deferred.take_error()?;
        self.expiry.take_error()
    }

    /// Moves keys and windows not touched since the last call to disk while the state holds
    /// more than its share of the memory budget, down to three quarters of it.
    fn evict_over_budget(&mut self) -> Result<()> {
        let Some(d) = self.disk.as_mut() else { return Ok(()) };
        let recent = std::mem::take(&mut d.recent);
        if d.spill.is_none() {
            if self.states.is_empty() {
                return Ok(());
            }
            d.spill = d.backend.spill(&d.step)?;
        }
        let Some(spill) = d.spill.as_mut() else { return Ok(()) };
        let size = |k: &Kw, s: &KeyedState| k.0.len() + s.size_bytes();
        let mut bytes: usize = self.states.iter().map(|(k, s)| size(k, s)).sum();
        let budget = spill.budget_for(bytes);
        if bytes <= budget {
            return Ok(());
        }
        let target = budget / 4 * 3;
        // Those not touched in the last call first.
        let mut victims: Vec<(bool, &Kw, usize)> =
            self.states.iter().map(|(k, s)| (recent.contains(k), k, size(k, s))).collect();
        victims.sort_unstable_by_key(|v| v.0);
        let mut chosen = Vec::new();
        for (_, kw, b) in victims {
            if bytes <= target {
                break;
            }
            bytes -= b;
            chosen.push(kw.clone());
        }
        let mut out = Vec::with_capacity(chosen.len());
        for kw in chosen {
            let Some(state) = self.states.remove(&kw) else { continue };
            out.push((
                crate::checkpoint::entry_key(&d.step, &kw.0, &kw.1)?,
                crate::checkpoint::encode(&d.step, &state)?,
            ));
        }
        out.sort_unstable();
        d.rows += out.len();
        spill.put(out)?;
        spill.report(bytes);
        Ok(())
    }

    fn unindex(&mut self, kw: &Kw, gc: Timestamp) {
        self.resident(kw);
        if let Some(state) = self.states.get(kw) {
            for ((family, id), t) in &state.timers {
                let entry = (kw.0.clone(), kw.1, family.clone(), id.clone());
                match t.domain {
                    TimeDomain::EventTime => self.event.remove(&(t.fire, entry.clone())),
                    TimeDomain::ProcessingTime => self.processing.remove(&(t.fire, entry.clone())),
                };
                if let Some(o) = t.output {
                    if family == DEFERRED_INPUT {
                        self.deferred.remove(&(o, entry.clone()));
                    }
                    self.holds.remove(&(o, entry));
                }
            }
        }
        self.expiry.remove(&(gc, kw.clone()));
    }

    fn index(&mut self, kw: &Kw, gc: Timestamp) {
        let Some(state) = self.states.get(kw) else { return };
        if state.is_empty() {
            self.states.remove(kw);
            return;
        }
        for ((family, id), t) in &state.timers {
            let entry = (kw.0.clone(), kw.1, family.clone(), id.clone());
            match t.domain {
                TimeDomain::EventTime => self.event.insert((t.fire, entry.clone())),
                TimeDomain::ProcessingTime => self.processing.insert((t.fire, entry.clone())),
            };
            if let Some(o) = t.output {
                if family == DEFERRED_INPUT {
                    self.deferred.insert((o, entry.clone()));
                }
                self.holds.insert((o, entry));
            }
        }
        self.expiry.insert((gc, kw.clone()));
    }

    fn remove(&mut self, kw: &Kw, gc: Timestamp) {
        self.mark(kw);
        self.unindex(kw, gc);
        if self.states.remove(kw).is_some() {
            self.changes.removed += 1;
        }
    }

    /// Notes that `kw`'s row may have changed, for the next delta.
    fn mark(&mut self, kw: &Kw) {
        self.dirty.mark(kw.clone());
    }

    /// Counts what happened to a row user code (or a timer firing) touched: updated if it was
    /// written and still holds state (once per count), removed if it held state before and no
    /// longer does.
    fn count(&mut self, kw: &Kw, existed: bool, fired: bool) {
        self.mark(kw);
        let (exists, changed) = match self.states.get_mut(kw) {
            Some(s) => (!s.is_empty(), s.take_changed() || fired),
            None => (false, false),
        };
        if exists && changed && !self.counted.contains(kw) {
            self.counted.insert(kw.clone());
            self.changes.updated += 1;
        }
        if existed && !exists {
            self.changes.removed += 1;
        }
    }
}

/// Hands out state to user code; a key and window's index entries are removed when it is first
/// touched and rebuilt afterwards ([`StatefulParDoOperator::process`]).
struct Env<'a> {
    store: &'a mut Store,
    /// Rows touched by user code, and whether each held state before.
    touched: &'a mut HashMap<Kw, bool>,
    strategy: &'a WindowingStrategy,
    input_watermark: Timestamp,
    processing_time: Timestamp,
    draining: bool,
}

impl KeyedStateEnv for Env<'_> {
    fn state(&mut self, key: &[u8], window: &Window) -> (&mut KeyedState, StateTime) {
        let gc = self.strategy.gc_time(window);
        let kw = (key.to_vec(), *window);
        self.store.resident(&kw);
        if let std::collections::hash_map::Entry::Vacant(first) = self.touched.entry(kw.clone()) {
            first.insert(self.store.states.contains_key(&kw));
            self.store.unindex(&kw, gc);
        }
        let time = StateTime {
            input_watermark: self.input_watermark,
            processing_time: self.processing_time,
            element_timestamp: MIN_TIMESTAMP,
            gc_time: gc,
            draining: self.draining,
        };
        (self.store.states.entry(kw).or_default(), time)
    }
}

/// A stateful ParDo.
pub struct StatefulParDoOperator {
    runner: DoFnRunner,
    strategy: WindowingStrategy,
    input_ops: Arc<dyn CollectionOps>,
    /// Splits input batches by key (a rescale moves the elements waiting for side inputs so).
    key_partitioner: Option<Arc<dyn weir_sdk::kernel::KeyPartitioner>>,
    output_ops: Vec<Arc<dyn CollectionOps>>,
    side: SideState,
    store: Store,
    input_watermark: Timestamp,
    processing_time: Timestamp,
    /// Whether the job is being drained: deferred input no longer holds windows open.
    draining: bool,
    dropped: DropCounts,
}

impl StatefulParDoOperator {
    /// The same operator keeping its state where `state` says.
    pub fn with_state(mut self, state: &crate::state_backend::StateBackend) -> Self {
        self.store = Store::new(state, self.runner.step());
        let pushback = std::mem::replace(&mut self.side.pushback, Pushback::new(self.input_ops.clone()));
        self.side.pushback = pushback.with_state(state, self.runner.step());
        self
    }

    /// The entries of batches of elements waiting for side inputs, written by any number of
    /// partitions, split by the elements' keys over `n` partitions and numbered anew in each.
    fn spread_waiting(
        &self,
        by_key: &dyn weir_sdk::kernel::KeyPartitioner,
        waiting: crate::checkpoint::Entries,
        n: usize,
    ) -> Result<Vec<crate::checkpoint::Entries>> {
        let coder = |source| weir_sdk::Error::Coder { step: format!("{} (waiting input)", self.runner.step()), source };
        let mut out: Vec<crate::checkpoint::Entries> = (0..n.max(1)).map(|_| Vec::new()).collect();
        for (k, v) in waiting {
            let batch = self.input_ops.decode_batch(&v).map_err(coder)?;
            for (p, part) in by_key.partition(batch, n.max(1)).map_err(coder)?.into_iter().enumerate() {
                if part.is_empty() {
                    continue;
                }
                let number = out[p].len() as u64;
                let Some(renumbered) = Pushback::renumber(&k[UNKEYED.len()..], number) else { continue };
                let mut key = UNKEYED.to_vec();
                key.extend(renumbered);
                out[p].push((key, self.input_ops.encode_batch(&part).map_err(coder)?));
            }
        }
        Ok(out)
    }

    /// The stateful ParDo `node`.
    pub fn new(node: &TransformNode, payload: &ParDoPayload, graph: &PipelineGraph) -> Self {
        let input = graph.pcollection(node.inputs[0]);
        StatefulParDoOperator {
            runner: DoFnRunner::new(node, payload, graph),
            strategy: input.windowing.clone(),
            input_ops: input.ops.clone(),
            key_partitioner: payload.key_partitioner.clone(),
            output_ops: node.outputs.iter().map(|&o| graph.pcollection(o).ops.clone()).collect(),
            side: SideState {
                sides: SideInputs::new(&payload.side_inputs, graph),
                pushback: Pushback::new(input.ops.clone()),
            },
            store: Store::default(),
            input_watermark: MIN_TIMESTAMP,
            processing_time: MIN_TIMESTAMP,
            draining: false,
            dropped: DropCounts::default(),
        }
    }

    /// Number of keys and windows holding state, in memory and on disk.
    pub fn state_size(&self) -> usize {
        self.store.states.len() + self.store.disk.as_ref().map_or(0, |d| d.rows)
    }

    /// Approximate bytes of state held in memory.
    pub fn state_bytes(&self) -> usize {
        self.store.states.iter().map(|(k, s)| k.0.len() + s.size_bytes()).sum()
    }

    /// The entry of the operator's own bookkeeping (watermark, processing time, drops), under
    /// the empty key.
    fn bookkeeping_entry(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let meta: Meta = (self.input_watermark, self.processing_time, self.dropped.late);
        Ok((Vec::new(), crate::checkpoint::encode(self.runner.step(), &meta)?))
    }

    /// The entries of the elements waiting for side inputs and of the side inputs, one per
    /// waiting batch and per side window ([`Pushback::entries`], [`SideInputs::entries`]),
    /// under keys no key and window has ([`UNKEYED`]).
    fn unkeyed_entries(&self, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let at = out.len();
        self.side.entries(self.runner.step(), out)?;
        out[at..].iter_mut().for_each(|(k, _)| unkeyed(k));
        Ok(())
    }

    /// The watermark windows expire at: the input watermark, held back by deferred input not
    /// yet run (a window the operator still owes itself input for is not done), unless the job
    /// is being drained (the deferred input is then cut short at expiry).
    fn expiry_watermark(&self) -> Timestamp {
        expiry_watermark(&self.store, self.input_watermark, self.draining)
    }

    /// The processing time timers fire at: the clock's, until the input has ended (its
    /// watermark past the end of the global window) and the operator owes itself no deferred
    /// input (a splittable DoFn's residuals keep the real clock until they are done), when
    /// every processing-time timer set by then fires, once, before the windows expire, as on
    /// Beam's Direct and Flink runners (a timer set while they fire, for a later time, is
    /// dropped with its window).
    fn firing_processing_time(&self) -> Result<Timestamp> {
        let ended = self.input_watermark > GLOBAL_WINDOW_MAX_TIMESTAMP && self.store.deferred.is_empty();
        if !ended || self.draining {
            return Ok(self.processing_time);
        }
        let last = self.store.processing.last_time()?.map(|t| t.saturating_add(1));
        Ok(last.map_or(self.processing_time, |l| l.max(self.processing_time)))
    }

    /// Fires due timers and expires windows, inside one bundle.
    fn fire_due(&mut self, metrics: &Arc<MetricsContainerImpl>) -> Result<Vec<Batch>> {
        let expiry_wm = self.expiry_watermark();
        let pt = self.firing_processing_time()?;
        let has_work = self.store.processing.first().is_some_and(|t| t.0 < pt)
            || self.store.event.first().is_some_and(|t| t.0 < self.input_watermark)
            || self.store.expiry.first().is_some_and(|t| t.0 < expiry_wm);
        if !has_work {
            return Ok(Vec::new());
        }
        let StatefulParDoOperator { runner, store, strategy, side, input_watermark, draining, .. } = self;
        let (wm, draining) = (*input_watermark, *draining);
        let sides: &SideInputs = &side.sides;
        runner.bundle(metrics, |step, instance, outputs| {
            if instance.fires_timers_together() {
                let clock = (wm, pt, draining);
                while fire_together(store, strategy, clock, step, &mut *instance, outputs, sides)? {}
            }
            loop {
                // The earliest due timer: processing time first, then event time, each in order.
                let next = match store.processing.first() {
                    Some((t, (key, window, family, id))) if *t < pt => {
                        Some((TimeDomain::ProcessingTime, (*t, key.clone(), *window, family.clone(), id.clone())))
                    }
                    _ => match store.event.first() {
                        Some((t, (key, window, family, id))) if *t < wm => {
                            Some((TimeDomain::EventTime, (*t, key.clone(), *window, family.clone(), id.clone())))
                        }
                        _ => None,
                    },
                };
                let Some((domain, (fire, key, window, family, id))) = next else { break };
                let kw = (key.clone(), window);
                let gc = strategy.gc_time(&window);
                store.unindex(&kw, gc);
                // A state that could not be read back from disk: its timer would stay due.
                store.take_error()?;
                let Some(mut state) = store.states.remove(&kw) else { continue };
                let Some(data) = state.timers.remove(&(family.clone(), id.clone())) else {
                    store.states.insert(kw.clone(), state);
                    store.index(&kw, gc);
                    continue;
                };
                let firing = TimerFiring { family, id, domain, fire_timestamp: fire, output_timestamp: data.output };
                let time = StateTime { draining, ..StateTime::at(wm, pt, gc) };
                let r = guarded(step, "on_timer", || {
                    instance.on_timer(&key, window, Some(&firing), outputs, &mut state, time, sides)
                });
                store.states.insert(kw.clone(), state);
                store.count(&kw, true, true);
                store.index(&kw, gc);
                r?;
            }
            // Windows past their expiry: on_window_expiration, then all their state goes.
            let expiry_wm = expiry_watermark(store, wm, draining);
            while let Some((gc, (key, window))) = store.expiry.first().cloned() {
                if gc >= expiry_wm {
                    break;
                }
                let kw = (key.clone(), window);
                store.resident(&kw);
                store.take_error()?;
                let mut state = store.states.get(&kw).cloned().unwrap_or_default();
                let time = StateTime { draining, ..StateTime::at(wm, pt, gc) };
                let r = guarded(step, "on_window_expiration", || {
                    instance.on_timer(&key, window, None, outputs, &mut state, time, sides)
                });
                store.remove(&kw, gc);
                r?;
            }
            Ok(())
        })
    }
}

impl Operator for StatefulParDoOperator {
    fn process(&mut self, input: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.processing_time = self.processing_time.max(ctx.processing_time);
        self.draining |= ctx.draining;
        // Elements of expired windows never reach user code.
        let (wm, strategy) = (self.input_watermark, &self.strategy);
        let (live, expired) = self.input_ops.partition_by_window(input, &mut |w| strategy.gc_time(w) >= wm);
        self.dropped.late += expired.len() as u64;
        if live.is_empty() {
            return Ok(self.runner.empty_outputs());
        }
        let live = self
            .side
            .pushback
            .ready(&self.side.sides, Some(live), false)
            .map_err(|e| weir_sdk::Error::execution(self.runner.step(), e.to_string()))?;
        self.run_keyed(live, ctx)
    }

    fn advance(&mut self, input_watermark: Timestamp, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        self.input_watermark = self.input_watermark.max(input_watermark);
        self.processing_time = self.processing_time.max(ctx.processing_time);
        self.draining |= ctx.draining;
        let mut outputs = Vec::new();
        if !self.side.pushback.is_empty() {
            let ready = self
                .side
                .pushback
                .ready(&self.side.sides, None, true)
                .map_err(|e| weir_sdk::Error::execution(self.runner.step(), e.to_string()))?;
            outputs = self.run_keyed(ready, ctx)?;
        }
        let fired = self.fire_due(ctx.metrics)?;
        self.store.take_error()?;
        self.store.evict_over_budget()?;
        Ok(concat_outputs(&self.output_ops, outputs, fired))
    }

    fn hold(&self) -> Option<Timestamp> {
        let holds = self.store.holds.first().map(|h| h.0);
        match (holds, self.side.pushback.hold()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn next_processing_timer(&self) -> Option<Timestamp> {
        self.store.processing.first().map(|t| t.0)
    }

    fn on_committed(&mut self) {
        self.runner.on_committed();
    }

    fn seal(&mut self, epoch: u64) {
        self.runner.seal(epoch);
    }

    fn on_committed_through(&mut self, epoch: u64) {
        self.runner.on_committed_through(epoch);
    }

    fn dropped(&self) -> DropCounts {
        self.dropped
    }

    fn process_side(&mut self, index: usize, input: Batch) -> Result<()> {
        self.side.sides.add(index, input);
        Ok(())
    }

    fn advance_side(&mut self, index: usize, watermark: Timestamp) {
        self.side.sides.set_watermark(index, watermark);
    }

    fn finish(&mut self) {
        self.runner.teardown();
    }

    fn state_entries(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let step = self.runner.step();
        let mut out = vec![self.bookkeeping_entry()?];
        self.unkeyed_entries(&mut out)?;
        for ((key, window), state) in &self.store.states {
            out.push((crate::checkpoint::entry_key(step, key, window)?, crate::checkpoint::encode(step, state)?));
        }
        // Those on disk are stored as their entries.
        if let Some(spill) = self.store.disk.as_ref().and_then(|d| d.spill.as_ref()) {
            spill.for_each(|k, fragments| {
                // A stateful DoFn's state is kept whole: one fragment a key and window.
                out.extend(fragments.iter().map(|v| (k.to_vec(), v.clone())));
                Ok(())
            })?;
        }
        Ok(out)
    }

    fn take_changed_entries(&mut self) -> Result<Option<crate::checkpoint::state_files::ChangedEntries>> {
        // Changes are kept from the first checkpoint on; that one diffs everything.
        let step = self.runner.step().to_string();
        let (mut written, mut removed) = (vec![self.bookkeeping_entry()?], Vec::new());
        let kept = self.side.take_changes(&step, &mut written, &mut removed)?;
        written[1..].iter_mut().for_each(|(k, _)| unkeyed(k));
        removed.iter_mut().for_each(unkeyed);
        let Some(dirty) = self.store.dirty.take().filter(|_| kept) else { return Ok(None) };
        let step = step.as_str();
        for kw in dirty {
            let entry = crate::checkpoint::entry_key(step, &kw.0, &kw.1)?;
            match self.store.states.get(&kw) {
                Some(state) => written.push((entry, crate::checkpoint::encode(step, state)?)),
                // Moved to disk since it changed.
                None => match self.store.spilled(&kw)? {
                    Some(state) => written.push((entry, crate::checkpoint::encode(step, &state)?)),
                    None => removed.push(entry),
                },
            }
        }
        Ok(Some((written, removed)))
    }

    /// Keyed state by its key; the entries under no key (waiting elements, side inputs) by what
    /// they hold.
    fn rescale_partition(&self, entry: &[u8], n: usize) -> Result<Option<usize>> {
        if entry.starts_with(&UNKEYED) {
            return Ok(None);
        }
        crate::checkpoint::keyed_partition(self.runner.step(), entry, n)
    }

    /// By key; each new partition's bookkeeping is the lowest watermark, the latest processing
    /// time, the drops summed, and the side inputs (the same in every partition). Elements
    /// waiting for side inputs move by their keys too.
    fn rescale(&self, old: Vec<crate::checkpoint::Entries>, n: usize) -> Result<Vec<crate::checkpoint::Entries>> {
        let step = self.runner.step().to_string();
        let refused = |waiting: usize| {
            weir_sdk::Error::NotSupported(format!(
                "{waiting} batches of elements wait for side inputs, and cannot move to another partition"
            ))
        };
        // The side inputs' entries, from the first partition that has any, go to every one.
        let (mut keyed, mut sides) = (Vec::with_capacity(old.len()), None::<crate::checkpoint::Entries>);
        let mut waiting = Vec::new();
        for entries in old {
            let (own, rest): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(k, _)| k.starts_with(&UNKEYED));
            let (waits, own): (Vec<_>, Vec<_>) =
                own.into_iter().partition(|(k, _)| Pushback::is_entry(&k[UNKEYED.len()..]));
            waiting.extend(waits);
            if sides.as_ref().is_none_or(Vec::is_empty) {
                sides = Some(own);
            }
            keyed.push(rest);
        }
        let moved = match (&self.key_partitioner, waiting.len()) {
            (_, 0) => Vec::new(),
            (Some(by_key), _) => self.spread_waiting(by_key.as_ref(), waiting, n)?,
            (None, count) => return Err(refused(count)),
        };
        let mut legacy_sides = None;
        let mut out = crate::checkpoint::spread_keyed(&step, keyed, n, |metas| {
            let mut merged: Option<Meta> = None;
            for m in metas {
                let ((wm, pt, late), legacy) = decode_meta(&step, &m)?;
                if let Some((pushback, s)) = legacy {
                    if !pushback.is_empty() {
                        return Err(refused(pushback.len()));
                    }
                    legacy_sides.get_or_insert(s);
                }
                merged = Some(match merged {
                    None => (wm, pt, late),
                    Some(a) => (a.0.min(wm), a.1.max(pt), a.2 + late),
                });
            }
            match merged {
                Some(m) => crate::checkpoint::encode(&step, &m),
                None => Ok(Vec::new()),
            }
        })?;
        for entries in &mut out {
            entries.extend(sides.iter().flatten().cloned());
        }
        for (p, entries) in moved.into_iter().enumerate() {
            out[p].extend(entries);
        }
        // Side inputs in the older layout go back into the bookkeeping, as it had them.
        if let Some(s) = legacy_sides {
            for entries in &mut out {
                if let Some((_, meta)) = entries.iter_mut().find(|(k, _)| k.is_empty()) {
                    let (wm, pt, late): Meta = crate::checkpoint::decode(&step, meta)?;
                    let legacy: LegacyMeta = (wm, pt, late, Vec::new(), s.clone());
                    *meta = crate::checkpoint::encode(&step, &legacy)?;
                }
            }
        }
        Ok(out)
    }

    fn restore_entries(&mut self, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let step = self.runner.step().to_string();
        let mut disk = self.store.disk.take();
        if let Some(d) = disk.as_mut() {
            d.rows = 0;
            if let Some(spill) = d.spill.as_mut() {
                spill.clear()?;
            }
        }
        let old = std::mem::take(&mut self.store);
        let (mut event, mut processing, mut holds, mut deferred, mut expiry) =
            (old.event, old.processing, old.holds, old.deferred, old.expiry);
        for index in [&mut event, &mut processing, &mut holds, &mut deferred] {
            index.clear();
        }
        expiry.clear();
        self.store = Store { disk, event, processing, holds, deferred, expiry, ..Store::default() };
        self.store.take_error()?;
        // State past the budget leaves memory while it is restored: each time a quarter of the
        // budget more is in memory (at least a MiB), not after every entry, as finding what to
        // move looks at every state held.
        let (mut since, mut every) = (0usize, 1usize << 20);
        for (entry, value) in entries {
            if entry.is_empty() {
                let ((wm, pt, late), legacy) = decode_meta(&step, &value)?;
                if let Some((pushback, sides)) = legacy {
                    // The older layout's entry is replaced by the bookkeeping entry at the next
                    // commit: what it held is written anew, in entries of its own.
                    self.side.keep_changes();
                    self.side.restore_legacy(pushback, sides)?;
                }
                self.input_watermark = wm;
                self.processing_time = pt;
                self.dropped.late = late;
                continue;
            }
            if let Some(own) = entry.strip_prefix(&UNKEYED) {
                self.side.restore_entry(&step, own, &value)?;
                continue;
            }
            let kw = crate::checkpoint::split_entry_key(&step, &entry)?;
            let state: KeyedState = crate::checkpoint::decode(&step, &value)?;
            let gc = self.strategy.gc_time(&kw.1);
            since += kw.0.len() + state.size_bytes();
            self.store.states.insert(kw.clone(), state);
            self.store.index(&kw, gc);
            if self.store.disk.is_some() && since >= every {
                self.store.evict_over_budget()?;
                let budget = self.store.disk.as_ref().and_then(|d| d.spill.as_ref()).map(|s| s.budget());
                (since, every) = (0, budget.map_or(every, |b| (b / 4).max(1 << 20)));
            }
        }
        // The state is what was committed: the next commit writes what changes from here.
        self.store.dirty.keep();
        self.side.keep_changes();
        self.store.evict_over_budget()?;
        // The map grew for what was restored; what stays is what the budget allows.
        self.store.states.shrink_to_fit();
        Ok(())
    }

    fn restore_keeps_changes(&self) -> bool {
        true
    }

    fn state_rows(&self) -> usize {
        self.state_size()
    }

    fn state_bytes(&self) -> usize {
        StatefulParDoOperator::state_bytes(self)
    }

    fn state_backend_metrics(&self) -> Vec<(&'static str, u64)> {
        let Some(d) = &self.store.disk else { return Vec::new() };
        let mut metrics = crate::state_backend::Spill::metrics(d.spill.as_ref(), 0, d.rows, d.hits, d.misses);
        let s = &self.store;
        let indexes = [&s.event, &s.processing, &s.holds, &s.deferred];
        let on_disk = indexes.iter().map(|i| i.on_disk()).sum::<usize>() + s.expiry.on_disk();
        metrics.push(("indexEntriesOnDisk", on_disk as u64));
        metrics.push(("waitingSpilledBytes", self.side.pushback.spilled_bytes() as u64));
        metrics
    }

    fn take_state_changes(&mut self) -> StateChanges {
        self.store.counted.clear();
        std::mem::take(&mut self.store.changes)
    }
}

/// Timers fired together in one call at most.
const FIRED_TOGETHER: usize = 4096;

/// Fires the due timers together ([`ErasedDoFn::on_timers`]), the earliest of each key and
/// window (so each key's fire in order, one a round): processing time first, then event time.
/// Whether any fired.
#[allow(clippy::too_many_arguments)]
fn fire_together(
    store: &mut Store,
    strategy: &WindowingStrategy,
    (wm, pt, draining): (Timestamp, Timestamp, bool),
    step: &str,
    instance: &mut dyn ErasedDoFn,
    outputs: &mut [Batch],
    sides: &SideInputs,
) -> Result<bool> {
    let mut due: Vec<(TimeDomain, TimerKey)> = Vec::new();
    let mut seen = HashSet::new();
    let processing = store.processing.iter_first().take_while(|t| t.0 < pt).map(|(t, (key, window, family, id))| {
        (TimeDomain::ProcessingTime, (*t, key.clone(), *window, family.clone(), id.clone()))
    });
    let event = store.event.iter_first().take_while(|t| t.0 < wm).map(|(t, (key, window, family, id))| {
        (TimeDomain::EventTime, (*t, key.clone(), *window, family.clone(), id.clone()))
    });
    // The earliest due event timers, those in memory before any on disk: the later ones fire
    // in later rounds, as these leave.
    for (domain, t) in processing.chain(event) {
        if due.len() == FIRED_TOGETHER {
            break;
        }
        if seen.insert((t.1.clone(), t.2)) {
            due.push((domain, t));
        }
    }
    if due.is_empty() {
        return Ok(false);
    }
    let mut touched = HashMap::new();
    let mut env = Env { store, touched: &mut touched, strategy, input_watermark: wm, processing_time: pt, draining };
    let mut firings = Vec::with_capacity(due.len());
    for (domain, (fire, key, window, family, id)) in due {
        let (state, _) = env.state(&key, &window);
        if let Some(data) = state.timers.remove(&(family.clone(), id.clone())) {
            let firing = TimerFiring { family, id, domain, fire_timestamp: fire, output_timestamp: data.output };
            firings.push((key, window, firing));
        }
    }
    let r = guarded(step, "on_timer", || instance.on_timers(firings, outputs, &mut env, sides));
    for (kw, existed) in touched {
        let gc = strategy.gc_time(&kw.1);
        store.count(&kw, existed, true);
        store.index(&kw, gc);
    }
    store.take_error()?;
    r.map(|()| true)
}

/// The watermark windows expire at (see [`StatefulParDoOperator::expiry_watermark`]).
fn expiry_watermark(store: &Store, input_watermark: Timestamp, draining: bool) -> Timestamp {
    match store.deferred.first().map(|(t, _)| (*t,)) {
        Some(d) if !draining => d.0.min(input_watermark),
        _ => input_watermark,
    }
}

/// Joins two lists of per-output batches (either may be empty).
fn concat_outputs(ops: &[Arc<dyn CollectionOps>], a: Vec<Batch>, b: Vec<Batch>) -> Vec<Batch> {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    a.into_iter().zip(b).zip(ops).map(|((x, y), o)| o.concat(vec![x, y])).collect()
}

impl StatefulParDoOperator {
    fn run_keyed(&mut self, live: Batch, ctx: &OpContext<'_>) -> Result<Vec<Batch>> {
        if live.is_empty() {
            return Ok(self.runner.empty_outputs());
        }
        let mut touched = HashMap::new();
        let result = {
            let StatefulParDoOperator {
                runner, store, strategy, side, input_watermark, processing_time, draining, ..
            } = self;
            let mut env = Env {
                store,
                touched: &mut touched,
                strategy,
                input_watermark: *input_watermark,
                processing_time: *processing_time,
                draining: *draining,
            };
            runner.bundle(ctx.metrics, |step, instance, outputs| {
                guarded(step, "process", || instance.process_keyed(live, outputs, &side.sides, &mut env))
            })
        };
        for (kw, existed) in touched {
            let gc = self.strategy.gc_time(&kw.1);
            self.store.count(&kw, existed, false);
            self.store.index(&kw, gc);
        }
        let result = result?;
        self.store.take_error()?;
        self.store.evict_over_budget()?;
        Ok(result)
    }
}
