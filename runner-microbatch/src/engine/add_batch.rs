//! addBatch: every node of the plan in topological order, all partitions of a node on the
//! workers at once: side inputs, then the pending bundles, then the watermark advance and the
//! timers it releases; fused element-wise chains run whole when their head's turn comes. What a
//! node outputs is routed through its consumers' exchanges.

use super::{Engine, NodeStats};
use std::sync::Arc;
use std::time::Instant;
use weir_runner_core::exec::chain::ChainTask;
use weir_runner_core::exec::exchange;
use weir_runner_core::exec::partition::{in_fired_bundles, PartitionTask};
use weir_runner_core::exec::source::add_stats;
use weir_runner_core::exec::topology::Slot;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::MetricsContainerImpl;
use weir_runner_core::operator::Operator;
use weir_runner_core::system_metrics;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::{Error, Result};

/// What adding and committing a batch did, for its progress report.
pub(super) struct Added {
    pub(super) stats: Vec<NodeStats>,
    pub(super) sink_rows: i64,
    pub(super) add_ms: u64,
    pub(super) commit_ms: u64,
}

impl Engine {
    /// Runs every node in topological order, then commits the batch. A failed batch is retried
    /// (up to `--max-batch-retries`) from the last committed state with the same input:
    /// attempted metrics count every try, committed ones only the try that committed.
    pub(super) fn add_batch(&mut self, job: &Job) -> Result<Added> {
        self.shared.active.store(true, std::sync::atomic::Ordering::SeqCst);
        let add_start = Instant::now();
        // A failed batch is retried (up to --max-batch-retries) from the last committed state
        // with the same input: attempted metrics count every try, committed ones only the try
        // that committed.
        let saved_input = if self.mb.max_batch_retries > 0 { Some(self.clone_pending()) } else { None };
        let mut attempt = 0;
        let added = loop {
            let mut stats: Vec<NodeStats> = (0..self.nodes.len()).map(|_| NodeStats::default()).collect();
            let mut containers: Vec<(String, Arc<MetricsContainerImpl>)> = Vec::new();
            let mut sink_rows = 0i64;
            let result = (|| -> Result<()> {
                for i in 0..self.nodes.len() {
                    if self.nodes[i].source.is_some() || self.fused_follower[i] {
                        continue;
                    }
                    if job.is_cancelled() {
                        return Err(Error::Cancelled);
                    }
                    // A fused chain runs whole when its head's turn comes (its other members
                    // only consume what the chain before them produces).
                    let (out_rows, last) = match self.chain_at[i] {
                        Some(c) => {
                            let chain = self.chains[c].clone();
                            (self.run_chain(&chain, &mut stats, &mut containers)?, chain[chain.len() - 1])
                        }
                        None => (self.run_node(i, &mut stats[i], &mut containers)?, i),
                    };
                    if self.topology.is_leaf(last) {
                        sink_rows += out_rows as i64;
                    }
                }
                Ok(())
            })();
            let add_ms = add_start.elapsed().as_millis() as u64;
            weir_sdk::testing::fault::point("add-batch");
            // commit: state, sinks, commit log; then the batch's metrics count as committed.
            let commit_result = result.and_then(|_| self.commit());
            for (step, c) in &containers {
                self.metrics.record(Some(step), c, commit_result.is_ok());
            }
            match commit_result {
                Ok(commit_ms) => {
                    // The batch is durable: what waited for that runs (bundle finalization).
                    self.nodes.iter_mut().flat_map(|n| n.ops.iter_mut()).for_each(|op| op.on_committed());
                    break Added { stats, sink_rows, add_ms, commit_ms };
                }
                Err(e) if !matches!(e, Error::Cancelled) && attempt < self.mb.max_batch_retries => {
                    attempt += 1;
                    tracing::warn!(batch = self.batch_id, attempt, error = %e, "batch failed; retrying from the last commit");
                    self.roll_back(saved_input.as_ref())?;
                }
                Err(e) => {
                    self.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
                    return Err(e);
                }
            }
        };
        self.shared.active.store(false, std::sync::atomic::Ordering::SeqCst);
        if self.mb.max_batch_retries > 0 {
            self.save_retry_base()?;
        }
        Ok(added)
    }

