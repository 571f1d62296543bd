//! Bounded splits and their readers: a read deferred into the batch that carries it (read where
//! the batch goes), or read now.

use super::*;
use crate::do_fn_runner::guarded;
use std::sync::{Arc, Mutex};
use weir_sdk::batch::BatchKind;
use weir_sdk::kernel::{Batch, CollectionOps, ErasedBoundedReader, ErasedBoundedSource};
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

/// The largest bundle a source hands to the plan.
pub(super) const BUNDLE: usize = 65_536;

pub(super) struct BoundedSplit {
    pub(super) source: Arc<dyn ErasedBoundedSource>,
    pub(super) reader: Option<SharedReader>,
    pub(super) read: u64,
    pub(super) done: bool,
}

/// A split's reader and how many elements it has delivered, shared with the [`DeferredRead`]s
/// that read from it during a batch.
pub(super) type SharedReader = Arc<Mutex<ReaderSlot>>;

pub(super) struct ReaderSlot {
    pub(super) reader: Box<dyn ErasedBoundedReader>,
    pub(super) delivered: u64,
    /// Whether a read of up to some count ([`DeferredRead`] of a reader that cannot say how
    /// much it has left) found the end.
    pub(super) ended: bool,
}

pub(super) fn shared(reader: Box<dyn ErasedBoundedReader>) -> SharedReader {
    Arc::new(Mutex::new(ReaderSlot { reader, delivered: 0, ended: false }))
}

pub(super) fn lock(r: &SharedReader) -> std::sync::MutexGuard<'_, ReaderSlot> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// A planned read: `count` elements of a bounded split whose reader knows how many it has left
/// ([`ErasedBoundedReader::remaining`]). The batch logs the count before anything is read, and
/// the fused chain the source feeds reads the elements in pieces small enough to stay in cache
/// while the whole chain runs over them (Spark's lazy `getBatch`). A runner that logs no
/// offsets may also plan reads of readers that cannot say how much they have left (a file of
/// lines): those read up to `count` elements, and the split is done once one finds the end
/// ([`SourceState::plan_reads_without_counts`]).
pub struct DeferredRead {
    pub(super) step: String,
    pub(super) reader: SharedReader,
    /// Whether the reader said it has at least `count` elements left.
    pub(super) exact: bool,
    pub(super) count: usize,
    pub(super) ops: Arc<dyn CollectionOps>,
}

impl DeferredRead {
    /// The number of elements planned.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing is planned.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The source step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Reads the planned elements in pieces of at most `piece`, handing each to `f` with the
    /// piece's timestamp stats added to `stats`; user code in the reader runs with `metrics`
    /// bound, and the source's output counts go there too.
    pub fn read(
        self,
        piece: usize,
        metrics: &Arc<crate::metrics::MetricsContainerImpl>,
        stats: &mut TsStats,
        mut f: impl FnMut(Batch) -> Result<()>,
    ) -> Result<()> {
        let mut left = self.count;
        while left > 0 {
            let (b, n) = {
                let _scope = weir_sdk::metrics::scoped_container(metrics.clone());
                let mut slot = lock(&self.reader);
                let b = guarded(&self.step, "read", || slot.reader.read_batch(left.min(piece)))?;
                let n = b.as_ref().map_or(0, |b| b.len());
                slot.delivered += n as u64;
                slot.ended |= n == 0 && !self.exact;
                (b.filter(|_| n > 0), n)
            };
            let Some(b) = b else {
                if !self.exact {
                    return Ok(());
                }
                return Err(weir_sdk::Error::execution(
                    &self.step,
                    format!("read failed: the reader ended {left} elements short of the count it reported remaining"),
                ));
            };
            left = left.saturating_sub(n);
            crate::system_metrics::count_batch(metrics, &*self.ops, &b, true);
            add_stats(stats, b.timestamp_stats());
            f(b)?;
        }
        Ok(())
    }
}

impl weir_sdk::batch::BatchData for DeferredRead {
    fn kind(&self) -> BatchKind {
        BatchKind::Planned
    }
    fn len(&self) -> usize {
        self.count
    }
    fn clone_batch(&self) -> Batch {
        // A planned read is consumed once, by the chain it feeds; a source whose output is
        // used twice does not plan its reads (see the runner's choice of deferred sources).
        Batch::new(DeferredRead {
            step: self.step.clone(),
            reader: self.reader.clone(),
            exact: self.exact,
            count: self.count,
            ops: self.ops.clone(),
        })
    }
    fn split_batch(self: Box<Self>, _: usize) -> Vec<Batch> {
        // Read piece by piece by the chain anyway.
        vec![Batch::new(*self)]
    }
    fn shuffle(&mut self, _: u64) {}
    fn timestamp_stats(&self) -> weir_sdk::batch::TimestampStats {
        // Not known until read: the chain adds the stats of what it reads.
        weir_sdk::batch::NO_TIMESTAMPS
    }
}

/// What [`read_now`] read from one split.
pub(super) struct EagerRead {
    pub(super) bundles: Vec<Batch>,
    pub(super) count: usize,
    pub(super) stats: Option<TsStats>,
    /// Whether the split ended.
    pub(super) ended: bool,
}

/// Reads up to `n` elements of a split now, in bundles of at most [`BUNDLE`] elements (which
/// keep allocations cache- and allocator-friendly however large the batch is).
pub(super) fn read_now(name: &str, slot: &mut ReaderSlot, n: usize) -> Result<EagerRead> {
    let mut got = EagerRead { bundles: Vec::new(), count: 0, stats: None, ended: false };
    while got.count < n {
        let want = (n - got.count).min(BUNDLE);
        match guarded(name, "read", || slot.reader.read_batch(want))? {
            Some(b) => {
                let len = b.len();
                add_stats(got.stats.get_or_insert((Timestamp::MAX, Timestamp::MIN, 0, 0)), b.timestamp_stats());
                slot.delivered += len as u64;
                got.count += len;
                got.bundles.push(b);
                if len < want {
                    break;
                }
            }
            None => {
                got.ended = true;
                break;
            }
        }
    }
    Ok(got)
}
