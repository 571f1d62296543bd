//! latestOffset: how far every source goes in this batch, read (or, for a planned read,
//! planned) into bundles per partition, with the positions before and after for the offset log.

use super::Engine;
use crate::checkpoint::OffsetEntry;
use weir_runner_core::exec::source::{add_stats, SourceBatch, TsStats};
use weir_runner_core::metrics::MetricsContainerImpl;
use weir_runner_core::system_metrics;
use weir_sdk::batch::BatchKind;
use weir_sdk::time::Timestamp;
use weir_sdk::Result;

/// What the sources gave one batch.
pub(super) struct SourcesRead {
    /// Per source node: its index and its slice.
    pub(super) reads: Vec<(usize, SourceBatch)>,
    /// Whether any source did anything (data, a watermark move, a clock move).
    pub(super) moved: bool,
    /// Elements read or planned.
    pub(super) input_rows: u64,
    /// Event-time stats of the elements read now (planned reads add theirs as they run).
    pub(super) ts_stats: TsStats,
}

impl Engine {
    /// Reads every source's slice: about `max` records each, or, replaying a logged batch,
    /// exactly the counts it logged. A requested drain applies to new batches only (see
    /// [`weir_runner_core::exec::source::SourceState::prepare_read`]).
    pub(super) fn latest_offset(
        &mut self,
        max: usize,
        replay: Option<&OffsetEntry>,
        drain_requested: bool,
    ) -> Result<SourcesRead> {
        let mut read = SourcesRead {
            reads: Vec::new(),
            moved: false,
            input_rows: 0,
            ts_stats: (Timestamp::MAX, Timestamp::MIN, 0, 0),
        };
        self.deferred_stats = (Timestamp::MAX, Timestamp::MIN, 0, 0);
        for i in 0..self.nodes.len() {
            let Some(src) = self.nodes[i].source.as_mut() else { continue };
            // User code in sources runs with the step's metrics container bound.
            let container = MetricsContainerImpl::new();
            let name = &self.plan.nodes[i].name;
            let logged = replay.map(|r| r.sources.iter().find(|s| &s.name == name));
            let counts = logged.map(|l| l.map(|s| s.counts.clone()).unwrap_or_default());
            src.prepare_read(logged.map(|l| l.map_or(&serde_json::Value::Null, |s| &s.end)), drain_requested);
            let sb = {
                let _scope = weir_sdk::metrics::scoped_container(container.clone());
                src.next(
                    self.partitions,
                    max,
                    counts.as_deref(),
                    &mut self.clock,
                    self.defer_reads[i],
                    Some(&self.workers),
                )
            };
            if let (Ok(sb), Some(&pc)) = (&sb, self.plan.nodes[i].outputs.first()) {
                let ops = self.graph.pcollection(pc).ops.clone();
                // Planned reads are counted as the chain reads them.
                for b in sb.bundles.iter().flatten().filter(|b| b.kind() != BatchKind::Planned) {
                    system_metrics::count_batch(&container, &*ops, b, true);
                }
            }
            self.metrics.record(Some(name), &container, sb.is_ok());
            let sb = sb?;
            read.moved |= sb.moved;
            read.input_rows += sb.rows as u64;
            add_stats(&mut read.ts_stats, sb.ts_stats);
            read.reads.push((i, sb));
        }
        Ok(read)
    }
}
