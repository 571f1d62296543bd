//! Metrics containers: one per step per unit of work, merged into a job's attempted and
//! committed step maps.
//!
//! A runner gives every bundle (or batch partition) a fresh [`MetricsContainerImpl`] bound
//! around its calls into user code. When the work ends, the container is merged into the job's
//! *attempted* map; only when the work commits is it merged into the *committed* map too, so a
//! retried or failed bundle is never counted as committed. Containers are merged cumulatively,
//! so each fresh container must be merged exactly once.

use std::collections::BTreeMap;
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

/// The metrics of one step (or of no step) in one unit of work.
#[derive(Debug, Default)]
pub struct MetricsContainerImpl {
    cells: Mutex<Cells>,
}

impl MetricsContainerImpl {
    /// An empty container.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn cells(&self) -> std::sync::MutexGuard<'_, Cells> {
        self.cells.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        let c = self.cells();
        c.counters.is_empty() && c.distributions.is_empty() && c.gauges.is_empty()
    }

    /// Sets a gauge at an explicit time (for system metrics).
    pub fn set_gauge_at(&self, name: &MetricName, value: i64, timestamp: i64) {
        let mut c = self.cells();
        let g = c.gauges.entry(name.clone()).or_insert(GaugeResult::EMPTY);
        *g = g.combine(&GaugeResult { value, timestamp });
    }
}

impl MetricsContainer for MetricsContainerImpl {
    fn inc_counter(&self, name: &MetricName, n: i64) {
        let mut c = self.cells();
        if let Some(v) = c.counters.get_mut(name) {
            *v = v.wrapping_add(n);
        } else {
            c.counters.insert(name.clone(), n);
        }
    }
    fn update_distribution(&self, name: &MetricName, value: i64) {
        let mut c = self.cells();
        let d = c.distributions.entry(name.clone()).or_insert(DistributionResult::EMPTY);
        *d = d.combine(&DistributionResult { sum: value, count: 1, min: value, max: value });
    }
    fn set_gauge(&self, name: &MetricName, value: i64) {
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
        let cells = container.cells().clone();
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
}

impl JobMetrics {
    /// Metrics of a runner that tracks committed values.
    pub fn with_committed() -> Arc<Self> {
        Arc::new(JobMetrics { supports_committed: true, ..Default::default() })
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
    fn attempted_counts_every_try_committed_only_commits() {
        let job = JobMetrics::with_committed();
        let name = MetricName::new("ns", "c").unwrap();
        for committed in [false, true] {
            let c = MetricsContainerImpl::new();
            c.inc_counter(&name, 2);
            c.update_distribution(&name, 5);
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
        c.inc_counter(&MetricName::new("ns", "c").unwrap(), 1);
        job.record(None, &c, true);
        let r = job.snapshot();
        assert!(r.counters[0].committed().is_err());
    }
}
