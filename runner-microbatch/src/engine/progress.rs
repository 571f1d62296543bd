//! progress: what a batch did, as Spark's `StreamingQueryProgress` (rows and rates, duration
//! per phase, event-time stats and the query watermark, state operators, sources and sink),
//! published to the query handle and its listeners.

use super::add_batch::Added;
use super::latest_offset::SourcesRead;
use super::reporter::RECENT;
use super::Engine;
use crate::progress::{
    DurationMs, EventTimeStats, SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress,
};
use std::time::Instant;
use weir_runner_core::exec::clock::Clock;
use weir_runner_core::exec::source::add_stats;
use weir_runner_core::progress::millis_rounded_up;
use weir_sdk::time::{iso8601, Timestamp, MAX_TIMESTAMP};

/// What a batch's report knows before the batch runs, and the phase timings as they come.
pub(super) struct BatchReport {
    /// Wall time the batch started.
    started_at: Timestamp,
    /// Seconds since the previous batch started.
    since_last: Option<f64>,
    /// The test clock before reading, when TestStream drives processing time.
    pub(super) start_clock: Option<Timestamp>,
    pub(super) read_ms: u64,
    pub(super) wal_ms: u64,
}

impl BatchReport {
    /// The report of a batch starting now.
    pub(super) fn begin(engine: &Engine) -> Self {
        BatchReport {
            started_at: Clock::Wall.now(),
            since_last: engine.planner.last_trigger.map(|t| t.elapsed().as_secs_f64()),
            start_clock: engine.clock.test_time(),
            read_ms: 0,
            wal_ms: 0,
        }
    }
}

struct ProgressInput {
    started_at: Timestamp,
    since_last: Option<f64>,
    input_rows: u64,
    ts_stats: weir_runner_core::exec::source::TsStats,
    sources: Vec<(usize, usize, serde_json::Value, serde_json::Value)>,
    stats: Vec<super::NodeStats>,
    sink_rows: i64,
    read_ms: u64,
    wal_ms: u64,
    add_ms: u64,
    commit_ms: u64,
    total_ms: u64,
}

impl Engine {
    /// Builds the batch's progress: published at once, or, when its commit is pending, once
    /// the commit log records the batch ([`Engine::finish_commit`]).
    pub(super) fn publish_progress(&mut self, report: BatchReport, read: SourcesRead, added: Added, started: Instant) {
        let mut ts_stats = read.ts_stats;
        add_stats(&mut ts_stats, self.planner.deferred_stats);
        // Planned reads count what the chains read: a read of up to a count may find fewer. With
        // one source planning reads (the usual case) its rows are exact too.
        let (planned, read_by_chains) = (
            read.reads.iter().map(|(_, sb)| sb.deferred_rows as u64).sum::<u64>(),
            self.planner.deferred_stats.3 as u64,
        );
        let input_rows = read.input_rows - planned + read_by_chains;
        let planning = read.reads.iter().filter(|(_, sb)| sb.deferred_rows > 0).count();
        let sources = read
            .reads
            .into_iter()
            .map(|(i, sb)| {
                let rows = match (planning, sb.deferred_rows) {
                    (1, d) if d > 0 => sb.rows - d + read_by_chains as usize,
                    _ => sb.rows,
                };
                (i, rows, sb.start_offset, sb.end_offset)
            })
            .collect();
        let progress = self.progress(ProgressInput {
            started_at: report.started_at,
            since_last: report.since_last,
            input_rows,
            ts_stats,
            sources,
            stats: added.stats,
            sink_rows: added.sink_rows,
            read_ms: report.read_ms,
            wal_ms: report.wal_ms,
            add_ms: added.add_ms,
            commit_ms: added.commit_ms,
            total_ms: started.elapsed().as_millis() as u64,
        });
        self.ck.state_loaded_from_files = false;
        match self.ck.pending.as_mut() {
            Some(pending) => pending.progress = Some(progress),
            None => self.publish(progress),
        }
    }

