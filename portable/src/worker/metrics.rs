//! The harnesses' metrics: every bundle's MonitoringInfos, summed over a job's bundles for the
//! Job API's GetJobMetrics (so that Beam's `result.metrics().query()` works), and user
//! counters, distributions and gauges handed to Weir's own metrics too, where the
//! MetricsPusher sends them to every configured sink.
//!
//! A bundle reports what it did alone, so a job's value is the combination over its bundles: a
//! sum, a distribution's count, sum, minimum and maximum, a gauge's latest value, a string
//! set's union, a bounded trie's merge ([`super::bounded_trie`]). Only bundles that succeeded count, and their output is what the job hands on,
//! so in batch the attempted and the committed values are the same.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::proto::pipeline::v1 as rapi;
use weir_sdk::metrics::{DistributionResult, MetricName};

/// Metric type URNs.
mod types {
    pub const SUM_INT64: &str = "beam:metrics:sum_int64:v1";
    pub const SUM_DOUBLE: &str = "beam:metrics:sum_double:v1";
    pub const DISTRIBUTION_INT64: &str = "beam:metrics:distribution_int64:v1";
    pub const LATEST_INT64: &str = "beam:metrics:latest_int64:v1";
    pub const SET_STRING: &str = "beam:metrics:set_string:v1";
    pub const BOUNDED_TRIE: &str = "beam:metrics:bounded_trie:v1";
}

/// User metric URNs, which Weir's own metrics get too.
const USER_COUNTER: &str = "beam:metric:user:sum_int64:v1";
const USER_DISTRIBUTION: &str = "beam:metric:user:distribution_int64:v1";
const USER_GAUGE: &str = "beam:metric:user:latest_int64:v1";

/// A metric's combined value.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Sum(i64),
    SumDouble(f64),
    Distribution(DistributionResult),
    Latest { timestamp: i64, value: i64 },
    Strings(BTreeSet<String>),
    Trie(super::bounded_trie::Trie),
}

fn varint(input: &mut &[u8]) -> Option<i64> {
    weir_sdk::coders::read_varint(input).ok().map(|v| v as i64)
}

fn write_varint(v: i64, out: &mut Vec<u8>) {
    weir_sdk::coders::write_varint(v as u64, out)
}

