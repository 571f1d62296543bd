//! One partition of a node's work in a unit of work (a batch, an epoch): side inputs first,
//! then every pending bundle at once (grouping operators group them together), then the input
//! watermark moves and the operator fires what it releases. Element counts, dropped elements,
//! state changes and timings are measured for the runner's reports.

use crate::group_also_by_window::StateChanges;
use crate::metrics::MetricsContainerImpl;
use crate::operator::{count_drops, OpContext, Operator};
use crate::system_metrics;
use std::sync::Arc;
use std::time::Instant;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// One partition's work in a node's unit of work. It owns what it works on (the operator
/// included, handed back with the result), so it can run on any worker thread.
pub struct PartitionTask {
    /// The partition's operator.
    pub op: Box<dyn Operator>,
    /// The operations on the pending input batches.
    pub in_ops: Option<Arc<dyn CollectionOps>>,
    /// The pending main-input bundles.
    pub bundles: Vec<Batch>,
    /// The pending side-input bundles, by side input.
    pub sides: Vec<(usize, Batch)>,
    /// The side inputs' watermarks.
    pub side_wms: Arc<[Timestamp]>,
    /// Whether the job is being drained ([`OpContext::draining`]).
    pub draining: bool,
    /// Process each bundle on its own rather than all together.
    pub one_at_a_time: bool,
}

/// What one partition of a node did.
pub struct PartitionDone {
    /// Per output, the batches produced.
    pub outputs: Vec<Vec<Batch>>,
    /// The partition's metrics.
    pub metrics: Arc<MetricsContainerImpl>,
    /// Time spent processing input, ms.
    pub update_ms: u64,
    /// Time spent moving the watermark, ms.
    pub removal_ms: u64,
    /// Elements dropped as late or for closed windows.
    pub dropped: u64,
    /// State rows updated and removed.
    pub changes: StateChanges,
}

/// What a partition's run gives back: its operator, and what it did or the error (with the
/// metrics gathered until then).
pub type PartitionResult = (Box<dyn Operator>, std::result::Result<PartitionDone, (Error, Arc<MetricsContainerImpl>)>);

impl PartitionTask {
    /// Runs the partition at input watermark `upstream` and processing time `now`, for a node
    /// with `n_outputs` outputs.
    pub fn run(self, upstream: Timestamp, now: Timestamp, n_outputs: usize) -> PartitionResult {
        let PartitionTask { op: mut boxed, in_ops, bundles, sides, side_wms, draining, one_at_a_time } = self;
        let metrics = MetricsContainerImpl::new();
        let ctx = OpContext { processing_time: now, metrics: &metrics, draining };
        let op: &mut dyn Operator = &mut *boxed;
        let before = op.dropped();
        let mut outputs: Vec<Vec<Batch>> = (0..n_outputs).map(|_| Vec::new()).collect();
        let work = || -> Result<(u64, u64)> {
            for (k, b) in sides {
                op.process_side(k, b)?;
            }
            for (k, wm) in side_wms.iter().enumerate() {
                op.advance_side(k, *wm);
            }
            let t = Instant::now();
            if let Some(ops) = &in_ops {
                for b in &bundles {
                    system_metrics::count_batch(&metrics, &**ops, b, false);
                }
            }
            // All of the batch's bundles at once (grouping operators group them together), or
            // each on its own.
            let calls: Vec<Vec<Batch>> = match one_at_a_time {
                true => bundles.into_iter().map(|b| vec![b]).collect(),
                false if bundles.is_empty() => Vec::new(),
                false => vec![bundles],
            };
            for call in calls {
                for (port, outs) in op.process_bundles(call, &ctx)?.into_iter().enumerate() {
                    if let Some(o) = outputs.get_mut(port) {
                        o.extend(outs);
                    }
                }
            }
            let update_ms = t.elapsed().as_millis() as u64;
            let t = Instant::now();
            for (port, outs) in op.advance_bundles(upstream, &ctx)?.into_iter().enumerate() {
                if let Some(o) = outputs.get_mut(port) {
                    o.extend(outs);
                }
            }
            Ok((update_ms, t.elapsed().as_millis() as u64))
        };
        let result = work();
        let changes = op.take_state_changes();
        let dropped = count_drops(op, before, &metrics);
        let done = match result {
            Ok((update_ms, removal_ms)) => {
                Ok(PartitionDone { outputs, metrics, update_ms, removal_ms, dropped, changes })
            }
            Err(e) => Err((e, metrics)),
        };
        (boxed, done)
    }
}

/// Most groups in one bundle of what a stateful node fires.
pub const FIRED_BUNDLE: usize = crate::group_also_by_window::FIRED_BUNDLE;

/// `bundles` with every one of more than twice [`FIRED_BUNDLE`] elements split into bundles of
/// that many.
pub fn in_fired_bundles(bundles: Vec<Batch>) -> Vec<Batch> {
    let mut out = Vec::with_capacity(bundles.len());
    for b in bundles {
        if b.len() > 2 * FIRED_BUNDLE {
            out.extend(b.split(FIRED_BUNDLE));
        } else {
            out.push(b);
        }
    }
    out
}
