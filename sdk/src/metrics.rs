//! The metrics API: counters, distributions and gauges that user code updates, and the query
//! types runners answer with.
//!
//! A metric handle holds only its name. Each update goes to the *current container*: the
//! runner binds the container of the step being executed (per thread) around every call into
//! user code, so the same handle used in two steps yields two results. An update with no
//! container bound is dropped (as in Beam), with one warning logged per thread.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

/// A metric's name: namespace and name, both non-empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MetricName {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl MetricName {
    /// A name; an empty namespace or name is an error.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Result<Self> {
        let (namespace, name) = (namespace.into(), name.into());
        if namespace.is_empty() {
            return Err(Error::InvalidArgument("Metric namespace must be non-empty".into()));
        }
        if name.is_empty() {
            return Err(Error::InvalidArgument("Metric name must be non-empty".into()));
        }
        Ok(MetricName { namespace, name })
    }
}

impl fmt::Display for MetricName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.namespace, self.name)
    }
}

/// A metric's identity in results: the step that updated it, and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MetricKey {
    /// Full name of the step, `None` for metrics updated outside any step.
    pub step: Option<String>,
    /// The metric's name.
    pub name: MetricName,
}

impl fmt::Display for MetricKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.step.as_deref().unwrap_or(""), self.name)
    }
}

/// Where metric updates go while user code of one step runs. Implemented by runner-core.
///
/// Names come as the handle's shared `Arc`, so that a container can find a metric's cell by
/// pointer on the per-element path instead of comparing names.
pub trait MetricsContainer: Send + Sync {
    /// Adds `n` (possibly negative) to a counter.
    fn inc_counter(&self, name: &Arc<MetricName>, n: i64);
    /// Adds values, given as their aggregate, to a distribution.
    fn update_distribution(&self, name: &Arc<MetricName>, values: &DistributionResult);
    /// Sets a gauge, stamped with the current wall-clock time.
    fn set_gauge(&self, name: &Arc<MetricName>, value: i64);
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn MetricsContainer>>> = const { RefCell::new(None) };
    static WARNED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Binds a container to the current thread until dropped, restoring the previous one.
pub struct ScopedContainer {
    previous: Option<Arc<dyn MetricsContainer>>,
}

impl Drop for ScopedContainer {
    fn drop(&mut self) {
        let prev = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// Binds `container` as the current thread's metrics container (runners call this around every
/// call into user code of a step).
pub fn scoped_container(container: Arc<dyn MetricsContainer>) -> ScopedContainer {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(container));
    ScopedContainer { previous }
}

/// The container bound on this thread, if any: for a runner that hands a step's work to other
/// threads, to bind the same container there with [`scoped_container`].
pub fn current_container() -> Option<Arc<dyn MetricsContainer>> {
    CURRENT.with(|c| c.borrow().clone())
}

fn with_current(f: impl FnOnce(&dyn MetricsContainer)) {
    CURRENT.with(|c| match c.borrow().as_deref() {
        Some(container) => f(container),
        None => {
            if !WARNED.with(|w| w.replace(true)) {
                tracing::warn!("a metric was updated outside any step's container; the update is dropped");
            }
        }
    })
}

/// Creates metric handles.
pub struct Metrics;

impl Metrics {
    /// A counter; an empty namespace or name is an error.
    pub fn counter(namespace: impl Into<String>, name: impl Into<String>) -> Result<Counter> {
        Ok(Counter { name: Arc::new(MetricName::new(namespace, name)?) })
    }
    /// A distribution; an empty namespace or name is an error.
    pub fn distribution(namespace: impl Into<String>, name: impl Into<String>) -> Result<Distribution> {
        Ok(Distribution { name: Arc::new(MetricName::new(namespace, name)?) })
    }
    /// A gauge; an empty namespace or name is an error.
    pub fn gauge(namespace: impl Into<String>, name: impl Into<String>) -> Result<Gauge> {
        Ok(Gauge { name: Arc::new(MetricName::new(namespace, name)?) })
    }
}

/// A signed 64-bit count (it can go down).
#[derive(Clone, Debug)]
pub struct Counter {
    name: Arc<MetricName>,
}

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1)
    }
    /// Adds `n`.
    pub fn inc_by(&self, n: i64) {
        with_current(|c| c.inc_counter(&self.name, n))
    }
    /// Subtracts one.
    pub fn dec(&self) {
        self.inc_by(-1)
    }
    /// Subtracts `n`.
    pub fn dec_by(&self, n: i64) {
        self.inc_by(n.wrapping_neg())
    }
    /// The metric's name.
    pub fn name(&self) -> &MetricName {
        &self.name
    }
}