impl Value {
    fn decode(kind: &str, mut p: &[u8]) -> Option<Value> {
        let p = &mut p;
        Some(match kind {
            types::SUM_INT64 => Value::Sum(varint(p)?),
            types::SUM_DOUBLE => Value::SumDouble(f64::from_be_bytes(p.get(..8)?.try_into().ok()?)),
            types::DISTRIBUTION_INT64 => {
                let (count, sum, min, max) = (varint(p)?, varint(p)?, varint(p)?, varint(p)?);
                Value::Distribution(DistributionResult { sum, count, min, max })
            }
            types::LATEST_INT64 => Value::Latest { timestamp: varint(p)?, value: varint(p)? },
            types::SET_STRING => {
                let n = i32::from_be_bytes(p.get(..4)?.try_into().ok()?);
                *p = &p[4..];
                let mut set = BTreeSet::new();
                for _ in 0..n.max(0) {
                    let len = usize::try_from(varint(p)?).ok()?;
                    set.insert(String::from_utf8(p.get(..len)?.to_vec()).ok()?);
                    *p = &p[len..];
                }
                Value::Strings(set)
            }
            types::BOUNDED_TRIE => Value::Trie(super::bounded_trie::Trie::decode(p)?),
            _ => return None,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Value::Sum(n) => write_varint(*n, &mut out),
            Value::SumDouble(x) => out.extend_from_slice(&x.to_be_bytes()),
            Value::Distribution(d) => [d.count, d.sum, d.min, d.max].iter().for_each(|v| write_varint(*v, &mut out)),
            Value::Latest { timestamp, value } => [*timestamp, *value].iter().for_each(|v| write_varint(*v, &mut out)),
            Value::Strings(set) => {
                out.extend_from_slice(&(set.len() as i32).to_be_bytes());
                for s in set {
                    write_varint(s.len() as i64, &mut out);
                    out.extend_from_slice(s.as_bytes());
                }
            }
            Value::Trie(t) => out = t.encode(),
        }
        out
    }

    fn combine(&mut self, other: Value) {
        match (self, other) {
            (Value::Sum(a), Value::Sum(b)) => *a = a.wrapping_add(b),
            (Value::SumDouble(a), Value::SumDouble(b)) => *a += b,
            (Value::Distribution(a), Value::Distribution(b)) => *a = a.combine(&b),
            (Value::Latest { timestamp: t, value: v }, Value::Latest { timestamp, value }) => {
                if timestamp >= *t {
                    (*t, *v) = (timestamp, value);
                }
            }
            (Value::Strings(a), Value::Strings(b)) => a.extend(b),
            (Value::Trie(a), Value::Trie(b)) => a.combine(b),
            (a, b) => *a = b,
        }
    }
}

/// A metric's identity: its URN, type and labels.
type Key = (String, String, BTreeMap<String, String>);

/// A job's harness metrics.
#[derive(Default)]
pub struct JobMetrics {
    values: Mutex<BTreeMap<Key, Value>>,
    /// What crossed the data plane.
    pub data_plane: DataPlane,
}

/// What crossed the data plane between Weir and the harnesses: the cost of running the user's
/// code out of process.
#[derive(Default, Debug)]
pub struct DataPlane {
    /// Bundles run.
    pub bundles: std::sync::atomic::AtomicU64,
    /// Elements sent to harnesses.
    pub elements_out: std::sync::atomic::AtomicU64,
    /// Their bytes.
    pub bytes_out: std::sync::atomic::AtomicU64,
    /// Elements received from harnesses.
    pub elements_in: std::sync::atomic::AtomicU64,
    /// Their bytes.
    pub bytes_in: std::sync::atomic::AtomicU64,
    /// Nanoseconds bundles took, from sending to the last output (summed over bundles).
    pub bundle_nanos: std::sync::atomic::AtomicU64,
    /// User state requests harnesses made (reads, appends and clears).
    pub state_requests: std::sync::atomic::AtomicU64,
}

impl DataPlane {
    /// Adds to `counter`.
    pub fn count(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// A line saying what crossed, over `seconds` of the job.
    pub fn summary(&self, seconds: f64) -> String {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let (bundles, eo, bo, ei, bi) = (
            get(&self.bundles),
            get(&self.elements_out),
            get(&self.bytes_out),
            get(&self.elements_in),
            get(&self.bytes_in),
        );
        let busy = get(&self.bundle_nanos) as f64 / 1e9;
        let state = get(&self.state_requests);
        let per_s = |n: u64| n as f64 / seconds.max(1e-9);
        format!(
            "data plane: {bundles} bundles; to harnesses {eo} elements, {bo} bytes; from harnesses {ei} elements, {bi} \
             bytes; {:.0} elements/s and {:.1} MB/s both ways over {seconds:.2} s; bundles busy {busy:.2} s, {:.2} µs per \
             element sent; {state} user state requests",
            per_s(eo + ei),
            per_s(bo + bi) / 1e6,
            busy * 1e6 / (eo.max(1)) as f64,
        )
    }
}

impl JobMetrics {
    /// Adds a successful bundle's MonitoringInfos (those of a type Weir cannot combine are
    /// left out, with a debug log), and hands its user metrics to Weir's metrics.
    pub fn add(&self, infos: &[rapi::MonitoringInfo]) {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        for info in infos {
            let Some(v) = Value::decode(&info.r#type, &info.payload) else {
                tracing::debug!("a harness metric of type {} ({}) is not combined", info.r#type, info.urn);
                continue;
            };
            to_weir(info, &v);
            let labels = info.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let key = (info.urn.clone(), info.r#type.clone(), labels);
            match values.get_mut(&key) {
                Some(old) => old.combine(v),
                None => {
                    values.insert(key, v);
                }
            }
        }
    }

    /// Every metric so far, as MonitoringInfos.
    pub fn monitoring_infos(&self) -> Vec<rapi::MonitoringInfo> {
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        values
            .iter()
            .map(|((urn, kind, labels), v)| rapi::MonitoringInfo {
                urn: urn.clone(),
                r#type: kind.clone(),
                payload: v.encode(),
                labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                start_time: None,
            })
            .collect()
    }
}

/// A user metric of a bundle into Weir's metrics container of the step running it.
fn to_weir(info: &rapi::MonitoringInfo, v: &Value) {
    let Some(container) = weir_sdk::metrics::current_container() else { return };
    let label = |k: &str| info.labels.get(k).cloned().unwrap_or_default();
    let Ok(name) = MetricName::new(label("NAMESPACE"), label("NAME")) else { return };
    let name = Arc::new(name);
    match (info.urn.as_str(), v) {
        (USER_COUNTER, Value::Sum(n)) => container.inc_counter(&name, *n),
        (USER_DISTRIBUTION, Value::Distribution(d)) => container.update_distribution(&name, d),
        (USER_GAUGE, Value::Latest { value, .. }) => container.set_gauge(&name, *value),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(urn: &str, kind: &str, payload: &[u8]) -> rapi::MonitoringInfo {
        rapi::MonitoringInfo {
            urn: urn.into(),
            r#type: kind.into(),
            payload: payload.to_vec(),
            labels: [("NAMESPACE".to_string(), "ns".to_string()), ("NAME".to_string(), "m".to_string())].into(),
            start_time: None,
        }
    }

    #[test]
    fn bundles_combine_as_beam_s_metrics_do() {
        let m = JobMetrics::default();
        // Beam Python's encodings: a counter of 5, a distribution of count 2, sum 4, min 1,
        // max 3, and a string set {"zzz", "a"}.
        m.add(&[
            info(USER_COUNTER, types::SUM_INT64, b"\x05"),
            info(USER_DISTRIBUTION, types::DISTRIBUTION_INT64, b"\x02\x04\x01\x03"),
            info("beam:metric:user:set_string:v1", types::SET_STRING, b"\x00\x00\x00\x02\x03zzz\x01a"),
        ]);
        m.add(&[
            info(USER_COUNTER, types::SUM_INT64, b"\x01"),
            info(USER_DISTRIBUTION, types::DISTRIBUTION_INT64, b"\x01\x07\x07\x07"),
            info("beam:metric:user:set_string:v1", types::SET_STRING, b"\x00\x00\x00\x01\x01b"),
            info("beam:metric:other:v1", "beam:metrics:top_n:v1", b"\xff"),
        ]);
        let infos = m.monitoring_infos();
        assert_eq!(infos.len(), 3, "{infos:?}");
        let payload = |urn: &str| infos.iter().find(|i| i.urn == urn).unwrap().payload.clone();
        assert_eq!(payload(USER_COUNTER), b"\x06");
        assert_eq!(payload(USER_DISTRIBUTION), b"\x03\x0b\x01\x07");
        assert_eq!(payload("beam:metric:user:set_string:v1"), b"\x00\x00\x00\x03\x01a\x01b\x03zzz");
        // A payload cut short is left out, never a panic.
        m.add(&[info(USER_DISTRIBUTION, types::DISTRIBUTION_INT64, b"\x02")]);
        assert_eq!(m.monitoring_infos().len(), 3);
    }
}
