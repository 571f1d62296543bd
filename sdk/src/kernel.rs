//! Type-erased kernels: what a runner calls without knowing element types (ARCHITECTURE.md, "Typed at the surface, erased per batch").
//!
//! Every kernel is built by the SDK at `apply` time, while the element types are known, and works
//! on whole batches: a [`Batch`] is always a `Vec<WindowedValue<T>>` behind `Box<dyn Any>`, and a
//! kernel downcasts it once per call, never per element.

use crate::coders::{check_roundtrip, CoderError, CoderRef, Element};
use crate::error::UserError;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::any::Any;
use std::sync::Arc;

pub use crate::batch::recycle;
use crate::batch::BatchRef;
pub use crate::batch::{downcast_batch, rows_mut, Batch, BatchData, BatchKind, Bundle, UniformBatch};

/// What a runner does with the batches of one PCollection that needs its element type or
/// coder: make empty batches, join them, check and estimate encodings, render elements for
/// messages, split by window. Built when the element type was known. (What every batch knows
/// by itself, its length, kind, clones and splits, is [`Batch`]'s.)
pub trait CollectionOps: Send + Sync {
    /// The Rust element type, for messages.
    fn type_name(&self) -> &'static str;
    /// A new empty batch.
    fn empty(&self) -> Batch;
    /// A new empty batch with room for `n` elements (a recycled buffer when one fits).
    fn empty_with_capacity(&self, n: usize) -> Batch {
        let _ = n;
        self.empty()
    }
    /// Concatenates batches.
    fn concat(&self, parts: Vec<Batch>) -> Batch;
    /// Checks that every element round-trips through the PCollection's coder.
    fn check_encodable(&self, b: &Batch) -> Result<(), CoderError>;
    /// Renders up to `limit` elements for messages.
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String>;
    /// Splits a batch by window: each window with its elements and the highest pane index among
    /// them, or -1 when no trigger produced them (their window is complete only once the
    /// watermark passes its end).
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)>;
    /// Splits a batch into the elements whose window `keep` accepts and the others.
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch);
    /// The encoded size of a batch, estimated from a sample of up to 16 elements.
    fn estimated_bytes(&self, b: &Batch) -> usize;
    /// Encodes a whole batch (values with timestamps, windows and panes), for checkpoints.
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError>;
    /// Decodes a batch written by `encode_batch`.
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError>;
}

/// [`CollectionOps`] for elements of type `T` with a given coder.
pub struct TypedCollectionOps<T> {
    coder: CoderRef<T>,
}

impl<T: Element> TypedCollectionOps<T> {
    /// Operations for `T` coded with `coder`.
    pub fn new(coder: CoderRef<T>) -> Self {
        TypedCollectionOps { coder }
    }
}

fn batch_ref<T: 'static>(b: &Batch) -> BatchRef<'_, T> {
    let r = match b.kind() {
        BatchKind::Rows => b.downcast_ref::<Vec<WindowedValue<T>>>().map(|r| BatchRef::Rows(r)),
        BatchKind::Uniform => b.downcast_ref::<UniformBatch<T>>().map(BatchRef::Uniform),
        _ => None,
    };
    r.unwrap_or_else(|| {
        panic!("internal error: a batch of {:?} is not of type {}", b.kind(), std::any::type_name::<T>())
    })
}

fn unbox<T: Clone + Send + 'static>(b: Batch) -> Bundle<T> {
    Bundle::from_batch(b).unwrap_or_else(|e| panic!("{e}"))
}

