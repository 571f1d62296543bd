//! addBatch: the batch's input (the sources' slices) goes to the partitions' inboxes, then every
//! worker thread goes through the whole plan, running each node's partitions as it claims them
//! ([`super::dataflow`]) and pushing their output on to the consumers' partitions. The engine
//! thread waits for the partitions, then commits.

use super::dataflow::{run_partitions, BatchFlow, PartitionOutcome, Shares};
use super::{Engine, NodeStats};
use std::sync::Arc;
use std::time::Instant;
use weir_runner_core::exec::node::{NodeShare, UnitMetrics};
use weir_runner_core::job::Job;
use weir_runner_core::watermark::Watermarks;
use weir_sdk::{Error, Result};

/// What adding and committing a batch did, for its progress report.
pub(super) struct Added {
    pub(super) stats: Vec<NodeStats>,
    pub(super) sink_rows: i64,
    pub(super) add_ms: u64,
    pub(super) commit_ms: u64,
}

/// What the partitions did, gathered.
struct Ran {
    stats: Vec<NodeStats>,
    sink_rows: i64,
    metrics: UnitMetrics,
    error: Option<Error>,
}

impl Engine {
    /// Runs the batch on the partitions, then commits it. A failed batch is retried (up to
    /// `--max-batch-retries`) from the last committed state with the same input: attempted
    /// metrics count every try, committed ones only the try that committed.
    pub(super) fn add_batch(&mut self, job: &Job) -> Result<Added> {
        self.report.shared.active.store(true, std::sync::atomic::Ordering::SeqCst);
        let add_start = Instant::now();
        let saved_input = if self.mb.max_batch_retries > 0 { Some(self.clone_pending()) } else { None };
        let mut attempt = 0;
        let added = loop {
            let ran = if job.is_cancelled() { Err(Error::Cancelled) } else { Ok(self.run_partitions()) };
            let (stats, sink_rows, mut metrics, result) = match ran {
                Ok(r) => (r.stats, r.sink_rows, r.metrics, r.error.map_or(Ok(()), Err)),
                Err(e) => (Vec::new(), 0, UnitMetrics::default(), Err(e)),
            };
            let add_ms = add_start.elapsed().as_millis() as u64;
            weir_sdk::testing::fault::point("add-batch");
            // commit: state, sinks, commit log; then the batch's metrics count as committed.
            let commit_result = result.and_then(|_| self.commit(&mut metrics));
            // A pending commit took the metrics: they count as committed when it finishes.
            metrics.publish(&self.report.metrics, commit_result.is_ok());
            match commit_result {
                Ok(commit_ms) => {
                    if self.ck.pending.is_none() {
                        // The batch is durable: what waited for that runs (bundle finalization).
                        self.shares_mut().for_each(NodeShare::on_committed);
                    }
                    break Added { stats, sink_rows, add_ms, commit_ms };
                }
                Err(e) if !matches!(e, Error::Cancelled) && attempt < self.mb.max_batch_retries => {
                    attempt += 1;
                    tracing::warn!(batch = self.batch_id, attempt, error = %e, "batch failed; retrying from the last commit");
                    self.roll_back(saved_input.as_ref())?;
                }
                Err(e) => {
                    self.report.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
                    return Err(e);
                }
            }
        };
        self.report.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
        if self.mb.max_batch_retries > 0 {
            self.save_retry_base()?;
        }
        Ok(added)
    }