    /// Routes output bundles (one list per partition) of node `i`'s output `port` to its
    /// consumers: a main input through the consumer's exchange for that input, a side input to
    /// be broadcast to every partition.
    pub(super) fn route(&mut self, i: usize, port: usize, per_partition: Vec<Vec<Batch>>) -> Result<()> {
        let Some(&pc) = self.plan.nodes[i].outputs.get(port) else { return Ok(()) };
        let consumers = self.topology.consumers(pc).to_vec();
        if consumers.is_empty() {
            return Ok(());
        }
        let per_partition: Vec<Vec<Batch>> =
            per_partition.into_iter().map(|bs| bs.into_iter().filter(|b| !b.is_empty()).collect()).collect();
        let last = consumers.len() - 1;
        let mut owned = Some(per_partition);
        for (n, (c, slot)) in consumers.into_iter().enumerate() {
            let data = if n == last {
                owned.take().unwrap_or_default()
            } else {
                owned.as_ref().map(|pp| pp.iter().map(|bs| bs.to_vec()).collect()).unwrap_or_default()
            };
            match slot {
                Slot::Side(k) => {
                    for b in data.into_iter().flatten() {
                        self.nodes[c].side_pending.push((k, b));
                    }
                }
                Slot::Main(port) => {
                    let routed =
                        exchange::route(&self.plan.nodes[c].exchanges[port], data, self.partitions, &self.workers)?;
                    for (q, part) in routed.into_iter().enumerate() {
                        self.nodes[c].pending[q].extend(part);
                    }
                }
            }
        }
        Ok(())
    }

    /// Stages a sink node's pending input in its writer (written at commit).
    pub(super) fn run_sink(&mut self, i: usize) -> Result<usize> {
        let upstream = self.upstream_watermark(i);
        let pending = self.take_pending(i);
        let node = &mut self.nodes[i];
        let mut rows = 0;
        if let Some(sink) = node.sink.as_mut() {
            for (p, bundles) in pending.into_iter().enumerate() {
                for b in bundles {
                    rows += sink.stage(p, b)?;
                }
            }
        }
        node.wm.advance(upstream, None, None);
        Ok(rows)
    }