impl<T: Element> CollectionOps for TypedCollectionOps<T> {
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn empty(&self) -> Batch {
        Batch::new(Vec::<WindowedValue<T>>::new())
    }
    fn empty_with_capacity(&self, n: usize) -> Batch {
        Batch::new(recycle::take::<WindowedValue<T>>(n))
    }
    fn concat(&self, parts: Vec<Batch>) -> Batch {
        let parts: Vec<Bundle<T>> = parts.into_iter().map(unbox).filter(|p| !p.is_empty()).collect();
        // Uniform parts with one metadata stay uniform.
        if let Some(Bundle::Uniform(first)) = parts.first() {
            if parts.iter().all(|p| matches!(p, Bundle::Uniform(u) if u.same_metadata(first))) {
                let mut uniforms = parts.into_iter().map(|p| match p {
                    Bundle::Uniform(u) => u,
                    Bundle::Rows(_) => unreachable!("all parts are uniform"),
                });
                let mut out = uniforms.next().expect("a first part");
                uniforms.for_each(|u| out.values.extend(u.values));
                return Batch::new(out);
            }
        }
        let mut out: Vec<WindowedValue<T>> = Vec::new();
        for p in parts {
            if out.is_empty() {
                out = p.into_rows();
            } else {
                p.append_rows_to(&mut out);
            }
        }
        Batch::new(out)
    }
    fn check_encodable(&self, b: &Batch) -> Result<(), CoderError> {
        batch_ref::<T>(b).values().try_for_each(|v| check_roundtrip(&*self.coder, v))
    }
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String> {
        batch_ref::<T>(b).values().take(limit).map(|v| format!("{v:?}")).collect()
    }
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)> {
        // Elements no trigger produced (e.g. straight from a source) carry no pane: -1.
        let pane_of = |p: &PaneInfo| if p.timing == crate::pane::Timing::Unknown { -1 } else { p.index };
        let v = match unbox::<T>(b) {
            Bundle::Uniform(u) if u.values.is_empty() => return Vec::new(),
            Bundle::Uniform(u) => return vec![(u.window, pane_of(&u.pane), Batch::new(u))],
            Bundle::Rows(r) => r,
        };
        // One window (fixed windows, a side input's singleton): the batch as it is, not copied.
        if let Some(first) = v.first().map(|wv| wv.window) {
            if v.iter().all(|wv| wv.window == first) {
                let pane = v.iter().map(|wv| pane_of(&wv.pane)).max().unwrap_or(-1);
                return vec![(first, pane, Batch::new(v))];
            }
        }
        // Sessions give a side input thousands of windows per batch: found by hash, not scan.
        // A first pass numbers the groups and counts them, so each is allocated once, exactly.
        let mut groups: Vec<(Window, i64, usize)> = Vec::new();
        let mut index: hashbrown::HashMap<Window, usize> = hashbrown::HashMap::new();
        let of: Vec<u32> = v
            .iter()
            .map(|wv| {
                let g = *index.entry(wv.window).or_insert_with(|| {
                    groups.push((wv.window, -1, 0));
                    groups.len() - 1
                });
                groups[g].1 = groups[g].1.max(pane_of(&wv.pane));
                groups[g].2 += 1;
                g as u32
            })
            .collect();
        let mut parts: Vec<Vec<WindowedValue<T>>> = groups.iter().map(|g| Vec::with_capacity(g.2)).collect();
        for (wv, g) in v.into_iter().zip(of) {
            parts[g as usize].push(wv);
        }
        groups.into_iter().zip(parts).map(|((w, p, _), v)| (w, p, Batch::new(v))).collect()
    }
    fn estimated_bytes(&self, b: &Batch) -> usize {
        let b = batch_ref::<T>(b);
        let sample = b.len().min(16);
        if sample == 0 {
            return 0;
        }
        // An unencodable element counts as nothing here; encodability is checked elsewhere.
        let bytes: usize = b.values().take(sample).map(|v| self.coder.encoded_len(v).unwrap_or(0)).sum();
        bytes * b.len() / sample
    }
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError> {
        let b = batch_ref::<T>(b);
        let mut out = Vec::new();
        crate::coders::write_varint(b.len() as u64, &mut out);
        b.try_for_each(|value, timestamp, window, pane| {
            self.coder.encode(value, &mut out)?;
            let meta = postcard::to_stdvec(&(timestamp, window, pane))
                .map_err(|e| CoderError::new(format!("cannot encode element metadata: {e}")))?;
            out.extend_from_slice(&meta);
            Ok(())
        })?;
        Ok(out)
    }
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError> {
        let mut rest = bytes;
        let n = crate::coders::read_varint(&mut rest)? as usize;
        let mut out: Vec<WindowedValue<T>> = Vec::with_capacity(n.min(rest.len()));
        for _ in 0..n {
            let value = self.coder.decode(&mut rest)?;
            let ((timestamp, window, pane), r): ((Timestamp, Window, PaneInfo), &[u8]) =
                postcard::take_from_bytes(rest)
                    .map_err(|e| CoderError::new(format!("cannot decode element metadata: {e}")))?;
            rest = r;
            out.push(WindowedValue { value, timestamp, window, pane });
        }
        Ok(Batch::new(out))
    }
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch) {
        match unbox::<T>(b) {
            Bundle::Uniform(u) => {
                if keep(&u.window) {
                    (Batch::new(u), self.empty())
                } else {
                    (self.empty(), Batch::new(u))
                }
            }
            Bundle::Rows(v) => {
                // One verdict per element, then either side whole (the usual case: a batch
                // all ready or all waiting is not copied) or both sized exactly.
                let verdicts: Vec<bool> = v.iter().map(|wv| keep(&wv.window)).collect();
                let kept = verdicts.iter().filter(|&&k| k).count();
                if kept == v.len() {
                    return (Batch::new(v), self.empty());
                }
                if kept == 0 {
                    return (self.empty(), Batch::new(v));
                }
                let (mut yes, mut no) = (Vec::with_capacity(kept), Vec::with_capacity(v.len() - kept));
                for (wv, k) in v.into_iter().zip(verdicts) {
                    if k {
                        yes.push(wv);
                    } else {
                        no.push(wv);
                    }
                }
                (Batch::new(yes), Batch::new(no))
            }
        }
    }
}

/// Gives a stateful DoFn the state of each element's key and window (implemented by
/// runner-core).
pub trait KeyedStateEnv {
    /// The state of `key` in `window` (created empty if absent) and the time context.
    fn state(&mut self, key: &[u8], window: &Window) -> (&mut crate::state::KeyedState, crate::state::StateTime);
}

/// Reads materialized side inputs for a DoFn (implemented by runner-core).
pub trait SideInputReader {
    /// The value of view `view_id` for a main-input element in `main_window`: the view built
    /// from the side input's elements in the mapped side window.
    fn get(&self, view_id: &str, main_window: &Window) -> Result<Arc<dyn Any + Send + Sync>, UserError>;
}

/// A [`SideInputReader`] for DoFns without side inputs.
pub struct NoSideInputs;

impl SideInputReader for NoSideInputs {
    fn get(&self, view_id: &str, _: &Window) -> Result<Arc<dyn Any + Send + Sync>, UserError> {
        Err(format!("side input '{view_id}' was not declared with ParDo::with_side_inputs").into())
    }
}

/// Builds a view's value from the elements of one side window (typed by the SDK).
pub trait ViewKernel: Send + Sync {
    /// The view of `elements` (all the side input's elements in one window; possibly none).
    fn build(&self, elements: Vec<Batch>) -> Result<Arc<dyn Any + Send + Sync>, UserError>;
}

/// A side input of a ParDo.
#[derive(Clone)]
pub struct SideInputSpec {
    /// The view's id.
    pub view_id: String,
    /// The side input PCollection.
    pub pcollection: usize,
    /// Builds the view value.
    pub kernel: Arc<dyn ViewKernel>,
    /// Maps main-input windows to side-input windows.
    pub window_fn: Arc<dyn crate::window_fn::WindowFn>,
    /// How long after a side window's end its watermark must pass before the window is ready
    /// with no pane fired, ms: 0 for a view (a window is ready at its end), the signal's
    /// allowed lateness for `Wait.on` (a signal window is done only once late data can no
    /// longer arrive).
    pub ready_after_ms: i64,
}

