//! Metrics containers: one per step per unit of work, merged into a job's attempted and
//! committed step maps.
//!
//! A runner gives every bundle (or batch partition) a fresh [`MetricsContainerImpl`] bound
//! around its calls into user code. When the work ends, the container is merged into the job's
//! *attempted* map; only when the work commits is it merged into the *committed* map too, so a
//! retried or failed bundle is never counted as committed. Containers are merged cumulatively,
//! so each fresh container must be merged exactly once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use weir_sdk::metrics::{
    DistributionResult, GaugeResult, MetricKey, MetricName, MetricQueryResults, MetricResult, MetricsContainer,
    MetricsSource,
};

#[derive(Default, Debug, Clone)]
struct Cells {
    counters: BTreeMap<MetricName, i64>,
    distributions: BTreeMap<MetricName, DistributionResult>,
    gauges: BTreeMap<MetricName, GaugeResult>,
}

impl Cells {
    fn merge(&mut self, o: &Cells) {
        for (k, v) in &o.counters {
            let c = self.counters.entry(k.clone()).or_insert(0);
            *c = c.wrapping_add(*v);
        }
        for (k, v) in &o.distributions {
            let d = self.distributions.entry(k.clone()).or_insert(DistributionResult::EMPTY);
            *d = d.combine(v);
        }
        for (k, v) in &o.gauges {
            let g = self.gauges.entry(k.clone()).or_insert(GaugeResult::EMPTY);
            *g = g.combine(v);
        }
    }
}

/// One kind of metric cell of a container, found by the handle's `Arc` first (the
/// per-element path: a pointer comparison over the step's few metrics), by name otherwise.
#[derive(Debug)]
struct CellList<V> {
    cells: Vec<(Arc<MetricName>, V)>,
}

impl<V> Default for CellList<V> {
    fn default() -> Self {
        CellList { cells: Vec::new() }
    }
}

impl<V: Copy> CellList<V> {
    fn cell(&mut self, name: &Arc<MetricName>, empty: V) -> &mut V {
        let found = self
            .cells
            .iter()
            .position(|(n, _)| Arc::ptr_eq(n, name))
            .or_else(|| self.cells.iter().position(|(n, _)| **n == **name));
        let i = found.unwrap_or_else(|| {
            self.cells.push((name.clone(), empty));
            self.cells.len() - 1
        });
        &mut self.cells[i].1
    }

    fn to_map(&self, combine: impl Fn(&V, &V) -> V) -> BTreeMap<MetricName, V> {
        let mut out: BTreeMap<MetricName, V> = BTreeMap::new();
        for (n, v) in &self.cells {
            match out.get_mut(&**n) {
                Some(e) => *e = combine(e, v),
                None => {
                    out.insert((**n).clone(), *v);
                }
            }
        }
        out
    }
}

#[derive(Debug, Default)]
struct LiveCells {
    counters: CellList<i64>,
    distributions: CellList<DistributionResult>,
    gauges: CellList<GaugeResult>,
}

/// The metrics of one step (or of no step) in one unit of work.
#[derive(Debug, Default)]
pub struct MetricsContainerImpl {
    cells: Mutex<LiveCells>,
}