/// Sum, count, min and max of reported values.
#[derive(Clone, Debug)]
pub struct Distribution {
    name: Arc<MetricName>,
}

impl Distribution {
    /// Reports a value.
    pub fn update(&self, value: i64) {
        self.update_aggregate(&DistributionResult::of(value))
    }
    /// Reports many values at once by their aggregate (Beam's `update(sum, count, min, max)`),
    /// for code that aggregates per bundle instead of reporting every value.
    pub fn update_aggregate(&self, values: &DistributionResult) {
        if values.count > 0 {
            with_current(|c| c.update_distribution(&self.name, values))
        }
    }
    /// The metric's name.
    pub fn name(&self) -> &MetricName {
        &self.name
    }
}

/// The latest reported value, with the time it was reported.
#[derive(Clone, Debug)]
pub struct Gauge {
    name: Arc<MetricName>,
}

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        with_current(|c| c.set_gauge(&self.name, value))
    }
    /// The metric's name.
    pub fn name(&self) -> &MetricName {
        &self.name
    }
}

/// The aggregate of a distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistributionResult {
    /// Sum of values.
    pub sum: i64,
    /// Number of values.
    pub count: i64,
    /// Smallest value (`i64::MAX` when empty).
    pub min: i64,
    /// Largest value (`i64::MIN` when empty).
    pub max: i64,
}

impl DistributionResult {
    /// The identity: no values.
    pub const EMPTY: DistributionResult = DistributionResult { sum: 0, count: 0, min: i64::MAX, max: i64::MIN };

    /// One value.
    #[inline]
    pub fn of(value: i64) -> DistributionResult {
        DistributionResult { sum: value, count: 1, min: value, max: value }
    }

    /// `sum / count`, NaN when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Both aggregates together.
    #[inline]
    pub fn combine(&self, o: &DistributionResult) -> DistributionResult {
        DistributionResult {
            sum: self.sum.wrapping_add(o.sum),
            count: self.count + o.count,
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// A gauge's value and the wall-clock time (ms since epoch) it was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaugeResult {
    /// The value.
    pub value: i64,
    /// When it was set, ms since the epoch.
    pub timestamp: i64,
}

impl GaugeResult {
    /// Never set: value -1 at the epoch.
    pub const EMPTY: GaugeResult = GaugeResult { value: -1, timestamp: 0 };

    /// The later of two gauges; on a tie, `incoming` wins.
    pub fn combine(&self, incoming: &GaugeResult) -> GaugeResult {
        if self.timestamp > incoming.timestamp {
            *self
        } else {
            *incoming
        }
    }
}

/// One metric's attempted and (if the runner supports it) committed value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricResult<T> {
    /// Step and name.
    pub key: MetricKey,
    /// Value over every attempt, including retried work.
    pub attempted: T,
    /// Value over committed work only; `None` when the runner does not track it.
    pub committed: Option<T>,
}

impl<T: Clone> MetricResult<T> {
    /// The committed value, or an error saying the runner does not support committed metrics.
    pub fn committed(&self) -> Result<T> {
        self.committed.clone().ok_or_else(|| {
            Error::NotSupported(
                "This runner does not currently support committed metrics results. Please use 'attempted' instead."
                    .into(),
            )
        })
    }
}

/// The metrics that matched a query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricQueryResults {
    /// Counters.
    pub counters: Vec<MetricResult<i64>>,
    /// Distributions.
    pub distributions: Vec<MetricResult<DistributionResult>>,
    /// Gauges.
    pub gauges: Vec<MetricResult<GaugeResult>>,
}