/// A DoFn instance as a runner drives it. Built by [`crate::transforms::par_do`] for a typed
/// [`crate::DoFn`]. `outputs` holds one batch per declared output tag, main output first.
pub trait ErasedDoFn: Send {
    /// `DoFn::setup`.
    fn setup(&mut self) -> Result<(), UserError>;
    /// `DoFn::start_bundle`.
    fn start_bundle(&mut self) -> Result<(), UserError>;
    /// Processes every element of `input`, appending to `outputs`; side inputs are read through
    /// `sides`.
    fn process_batch(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
    ) -> Result<(), UserError>;
    /// Processes every element of a keyed `input` with the state of its key and window from
    /// `env` (stateful ParDos).
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
        env: &mut dyn KeyedStateEnv,
    ) -> Result<(), UserError>;
    /// Calls `DoFn::on_timer` (`firing` given) or `DoFn::on_window_expiration` (`None`) for the
    /// key and window with their state.
    fn on_timer(
        &mut self,
        key: &[u8],
        window: Window,
        firing: Option<&crate::state::TimerFiring>,
        outputs: &mut [Batch],
        state: &mut crate::state::KeyedState,
        time: crate::state::StateTime,
    ) -> Result<(), UserError>;
    /// `DoFn::finish_bundle`, appending to `outputs`.
    fn finish_bundle(&mut self, outputs: &mut [Batch]) -> Result<(), UserError>;
    /// `DoFn::teardown`.
    fn teardown(&mut self) -> Result<(), UserError>;
    /// Whether the runner may fire many timers in one call ([`ErasedDoFn::on_timers`]): a DoFn
    /// whose callbacks run elsewhere, a bundle at a time (a portable harness's).
    fn fires_timers_together(&self) -> bool {
        false
    }
    /// Fires `firings` (at most one per key and window, each already taken from its state)
    /// with the state of their keys and windows from `env`; only called when
    /// [`ErasedDoFn::fires_timers_together`] says so.
    fn on_timers(
        &mut self,
        firings: Vec<(Vec<u8>, Window, crate::state::TimerFiring)>,
        _outputs: &mut [Batch],
        _env: &mut dyn KeyedStateEnv,
    ) -> Result<(), UserError> {
        Err(format!("{} timers fired together, which this DoFn cannot take", firings.len()).into())
    }
    /// The runner has durably committed everything this instance output so far: work that
    /// waited for that runs (a portable harness's bundle finalization). Only for a ParDo
    /// declared to finalize after commit; errors are the instance's to report.
    fn on_committed(&mut self) {}
    /// For runners that commit an epoch after running it (timely): what the instance output so
    /// far belongs to `epoch`.
    fn seal(&mut self, _epoch: u64) {}
    /// Every epoch before `epoch` is durably committed: work sealed with those epochs runs.
    fn on_committed_through(&mut self, _epoch: u64) {}
}

/// Makes fresh [`ErasedDoFn`] instances (one per worker, or a new one after a failure).
pub type DoFnFactory = Arc<dyn Fn() -> Box<dyn ErasedDoFn> + Send + Sync>;

/// One row of an [`EncodedKvBatch`]: byte ranges of the key and value in `data`, plus metadata.
#[derive(Clone, Debug)]
pub struct EncodedRow {
    /// Start and end of the encoded key in the batch's data.
    pub key: (usize, usize),
    /// Start and end of the encoded value in the batch's data.
    pub value: (usize, usize),
    /// Element timestamp.
    pub timestamp: Timestamp,
    /// Element window.
    pub window: Window,
    /// Element pane.
    pub pane: PaneInfo,
}

/// KV elements with keys and values encoded into one buffer (no allocation per element).
#[derive(Default, Debug, Clone)]
pub struct EncodedKvBatch {
    /// Encoded keys and values, back to back.
    pub data: Vec<u8>,
    /// One row per element.
    pub rows: Vec<EncodedRow>,
    /// Whether the rows are [lifted rows](lifted_value), partial accumulators: the batch's
    /// length is then the number of inputs they combine, so element counts stay the input's.
    pub lifted: bool,
}

impl EncodedKvBatch {
    /// Encodes a batch of `KV<K, V>` (keys with `key`, values with `value`) and appends it.
    pub fn append<K, V>(
        &mut self,
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        value: &impl crate::coders::Coder<V>,
    ) -> Result<(), CoderError>
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        self.append_with::<K, V>(input, key, |v, data| value.encode(v, data))
    }

    /// [`EncodedKvBatch::append`] with values written by `value` (which may keep scratch space).
    pub fn append_with<K: Clone + Send + 'static, V: Clone + Send + 'static>(
        &mut self,
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        value: impl FnMut(&V, &mut Vec<u8>) -> Result<(), CoderError>,
    ) -> Result<(), CoderError> {
        Self::append_split(std::slice::from_mut(self), input, key, value)
    }

    /// [`EncodedKvBatch::append_with`] into `parts`, each row into the part of its encoded
    /// key (as [`partition_of`] assigns keys among `parts.len()`): an exchange by key that
    /// encodes its input splits it on the way, without copying the rows again
    /// ([`EncodedKvBatch::partition`] does that for rows already encoded).
    pub fn append_split<K: Clone + Send + 'static, V: Clone + Send + 'static>(
        parts: &mut [EncodedKvBatch],
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        mut value: impl FnMut(&V, &mut Vec<u8>) -> Result<(), CoderError>,
    ) -> Result<(), CoderError> {
        let input = Bundle::<crate::kv::KV<K, V>>::from_batch(input)?;
        let (n, n_parts) = (input.len(), parts.len());
        if n_parts == 0 {
            return Err(CoderError::new("internal error: rows split into no parts"));
        }
        let starts: Vec<usize> = parts.iter().map(|p| p.data.len()).collect();
        for p in parts.iter_mut() {
            p.rows.reserve(if n_parts == 1 { n } else { n / n_parts + n / (4 * n_parts) + 16 });
        }
        // One key is encoded aside to find its part when there are several.
        let mut scratch: Vec<u8> = Vec::new();
        let mut i = 0;
        input.try_for_each(|wv| {
            if i == 64 && n > 128 {
                // Room for the rest at the first rows' size: the buffers do not grow (and
                // copy themselves) a dozen times over a large batch.
                let written: usize = parts.iter().zip(&starts).map(|(p, s)| p.data.len() - s).sum();
                let rest = written / 64 * (n - 64) * 9 / 8;
                for p in parts.iter_mut() {
                    p.data.reserve(if n_parts == 1 { rest } else { rest / n_parts + rest / (4 * n_parts) });
                }
            }
            i += 1;
            let part = if n_parts == 1 {
                let part = &mut parts[0];
                let k0 = part.data.len();
                key.encode(&wv.value.key, &mut part.data)?;
                (part, k0)
            } else {
                scratch.clear();
                key.encode(&wv.value.key, &mut scratch)?;
                let part = &mut parts[partition_of(&scratch, n_parts)];
                let k0 = part.data.len();
                part.data.extend_from_slice(&scratch);
                (part, k0)
            };
            let (part, k0) = part;
            let k1 = part.data.len();
            value(&wv.value.value, &mut part.data)?;
            let v1 = part.data.len();
            part.rows.push(EncodedRow {
                key: (k0, k1),
                value: (k1, v1),
                timestamp: wv.timestamp,
                window: wv.window,
                pane: wv.pane,
            });
            Ok(())
        })
    }

    /// Appends one row: `key`'s bytes, and a value `value` writes after them.
    pub fn push_row<E>(
        &mut self,
        key: &[u8],
        timestamp: Timestamp,
        window: Window,
        value: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let k0 = self.data.len();
        self.data.extend_from_slice(key);
        let k1 = self.data.len();
        value(&mut self.data)?;
        let v1 = self.data.len();
        self.rows.push(EncodedRow {
            key: (k0, k1),
            value: (k1, v1),
            timestamp,
            window,
            pane: crate::pane::PaneInfo::NO_FIRING,
        });
        Ok(())
    }

    /// An empty batch with room for `rows` rows of `bytes` bytes in all, in recycled buffers
    /// when there are some that size.
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        EncodedKvBatch { data: recycle::take(bytes), rows: recycle::take(rows), lifted: false }
    }

    /// Gives the batch's buffers back for reuse.
    pub fn recycle(self) {
        recycle::give(self.data);
        recycle::give(self.rows);
    }

    /// Appends the rows of `other` (moving its buffers when this batch is empty); the buffers
    /// left over go back for reuse.
    pub fn extend(&mut self, mut other: EncodedKvBatch) {
        if self.rows.is_empty() {
            std::mem::replace(self, other).recycle();
            return;
        }
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.rows.extend(other.rows.drain(..).map(|mut r| {
            r.key = (r.key.0 + base, r.key.1 + base);
            r.value = (r.value.0 + base, r.value.1 + base);
            r
        }));
        other.recycle();
    }

    /// Splits the rows into `n` batches by the partition of their encoded key (as
    /// [`partition_of`] assigns keys), keeping their order.
    pub fn partition(self, n: usize) -> Vec<EncodedKvBatch> {
        if n <= 1 {
            return vec![self];
        }
        // Where each row goes, then parts sized exactly: growing them row by row would copy
        // and page-fault every part's buffers several times over.
        let targets: Vec<u32> =
            self.rows.iter().map(|r| partition_of(&self.data[r.key.0..r.key.1], n) as u32).collect();
        let mut sizes = vec![(0usize, 0usize); n];
        for (r, &t) in self.rows.iter().zip(&targets) {
            let s = &mut sizes[t as usize];
            s.0 += 1;
            s.1 += (r.key.1 - r.key.0) + (r.value.1 - r.value.0);
        }
        let mut parts: Vec<EncodedKvBatch> = sizes
            .iter()
            .map(|&(rows, bytes)| EncodedKvBatch { lifted: self.lifted, ..EncodedKvBatch::with_capacity(rows, bytes) })
            .collect();
        for (r, &t) in self.rows.iter().zip(&targets) {
            parts[t as usize].push_copy(&self.data, r);
        }
        self.recycle();
        parts
    }

    /// The encoded key of row `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let (a, b) = self.rows[i].key;
        &self.data[a..b]
    }
    /// The encoded value of row `i`.
    pub fn value(&self, i: usize) -> &[u8] {
        let (a, b) = self.rows[i].value;
        &self.data[a..b]
    }
}