impl MetricsContainerImpl {
    /// An empty container.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn live(&self) -> std::sync::MutexGuard<'_, LiveCells> {
        self.cells.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cells(&self) -> Cells {
        let c = self.live();
        Cells {
            counters: c.counters.to_map(|a, b| a.wrapping_add(*b)),
            distributions: c.distributions.to_map(DistributionResult::combine),
            gauges: c.gauges.to_map(GaugeResult::combine),
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        let c = self.live();
        c.counters.cells.is_empty() && c.distributions.cells.is_empty() && c.gauges.cells.is_empty()
    }

    /// Sets a gauge at an explicit time (for system metrics).
    pub fn set_gauge_at(&self, name: &Arc<MetricName>, value: i64, timestamp: i64) {
        let mut c = self.live();
        let g = c.gauges.cell(name, GaugeResult::EMPTY);
        *g = g.combine(&GaugeResult { value, timestamp });
    }
}

impl MetricsContainer for MetricsContainerImpl {
    fn inc_counter(&self, name: &Arc<MetricName>, n: i64) {
        let mut c = self.live();
        let v = c.counters.cell(name, 0);
        *v = v.wrapping_add(n);
    }
    fn update_distribution(&self, name: &Arc<MetricName>, values: &DistributionResult) {
        let mut c = self.live();
        let d = c.distributions.cell(name, DistributionResult::EMPTY);
        *d = d.combine(values);
    }
    fn set_gauge(&self, name: &Arc<MetricName>, value: i64) {
        self.set_gauge_at(name, value, weir_sdk::time::now_millis());
    }
}

/// The metrics of a whole job, per step: one of attempted or committed.
#[derive(Debug, Default)]
pub struct MetricsStepMap {
    steps: Mutex<BTreeMap<Option<String>, Cells>>,
}

impl MetricsStepMap {
    /// Merges a finished unit of work's container for `step` (each container exactly once).
    pub fn merge(&self, step: Option<&str>, container: &MetricsContainerImpl) {
        let cells = container.cells();
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        steps.entry(step.map(String::from)).or_default().merge(&cells);
    }

    fn snapshot(&self) -> BTreeMap<Option<String>, Cells> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A job's attempted and committed metrics: what `PipelineResult::metrics()` serves.
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Every attempt.
    pub attempted: MetricsStepMap,
    /// Committed work only.
    pub committed: MetricsStepMap,
    /// Whether this runner tracks committed values.
    pub supports_committed: bool,
    /// What the other processes of a distributed job last reported, by process: their
    /// cumulative results, added to this process's in [`MetricsSource::snapshot`].
    remote: Mutex<BTreeMap<usize, MetricQueryResults>>,
}

impl JobMetrics {
    /// Metrics of a runner that tracks committed values.
    pub fn with_committed() -> Arc<Self> {
        Arc::new(JobMetrics { supports_committed: true, ..Default::default() })
    }

    /// Sets what process `process` of a distributed job reports: its cumulative results so far
    /// (each report replaces the last).
    pub fn set_remote(&self, process: usize, results: MetricQueryResults) {
        self.remote.lock().unwrap_or_else(|e| e.into_inner()).insert(process, results);
    }

    /// This process's own results, without what other processes reported.
    pub fn local_snapshot(&self) -> MetricQueryResults {
        self.snapshot_of_maps()
    }