impl MetricQueryResults {
    /// Whether there is no metric at all.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.distributions.is_empty() && self.gauges.is_empty()
    }

    /// Keeps the results matching `filter`.
    pub fn filter(self, filter: &MetricsFilter) -> Self {
        MetricQueryResults {
            counters: self.counters.into_iter().filter(|r| filter.matches(&r.key)).collect(),
            distributions: self.distributions.into_iter().filter(|r| filter.matches(&r.key)).collect(),
            gauges: self.gauges.into_iter().filter(|r| filter.matches(&r.key)).collect(),
        }
    }

    /// The counter named `namespace:name` in `step`, if any.
    pub fn counter(&self, step: &str, namespace: &str, name: &str) -> Option<&MetricResult<i64>> {
        self.counters.iter().find(|r| is(&r.key, step, namespace, name))
    }
    /// The distribution named `namespace:name` in `step`, if any.
    pub fn distribution(&self, step: &str, namespace: &str, name: &str) -> Option<&MetricResult<DistributionResult>> {
        self.distributions.iter().find(|r| is(&r.key, step, namespace, name))
    }
    /// The gauge named `namespace:name` in `step`, if any.
    pub fn gauge(&self, step: &str, namespace: &str, name: &str) -> Option<&MetricResult<GaugeResult>> {
        self.gauges.iter().find(|r| is(&r.key, step, namespace, name))
    }
}

fn is(key: &MetricKey, step: &str, namespace: &str, name: &str) -> bool {
    key.step.as_deref() == Some(step) && key.name.namespace == namespace && key.name.name == name
}

/// Selects metrics by name and step (Beam's `MetricsFilter`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsFilter {
    names: Vec<(String, Option<String>)>,
    steps: Vec<String>,
}

impl MetricsFilter {
    /// Matches everything.
    pub fn all() -> Self {
        Self::default()
    }
    /// Also matches every metric in `namespace`.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.names.push((namespace.into(), None));
        self
    }
    /// Also matches the metric `namespace:name`.
    pub fn named(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.names.push((namespace.into(), Some(name.into())));
        self
    }
    /// Also matches metrics of `step` and of steps nested in it (by `/`-bounded sub-path).
    pub fn add_step(mut self, step: impl Into<String>) -> Self {
        self.steps.push(step.into());
        self
    }

    /// Beam's `MetricFiltering.matches`.
    pub fn matches(&self, key: &MetricKey) -> bool {
        let step_ok = self.steps.is_empty()
            || key.step.as_deref().is_some_and(|s| self.steps.iter().any(|f| f == s || sub_path_matches(s, f)));
        let name_ok = self.names.is_empty()
            || self
                .names
                .iter()
                .any(|(ns, n)| *ns == key.name.namespace && n.as_ref().is_none_or(|n| *n == key.name.name));
        step_ok && name_ok
    }
}

/// Whether `needle` occurs in `haystack` as whole `/`-separated components. Like Beam, only the
/// first occurrence is examined.
fn sub_path_matches(haystack: &str, needle: &str) -> bool {
    let Some(start) = haystack.find(needle) else {
        return false;
    };
    let end = start + needle.len();
    (start == 0 || haystack.as_bytes()[start - 1] == b'/')
        && (end == haystack.len() || haystack.as_bytes()[end] == b'/')
}

/// Something that can report a pipeline's current metrics.
pub trait MetricsSource: Send + Sync {
    /// Every metric, now.
    fn snapshot(&self) -> MetricQueryResults;
}

/// A pipeline's metrics, queryable while it runs and after it ends.
#[derive(Clone)]
pub struct MetricResults {
    source: Arc<dyn MetricsSource>,
}

impl fmt::Debug for MetricResults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricResults")
    }
}

impl MetricResults {
    /// Results served by `source`.
    pub fn new(source: Arc<dyn MetricsSource>) -> Self {
        MetricResults { source }
    }
    /// The metrics matching `filter`.
    pub fn query_metrics(&self, filter: &MetricsFilter) -> MetricQueryResults {
        self.source.snapshot().filter(filter)
    }
    /// Every metric.
    pub fn all_metrics(&self) -> MetricQueryResults {
        self.source.snapshot()
    }
}

/// Where a metrics pusher sends metrics (Beam's `MetricsSink`). Implement it to add a backend;
/// register a factory with [`register_metrics_sink`] to make it selectable by `--metrics-sink`.
pub trait MetricsSink: Send {
    /// The sink's name, for logs.
    fn name(&self) -> &str;
    /// Writes the current cumulative values of every metric.
    fn write(&mut self, results: &MetricQueryResults) -> std::result::Result<(), crate::error::UserError>;
}