    /// Runs the batch: the pending input into the partitions' inboxes, the worker threads
    /// through the whole plan claiming partitions, then every node's watermarks and state size
    /// as the partitions left them.
    fn run_partitions(&mut self) -> Ran {
        let now = self.clock.now();
        // The batch is drained when its sources were read drained (logged, so a replay is too).
        let draining = self.nodes.iter().filter_map(|n| n.source.as_ref()).any(|s| s.is_drained());
        let wms: Vec<_> = self.nodes.iter().map(|n| n.wm.output()).collect();
        let flow = BatchFlow::new(
            self.plan.clone(),
            self.flow.topology.clone(),
            self.partitions,
            &self.flow.deliveries,
            &wms,
            self.flow.sinks.clone(),
            now,
            draining,
        );
        // With a checkpoint, each partition encodes its state as it finishes; the batch's
        // commit writes those files.
        let snapshot = self.ck.last_snapshot.is_none();
        let flow = match &self.ck.checkpoint {
            Some(_) => flow.checkpointed(snapshot),
            None => flow,
        };
        self.ck.encoded = (snapshot, Vec::new());
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let pending = std::mem::replace(&mut node.pending, (0..self.partitions).map(|_| Vec::new()).collect());
            let sides = std::mem::take(&mut node.side_pending);
            for (q, main) in pending.into_iter().enumerate() {
                // Side input goes to every partition.
                let sides = sides.clone();
                if !main.is_empty() || !sides.is_empty() {
                    flow.deliver_read(i, q, main, sides);
                }
            }
        }
        let flow = Arc::new(flow);
        // One task per worker thread (never more threads than partitions), each claiming
        // partitions node by node.
        let threads = self.flow.workers.threads();
        let shares = Arc::new(Shares::new(std::mem::take(&mut self.flow.parts)));
        let (f, s) = (flow.clone(), shares.clone());
        let results = self.flow.workers.run(vec![(); threads], move |()| run_partitions(&f, &s));
        self.flow.parts = shares.take_parts();
        let mut ran = Ran {
            stats: (0..self.nodes.len()).map(|_| NodeStats::default()).collect(),
            sink_rows: 0,
            metrics: UnitMetrics::default(),
            error: None,
        };
        for outcome in results {
            let PartitionOutcome { metrics, stats, read_stats, sink_rows, error, state } = outcome;
            self.ck.encoded.1.extend(state);
            ran.metrics.append(metrics);
            ran.sink_rows += sink_rows;
            weir_runner_core::exec::source::add_stats(&mut self.planner.deferred_stats, read_stats);
            for (m, s) in stats {
                ran.stats[m].add(&s);
            }
            if ran.error.is_none() {
                ran.error = error;
            }
        }
        // A failed batch's gauges are not reported (it is rolled back or fails the query).
        let mut gauges = UnitMetrics::default();
        self.gather_watermarks(now, &mut gauges);
        if ran.error.is_none() {
            ran.metrics.append(gauges);
        }
        ran
    }

    /// Every node's watermarks as its partitions left them (the minimum over them), their
    /// gauges, and the state they hold.
    fn gather_watermarks(&mut self, now: weir_sdk::time::Timestamp, metrics: &mut UnitMetrics) {
        for i in 0..self.nodes.len() {
            let Some(shares) = self.shares_of(i) else { continue };
            NodeShare::gauges(&shares, now, metrics);
            let members: Vec<usize> = shares[0].members().to_vec();
            let stateful = self.plan.nodes[i].stateful;
            let size = if stateful || members.len() == 1 {
                shares.iter().fold((0, 0), |(r, b), s| {
                    let (x, y) = s.state_size();
                    (r + x, b + y)
                })
            } else {
                (0, 0)
            };
            let wms: Vec<Watermarks> = (0..members.len())
                .map(|k| {
                    let input = shares.iter().map(|s| s.watermarks()[k].input()).min().unwrap_or_default();
                    let output = shares.iter().map(|s| s.watermarks()[k].output()).min().unwrap_or_default();
                    Watermarks::restored(input, output)
                })
                .collect();
            let mut backend = std::collections::BTreeMap::new();
            if stateful {
                for (name, v) in shares.iter().flat_map(|s| s.state_backend_metrics()) {
                    *backend.entry(name).or_default() += v;
                }
            }
            for (k, &m) in members.iter().enumerate() {
                self.nodes[m].wm = wms[k];
                self.nodes[m].state_size = Some(if k == 0 { size } else { (0, 0) });
                self.nodes[m].backend_metrics = if k == 0 { std::mem::take(&mut backend) } else { Default::default() };
            }
        }
    }

    /// The shares of node `i` on every partition, if it heads one.
    pub(super) fn shares_of(&self, i: usize) -> Option<Vec<&NodeShare>> {
        self.flow.parts.iter().map(|part| part.get(i).and_then(Option::as_ref)).collect()
    }

    /// Every share of every partition.
    pub(super) fn shares_mut(&mut self) -> impl Iterator<Item = &mut NodeShare> {
        self.flow.parts.iter_mut().flat_map(|part| part.iter_mut().flatten())
    }
}