/// [`CollectionOps`] for batches of [`EncodedKvBatch`]: the input of a grouping operator whose
/// inputs were encoded on the way in (a natively translated CoGroupByKey, a lifted combine).
#[derive(Default)]
pub struct EncodedKvOps;

impl BatchData for EncodedKvBatch {
    fn kind(&self) -> BatchKind {
        BatchKind::EncodedRows
    }
    fn len(&self) -> usize {
        if !self.lifted {
            return self.rows.len();
        }
        (0..self.rows.len()).map(|i| lifted_value(self.value(i)).map_or(1, |(n, _)| n as usize)).sum()
    }
    fn clone_batch(&self) -> Batch {
        Batch::new(self.clone())
    }
    fn split_batch(self: Box<Self>, max_len: usize) -> Vec<Batch> {
        if self.rows.len() <= max_len {
            return vec![Batch::new(*self)];
        }
        (0..self.rows.len())
            .step_by(max_len)
            .map(|start| Batch::new(self.copy_rows(self.rows[start..(start + max_len).min(self.rows.len())].iter())))
            .collect()
    }
    fn shuffle(&mut self, seed: u64) {
        self.rows.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
    }
    fn timestamp_stats(&self) -> crate::batch::TimestampStats {
        self.rows.iter().fold(crate::batch::NO_TIMESTAMPS, |(lo, hi, sum, n), r| {
            (lo.min(r.timestamp), hi.max(r.timestamp), sum + i128::from(r.timestamp), n + 1)
        })
    }
}

fn encoded(b: &Batch) -> &EncodedKvBatch {
    b.downcast_ref::<EncodedKvBatch>().unwrap_or_else(|| panic!("internal error: batch is not an EncodedKvBatch"))
}

fn take_encoded(b: Batch) -> EncodedKvBatch {
    *b.downcast::<EncodedKvBatch>().unwrap_or_else(|_| panic!("internal error: batch is not an EncodedKvBatch"))
}

impl EncodedKvBatch {
    /// A new batch of the rows `keep` selects (by index and row), in order.
    fn select(&self, mut keep: impl FnMut(usize, &EncodedRow) -> bool) -> EncodedKvBatch {
        self.copy_rows(self.rows.iter().enumerate().filter(|(i, r)| keep(*i, r)).map(|(_, r)| r))
    }

    /// A new batch holding copies of `rows` (rows of this batch).
    fn copy_rows<'a>(&self, rows: impl Iterator<Item = &'a EncodedRow>) -> EncodedKvBatch {
        let mut out = EncodedKvBatch { lifted: self.lifted, ..EncodedKvBatch::default() };
        for r in rows {
            out.push_copy(&self.data, r);
        }
        out
    }

    /// Appends a copy of row `r` of another batch whose buffer is `data`.
    fn push_copy(&mut self, data: &[u8], r: &EncodedRow) {
        let k0 = self.data.len();
        self.data.extend_from_slice(&data[r.key.0..r.key.1]);
        let k1 = self.data.len();
        self.data.extend_from_slice(&data[r.value.0..r.value.1]);
        self.rows.push(EncodedRow { key: (k0, k1), value: (k1, self.data.len()), ..r.clone() });
    }
}