    /// Runs node `i` for this batch on every partition in parallel. Returns the rows it output.
    pub(super) fn run_node(
        &mut self,
        i: usize,
        stats: &mut NodeStats,
        containers: &mut Vec<(String, Arc<MetricsContainerImpl>)>,
    ) -> Result<usize> {
        if self.plan.nodes[i].is_sink() {
            return self.run_sink(i);
        }
        let spec = &self.plan.nodes[i];
        let name = spec.name.clone();
        let upstream = self.upstream_watermark(i);
        let side_wms = self.topology.side_watermarks(i, |p| self.nodes[p].wm.output());
        let in_ops = self.main_ops(i);
        let n_outputs = spec.outputs.len();
        let now = self.clock.now();
        // The batch is drained when its sources were read drained (logged, so a replay is too).
        let draining = self.nodes.iter().filter_map(|n| n.source.as_ref()).any(|s| s.is_drained());
        let pending = self.take_pending(i);
        let node = &mut self.nodes[i];
        let side_pending = std::mem::take(&mut node.side_pending);
        stats.input_rows = match &in_ops {
            Some(_) => pending.iter().flatten().map(|b| b.len() as u64).sum(),
            None => 0,
        };
        // Side-input data goes to every partition.
        let n_parts = node.ops.len();
        let mut sides_per_partition: Vec<Vec<(usize, Batch)>> = (0..n_parts).map(|_| Vec::new()).collect();
        for (k, b) in side_pending {
            let mut copies: Vec<Batch> = (1..n_parts).map(|_| b.clone()).collect();
            copies.push(b);
            for (p, c) in copies.into_iter().enumerate() {
                sides_per_partition[p].push((k, c));
            }
        }
        let side_wms: Arc<[weir_sdk::time::Timestamp]> = side_wms.into();
        let tasks: Vec<PartitionTask> = std::mem::take(&mut node.ops)
            .into_iter()
            .zip(pending)
            .zip(sides_per_partition)
            .map(|((op, bundles), sides)| PartitionTask {
                op,
                in_ops: in_ops.clone(),
                bundles,
                sides,
                side_wms: side_wms.clone(),
                draining,
            })
            .collect();
        let results = self.workers.run(tasks, move |t| t.run(upstream, now, n_outputs));
        let mut done_all = Vec::with_capacity(results.len());
        for (op, done) in results {
            self.nodes[i].ops.push(op);
            done_all.push(done);
        }
        let mut outputs: Vec<Vec<Vec<Batch>>> = (0..n_outputs).map(|_| Vec::new()).collect();
        let mut first_error = None;
        for r in done_all {
            match r {
                Ok(done) => {
                    stats.update_ms += done.update_ms;
                    stats.removal_ms += done.removal_ms;
                    stats.dropped += done.dropped;
                    stats.changes.updated += done.changes.updated;
                    stats.changes.removed += done.changes.removed;
                    containers.push((name.clone(), done.metrics));
                    for (port, bs) in done.outputs.into_iter().enumerate() {
                        outputs[port].push(bs);
                    }
                }
                Err((e, metrics)) => {
                    containers.push((name.clone(), metrics));
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let hold = self.nodes[i].ops.iter().filter_map(|o| o.hold()).min();
        self.nodes[i].wm.advance(upstream, None, hold);
        let system = MetricsContainerImpl::new();
        let wm = self.nodes[i].wm;
        system_metrics::watermarks(&system, wm.input(), wm.output(), now);
        let (rows, bytes) = self.nodes[i].measure_state();
        self.nodes[i].state_size = Some((rows, bytes));
        if rows > 0 || bytes > 0 {
            system_metrics::state(&system, rows as usize, bytes as usize, now);
        }
        let mut out_rows = 0;
        let grouping = self.plan.nodes[i].stateful;
        for (port, mut per_partition) in outputs.into_iter().enumerate() {
            if let Some(&pc) = self.plan.nodes[i].outputs.get(port) {
                let ops = self.graph.pcollection(pc).ops.clone();
                for b in per_partition.iter().flatten() {
                    out_rows += b.len();
                    system_metrics::count_batch(&system, &*ops, b, true);
                }
                if grouping {
                    // What a stateful node fires (at the end of a bounded input: every window
                    // at once) goes on in bundles of groups, so what consumes it learns its
                    // fan-out on the first and sizes its output for the rest, and a chain
                    // after it reuses one bundle's buffers for the next.
                    per_partition = per_partition.into_iter().map(in_fired_bundles).collect();
                }
            }
            self.route(i, port, per_partition)?;
        }
        containers.push((name, system));
        Ok(out_rows)
    }

    /// Runs a fused chain of element-wise nodes: per partition, each bundle of the head's input
    /// goes through every node of the chain before the next bundle, then every node's
    /// watermark moves in order. Metrics, element counts and stats are kept per node as
    /// [`Engine::run_node`] keeps them. Returns the rows the chain's last node output.
    pub(super) fn run_chain(
        &mut self,
        chain: &[usize],
        stats: &mut [NodeStats],
        containers: &mut Vec<(String, Arc<MetricsContainerImpl>)>,
    ) -> Result<usize> {
        let (head, tail) = (chain[0], chain[chain.len() - 1]);
        // Element-wise nodes hold nothing back: every member's input watermark is the head's.
        let upstream = self.upstream_watermark(head);
        let now = self.clock.now();
        let names: Vec<String> = chain.iter().map(|&i| self.plan.nodes[i].name.clone()).collect();
        let in_ops: Vec<Arc<dyn CollectionOps>> =
            chain.iter().map(|&i| self.graph.pcollection(self.plan.nodes[i].inputs[0]).ops.clone()).collect();
        let out_ops: Vec<Vec<Arc<dyn CollectionOps>>> = chain
            .iter()
            .map(|&i| self.plan.nodes[i].outputs.iter().map(|&o| self.graph.pcollection(o).ops.clone()).collect())
            .collect();
        let pending = self.take_pending(head);
        let mut per_partition: Vec<Vec<Box<dyn Operator>>> = (0..self.partitions).map(|_| Vec::new()).collect();
        for &i in chain {
            for (p, op) in std::mem::take(&mut self.nodes[i].ops).into_iter().enumerate() {
                per_partition[p].push(op);
            }
        }
        let (in_ops, out_ops): (Arc<[_]>, Arc<[_]>) = (in_ops.into(), out_ops.into());
        let tasks: Vec<ChainTask> = per_partition
            .into_iter()
            .zip(pending)
            .map(|(ops, bundles)| ChainTask { ops, in_ops: in_ops.clone(), out_ops: out_ops.clone(), bundles })
            .collect();
        let results = self.workers.run(tasks, move |t| t.run(upstream, now));
        let mut done_all = Vec::with_capacity(results.len());
        for (ops, done, error) in results {
            for (&i, op) in chain.iter().zip(ops) {
                self.nodes[i].ops.push(op);
            }
            done_all.push((done, error));
        }
        let mut outputs: Vec<Vec<Vec<Batch>>> = (0..out_ops[chain.len() - 1].len()).map(|_| Vec::new()).collect();
        let mut first_error = None;
        for (done, error) in done_all {
            containers.extend(done.sources);
            add_stats(&mut self.deferred_stats, done.read_stats);
            for (j, member) in done.members.into_iter().enumerate() {
                let st = &mut stats[chain[j]];
                st.input_rows += member.input_rows;
                st.update_ms += member.update.as_millis() as u64;
                st.removal_ms += member.removal.as_millis() as u64;
                st.dropped += member.dropped;
                containers.push((names[j].clone(), member.metrics));
            }
            for (port, bs) in done.outputs.into_iter().enumerate() {
                outputs[port].push(bs);
            }
            if let Some(e) = error {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for (j, &i) in chain.iter().enumerate() {
            let hold = self.nodes[i].ops.iter().filter_map(|o| o.hold()).min();
            self.nodes[i].wm.advance(upstream, None, hold);
            self.nodes[i].state_size = Some((0, 0));
            let system = MetricsContainerImpl::new();
            let wm = self.nodes[i].wm;
            system_metrics::watermarks(&system, wm.input(), wm.output(), now);
            containers.push((names[j].clone(), system));
        }
        let mut out_rows = 0;
        for (port, per_partition) in outputs.into_iter().enumerate() {
            out_rows += per_partition.iter().flatten().map(Batch::len).sum::<usize>();
            self.route(tail, port, per_partition)?;
        }
        Ok(out_rows)
    }
}
