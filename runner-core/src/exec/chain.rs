//! One partition of a fused chain of element-wise nodes: each bundle of the head's input runs
//! through every node of the chain before the next bundle, so it stays in cache; then every
//! node's watermark moves in order. A planned source read ([`DeferredRead`]) is read piece by
//! piece, each piece through the whole chain.

use crate::exec::source::{DeferredRead, TsStats};
use crate::group_also_by_window::DropCounts;
use crate::metrics::MetricsContainerImpl;
use crate::operator::{count_drops, OpContext, Operator};
use crate::system_metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_sdk::batch::BatchKind;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// Elements a fused chain reads from a planned source read at a time: small enough that every
/// member's input and output stay in cache, large enough to amortize each member's per-bundle
/// work.
pub const DEFERRED_PIECE: usize = 32_768;

/// What a member of a chain is given.
enum Feed {
    /// A batch of input.
    Input(Batch),
    /// Its input watermark moves: it fires what that releases.
    Advance,
}

/// One partition of a fused chain: its operators (one per node, head first, handed back with
/// the result) and the head's input bundles. It owns what it works on, so it can run on any
/// worker thread.
pub struct ChainTask {
    /// The partition's operator of every node of the chain, head first.
    pub ops: Vec<Box<dyn Operator>>,
    /// Per node, the operations on its input batches.
    pub in_ops: Arc<[Arc<dyn CollectionOps>]>,
    /// Per node, the operations on each of its outputs' batches.
    pub out_ops: Arc<[Vec<Arc<dyn CollectionOps>>]>,
    /// The head's input: batches, or planned reads.
    pub bundles: Vec<Batch>,
}

/// What one node of a fused chain did in one partition.
pub struct ChainMember {
    /// Its metrics in this partition.
    pub metrics: Arc<MetricsContainerImpl>,
    /// Elements it processed.
    pub input_rows: u64,
    /// Time spent processing input.
    pub update: Duration,
    /// Time spent moving its watermark.
    pub removal: Duration,
    /// Elements it dropped.
    pub dropped: u64,
}

/// What a partition of a fused chain did.
pub struct ChainDone {
    /// Per node of the chain, in order.
    pub members: Vec<ChainMember>,
    /// Metrics of the sources whose planned reads the chain carried out, by source step.
    pub sources: Vec<(String, Arc<MetricsContainerImpl>)>,
    /// Event-time stats of what those reads delivered.
    pub read_stats: TsStats,
    /// The last node's output batches, per output.
    pub outputs: Vec<Vec<Batch>>,
}

/// What a partition of a chain gives back: its operators, what every node did, and the first
/// error.
pub type ChainResult = (Vec<Box<dyn Operator>>, ChainDone, Option<Error>);

impl ChainTask {
    /// Runs the partition's part of the chain.
    pub fn run(self, upstream: Timestamp, now: Timestamp) -> ChainResult {
        let ChainTask { mut ops, in_ops, out_ops, bundles } = self;
        let k = ops.len();
        let mut members: Vec<ChainMember> = (0..k)
            .map(|_| ChainMember {
                metrics: MetricsContainerImpl::new(),
                input_rows: 0,
                update: Duration::ZERO,
                removal: Duration::ZERO,
                dropped: 0,
            })
            .collect();
        let before: Vec<DropCounts> = ops.iter().map(|o| o.dropped()).collect();
        let mut outputs: Vec<Vec<Batch>> = (0..out_ops[k - 1].len()).map(|_| Vec::new()).collect();
        // Feeds node `j` (a batch of input, or its watermark advance) and what comes out of it
        // through the rest of the chain.
        let mut feed = |ops: &mut Vec<Box<dyn Operator>>, mut j: usize, mut step: Feed| -> Result<()> {
            loop {
                let m = &mut members[j];
                // Element-wise operators have no work of their own to give up on a drain.
                let ctx = OpContext { processing_time: now, metrics: &m.metrics, draining: false };
                let t = Instant::now();
                let outs = match step {
                    Feed::Advance => {
                        let outs = ops[j].advance(upstream, &ctx)?;
                        m.removal += t.elapsed();
                        outs
                    }
                    Feed::Input(batch) => {
                        let n = batch.len();
                        if n == 0 {
                            return Ok(());
                        }
                        m.input_rows += n as u64;
                        system_metrics::count_batch(&m.metrics, &*in_ops[j], &batch, false);
                        let outs = ops[j].process(batch, &ctx)?;
                        m.update += t.elapsed();
                        outs
                    }
                };
                for (port, o) in outs.iter().enumerate() {
                    system_metrics::count_batch(&m.metrics, &*out_ops[j][port], o, true);
                }
                if j + 1 == k {
                    for (port, o) in outs.into_iter().enumerate() {
                        outputs[port].push(o);
                    }
                    return Ok(());
                }
                // Not the last node: one output, the next node's input.
                match outs.into_iter().next() {
                    Some(o) => step = Feed::Input(o),
                    None => return Ok(()),
                }
                j += 1;
            }
        };
        let mut sources: Vec<(String, Arc<MetricsContainerImpl>)> = Vec::new();
        let mut read_stats: TsStats = (Timestamp::MAX, Timestamp::MIN, 0, 0);
        let work = || -> Result<()> {
            for b in bundles {
                if b.kind() != BatchKind::Planned {
                    feed(&mut ops, 0, Feed::Input(b))?;
                    continue;
                }
                // A planned read: piece by piece, each through the whole chain while it is in
                // cache.
                if let Ok(d) = b.downcast::<DeferredRead>() {
                    let metrics = MetricsContainerImpl::new();
                    sources.push((d.step().to_string(), metrics.clone()));
                    d.read(DEFERRED_PIECE, &metrics, &mut read_stats, |piece| feed(&mut ops, 0, Feed::Input(piece)))?;
                }
            }
            for j in 0..k {
                feed(&mut ops, j, Feed::Advance)?;
            }
            Ok(())
        };
        let result = work();
        for (j, op) in ops.iter().enumerate() {
            members[j].dropped = count_drops(&**op, before[j], &members[j].metrics);
        }
        (ops, ChainDone { members, sources, read_stats, outputs }, result.err())
    }
}
