//! Batches: what flows between the nodes of a plan.
//!
//! A [`Batch`] holds the elements of one PCollection (or of an exchange's encoded form of
//! them), type-erased, and describes itself: its [`BatchKind`], its length, and how to clone,
//! split and shuffle it, so a runner moves, counts and cuts batches without knowing their
//! element type. Kernels built for the element type take the batch back in its typed form
//! ([`Batch::downcast`], [`Bundle::from_batch`]), once per batch, never per element.
//!
//! The kinds: rows (`Vec<WindowedValue<T>>`, one timestamp, window and pane per element),
//! uniform values ([`UniformBatch<T>`], one timestamp, window and pane for all), encoded
//! key-value rows ([`crate::kernel::EncodedKvBatch`], what a co-group or a lifted combine
//! exchanges), and planned reads (a source's slice read only when a fused chain runs over it).

pub mod recycle;

use crate::coders::CoderError;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::any::Any;

/// What a batch holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    /// One windowed value per element.
    Rows,
    /// Values sharing one timestamp, window and pane.
    Uniform,
    /// Encoded keys and values with their metadata.
    EncodedRows,
    /// A planned read: elements a source will deliver when the batch is consumed.
    Planned,
}

/// Minimum, maximum and sum of element timestamps, and their count.
pub type TimestampStats = (Timestamp, Timestamp, i128, usize);

/// No timestamps yet.
pub const NO_TIMESTAMPS: TimestampStats = (Timestamp::MAX, Timestamp::MIN, 0, 0);

/// A batch's data as `Any`, to take back its typed form; implemented for every sized type.
pub trait AsAny: Any + Send {
    /// The data as `Any`.
    fn as_any(&self) -> &dyn Any;
    /// See [`AsAny::as_any`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// See [`AsAny::as_any`].
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: Any + Send> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// The data behind a [`Batch`]: every form of batch implements it.
pub trait BatchData: AsAny {
    /// What the batch holds.
    fn kind(&self) -> BatchKind;
    /// The number of elements.
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A copy (for a collection with several consumers).
    fn clone_batch(&self) -> Batch;
    /// Batches of at most `max_len` elements, in order, together holding these elements.
    fn split_batch(self: Box<Self>, max_len: usize) -> Vec<Batch>;
    /// Shuffles the elements with `seed`.
    fn shuffle(&mut self, seed: u64);
    /// Minimum, maximum and sum of the element timestamps, and their count.
    fn timestamp_stats(&self) -> TimestampStats;
}

/// A batch of elements of one PCollection, type-erased and self-describing.
pub struct Batch(Box<dyn BatchData>);

impl Batch {
    /// The batch of `data`.
    pub fn new(data: impl BatchData) -> Self {
        Batch(Box::new(data))
    }
    /// What the batch holds.
    pub fn kind(&self) -> BatchKind {
        self.0.kind()
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Batches of at most `max_len` elements (at least one), in order.
    pub fn split(self, max_len: usize) -> Vec<Batch> {
        self.0.split_batch(max_len.max(1))
    }
    /// Shuffles the elements with `seed`.
    pub fn shuffle(&mut self, seed: u64) {
        self.0.shuffle(seed)
    }
    /// Minimum, maximum and sum of the element timestamps, and their count.
    pub fn timestamp_stats(&self) -> TimestampStats {
        self.0.timestamp_stats()
    }
    /// The earliest element timestamp.
    pub fn min_timestamp(&self) -> Option<Timestamp> {
        let (lo, _, _, n) = self.timestamp_stats();
        (n > 0).then_some(lo)
    }
    /// Whether the data is a `T`.
    pub fn is<T: 'static>(&self) -> bool {
        (*self.0).as_any().is::<T>()
    }
    /// The data as a `T`, if it is one.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        (*self.0).as_any().downcast_ref()
    }
    /// See [`Batch::downcast_ref`].
    pub fn downcast_mut<T: 'static>(&mut self) -> Option<&mut T> {
        (*self.0).as_any_mut().downcast_mut()
    }
    /// The data as a `T`, or the batch back when it is not one.
    pub fn downcast<T: 'static>(self) -> Result<Box<T>, Batch> {
        if !self.is::<T>() {
            return Err(self);
        }
        match self.0.into_any().downcast::<T>() {
            Ok(t) => Ok(t),
            // Checked just above.
            Err(_) => unreachable!("the batch was checked to hold a T"),
        }
    }
}

impl Clone for Batch {
    fn clone(&self) -> Self {
        self.0.clone_batch()
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({:?}, {} elements)", self.kind(), self.len())
    }
}

impl<T: Clone + Send + 'static> From<Vec<WindowedValue<T>>> for Batch {
    fn from(rows: Vec<WindowedValue<T>>) -> Self {
        Batch::new(rows)
    }
}