    /// Merges a unit of work's container: into attempted always, into committed if it
    /// committed.
    pub fn record(&self, step: Option<&str>, container: &MetricsContainerImpl, committed: bool) {
        self.attempted.merge(step, container);
        if committed && self.supports_committed {
            self.committed.merge(step, container);
        }
    }
}

impl MetricsSource for JobMetrics {
    fn snapshot(&self) -> MetricQueryResults {
        let mut out = self.snapshot_of_maps();
        for r in self.remote.lock().unwrap_or_else(|e| e.into_inner()).values() {
            merge_results(&mut out, r);
        }
        out
    }
}

/// Adds `b`'s results into `a`: counters and distributions add up, a gauge keeps its latest
/// value.
pub fn merge_results(a: &mut MetricQueryResults, b: &MetricQueryResults) {
    fn merge<T: Copy>(into: &mut Vec<MetricResult<T>>, from: &[MetricResult<T>], f: impl Fn(T, T) -> T, empty: T) {
        let mut at: HashMap<MetricKey, usize> = into.iter().enumerate().map(|(i, r)| (r.key.clone(), i)).collect();
        for r in from {
            match at.get(&r.key) {
                Some(&i) => {
                    let x = &mut into[i];
                    x.attempted = f(x.attempted, r.attempted);
                    x.committed = match (x.committed, r.committed) {
                        (None, None) => None,
                        (c, d) => Some(f(c.unwrap_or(empty), d.unwrap_or(empty))),
                    };
                }
                None => {
                    at.insert(r.key.clone(), into.len());
                    into.push(r.clone());
                }
            }
        }
    }
    merge(&mut a.counters, &b.counters, |x, y| x.wrapping_add(y), 0);
    merge(&mut a.distributions, &b.distributions, |x, y| x.combine(&y), DistributionResult::EMPTY);
    merge(&mut a.gauges, &b.gauges, |x, y| x.combine(&y), GaugeResult::EMPTY);
}

impl JobMetrics {
    fn snapshot_of_maps(&self) -> MetricQueryResults {
        let attempted = self.attempted.snapshot();
        let committed = self.committed.snapshot();
        let mut out = MetricQueryResults::default();
        for (step, cells) in &attempted {
            let c = committed.get(step);
            let key = |name: &MetricName| MetricKey { step: step.clone(), name: name.clone() };
            for (name, v) in &cells.counters {
                let committed =
                    self.supports_committed.then(|| c.and_then(|c| c.counters.get(name)).copied().unwrap_or(0));
                out.counters.push(MetricResult { key: key(name), attempted: *v, committed });
            }
            for (name, v) in &cells.distributions {
                let committed = self
                    .supports_committed
                    .then(|| c.and_then(|c| c.distributions.get(name)).copied().unwrap_or(DistributionResult::EMPTY));
                out.distributions.push(MetricResult { key: key(name), attempted: *v, committed });
            }
            for (name, v) in &cells.gauges {
                let committed = self
                    .supports_committed
                    .then(|| c.and_then(|c| c.gauges.get(name)).copied().unwrap_or(GaugeResult::EMPTY));
                out.gauges.push(MetricResult { key: key(name), attempted: *v, committed });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_processes_reports_add_up_with_this_ones() {
        let name = Arc::new(MetricName::new("ns", "c").unwrap());
        let process = |n: i64, at: i64| {
            let job = JobMetrics::with_committed();
            let c = MetricsContainerImpl::new();
            c.inc_counter(&name, n);
            c.update_distribution(&name, &DistributionResult::of(n));
            c.set_gauge_at(&name, n, at);
            job.record(Some("Step"), &c, true);
            job
        };
        let zero = process(1, 300);
        zero.set_remote(1, process(10, 100).local_snapshot());
        zero.set_remote(2, process(100, 200).local_snapshot());
        // A later report of a process replaces its earlier one.
        zero.set_remote(2, process(1000, 200).local_snapshot());
        let r = zero.snapshot();
        assert_eq!(r.counter("Step", "ns", "c").unwrap().attempted, 1011);
        assert_eq!(r.counter("Step", "ns", "c").unwrap().committed, Some(1011));
        let d = r.distribution("Step", "ns", "c").unwrap().attempted;
        assert_eq!((d.sum, d.count, d.min, d.max), (1011, 3, 1, 1000));
        // The gauge set last wins, wherever it was set.
        assert_eq!(r.gauge("Step", "ns", "c").unwrap().attempted.value, 1);
        assert_eq!(zero.local_snapshot().counter("Step", "ns", "c").unwrap().attempted, 1);
    }

    #[test]
    fn attempted_counts_every_try_committed_only_commits() {
        let job = JobMetrics::with_committed();
        let name = Arc::new(MetricName::new("ns", "c").unwrap());
        for committed in [false, true] {
            let c = MetricsContainerImpl::new();
            c.inc_counter(&name, 2);
            c.update_distribution(&name, &DistributionResult::of(5));
            c.set_gauge_at(&name, 7, 100);
            job.record(Some("Step"), &c, committed);
        }
        let r = job.snapshot();
        assert_eq!(r.counter("Step", "ns", "c").unwrap().attempted, 4);
        assert_eq!(r.counter("Step", "ns", "c").unwrap().committed, Some(2));
        let d = r.distribution("Step", "ns", "c").unwrap();
        assert_eq!(d.attempted, DistributionResult { sum: 10, count: 2, min: 5, max: 5 });
        assert_eq!(d.committed.unwrap().count, 1);
        assert_eq!(r.gauge("Step", "ns", "c").unwrap().attempted, GaugeResult { value: 7, timestamp: 100 });
    }

    #[test]
    fn attempted_only_runners_report_no_committed() {
        let job = Arc::new(JobMetrics::default());
        let c = MetricsContainerImpl::new();
        c.inc_counter(&Arc::new(MetricName::new("ns", "c").unwrap()), 1);
        job.record(None, &c, true);
        let r = job.snapshot();
        assert!(r.counters[0].committed().is_err());
    }
}
