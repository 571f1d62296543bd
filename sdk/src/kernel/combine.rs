//! Combine kernels and combine tables: a combine's accumulators kept per key and window, lifted
//! before an exchange and merged after it.

use super::*;
use crate::batch::Batch;
use crate::coders::CoderError;
use crate::error::UserError;
use crate::pane::PaneInfo;
use crate::window::Window;
use std::sync::Arc;

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

/// Takes the groups of one window of a [`CombineTable`]: encoded key, number of inputs and
/// encoded accumulator.
pub type WindowEntries<'a> = dyn FnMut(&[u8], u64, Vec<u8>) + 'a;

/// Takes the groups a [`CombineTable`] no longer holds: encoded key and window.
pub type TableKeys<'a> = dyn FnMut(&[u8], Window) + 'a;

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
    /// What changed since the previous call, for checkpoints that write only that: every
    /// group added to (as [`CombineTable::entries`] gives it) and every group fired. The first
    /// call starts keeping changes and returns `false` (the caller takes every entry then).
    fn take_changed(&mut self, written: &mut TableEntries<'_>, removed: &mut TableKeys<'_>)
        -> Result<bool, CoderError>;
    /// Every group, for checkpoints: its encoded key, window, the number of inputs it combines
    /// and its encoded accumulator.
    fn entries(&self, out: &mut TableEntries<'_>) -> Result<(), CoderError>;
    /// Restores a group written by [`CombineTable::entries`] (merged into the group when the
    /// table holds it already).
    fn restore(&mut self, key: &[u8], window: Window, count: u64, acc: &[u8]) -> Result<(), CoderError>;
    /// Calls `missing` with the encoded key and window of each row of `input` (as
    /// [`CombineTable::add`] takes it) whose group the table does not hold, for a runner that
    /// keeps groups elsewhere too (on disk) and brings them back before adding; a key may come
    /// more than once.
    fn missing(&self, input: &Batch, missing: &mut TableKeys<'_>) -> Result<(), CoderError>;
    /// Calls `f` with each window held and the approximate bytes of its groups, in the order of
    /// the windows' maximum timestamps.
    fn window_sizes(&self, f: &mut dyn FnMut(Window, usize));
    /// Takes every group of `window` out of the table, in key order (shorter encoded keys
    /// first, then by their bytes), each as its encoded key, its number of inputs and its
    /// encoded accumulator; for a runner that moves groups elsewhere (to disk). The groups are
    /// not fired: no change is recorded for them. Returns how many there were.
    fn take_window(&mut self, window: &Window, out: &mut WindowEntries<'_>) -> Result<usize, CoderError>;
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
