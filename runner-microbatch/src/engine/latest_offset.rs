//! latestOffset: how far every source goes in this batch, read (or, for a planned read,
//! planned) into bundles per partition, with the positions before and after for the offset log.

use super::Engine;
use crate::checkpoint::OffsetEntry;
use weir_runner_core::exec::node::UnitMetrics;
use weir_runner_core::exec::source::{add_stats, SourceBatch, TsStats};
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
        self.planner.deferred_stats = (Timestamp::MAX, Timestamp::MIN, 0, 0);
        for i in 0..self.nodes.len() {
            let Some(src) = self.nodes[i].source.as_mut() else { continue };
            // User code in sources runs with the step's metrics container bound.
            let mut metrics = UnitMetrics::default();
            let name = &self.plan.nodes[i].name;
            let logged = replay.map(|r| r.sources.iter().find(|s| &s.name == name));
            let counts = logged.map(|l| l.map(|s| s.counts.clone()).unwrap_or_default());
            src.prepare_read(logged.map(|l| l.map_or(&serde_json::Value::Null, |s| &s.end)), drain_requested);
            let ops = self.graph.pcollection(self.plan.nodes[i].outputs[0]).ops.clone();
            let (partitions, defer, clock, workers) =
                (self.partitions, self.planner.defer_reads[i], &mut self.clock, &self.flow.workers);
            let sb =
                metrics.read(name, &*ops, || src.next(partitions, max, counts.as_deref(), clock, defer, Some(workers)));
            metrics.publish(&self.report.metrics, sb.is_ok());
            let sb = sb?;
            read.moved |= sb.moved;
            read.input_rows += sb.rows as u64;
            add_stats(&mut read.ts_stats, sb.ts_stats);
            read.reads.push((i, sb));
        }
        Ok(read)
    }
}