impl CollectionOps for EncodedKvOps {
    fn type_name(&self) -> &'static str {
        "encoded key-value rows"
    }
    fn empty(&self) -> Batch {
        Batch::new(EncodedKvBatch::default())
    }
    fn concat(&self, parts: Vec<Batch>) -> Batch {
        let mut out = EncodedKvBatch::default();
        for p in parts {
            out.extend(take_encoded(p));
        }
        Batch::new(out)
    }
    fn check_encodable(&self, _: &Batch) -> Result<(), CoderError> {
        Ok(())
    }
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String> {
        let e = encoded(b);
        (0..e.rows.len().min(limit)).map(|i| format!("key {:?} value {:?}", e.key(i), e.value(i))).collect()
    }
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)> {
        let e = take_encoded(b);
        let mut groups: Vec<(Window, i64, EncodedKvBatch)> = Vec::new();
        let mut index: std::collections::HashMap<Window, usize> = std::collections::HashMap::new();
        for r in &e.rows {
            let pane = if r.pane.timing == crate::pane::Timing::Unknown { -1 } else { r.pane.index };
            let g = *index.entry(r.window).or_insert_with(|| {
                groups.push((r.window, pane, EncodedKvBatch::default()));
                groups.len() - 1
            });
            groups[g].1 = groups[g].1.max(pane);
            groups[g].2.push_copy(&e.data, r);
        }
        groups.into_iter().map(|(w, p, b)| (w, p, Batch::new(b))).collect()
    }
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch) {
        let e = take_encoded(b);
        let flags: Vec<bool> = e.rows.iter().map(|r| keep(&r.window)).collect();
        (Batch::new(e.select(|i, _| flags[i])), Batch::new(e.select(|i, _| !flags[i])))
    }
    fn estimated_bytes(&self, b: &Batch) -> usize {
        encoded(b).data.len()
    }
    /// The rows, for a batch that crosses processes: whether they are lifted, their count, then
    /// per row its key and value (each length-prefixed) and its timestamp, window and pane.
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError> {
        let e = encoded(b);
        let mut out = Vec::with_capacity(e.data.len() + 24 * e.rows.len() + 16);
        out.push(u8::from(e.lifted));
        crate::coders::write_varint(e.rows.len() as u64, &mut out);
        for r in &e.rows {
            for (a, z) in [r.key, r.value] {
                crate::coders::write_varint((z - a) as u64, &mut out);
                out.extend_from_slice(&e.data[a..z]);
            }
            let meta = postcard::to_stdvec(&(r.timestamp, r.window, r.pane))
                .map_err(|e| CoderError::new(format!("cannot encode element metadata: {e}")))?;
            out.extend_from_slice(&meta);
        }
        Ok(out)
    }
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError> {
        let (&lifted, mut rest) =
            bytes.split_first().ok_or_else(|| CoderError::new("an empty buffer is not encoded key-value rows"))?;
        if lifted > 1 {
            return Err(CoderError::new(format!("bad lifted flag {lifted} in encoded key-value rows")));
        }
        let n = crate::coders::read_varint(&mut rest)? as usize;
        let mut out = EncodedKvBatch { lifted: lifted == 1, ..Default::default() };
        out.rows.reserve(n.min(rest.len()));
        for _ in 0..n {
            let mut span = || -> Result<(usize, usize), CoderError> {
                let len = crate::coders::read_varint(&mut rest)? as usize;
                if len > rest.len() {
                    return Err(CoderError::new("encoded key-value rows end inside a row"));
                }
                let start = out.data.len();
                out.data.extend_from_slice(&rest[..len]);
                rest = &rest[len..];
                Ok((start, start + len))
            };
            let (key, value) = (span()?, span()?);
            let ((timestamp, window, pane), r): ((Timestamp, Window, PaneInfo), &[u8]) =
                postcard::take_from_bytes(rest)
                    .map_err(|e| CoderError::new(format!("cannot decode element metadata: {e}")))?;
            rest = r;
            out.rows.push(EncodedRow { key, value, timestamp, window, pane });
        }
        Ok(Batch::new(out))
    }
}

/// A finished group: one key, its values encoded back to back, and the output metadata.
#[derive(Debug)]
pub struct EncodedGroup {
    /// The encoded key.
    pub key: Vec<u8>,
    /// The encoded values, back to back.
    pub values: Vec<u8>,
    /// How many values `values` holds.
    pub count: usize,
    /// Output timestamp.
    pub timestamp: Timestamp,
    /// Output window.
    pub window: Window,
    /// Output pane.
    pub pane: PaneInfo,
}

/// Splits keyed batches by key into partitions (the exchange before a keyed operator). The
/// partition of a key depends only on its encoded bytes, so it is stable across runs.
pub trait KeyPartitioner: Send + Sync {
    /// Splits `input` into `n` batches by the hash of each element's encoded key.
    fn partition(&self, input: Batch, n: usize) -> Result<Vec<Batch>, CoderError>;
}

/// The name and version of [`partition_of`]'s key-to-partition mapping. Checkpoints record it:
/// state written under one mapping cannot be read back under another.
pub const PARTITIONING: &str = "fnv1a64+fmix64 into 4096 key groups, range-assigned, v3";

/// The number of key groups keys fall into (Flink's maximum parallelism): a partition holds a
/// contiguous range of them, so state written by some number of partitions can be spread over
/// another number, key group by key group.
pub const KEY_GROUPS: usize = 4096;

/// The key group of an encoded key: FNV-1a over the bytes, then MurmurHash3's 64-bit finalizer,
/// stable across processes and versions ([`PARTITIONING`]). FNV-1a alone leaves the low bits of
/// the hash a function of the low bits of each byte only, so one-byte keys that differ in high
/// bits (small integers) would all share a group; the finalizer mixes every input bit into every
/// output bit.
pub fn key_group(key: &[u8]) -> usize {
    (fmix64(fnv1a(FNV1A_BASIS, key)) % KEY_GROUPS as u64) as usize
}

/// FNV-1a's offset basis: the hash of no bytes.
pub const FNV1A_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// Hash `h` (FNV-1a, 64 bits) continued over `bytes`: stable across processes, platforms and
/// versions, as what checkpoints and brokers keep needs (a key group, a restriction's
/// fingerprint, a sink's transactional id).
pub fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The partition of an encoded key among `n`: its key group's, groups assigned to partitions in
/// contiguous ranges (group `g` to partition `g * n / KEY_GROUPS`, as Flink assigns them).
pub fn partition_of(key: &[u8], n: usize) -> usize {
    key_group(key) * n.max(1) / KEY_GROUPS
}

/// MurmurHash3's 64-bit finalizer: every input bit flips each output bit with probability
/// about one half.
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// [`KeyPartitioner`] for `KV<K, V>` batches.
pub struct KvPartitioner<K, V>(std::marker::PhantomData<fn() -> (K, V)>);

impl<K, V> Default for KvPartitioner<K, V> {
    fn default() -> Self {
        KvPartitioner(std::marker::PhantomData)
    }
}

