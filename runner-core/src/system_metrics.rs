//! Metrics Weir reports about every step, in the `weir` namespace (beyond Beam's user
//! metrics): elements and estimated bytes in and out, dropped-late elements (see
//! [`crate::operator::count_drops`]), input and output watermarks and the output watermark's lag
//! behind processing time, and state size; and every stateful step's state store figures of its
//! last batch or epoch ([`state_operator`]), as Spark's `StreamingQueryProgress` names them.

use std::sync::Arc;

use crate::metrics::MetricsContainerImpl;
use weir_sdk::kernel::{Batch, CollectionOps};
use weir_sdk::metrics::{MetricName, MetricsContainer};
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};

/// Namespace of the metrics Weir reports about pipelines (beyond user metrics).
pub const SYSTEM_NAMESPACE: &str = "weir";

/// Every system metric's name.
const NAMES: [&str; 9] = [
    "elementsIn",
    "elementsOut",
    "bytesIn",
    "bytesOut",
    "inputWatermark",
    "outputWatermark",
    "watermarkLagMs",
    "stateRows",
    "stateBytes",
];

/// The metric `n`: one of [`NAMES`] is built once (these are counted for every bundle of every
/// step), any other each time.
fn name(n: &str) -> Option<Arc<MetricName>> {
    let build = |n: &str| MetricName::new(SYSTEM_NAMESPACE, n).ok().map(Arc::new);
    static BUILT: std::sync::OnceLock<Vec<Option<Arc<MetricName>>>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| NAMES.iter().map(|n| build(n)).collect());
    match NAMES.iter().position(|k| *k == n) {
        Some(i) => built[i].clone(),
        None => build(n),
    }
}

/// Adds a batch to the step's `elementsIn`/`bytesIn` (or `elementsOut`/`bytesOut`) counters.
/// Bytes are estimated from the encoded size of a sample of the batch.
pub fn count_batch(container: &MetricsContainerImpl, ops: &dyn CollectionOps, b: &Batch, output: bool) {
    let n = b.len();
    if n == 0 {
        return;
    }
    let (elements, bytes) = if output { ("elementsOut", "bytesOut") } else { ("elementsIn", "bytesIn") };
    if let Some(m) = name(elements) {
        container.inc_counter(&m, n as i64);
    }
    if let Some(m) = name(bytes) {
        container.inc_counter(&m, ops.estimated_bytes(b) as i64);
    }
}

/// Sets the step's `inputWatermark`, `outputWatermark` and `watermarkLagMs` gauges.
pub fn watermarks(container: &MetricsContainerImpl, input: Timestamp, output: Timestamp, now: Timestamp) {
    for (n, v) in [("inputWatermark", input), ("outputWatermark", output)] {
        if let Some(m) = name(n) {
            container.set_gauge_at(&m, v, now);
        }
    }
    if output > MIN_TIMESTAMP && output < MAX_TIMESTAMP {
        if let Some(m) = name("watermarkLagMs") {
            container.set_gauge_at(&m, (now - output).max(0), now);
        }
    }
}

/// Sets the step's `stateRows` and `stateBytes` gauges.
pub fn state(container: &MetricsContainerImpl, rows: usize, bytes: usize, now: Timestamp) {
    for (n, v) in [("stateRows", rows), ("stateBytes", bytes)] {
        if let Some(m) = name(n) {
            container.set_gauge_at(&m, v as i64, now);
        }
    }
}

/// Sets a stateful step's gauges from its part of the last batch's (epoch's) progress: Spark's
/// state store metrics by their names (`numRowsTotal`, `numRowsUpdated`, `numRowsRemoved`,
/// `numRowsDroppedByWatermark`, `allUpdatesTimeMs`, `allRemovalsTimeMs`, `commitTimeMs`,
/// `memoryUsedBytes`, `numStateStoreInstances`) and its custom metrics by theirs, so every
/// metrics sink has them.
pub fn state_operator(container: &MetricsContainerImpl, op: &crate::progress::StateOperatorProgress, now: Timestamp) {
    let fixed = [
        ("numRowsTotal", op.num_rows_total),
        ("numRowsUpdated", op.num_rows_updated),
        ("numRowsRemoved", op.num_rows_removed),
        ("numRowsDroppedByWatermark", op.num_rows_dropped_by_watermark),
        ("allUpdatesTimeMs", op.all_updates_time_ms),
        ("allRemovalsTimeMs", op.all_removals_time_ms),
        ("commitTimeMs", op.commit_time_ms),
        ("memoryUsedBytes", op.memory_used_bytes),
        ("numStateStoreInstances", op.num_state_store_instances),
    ];
    let custom = op.custom_metrics.iter().map(|(k, v)| (k.as_str(), *v));
    for (n, v) in fixed.into_iter().chain(custom) {
        if let Some(m) = name(n) {
            container.set_gauge_at(&m, i64::try_from(v).unwrap_or(i64::MAX), now);
        }
    }
}