impl<T: Clone + Send + 'static> From<UniformBatch<T>> for Batch {
    fn from(u: UniformBatch<T>) -> Self {
        Batch::new(u)
    }
}

/// Pieces of at most `max_len` cut from the end, so that every element is moved once; the
/// first piece keeps the original buffer.
fn chunks<E>(mut v: Vec<E>, max_len: usize, mut make: impl FnMut(Vec<E>) -> Batch) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::with_capacity(v.len().div_ceil(max_len).max(1));
    while v.len() > max_len {
        let at = (v.len() - 1) / max_len * max_len;
        out.push(make(v.split_off(at)));
    }
    out.push(make(v));
    out.reverse();
    out
}

impl<T: Clone + Send + 'static> BatchData for Vec<WindowedValue<T>> {
    fn kind(&self) -> BatchKind {
        BatchKind::Rows
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn clone_batch(&self) -> Batch {
        Batch::new(self.clone())
    }
    fn split_batch(self: Box<Self>, max_len: usize) -> Vec<Batch> {
        chunks(*self, max_len, Batch::new)
    }
    fn shuffle(&mut self, seed: u64) {
        SliceRandom::shuffle(&mut self[..], &mut rand::rngs::SmallRng::seed_from_u64(seed));
    }
    fn timestamp_stats(&self) -> TimestampStats {
        self.iter().fold(NO_TIMESTAMPS, |(lo, hi, sum, n), wv| {
            (lo.min(wv.timestamp), hi.max(wv.timestamp), sum + i128::from(wv.timestamp), n + 1)
        })
    }
}

impl<T: Clone + Send + 'static> BatchData for UniformBatch<T> {
    fn kind(&self) -> BatchKind {
        BatchKind::Uniform
    }
    fn len(&self) -> usize {
        self.values.len()
    }
    fn clone_batch(&self) -> Batch {
        Batch::new(self.clone())
    }
    fn split_batch(mut self: Box<Self>, max_len: usize) -> Vec<Batch> {
        let values = std::mem::take(&mut self.values);
        let like = *self;
        chunks(values, max_len, |c| Batch::new(UniformBatch::like(&like, c)))
    }
    fn shuffle(&mut self, seed: u64) {
        self.values.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
    }
    fn timestamp_stats(&self) -> TimestampStats {
        match self.values.len() {
            0 => NO_TIMESTAMPS,
            n => (self.timestamp, self.timestamp, i128::from(self.timestamp) * n as i128, n),
        }
    }
}

/// Elements that share one timestamp, window and pane, stored as their values alone.
///
/// A source whose elements all have one timestamp (`Create`, `GenerateSequence` without
/// timestamps) reads into this, and a stateless DoFn given one outputs one with
/// `ProcessContext::output`: a chain of element-wise transforms then moves values, not
/// windowed values four or five times their size, and runs tight loops over them. Every kernel
/// and [`crate::kernel::CollectionOps`] accepts both forms of a batch; [`downcast_batch`] turns either into rows.
#[derive(Clone, Debug, PartialEq)]
pub struct UniformBatch<T> {
    /// The elements' values.
    pub values: Vec<T>,
    /// Their event timestamp.
    pub timestamp: Timestamp,
    /// Their window.
    pub window: Window,
    /// The pane that produced them.
    pub pane: PaneInfo,
}

impl<T> UniformBatch<T> {
    /// `values` at `timestamp` in the global window, not from any firing (what a source reads).
    pub fn global(values: Vec<T>, timestamp: Timestamp) -> Self {
        UniformBatch { values, timestamp, window: Window::Global, pane: PaneInfo::NO_FIRING }
    }
    /// An empty batch with `values`' room and the metadata of `like`.
    pub fn like<U>(like: &UniformBatch<U>, values: Vec<T>) -> Self {
        UniformBatch { values, timestamp: like.timestamp, window: like.window, pane: like.pane }
    }
    /// Whether `other` has the same timestamp, window and pane.
    pub fn same_metadata<U>(&self, other: &UniformBatch<U>) -> bool {
        self.timestamp == other.timestamp && self.window == other.window && self.pane == other.pane
    }
}

/// A batch taken out of its box: rows, or a [`UniformBatch`].
pub enum Bundle<T> {
    /// One windowed value per element.
    Rows(Vec<WindowedValue<T>>),
    /// Values sharing their metadata.
    Uniform(UniformBatch<T>),
}