impl<K: Element, V: Element> KeyPartitioner for KvPartitioner<K, V> {
    fn partition(&self, input: Batch, n: usize) -> Result<Vec<Batch>, CoderError> {
        use crate::coders::Coder;
        if n <= 1 {
            // One partition: every key goes there, no key needs encoding.
            return Ok(vec![input]);
        }
        let input = downcast_batch::<crate::kv::KV<K, V>>(input)?;
        let mut parts: Vec<Vec<WindowedValue<crate::kv::KV<K, V>>>> = (0..n).map(|_| Vec::new()).collect();
        let coder = crate::coders::ElementCoder::<K>::new();
        let mut key = Vec::new();
        for wv in input {
            key.clear();
            coder.encode(&wv.value.key, &mut key)?;
            parts[partition_of(&key, n)].push(wv);
        }
        Ok(parts.into_iter().map(Batch::new).collect())
    }
}

/// The typed edges of a GroupByKey: encode `KV<K, V>` batches into key and value bytes, and build
/// `KV<K, Vec<V>>` batches from finished groups. Grouping itself is runner-core's.
pub trait GroupKernel: Send + Sync {
    /// Encodes a batch of `KV<K, V>` and appends it to `out`.
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError>;
    /// Decodes finished groups into a batch of `KV<K, Vec<V>>`.
    fn decode_groups(&self, groups: Vec<EncodedGroup>) -> Result<Batch, CoderError>;
}

/// Reads one bounded source split. Built for a typed [`crate::io::BoundedSource`].
pub trait ErasedBoundedSource: Send + Sync {
    /// Splits into sources of about `desired_bundle_size_bytes` each.
    fn split(&self, desired_bundle_size_bytes: u64) -> Result<Vec<Arc<dyn ErasedBoundedSource>>, UserError>;
    /// Estimated size in bytes.
    fn estimated_size_bytes(&self) -> Result<u64, UserError>;
    /// Opens a reader.
    fn reader(&self) -> Result<Box<dyn ErasedBoundedReader>, UserError>;
    /// What the source reads ([`crate::io::BoundedSource::describe`]).
    fn describe(&self) -> String;
}

/// Reads a bounded source batch by batch.
pub trait ErasedBoundedReader: Send {
    /// Reads up to `max` elements; `None` once exhausted.
    fn read_batch(&mut self, max: usize) -> Result<Option<Batch>, UserError>;
    /// The exact number of elements left to read, when the reader knows it without reading
    /// ([`crate::io::BoundedReader::remaining`]).
    fn remaining(&self) -> Option<u64> {
        None
    }
    /// Skips the next `n` elements ([`crate::io::BoundedReader::skip`]); how many there were.
    fn skip(&mut self, n: u64) -> Result<u64, UserError>;
}

/// Assigns windows to a batch (the typed side of WindowInto).
pub trait AssignKernel: Send + Sync {
    /// Re-windows every element of `input`.
    fn assign(&self, input: Batch) -> Result<Batch, UserError>;
}

/// The typed edges of a combining GroupByKey (Combine.perKey translated natively): encode
/// `KV<K, In>` batches, fold encoded inputs into encoded accumulators, merge accumulators, and
/// build `KV<K, Out>` batches from finished accumulators. The engine keeps one accumulator per
/// key and window and never buffers raw values.
pub trait CombineKernel: Send + Sync {
    /// Encodes a batch of `KV<K, In>` and appends it to `out`.
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError>;
    /// Adds encoded inputs to an encoded accumulator (`None`: a new accumulator).
    fn add_inputs(&self, acc: Option<&[u8]>, inputs: &mut dyn Iterator<Item = &[u8]>) -> Result<Vec<u8>, UserError>;
    /// Merges encoded accumulators into one.
    fn merge_accumulators(&self, accs: &[&[u8]]) -> Result<Vec<u8>, UserError>;
    /// Builds `KV<K, Out>` from groups whose `values` hold one encoded accumulator each.
    fn extract(&self, groups: Vec<EncodedGroup>) -> Result<Batch, UserError>;
    /// Combiner lifting's first half (Beam's partial combine before the shuffle): combines
    /// batches of `KV<K, In>` per encoded key and window into accumulators, and appends one
    /// [lifted row](lifted_value) per key and window to `out`, stamped with the earliest
    /// input's timestamp.
    fn partial(&self, inputs: Vec<Batch>, out: &mut EncodedKvBatch) -> Result<(), UserError>;
    /// An empty [`CombineTable`] of this combine: Combine.perKey as a hash aggregation, for
    /// runners that aggregate windows that never merge and fire once.
    fn table(&self) -> Box<dyn CombineTable>;
}

/// Takes the groups of a [`CombineTable`] one by one: encoded key, window, number of inputs and
/// encoded accumulator.
pub type TableEntries<'a> = dyn FnMut(&[u8], Window, u64, Vec<u8>) + 'a;

