//! Side inputs: materialized per window, mapped from main-input windows, and ready when data
//! for the side window arrived or the side watermark passed it.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use weir_sdk::graph::PipelineGraph;
use weir_sdk::kernel::{Batch, CollectionOps, SideInputReader, SideInputSpec};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use weir_sdk::window::Window;
use weir_sdk::UserError;

type Built = Arc<dyn Any + Send + Sync>;

/// The side inputs of one ParDo.
pub struct SideInputs {
    specs: Vec<SideInputSpec>,
    ops: Vec<Arc<dyn CollectionOps>>,
    /// Per side input: per side window, the latest pane index seen and that pane's elements.
    data: Vec<HashMap<Window, (i64, Vec<Batch>)>>,
    watermarks: Vec<Timestamp>,
    cache: Mutex<HashMap<(usize, Window), Built>>,
    /// The (side input, window)s changed since a checkpoint last took them
    /// ([`SideInputs::take_changes`]); not kept until one first asks.
    dirty: crate::checkpoint::Changed<(usize, Window)>,
}

impl SideInputs {
    /// Side inputs described by `specs`.
    pub fn new(specs: &[SideInputSpec], graph: &PipelineGraph) -> Self {
        SideInputs {
            ops: specs.iter().map(|s| graph.pcollection(s.pcollection).ops.clone()).collect(),
            data: specs.iter().map(|_| HashMap::new()).collect(),
            watermarks: vec![MIN_TIMESTAMP; specs.len()],
            specs: specs.to_vec(),
            cache: Mutex::new(HashMap::new()),
            dirty: Default::default(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Adds side-input data. A window shows its latest pane: elements of a later pane replace
    /// the earlier pane's (triggered side inputs), elements of the same pane accumulate; with
    /// [`SideInputSpec::portable_semantics`], every pane's elements accumulate.
    pub fn add(&mut self, index: usize, batch: Batch) {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        let every_pane = self.specs[index].portable_semantics;
        for (window, pane, b) in self.ops[index].group_by_window(batch) {
            cache.remove(&(index, window));
            self.dirty.mark((index, window));
            let entry = self.data[index].entry(window).or_insert((pane, Vec::new()));
            if every_pane {
                entry.0 = entry.0.max(pane);
                entry.1.push(b);
            } else if pane > entry.0 {
                *entry = (pane, vec![b]);
            } else if pane == entry.0 {
                entry.1.push(b);
            }
        }
    }

    /// Moves a side input's watermark.
    pub fn set_watermark(&mut self, index: usize, watermark: Timestamp) {
        self.watermarks[index] = self.watermarks[index].max(watermark);
    }

    /// Whether every side window that `main` maps to is ready.
    pub fn is_ready(&self, main: &Window) -> Result<bool, UserError> {
        for (i, spec) in self.specs.iter().enumerate() {
            let side = spec.window_fn.side_input_window(main)?;
            // A window is ready once a trigger fired a pane of it, or once the watermark passed
            // its end (plus, for a Wait.on signal, its allowed lateness); elements no trigger
            // produced may still be arriving before that.
            let fired = self.data[i].get(&side).is_some_and(|(pane, _)| *pane >= 0);
            if !fired && self.watermarks[i] <= side.max_timestamp().saturating_add(spec.ready_after_ms) {
                return Ok(false);
            }
            // A submitted pipeline's side input is held, as on Beam's portable runners, until
            // its watermark reaches the main window (see `SideInputSpec::portable_semantics`).
            if spec.portable_semantics && self.watermarks[i] < main.min_timestamp() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Encoded side-input data as older checkpoints wrote it, in one entry: per side input, per
/// window, the pane index and encoded batches.
pub type SidesSnapshot = Vec<Vec<(Window, i64, Vec<Vec<u8>>)>>;

impl SideInputs {
    /// Restores side-input data an older checkpoint wrote in one entry ([`SidesSnapshot`]).
    pub fn restore(&mut self, snapshot: SidesSnapshot) -> Result<(), weir_sdk::Error> {
        for (i, windows) in snapshot.into_iter().enumerate().take(self.data.len()) {
            for (w, pane, batches) in windows {
                self.restore_window(i, w, pane, &batches)?;
            }
        }
        Ok(())
    }

    /// Restores side input `index`'s window `w`: its pane index and encoded batches.
    fn restore_window(
        &mut self,
        index: usize,
        w: Window,
        pane: i64,
        batches: &[Vec<u8>],
    ) -> Result<(), weir_sdk::Error> {
        let decoded = batches.iter().map(|b| self.ops[index].decode_batch(b)).collect::<Result<Vec<_>, _>>().map_err(
            |source| weir_sdk::Error::Coder { step: format!("side input {}", self.specs[index].view_id), source },
        )?;
        self.data[index].insert(w, (pane, decoded));
        self.dirty.mark((index, w));
        Ok(())
    }
}

impl SideInputReader for SideInputs {
    fn get(&self, view_id: &str, main: &Window) -> Result<Built, UserError> {
        let i = self
            .specs
            .iter()
            .position(|s| s.view_id == view_id)
            .ok_or_else(|| format!("side input '{view_id}' was not declared with ParDo::with_side_inputs"))?;
        let side = self.specs[i].window_fn.side_input_window(main)?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = cache.get(&(i, side)) {
            return Ok(v.clone());
        }
        let batches = self.data[i].get(&side).map(|(_, bs)| bs.to_vec()).unwrap_or_default();
        let built = self.specs[i].kernel.build(batches)?;
        cache.insert((i, side), built.clone());
        Ok(built)
    }
}

/// Main-input elements waiting for their side inputs to become ready (Beam's
/// `PushbackSideInputDoFnRunner`). Waiting elements hold the ParDo's output watermark. They are
/// kept by window, so that a retry asks once per waiting window, not once per element.
///
/// On the disk backend, batches past a cap (an eighth of an equal share of the budget, at least
/// 1 MiB or the budget) wait on disk, encoded as a checkpoint writes them, and are read back
/// when their window is ready: a side input that comes late, or a bounded one a streaming main
/// input waits for, does not hold the main input in memory. Each window's number and earliest
/// timestamp stay in memory.
pub struct Pushback {
    ops: Arc<dyn CollectionOps>,
    waiting: BTreeMap<Window, Waiting>,
    /// The number the next batch to wait gets (its entry's key).
    next: u64,
    /// The (window, number)s of batches that began or stopped waiting since a checkpoint last
    /// took them ([`Pushback::take_changes`]); not kept until one first asks.
    dirty: crate::checkpoint::Changed<(Window, u64)>,
    /// The disk backend's part.
    disk: Option<Box<PushbackDisk>>,
}

/// The elements of one window waiting for its side inputs, by number, and their earliest
/// timestamp.
struct Waiting {
    batches: Vec<(u64, Batch)>,
    /// With the disk backend: the encoded bytes of `batches`, and the numbers of the window's
    /// batches on disk.
    bytes: usize,
    on_disk: Vec<u64>,
    min_timestamp: Timestamp,
}

/// Where a [`Pushback`] keeps what is past its cap.
struct PushbackDisk {
    backend: crate::state_backend::StateBackend,
    step: String,
    /// Opened when a batch first goes to disk.
    area: Option<crate::state_backend::Spill>,
    /// Encoded bytes of the batches in memory.
    in_memory: usize,
}

impl PushbackDisk {
    fn area(&mut self) -> weir_sdk::Result<&mut crate::state_backend::Spill> {
        if self.area.is_none() {
            self.area = self.backend.uncounted_area(&self.step)?;
        }
        let step = &self.step;
        self.area.as_mut().ok_or_else(|| weir_sdk::Error::execution(step, "no disk store on the memory backend"))
    }
}

impl Pushback {
    /// An empty pushback buffer for elements with `ops`.
    pub fn new(ops: Arc<dyn CollectionOps>) -> Self {
        Pushback { ops, waiting: BTreeMap::new(), next: 0, dirty: Default::default(), disk: None }
    }

    /// The same buffer keeping batches past its cap on disk when `state` is the disk backend,
    /// for the step `step`.
    pub fn with_state(mut self, state: &crate::state_backend::StateBackend, step: &str) -> Self {
        if state.is_disk() {
            self.disk = Some(Box::new(PushbackDisk {
                backend: state.clone(),
                step: step.to_string(),
                area: None,
                in_memory: 0,
            }));
        }
        self
    }

    fn wait(&mut self, window: Window, batch: Batch) -> weir_sdk::Result<()> {
        let n = self.next;
        self.next += 1;
        self.wait_as(window, n, batch, None)
    }

    /// Batch `n` of `window` begins waiting (`encoded`: as its checkpoint entry holds it, when
    /// restored).
    fn wait_as(&mut self, window: Window, n: u64, batch: Batch, encoded: Option<&[u8]>) -> weir_sdk::Result<()> {
        let min = batch.min_timestamp().unwrap_or(MAX_TIMESTAMP);
        let empty = || Waiting { batches: Vec::new(), bytes: 0, on_disk: Vec::new(), min_timestamp: MAX_TIMESTAMP };
        self.dirty.mark((window, n));
        let mut bytes = 0;
        if let Some(d) = self.disk.as_mut() {
            let value = match encoded {
                Some(e) => e.to_vec(),
                None => self
                    .ops
                    .encode_batch(&batch)
                    .map_err(|source| weir_sdk::Error::Coder { step: d.step.clone(), source })?,
            };
            if d.in_memory + value.len() > d.backend.part_cap(8) {
                let key = Self::entry_key(n, &window, &d.step)?;
                d.area()?.put(vec![(key, value)])?;
                let w = self.waiting.entry(window).or_insert_with(empty);
                w.min_timestamp = w.min_timestamp.min(min);
                w.on_disk.push(n);
                return Ok(());
            }
            bytes = value.len();
            d.in_memory += bytes;
        }
        let w = self.waiting.entry(window).or_insert_with(empty);
        w.min_timestamp = w.min_timestamp.min(min);
        w.bytes += bytes;
        w.batches.push((n, batch));
        Ok(())
    }

    /// Takes window `w`'s waiting batches (those on disk read back).
    fn release(&mut self, w: &Window) -> weir_sdk::Result<Vec<Batch>> {
        let Some(waiting) = self.waiting.remove(w) else { return Ok(Vec::new()) };
        self.dirty.mark_all(waiting.batches.iter().map(|(n, _)| (*w, *n)));
        self.dirty.mark_all(waiting.on_disk.iter().map(|n| (*w, *n)));
        let mut out: Vec<Batch> = waiting.batches.into_iter().map(|(_, b)| b).collect();
        if let Some(d) = self.disk.as_mut() {
            d.in_memory -= waiting.bytes.min(d.in_memory);
            for n in waiting.on_disk {
                let key = Self::entry_key(n, w, &d.step)?;
                let step = d.step.clone();
                let bytes = d.area()?.take(&key)?.ok_or_else(|| {
                    weir_sdk::Error::execution(&step, format!("batch {n} waiting for side inputs is not on disk"))
                })?;
                out.push(self.ops.decode_batch(&bytes).map_err(|source| weir_sdk::Error::Coder { step, source })?);
            }
        }
        Ok(out)
    }

    /// The encoded batch `n` of `w`, wherever it waits; `None` if it does not.
    fn encoded(&self, w: &Window, n: u64, step: &str) -> weir_sdk::Result<Option<Vec<u8>>> {
        let Some(waiting) = self.waiting.get(w) else { return Ok(None) };
        if let Some((_, b)) = waiting.batches.iter().find(|(m, _)| *m == n) {
            return self.encode(b).map(Some);
        }
        if !waiting.on_disk.contains(&n) {
            return Ok(None);
        }
        let area = self.disk.as_ref().and_then(|d| d.area.as_ref());
        let bytes = area.map(|a| a.peek(&Self::entry_key(n, w, step)?)).transpose()?.flatten();
        bytes.map(Some).ok_or_else(|| {
            weir_sdk::Error::execution(step, format!("batch {n} waiting for side inputs is not on disk"))
        })
    }

    /// The part of `input` (plus earlier waiting elements when `retry`) whose side windows are
    /// ready, in one batch; the rest waits.
    pub fn ready(&mut self, sides: &SideInputs, input: Option<Batch>, retry: bool) -> Result<Batch, UserError> {
        let ready = self.ready_batches(sides, input, retry)?;
        Ok(self.ops.concat(ready))
    }

    /// [`Pushback::ready`] as the batches it is made of, none empty: what waited for the end of
    /// a bounded input (every element of a ParDo whose side input is ready only then) is not
    /// copied into one batch first.
    pub fn ready_batches(
        &mut self,
        sides: &SideInputs,
        input: Option<Batch>,
        retry: bool,
    ) -> Result<Vec<Batch>, UserError> {
        let mut ready: Vec<Batch> = Vec::new();
        if sides.is_empty() {
            ready.extend(input);
            if retry {
                let windows: Vec<Window> = self.waiting.keys().copied().collect();
                for w in windows {
                    ready.extend(self.release(&w)?);
                }
            }
            ready.retain(|b| !b.is_empty());
            return Ok(ready);
        }
        if retry {
            let windows: Vec<Window> = self.waiting.keys().copied().collect();
            for w in windows {
                if sides.is_ready(&w)? {
                    ready.extend(self.release(&w)?);
                }
            }
        }
        if let Some(b) = input {
            // One verdict per distinct window, one pass over the elements: with sessions almost
            // every element has a window of its own, so splitting by window first costs more
            // than the join itself.
            // Runs of elements share a window (fixed windows): the last verdict is checked first.
            let mut verdicts: HashMap<Window, bool> = HashMap::new();
            let mut last: Option<(Window, bool)> = None;
            let mut failure = None;
            let (now, later) = self.ops.partition_by_window(b, &mut |w| {
                if let Some((lw, verdict)) = last {
                    if lw == *w {
                        return verdict;
                    }
                }
                let verdict = *verdicts.entry(*w).or_insert_with(|| {
                    sides.is_ready(w).unwrap_or_else(|e| {
                        failure.get_or_insert(e);
                        false
                    })
                });
                last = Some((*w, verdict));
                verdict
            });
            if let Some(e) = failure {
                return Err(e);
            }
            ready.push(now);
            if !later.is_empty() {
                for (w, _, part) in self.ops.group_by_window(later) {
                    self.wait(w, part)?;
                }
            }
        }
        ready.retain(|b| !b.is_empty());
        Ok(ready)
    }

    /// Restores waiting elements an older checkpoint wrote in one entry (each batch encoded).
    pub fn restore(&mut self, batches: Vec<Vec<u8>>) -> Result<(), weir_sdk::Error> {
        for b in batches {
            let decoded = self
                .ops
                .decode_batch(&b)
                .map_err(|source| weir_sdk::Error::Coder { step: "pushed-back input".into(), source })?;
            for (w, _, part) in self.ops.group_by_window(decoded) {
                self.wait(w, part)?;
            }
        }
        Ok(())
    }

    /// Encoded bytes of waiting elements written to disk since the operator started.
    pub fn spilled_bytes(&self) -> usize {
        self.disk.as_ref().and_then(|d| d.area.as_ref()).map_or(0, |a| a.spilled_total())
    }

    /// Whether elements are waiting.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The earliest timestamp waiting.
    pub fn hold(&self) -> Option<Timestamp> {
        self.waiting.values().map(|w| w.min_timestamp).min()
    }
}

/// The first byte of a pushed-back batch's state entry.
const WAITING: u8 = b'P';
/// The first byte of a side input window's state entry.
const SIDE: u8 = b'S';

/// The parts of a state entry key that begins with `tag`, then `N` bytes, then a window; `None`
/// if it begins otherwise.
fn split_tagged<const N: usize>(key: &[u8], tag: u8, step: &str) -> weir_sdk::Result<Option<([u8; N], Window)>> {
    match key.split_first() {
        Some((t, rest)) if *t == tag => match rest.split_first_chunk::<N>() {
            Some((head, window)) => Ok(Some((*head, crate::checkpoint::decode(step, window)?))),
            None => Err(weir_sdk::Error::execution(step, "corrupt state entry key")),
        },
        _ => Ok(None),
    }
}

/// State entries of a ParDo's side inputs and pushed-back elements, each changed on its own, so
/// a checkpoint writes only what changed: a side input's window (`S`, the input's index, the
/// window: its pane index and batches) and a batch waiting for its side inputs (`P`, its
/// number, its window: the batch). The empty key is the older layout: everything in one entry.
impl SideInputs {
    fn entry_key(index: usize, window: &Window, step: &str) -> weir_sdk::Result<Vec<u8>> {
        let mut k = vec![SIDE];
        k.extend_from_slice(&(index as u32).to_be_bytes());
        k.extend(crate::checkpoint::encode(step, window)?);
        Ok(k)
    }

    fn entry(&self, index: usize, window: &Window, step: &str) -> weir_sdk::Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some((pane, batches)) = self.data[index].get(window) else { return Ok(None) };
        let enc = batches.iter().map(|b| self.ops[index].encode_batch(b)).collect::<Result<Vec<_>, _>>().map_err(
            |source| weir_sdk::Error::Coder { step: format!("side input {}", self.specs[index].view_id), source },
        )?;
        Ok(Some((Self::entry_key(index, window, step)?, crate::checkpoint::encode(step, &(*pane, enc))?)))
    }

    /// Every side input window as state entries of step `step`.
    pub fn entries(&self, step: &str, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> weir_sdk::Result<()> {
        for (i, data) in self.data.iter().enumerate() {
            for w in data.keys() {
                out.extend(self.entry(i, w, step)?);
            }
        }
        Ok(())
    }

    /// The windows changed since the last call, as entries; `false` at the first call, from
    /// which on changes are kept.
    pub fn take_changes(&mut self, step: &str, written: &mut Vec<(Vec<u8>, Vec<u8>)>) -> weir_sdk::Result<bool> {
        let Some(dirty) = self.dirty.take() else { return Ok(false) };
        for (i, w) in dirty {
            written.extend(self.entry(i, &w, step)?);
        }
        Ok(true)
    }

    /// Restores a side input window's entry; `false` if `key` is not one.
    pub fn restore_entry(&mut self, step: &str, key: &[u8], value: &[u8]) -> weir_sdk::Result<bool> {
        let Some((index, window)) = split_tagged::<4>(key, SIDE, step)? else { return Ok(false) };
        let index = u32::from_be_bytes(index) as usize;
        let (pane, batches): (i64, Vec<Vec<u8>>) = crate::checkpoint::decode(step, value)?;
        if index >= self.data.len() {
            return Err(weir_sdk::Error::execution(step, format!("state of side input {index}, which the step lacks")));
        }
        self.restore_window(index, window, pane, &batches)?;
        Ok(true)
    }
}

impl Pushback {
    fn entry_key(n: u64, window: &Window, step: &str) -> weir_sdk::Result<Vec<u8>> {
        let mut k = vec![WAITING];
        k.extend_from_slice(&n.to_be_bytes());
        k.extend(crate::checkpoint::encode(step, window)?);
        Ok(k)
    }

    fn encode(&self, b: &Batch) -> weir_sdk::Result<Vec<u8>> {
        self.ops.encode_batch(b).map_err(|source| weir_sdk::Error::Coder { step: "pushed-back input".into(), source })
    }

    /// Every waiting batch as a state entry of step `step`.
    pub fn entries(&self, step: &str, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> weir_sdk::Result<()> {
        for (w, waiting) in &self.waiting {
            for n in waiting.batches.iter().map(|(n, _)| n).chain(&waiting.on_disk) {
                if let Some(bytes) = self.encoded(w, *n, step)? {
                    out.push((Self::entry_key(*n, w, step)?, bytes));
                }
            }
        }
        Ok(())
    }

    /// The batches that began waiting since the last call, as entries, and the keys of those
    /// that stopped; `false` at the first call, from which on changes are kept.
    pub fn take_changes(
        &mut self,
        step: &str,
        written: &mut Vec<(Vec<u8>, Vec<u8>)>,
        removed: &mut Vec<Vec<u8>>,
    ) -> weir_sdk::Result<bool> {
        let Some(dirty) = self.dirty.take() else { return Ok(false) };
        for (w, n) in dirty {
            let key = Self::entry_key(n, &w, step)?;
            match self.encoded(&w, n, step)? {
                Some(bytes) => written.push((key, bytes)),
                None => removed.push(key),
            }
        }
        Ok(true)
    }

    /// Restores a waiting batch's entry; `false` if `key` is not one.
    pub fn restore_entry(&mut self, step: &str, key: &[u8], value: &[u8]) -> weir_sdk::Result<bool> {
        let Some((n, window)) = split_tagged::<8>(key, WAITING, step)? else { return Ok(false) };
        let n = u64::from_be_bytes(n);
        let batch = self
            .ops
            .decode_batch(value)
            .map_err(|source| weir_sdk::Error::Coder { step: "pushed-back input".into(), source })?;
        self.next = self.next.max(n + 1);
        self.wait_as(window, n, batch, Some(value))?;
        Ok(true)
    }

    /// Whether `key` is a waiting batch's entry key.
    pub fn is_entry(key: &[u8]) -> bool {
        key.first() == Some(&WAITING)
    }

    /// Entry `entry` of a batch waiting, renumbered `n` (a restart at another parallelism
    /// gathers every old partition's); `None` if it is not a waiting batch's entry.
    pub fn renumber(entry: &[u8], n: u64) -> Option<Vec<u8>> {
        let (&WAITING, rest) = entry.split_first()? else { return None };
        let (_, window) = rest.split_first_chunk::<8>()?;
        let mut k = vec![WAITING];
        k.extend_from_slice(&n.to_be_bytes());
        k.extend_from_slice(window);
        Some(k)
    }
}

/// A ParDo's side inputs and the elements waiting for them, checkpointed as state entries (one
/// per side input window and per waiting batch, [`SideInputs::entries`] and
/// [`Pushback::entries`]) by the stateless and the stateful ParDo operators alike.
pub struct SideState {
    /// The side inputs.
    pub sides: SideInputs,
    /// The elements waiting for them.
    pub pushback: Pushback,
}

impl SideState {
    /// Every entry, appended to `out`.
    pub fn entries(&self, step: &str, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> weir_sdk::Result<()> {
        self.pushback.entries(step, out)?;
        self.sides.entries(step, out)
    }

    /// What changed since the last call, appended to `written` and `removed`; `false` at the
    /// first call, from which on changes are kept.
    pub fn take_changes(
        &mut self,
        step: &str,
        written: &mut Vec<(Vec<u8>, Vec<u8>)>,
        removed: &mut Vec<Vec<u8>>,
    ) -> weir_sdk::Result<bool> {
        let waiting = self.pushback.take_changes(step, written, removed)?;
        Ok(self.sides.take_changes(step, written)? && waiting)
    }

    /// Restores one entry; an error names the step if it is neither kind.
    pub fn restore_entry(&mut self, step: &str, key: &[u8], value: &[u8]) -> weir_sdk::Result<()> {
        if self.pushback.restore_entry(step, key, value)? || self.sides.restore_entry(step, key, value)? {
            return Ok(());
        }
        Err(weir_sdk::Error::execution(step, "a state entry that is neither a side input's nor a waiting element's"))
    }

    /// Restores what an older checkpoint wrote in one entry.
    pub fn restore_legacy(&mut self, pushback: Vec<Vec<u8>>, sides: SidesSnapshot) -> weir_sdk::Result<()> {
        self.pushback.restore(pushback)?;
        self.sides.restore(sides)
    }

    /// Keeps changes from now on (see [`crate::checkpoint::Changed::keep`]).
    pub fn keep_changes(&mut self) {
        self.pushback.dirty.keep();
        self.sides.dirty.keep();
    }

    /// Forgets the changes kept so far (the state was restored to what was committed).
    pub fn forget_changes(&mut self) {
        self.pushback.dirty.forget();
        self.sides.dirty.forget();
    }
}