    /// Publishes a batch's progress: to the job's metrics (the state figures), the handle and
    /// its listeners.
    pub(super) fn publish(&mut self, progress: StreamingQueryProgress) {
        // The state store figures reach the job's metrics, and every sink, as gauges.
        weir_runner_core::exec::node::UnitMetrics::publish_state_operators(
            &self.report.metrics,
            &progress.state_operators,
            self.clock.now(),
        );
        {
            let mut recent = self.report.shared.recent.lock().unwrap_or_else(|e| e.into_inner());
            recent.push_back(progress.clone());
            while recent.len() > RECENT {
                recent.pop_front();
            }
        }
        for l in self.report.shared.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            l(&progress);
        }
        tracing::debug!(progress = %progress.json(), "batch committed");
    }

    fn progress(&self, p: ProgressInput) -> StreamingQueryProgress {
        let secs = (p.total_ms as f64 / 1000.0).max(1e-3);
        let since = p.since_last.unwrap_or(secs).max(1e-3);
        let (lo, hi, sum, n) = p.ts_stats;
        let event_time = EventTimeStats {
            min: (n > 0).then(|| iso8601(lo)),
            max: (n > 0).then(|| iso8601(hi)),
            avg: (n > 0).then(|| iso8601((sum / n as i128) as i64)),
            watermark: iso8601(self.query_watermark().min(MAX_TIMESTAMP)),
        };
        let mut state_operators = Vec::new();
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            if !spec.stateful {
                continue;
            }
            let (total, memory_used_bytes) = self.nodes[i].state_size();
            let st = &p.stats[i];
            state_operators.push(StateOperatorProgress {
                operator_name: spec.name.clone(),
                num_rows_total: total,
                num_rows_updated: st.changes.updated,
                num_rows_removed: st.changes.removed,
                num_rows_dropped_by_watermark: st.dropped,
                all_updates_time_ms: st.update_ms,
                all_removals_time_ms: st.removal_ms,
                commit_time_ms: self.state_writes(i).0,
                memory_used_bytes,
                num_state_store_instances: self.partitions as u64,
                custom_metrics: {
                    let mut custom = self.state_writes(i).1;
                    // Each partition's state for this batch came from memory (a hit; a retried
                    // batch restores the copy kept in memory) or, after a restart, from the
                    // checkpoint's files (a miss).
                    let instances = self.partitions as u64;
                    let (hits, misses) = if self.ck.state_loaded_from_files { (0, instances) } else { (instances, 0) };
                    custom.insert("loadedMapCacheHitCount".to_string(), hits);
                    custom.insert("loadedMapCacheMissCount".to_string(), misses);
                    custom.extend(self.nodes[i].backend_metrics.clone());
                    custom
                },
            });
        }
        let sources = p
            .sources
            .into_iter()
            .map(|(i, rows, start, end)| SourceProgress {
                description: self.plan.nodes[i].name.clone(),
                start_offset: start,
                end_offset: end,
                num_input_rows: rows as u64,
                input_rows_per_second: rows as f64 / since,
                processed_rows_per_second: rows as f64 / secs,
            })
            .collect();
        let leaves: Vec<String> = self
            .plan
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| !n.outputs.is_empty() && self.flow.topology.is_leaf(*i))
            .map(|(_, n)| n.name.clone())
            .collect();
        let watermarks =
            self.plan.nodes.iter().zip(&self.nodes).map(|(s, n)| (s.name.clone(), iso8601(n.wm.output()))).collect();
        StreamingQueryProgress {
            id: self.report.id.clone(),
            run_id: self.report.run_id.clone(),
            name: self.options.job_name.clone(),
            timestamp: iso8601(p.started_at),
            batch_id: self.batch_id,
            batch_duration: p.total_ms,
            num_input_rows: p.input_rows,
            input_rows_per_second: p.input_rows as f64 / since,
            processed_rows_per_second: p.input_rows as f64 / secs,
            duration_ms: DurationMs {
                latest_offset: p.read_ms,
                wal_commit: p.wal_ms,
                get_batch: 0,
                query_planning: 0,
                add_batch: p.add_ms,
                commit_offsets: p.commit_ms,
                trigger_execution: p.total_ms,
            },
            event_time,
            state_operators,
            sources,
            sink: SinkProgress { description: leaves.join(", "), num_output_rows: p.sink_rows },
            watermarks,
        }
    }

    /// Node `i`'s state writes in the last commit: its `commitTimeMs`, and its bytes written as
    /// custom metrics.
    fn state_writes(&self, i: usize) -> (u64, std::collections::BTreeMap<String, u64>) {
        let time = self.ck.commit_time.get(&i).map_or(0, |&d| millis_rounded_up(d));
        (time, self.ck.state_bytes.get(&i).copied().unwrap_or_default().custom_metrics())
    }

    /// Sets the state figures of a batch's progress built before its state was written (a
    /// pending commit's): each stateful step's commit time and bytes written.
    pub(super) fn add_state_writes(&self, progress: &mut StreamingQueryProgress) {
        for (i, spec) in self.plan.nodes.iter().enumerate() {
            let Some(op) = progress.state_operators.iter_mut().find(|o| o.operator_name == spec.name) else {
                continue;
            };
            let (time, bytes) = self.state_writes(i);
            op.commit_time_ms = time;
            op.custom_metrics.extend(bytes);
        }
    }

    /// The query's watermark: the minimum output watermark of its leaf nodes.
    fn query_watermark(&self) -> Timestamp {
        self.plan
            .nodes
            .iter()
            .zip(&self.nodes)
            .enumerate()
            .filter(|(i, _)| self.flow.topology.is_leaf(*i))
            .map(|(_, (_, n))| n.wm.output())
            .min()
            .unwrap_or(MAX_TIMESTAMP)
    }
}