/// A combine's accumulators per key and window, typed: Combine.perKey as a hash aggregation on
/// (window, key), as Flink's and Spark's window aggregations run, for windows that never merge
/// and fire once, when the watermark passes their end. Keys are held encoded (as the exchange
/// encodes them, so an exchanged row is looked up without decoding), accumulators typed: an
/// input is added, or a partial accumulator merged, without encoding or decoding any state.
/// Windows are kept in the order of their ends, so the windows a watermark releases are the
/// first ones. A runner holds no trigger, pane or hold state per window: every pane is the
/// window's one pane, at its end.
pub trait CombineTable: Send {
    /// Adds a batch of `KV<K, In>`, or of encoded rows (inputs, or [lifted](lifted_value)
    /// partial accumulators). Rows whose window `expired` says has expired are not added;
    /// returns how many inputs they held.
    fn add(&mut self, input: Batch, expired: &mut dyn FnMut(&Window) -> bool) -> Result<u64, UserError>;
    /// The window held whose maximum timestamp is the earliest.
    fn first_window(&self) -> Option<Window>;
    /// Takes every group of the first window ([`CombineTable::first_window`]) and appends them
    /// to `out` as `KV<K, Out>` at the window's maximum timestamp with `pane`, in bundles of at
    /// most `limit` (the last bundle of `out`, when it has room, is filled first). Returns the
    /// number of groups taken.
    fn fire_first(&mut self, pane: PaneInfo, limit: usize, out: &mut Vec<Batch>) -> Result<usize, UserError>;
    /// An empty batch of `KV<K, Out>`.
    fn empty(&self) -> Batch;
    /// Number of groups (key and window) held.
    fn len(&self) -> usize;
    /// Whether no group is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Approximate bytes held.
    fn bytes(&self) -> usize;
    /// Number of groups added to since the previous call, each counted once.
    fn take_updated(&mut self) -> u64;
    /// Every group, for checkpoints: its encoded key, window, the number of inputs it combines
    /// and its encoded accumulator.
    fn entries(&self, out: &mut TableEntries<'_>) -> Result<(), CoderError>;
    /// Restores a group written by [`CombineTable::entries`].
    fn restore(&mut self, key: &[u8], window: Window, count: u64, acc: &[u8]) -> Result<(), CoderError>;
}

/// The value of a lifted row: the number of inputs it combines (8 bytes, little-endian), then
/// the encoded accumulator. Returns `(count, accumulator)`.
pub fn lifted_value(value: &[u8]) -> Result<(u64, &[u8]), CoderError> {
    match value.split_first_chunk::<8>() {
        Some((count, acc)) => Ok((u64::from_le_bytes(*count), acc)),
        None => Err(CoderError::new(format!("a lifted combine row of {} bytes has no input count", value.len()))),
    }
}

/// The runner-visible payload of `Combine.perKey`, for runners that translate it natively.
#[derive(Clone)]
pub struct CombinePerKeyPayload {
    /// The combining kernel.
    pub kernel: Arc<dyn CombineKernel>,
    /// Splits the keyed input by key.
    pub partitioner: Arc<dyn KeyPartitioner>,
}

/// Reads one split of an unbounded source. Built for a typed [`crate::io::UnboundedSource`].
pub trait ErasedUnboundedSource: Send + Sync {
    /// Splits into about `desired` sources.
    fn split(&self, desired: usize) -> Result<Vec<Arc<dyn ErasedUnboundedSource>>, UserError>;
    /// Opens a reader, resuming from an encoded checkpoint mark when given.
    fn reader(&self, checkpoint: Option<&[u8]>) -> Result<Box<dyn ErasedUnboundedReader>, UserError>;
    /// What the source reads ([`crate::io::UnboundedSource::describe`]).
    fn describe(&self) -> String;
}

/// Reads an unbounded source batch by batch.
pub trait ErasedUnboundedReader: Send {
    /// Reads up to `max` elements available now (possibly none).
    fn read_batch(&mut self, max: usize) -> Result<Batch, UserError>;
    /// The source's watermark: no element before it will be read any more. `MAX_TIMESTAMP`
    /// once the source is exhausted.
    fn watermark(&self) -> Timestamp;
    /// The encoded checkpoint mark: where a new reader resumes.
    fn checkpoint(&self) -> Result<Vec<u8>, UserError>;
}

/// One event of a [`crate::testing::TestStream`], with its elements type-erased.
#[derive(Clone)]
pub enum TestStreamEvent {
    /// Elements to emit as one bundle; the function builds the batch.
    Elements(Arc<dyn Fn() -> Batch + Send + Sync>),
    /// Advance the source watermark.
    Watermark(Timestamp),
    /// Advance the test clock by this many milliseconds.
    ProcessingTime(i64),
}

impl std::fmt::Debug for TestStreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestStreamEvent::Elements(_) => f.write_str("Elements"),
            TestStreamEvent::Watermark(t) => write!(f, "Watermark({t})"),
            TestStreamEvent::ProcessingTime(d) => write!(f, "ProcessingTime(+{d})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coders::{Coder, ElementCoder};
    use crate::kv::KV;
    use crate::window::IntervalWindow;

    /// Rows (key, value, window start) of an encoded batch, decoded.
    fn rows(b: &EncodedKvBatch) -> Vec<(i64, String, Timestamp)> {
        (0..b.rows.len())
            .map(|i| {
                let k = ElementCoder::<i64>::new().decode_outer(b.key(i)).unwrap();
                let v = ElementCoder::<String>::new().decode_outer(b.value(i)).unwrap();
                (k, v, b.rows[i].window.max_timestamp())
            })
            .collect()
    }

    /// Issue 16: FNV-1a without a finalizer put the one-byte encodings of 0..63 in a single
    /// partition of two. Key groups (issue 34) keep the spread.
    #[test]
    fn small_integer_keys_spread_over_partitions() {
        let coder = ElementCoder::<i64>::new();
        for n in [2usize, 3, 4, 8] {
            let mut counts = vec![0usize; n];
            for k in 0..64i64 {
                let mut key = Vec::new();
                coder.encode(&k, &mut key).unwrap();
                counts[partition_of(&key, n)] += 1;
            }
            // A sample this small varies by chance; the degenerate hash put them all in one.
            let expected = 64 / n;
            assert!(counts.iter().all(|&c| c >= expected / 4), "keys 0..64 over {n} partitions: {counts:?}");
        }
        for n in [2usize, 4, 7, 16] {
            let mut counts = vec![0usize; n];
            for k in 0..100_000u32 {
                counts[partition_of(&k.to_be_bytes(), n)] += 1;
            }
            let expected = 100_000 / n;
            assert!(
                counts.iter().all(|&c| c.abs_diff(expected) < expected / 20),
                "100 000 keys over {n} partitions: {counts:?}"
            );
        }
    }

    #[test]
    fn encoded_rows_split_concat_partition_and_select_by_window() {
        let input: Vec<WindowedValue<KV<i64, String>>> = (0..10i64)
            .map(|i| {
                let mut wv = WindowedValue::timestamped(KV::new(i % 4, format!("v{i}")), i);
                wv.window = Window::Interval(IntervalWindow::new(i / 5 * 5, i / 5 * 5 + 5));
                wv
            })
            .collect();
        let mut batch = EncodedKvBatch::default();
        batch.append::<i64, String>(Batch::new(input), &ElementCoder::new(), &ElementCoder::new()).unwrap();
        let all = rows(&batch);
        let ops = EncodedKvOps;
        let parts = Batch::new(batch.clone()).split(3);
        assert_eq!(parts.iter().map(Batch::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
        let joined = ops.concat(parts);
        assert_eq!(rows(joined.downcast_ref::<EncodedKvBatch>().unwrap()), all);
        // By key partition: every row once, each where its key belongs, in order.
        let by_key = batch.clone().partition(3);
        assert_eq!(by_key.iter().map(|p| p.rows.len()).sum::<usize>(), 10);
        for (q, p) in by_key.iter().enumerate() {
            assert!((0..p.rows.len()).all(|i| partition_of(p.key(i), 3) == q));
        }
        // Split while encoding: the same parts, rows and order as encoding then partitioning.
        let many: Vec<WindowedValue<KV<i64, String>>> =
            (0..500i64).map(|i| WindowedValue::timestamped(KV::new(i % 37, format!("v{i}")), i)).collect();
        let mut whole = EncodedKvBatch::default();
        whole.append::<i64, String>(Batch::new(many.clone()), &ElementCoder::new(), &ElementCoder::new()).unwrap();
        let mut split: Vec<EncodedKvBatch> = (0..3).map(|_| EncodedKvBatch::default()).collect();
        for half in Batch::new(many).split(250) {
            EncodedKvBatch::append_split::<i64, String>(&mut split, half, &ElementCoder::new(), |v, d| {
                ElementCoder::<String>::new().encode(v, d)
            })
            .unwrap();
        }
        let expected: Vec<_> = whole.partition(3).iter().map(rows).collect();
        assert_eq!(split.iter().map(rows).collect::<Vec<_>>(), expected);
        assert!(expected.iter().all(|p| !p.is_empty()));
        let (early, late) = ops.partition_by_window(Batch::new(batch), &mut |w| w.max_timestamp() < 5);
        assert_eq!(rows(early.downcast_ref::<EncodedKvBatch>().unwrap()), all[..5]);
        assert_eq!(rows(late.downcast_ref::<EncodedKvBatch>().unwrap()), all[5..]);
    }

    #[test]
    fn encoded_rows_cross_processes_as_bytes() {
        let input: Vec<WindowedValue<KV<i64, String>>> = (0..7i64)
            .map(|i| {
                let mut wv = WindowedValue::timestamped(KV::new(i % 3, format!("value {i}")), 10 * i);
                wv.window = Window::Interval(IntervalWindow::new(i, i + 5));
                wv
            })
            .collect();
        let mut batch = EncodedKvBatch::default();
        batch.append::<i64, String>(Batch::new(input), &ElementCoder::new(), &ElementCoder::new()).unwrap();
        for lifted in [false, true] {
            batch.lifted = lifted;
            let ops = EncodedKvOps;
            let bytes = ops.encode_batch(&Batch::new(batch.clone())).unwrap();
            let back = ops.decode_batch(&bytes).unwrap();
            let back = back.downcast_ref::<EncodedKvBatch>().unwrap();
            assert_eq!(rows(back), rows(&batch));
            assert_eq!(back.lifted, lifted);
            // Every truncation is an error, never a panic.
            for n in 0..bytes.len() {
                assert!(ops.decode_batch(&bytes[..n]).is_err(), "{n} of {} bytes decoded", bytes.len());
            }
        }
    }

    fn uniform(values: Vec<i64>, timestamp: Timestamp, window: Window) -> UniformBatch<i64> {
        UniformBatch { values, timestamp, window, pane: PaneInfo::NO_FIRING }
    }

    fn rows_of(b: &Batch) -> Vec<WindowedValue<i64>> {
        downcast_batch::<i64>(b.clone()).unwrap()
    }

    #[test]
    fn uniform_batches_are_collections_like_rows() {
        let ops = TypedCollectionOps::<i64>::new(Arc::new(ElementCoder::new()));
        let w = Window::Interval(IntervalWindow::new(0, 10));
        let b: Batch = Batch::new(uniform(vec![1, 2, 3], 7, w));
        let expanded: Vec<WindowedValue<i64>> = [1, 2, 3]
            .into_iter()
            .map(|value| WindowedValue { value, timestamp: 7, window: w, pane: PaneInfo::NO_FIRING })
            .collect();
        assert_eq!(rows_of(&b), expanded);
        assert_eq!(b.len(), 3);
        assert_eq!(b.min_timestamp(), Some(7));
        assert_eq!(b.timestamp_stats(), (7, 7, 21, 3));
        assert_eq!(ops.describe(&b, 2), vec!["1", "2"]);
        assert!(ops.estimated_bytes(&b) > 0);
        // Encoded like the rows they stand for.
        let bytes = ops.encode_batch(&b).unwrap();
        assert_eq!(bytes, ops.encode_batch(&Batch::new(expanded.clone())).unwrap());
        assert_eq!(rows_of(&ops.decode_batch(&bytes).unwrap()), expanded);
        // Rows split into pieces in order, every piece but the last full.
        let ten: Batch = Batch::new((0..10i64).map(|i| WindowedValue::timestamped(i, i)).collect::<Vec<_>>());
        let pieces = ten.split(3);
        assert_eq!(pieces.iter().map(Batch::len).collect::<Vec<_>>(), vec![3, 3, 3, 1]);
        let values: Vec<i64> = pieces.iter().flat_map(rows_of).map(|wv| wv.value).collect();
        assert_eq!(values, (0..10).collect::<Vec<_>>());
        // Split stays uniform; concat of parts with one metadata too, else rows.
        let parts = b.clone().split(2);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.is::<UniformBatch<i64>>()));
        let joined = ops.concat(parts);
        assert_eq!(joined.downcast_ref::<UniformBatch<i64>>().map(|u| u.values.clone()), Some(vec![1, 2, 3]));
        let other: Batch = Batch::new(uniform(vec![4], 8, w));
        let mixed = ops.concat(vec![b.clone(), other, Batch::new(vec![WindowedValue::timestamped(5i64, 9)])]);
        let mut got: Vec<(i64, Timestamp)> = rows_of(&mixed).iter().map(|wv| (wv.value, wv.timestamp)).collect();
        got.sort();
        assert_eq!(got, vec![(1, 7), (2, 7), (3, 7), (4, 8), (5, 9)]);
        // One window: one group, kept uniform; partitioned whole.
        let groups = ops.group_by_window(b.clone());
        assert_eq!(groups.len(), 1);
        assert_eq!((groups[0].0, groups[0].1, groups[0].2.len()), (w, -1, 3));
        let (yes, no) = ops.partition_by_window(b.clone(), &mut |x| *x == w);
        assert_eq!((yes.len(), no.len()), (3, 0));
        let (yes, no) = ops.partition_by_window(b.clone(), &mut |x| *x != w);
        assert_eq!((yes.len(), no.len()), (0, 3));
        // An output buffer holding a uniform batch turns into rows in place.
        let mut out = b.clone();
        rows_mut::<i64>(&mut out).unwrap().push(WindowedValue::timestamped(9, 1));
        assert_eq!(rows_of(&out).len(), 4);
        assert!(rows_mut::<String>(&mut out).is_none());
        // Keys and values encode from either form alike.
        let kvs: Batch = Batch::new(UniformBatch {
            values: vec![KV::new(1i64, "a".to_string())],
            timestamp: 3,
            window: w,
            pane: PaneInfo::NO_FIRING,
        });
        let mut enc = EncodedKvBatch::default();
        enc.append::<i64, String>(kvs, &ElementCoder::new(), &ElementCoder::new()).unwrap();
        assert_eq!(rows(&enc), vec![(1, "a".to_string(), 9)]);
        assert_eq!(enc.rows[0].timestamp, 3);
    }
}