impl<S: MetricsSink + ?Sized> MetricsSink for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn write(&mut self, results: &MetricQueryResults) -> std::result::Result<(), crate::error::UserError> {
        (**self).write(results)
    }
}

/// Builds a sink from the pipeline's options (e.g. its URL or file).
pub type MetricsSinkFactory = fn(&crate::options::PipelineOptions) -> Result<Box<dyn MetricsSink>>;

fn sinks() -> &'static std::sync::RwLock<std::collections::BTreeMap<String, MetricsSinkFactory>> {
    static SINKS: std::sync::OnceLock<std::sync::RwLock<std::collections::BTreeMap<String, MetricsSinkFactory>>> =
        std::sync::OnceLock::new();
    SINKS.get_or_init(Default::default)
}

/// Makes a sink selectable as `--metrics-sink NAME`.
pub fn register_metrics_sink(name: &str, factory: MetricsSinkFactory) {
    sinks().write().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), factory);
}

/// Builds the sinks named by `--metrics-sink`; an unknown name is an error listing the valid ones.
pub fn configured_sinks(options: &crate::options::PipelineOptions) -> Result<Vec<Box<dyn MetricsSink>>> {
    let reg = sinks().read().unwrap_or_else(|e| e.into_inner());
    options
        .metrics
        .sinks
        .iter()
        .map(|name| match reg.get(name) {
            Some(f) => f(options),
            None => Err(Error::Options(format!(
                "unknown metrics sink '{name}'; valid sinks: {}",
                if reg.is_empty() {
                    "(none registered)".to_string()
                } else {
                    reg.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(step: Option<&str>, ns: &str, name: &str) -> MetricKey {
        MetricKey { step: step.map(String::from), name: MetricName::new(ns, name).unwrap() }
    }

    #[test]
    fn names_must_be_non_empty() {
        assert!(Metrics::counter("", "x").unwrap_err().to_string().contains("namespace must be non-empty"));
        assert!(Metrics::gauge("ns", "").unwrap_err().to_string().contains("name must be non-empty"));
    }

    #[test]
    fn sub_path_rules() {
        assert!(sub_path_matches("a/foo/bar/b", "foo/bar"));
        assert!(!sub_path_matches("a/fool/bar/b", "foo/bar"));
        assert!(!sub_path_matches("a/foo/bart/b", "foo/bar"));
        assert!(sub_path_matches("A/B/C/D", "A/B"));
        assert!(sub_path_matches("A/B/C/D", "B/C"));
        assert!(!sub_path_matches("A/B/C/D", "A/C"));
        // Only the first occurrence is examined, as in Beam.
        assert!(!sub_path_matches("x/foo_1/foo", "foo"));
    }

    #[test]
    fn filters() {
        let f = MetricsFilter::all().in_namespace("ns").add_step("Outer");
        assert!(f.matches(&key(Some("Outer/Inner"), "ns", "a")));
        assert!(!f.matches(&key(None, "ns", "a")));
        assert!(!f.matches(&key(Some("Outer"), "other", "a")));
        let g = MetricsFilter::all().named("ns", "a");
        assert!(g.matches(&key(None, "ns", "a")));
        assert!(!g.matches(&key(None, "ns", "b")));
        assert!(MetricsFilter::all().matches(&key(None, "x", "y")));
    }

    #[test]
    fn aggregates() {
        let d = DistributionResult::EMPTY.combine(&DistributionResult { sum: 10, count: 2, min: 3, max: 7 });
        assert_eq!(d, DistributionResult { sum: 10, count: 2, min: 3, max: 7 });
        assert_eq!(d.mean(), 5.0);
        assert!(DistributionResult::EMPTY.mean().is_nan());
        let a = GaugeResult { value: 1, timestamp: 5 };
        let b = GaugeResult { value: 2, timestamp: 5 };
        assert_eq!(a.combine(&b), b);
        assert_eq!(GaugeResult { value: 3, timestamp: 9 }.combine(&b).value, 3);
        let r = MetricResult { key: key(None, "a", "b"), attempted: 1, committed: None };
        assert!(r.committed().unwrap_err().to_string().contains("committed metrics"));
    }
}