impl<T: Clone + Send + 'static> Bundle<T> {
    /// Unboxes a batch of element type `T`, by its kind.
    ///
    /// Kernels are built for one element type, so a mismatch is a bug in a runner (it passed a
    /// batch to the wrong kernel); the error names the type.
    pub fn from_batch(b: Batch) -> Result<Self, CoderError> {
        let mismatch = |kind: BatchKind| {
            CoderError::new(format!(
                "internal error: a batch of {kind:?} is not of element type {}",
                std::any::type_name::<T>()
            ))
        };
        match b.kind() {
            BatchKind::Rows => b.downcast::<Vec<WindowedValue<T>>>().map(|r| Bundle::Rows(*r)),
            BatchKind::Uniform => b.downcast::<UniformBatch<T>>().map(|u| Bundle::Uniform(*u)),
            _ => Err(b),
        }
        .map_err(|b| mismatch(b.kind()))
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Bundle::Rows(r) => r.len(),
            Bundle::Uniform(u) => u.values.len(),
        }
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// One windowed value per element (a uniform batch's values buffer goes back for reuse).
    pub fn into_rows(self) -> Vec<WindowedValue<T>> {
        match self {
            Bundle::Rows(r) => r,
            uniform => {
                let mut rows: Vec<WindowedValue<T>> = recycle::take(uniform.len());
                uniform.append_rows_to(&mut rows);
                rows
            }
        }
    }
    /// Appends one windowed value per element to `rows` (emptied buffers go back for reuse).
    pub(crate) fn append_rows_to(self, rows: &mut Vec<WindowedValue<T>>) {
        match self {
            Bundle::Rows(mut r) => {
                rows.append(&mut r);
                recycle::give(r);
            }
            Bundle::Uniform(mut u) => {
                let (timestamp, window, pane) = (u.timestamp, u.window, u.pane);
                rows.extend(u.values.drain(..).map(|value| WindowedValue { value, timestamp, window, pane }));
                recycle::give(u.values);
            }
        }
    }
    /// Calls `f` with every element, in order, and gives the emptied buffer back for reuse.
    pub fn try_for_each<E>(self, mut f: impl FnMut(WindowedValue<T>) -> Result<(), E>) -> Result<(), E> {
        match self {
            Bundle::Rows(mut r) => {
                for wv in r.drain(..) {
                    f(wv)?;
                }
                recycle::give(r);
            }
            Bundle::Uniform(mut u) => {
                let (timestamp, window, pane) = (u.timestamp, u.window, u.pane);
                for value in u.values.drain(..) {
                    f(WindowedValue { value, timestamp, window, pane })?;
                }
                recycle::give(u.values);
            }
        }
        Ok(())
    }
}

/// Downcasts a batch to rows (a [`UniformBatch`] is expanded).
///
/// Kernels are built for one element type, so a mismatch is a bug in a runner (it passed a
/// batch to the wrong kernel); the error names both types.
pub fn downcast_batch<T: Clone + Send + 'static>(b: Batch) -> Result<Vec<WindowedValue<T>>, CoderError> {
    Bundle::from_batch(b).map(Bundle::into_rows)
}

/// The rows of an output buffer, turning a [`UniformBatch`] into rows in place first; `None`
/// when the buffer holds neither form of element type `T`.
pub fn rows_mut<T: Clone + Send + 'static>(b: &mut Batch) -> Option<&mut Vec<WindowedValue<T>>> {
    if b.kind() == BatchKind::Uniform {
        let u = std::mem::replace(b, Batch::new(Vec::<WindowedValue<T>>::new()));
        *b = Batch::new(Bundle::<T>::from_batch(u).ok()?.into_rows());
    }
    b.downcast_mut::<Vec<WindowedValue<T>>>()
}

/// A borrowed batch of either form.
pub(crate) enum BatchRef<'a, T> {
    Rows(&'a [WindowedValue<T>]),
    Uniform(&'a UniformBatch<T>),
}

impl<'a, T> BatchRef<'a, T> {
    pub(crate) fn len(&self) -> usize {
        match self {
            BatchRef::Rows(r) => r.len(),
            BatchRef::Uniform(u) => u.values.len(),
        }
    }
    /// The values, in order (one of the two slices is empty: no dynamic dispatch per value).
    pub(crate) fn values(&self) -> impl Iterator<Item = &'a T> + 'a {
        let (rows, values): (&'a [WindowedValue<T>], &'a [T]) = match *self {
            BatchRef::Rows(r) => (r, &[]),
            BatchRef::Uniform(u) => (&[], &u.values),
        };
        rows.iter().map(|wv| &wv.value).chain(values)
    }
    /// Calls `f` with every element's value, timestamp, window and pane, in order.
    pub(crate) fn try_for_each<E>(
        &self,
        mut f: impl FnMut(&T, Timestamp, &Window, &PaneInfo) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            BatchRef::Rows(r) => r.iter().try_for_each(|wv| f(&wv.value, wv.timestamp, &wv.window, &wv.pane)),
            BatchRef::Uniform(u) => u.values.iter().try_for_each(|v| f(v, u.timestamp, &u.window, &u.pane)),
        }
    }
}
