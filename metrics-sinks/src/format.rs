//! Wire formats: Beam's MetricsHttpSink JSON body, MetricsGraphiteSink lines, and Java's double
//! formatting they both use.

use serde_json::{json, Map, Value};
use weir_sdk::metrics::{MetricKey, MetricQueryResults, MetricResult};
use weir_sdk::time::iso8601;

/// A double as Java's `Double.toString` writes it: `5.0`, `6.25`, `1.2345E7`, `NaN`.
pub fn java_double(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let a = x.abs();
    if a == 0.0 || (1e-3..1e7).contains(&a) {
        let s = format!("{x}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = if mantissa.contains('.') { mantissa.to_string() } else { format!("{mantissa}.0") };
        format!("{mantissa}E{exp}")
    }
}

fn element<T>(r: &MetricResult<T>, value: impl Fn(&T) -> Value) -> Value {
    // Key order as Beam's serializer writes it: attempted, [committed], name {name, namespace}, step.
    let mut m = Map::new();
    m.insert("attempted".into(), value(&r.attempted));
    if let Some(c) = &r.committed {
        m.insert("committed".into(), value(c));
    }
    m.insert("name".into(), json!({ "name": r.key.name.name, "namespace": r.key.name.namespace }));
    m.insert("step".into(), r.key.step.clone().map(Value::String).unwrap_or(Value::Null));
    Value::Object(m)
}

/// The JSON body of Beam's MetricsHttpSink: top-level keys sorted, one compact line.
pub fn http_json(r: &MetricQueryResults) -> String {
    let counters: Vec<Value> = r.counters.iter().map(|c| element(c, |v| json!(v))).collect();
    let distributions: Vec<Value> = r
        .distributions
        .iter()
        .map(|d| {
            element(d, |v| {
                let mean = v.mean();
                let mean = if mean.is_nan() { json!("NaN") } else { json!(mean) };
                json!({ "count": v.count, "max": v.max, "mean": mean, "min": v.min, "sum": v.sum })
            })
        })
        .collect();
    let gauges: Vec<Value> = r
        .gauges
        .iter()
        .map(|g| element(g, |v| json!({ "timestamp": iso8601(v.timestamp), "value": v.value })))
        .collect();
    let body = json!({ "counters": counters, "distributions": distributions, "gauges": gauges, "stringSets": [] });
    body.to_string()
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_ws = false;
    for c in s.chars() {
        if c.is_whitespace() {
            if !in_ws {
                out.push('_');
            }
            in_ws = true;
        } else {
            out.push(c);
            in_ws = false;
        }
    }
    out
}

fn path(kind: &str, key: &MetricKey, which: &str, value_type: &str) -> String {
    format!(
        "beam.{kind}.{}.{}.{}.{which}.{value_type}",
        escape(&key.name.namespace),
        escape(&key.name.name),
        escape(key.step.as_deref().unwrap_or("null"))
    )
}

/// The lines of Beam's MetricsGraphiteSink for one push at `now_secs`: counters, gauges (at
/// their own time), then distributions (min, max, count, sum, mean); a committed line before
/// its attempted twin when committed values are known.
pub fn graphite_lines(r: &MetricQueryResults, now_secs: i64) -> String {
    let mut out = String::new();
    let mut line = |p: String, v: String, ts: i64| {
        out.push_str(&format!("{p} {v} {ts}\n"));
    };
    for c in &r.counters {
        if let Some(v) = c.committed {
            line(path("counter", &c.key, "committed", "value"), v.to_string(), now_secs);
        }
        line(path("counter", &c.key, "attempted", "value"), c.attempted.to_string(), now_secs);
    }
    for g in &r.gauges {
        if let Some(v) = g.committed {
            line(path("gauge", &g.key, "committed", "value"), v.value.to_string(), v.timestamp.div_euclid(1000));
        }
        line(
            path("gauge", &g.key, "attempted", "value"),
            g.attempted.value.to_string(),
            g.attempted.timestamp.div_euclid(1000),
        );
    }
    for d in &r.distributions {
        let stats = |v: &weir_sdk::metrics::DistributionResult| {
            [
                ("min", v.min.to_string()),
                ("max", v.max.to_string()),
                ("count", v.count.to_string()),
                ("sum", v.sum.to_string()),
                ("mean", java_double(v.mean())),
            ]
        };
        let committed = d.committed.as_ref().map(stats);
        for (i, (vt, v)) in stats(&d.attempted).into_iter().enumerate() {
            if let Some(c) = &committed {
                line(path("distribution", &d.key, "committed", vt), c[i].1.clone(), now_secs);
            }
            line(path("distribution", &d.key, "attempted", vt), v, now_secs);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::metrics::{DistributionResult, GaugeResult, MetricName};

    fn key(ns: &str, n: &str, step: &str) -> MetricKey {
        MetricKey { step: Some(step.into()), name: MetricName::new(ns, n).unwrap() }
    }

    fn example(committed: bool) -> MetricQueryResults {
        MetricQueryResults {
            counters: vec![MetricResult {
                key: key("ns1", "n1", "s1"),
                attempted: 20,
                committed: committed.then_some(10),
            }],
            distributions: vec![MetricResult {
                key: key("ns1", "n2", "s2"),
                attempted: DistributionResult { sum: 25, count: 4, min: 3, max: 9 },
                committed: None,
            }],
            gauges: vec![MetricResult {
                key: key("ns1", "n3", "s3"),
                attempted: GaugeResult { value: 120, timestamp: 345_862_800 },
                committed: None,
            }],
        }
    }

    #[test]
    fn http_body_matches_beams_example() {
        assert_eq!(
            http_json(&example(false)),
            r#"{"counters":[{"attempted":20,"name":{"name":"n1","namespace":"ns1"},"step":"s1"}],"distributions":[{"attempted":{"count":4,"max":9,"mean":6.25,"min":3,"sum":25},"name":{"name":"n2","namespace":"ns1"},"step":"s2"}],"gauges":[{"attempted":{"timestamp":"1970-01-05T00:04:22.800Z","value":120},"name":{"name":"n3","namespace":"ns1"},"step":"s3"}],"stringSets":[]}"#
        );
        assert!(http_json(&example(true))
            .contains(r#"{"attempted":20,"committed":10,"name":{"name":"n1","namespace":"ns1"},"step":"s1"}"#));
    }

    #[test]
    fn graphite_lines_match_beams_example() {
        assert_eq!(
            graphite_lines(&example(false), 1_700_000_000),
            "beam.counter.ns1.n1.s1.attempted.value 20 1700000000\n\
             beam.gauge.ns1.n3.s3.attempted.value 120 345862\n\
             beam.distribution.ns1.n2.s2.attempted.min 3 1700000000\n\
             beam.distribution.ns1.n2.s2.attempted.max 9 1700000000\n\
             beam.distribution.ns1.n2.s2.attempted.count 4 1700000000\n\
             beam.distribution.ns1.n2.s2.attempted.sum 25 1700000000\n\
             beam.distribution.ns1.n2.s2.attempted.mean 6.25 1700000000\n"
        );
        let with_committed = graphite_lines(&example(true), 1);
        assert!(with_committed
            .starts_with("beam.counter.ns1.n1.s1.committed.value 10 1\nbeam.counter.ns1.n1.s1.attempted.value 20 1\n"));
    }

    #[test]
    fn whitespace_becomes_underscores_and_dots_stay() {
        let r = MetricQueryResults {
            counters: vec![MetricResult {
                key: key("org.example Fn", "my \t name", "Outer/Inner(x)"),
                attempted: 1,
                committed: None,
            }],
            ..Default::default()
        };
        assert_eq!(graphite_lines(&r, 5), "beam.counter.org.example_Fn.my_name.Outer/Inner(x).attempted.value 1 5\n");
    }

    #[test]
    fn java_doubles() {
        assert_eq!(java_double(5.0), "5.0");
        assert_eq!(java_double(6.25), "6.25");
        assert_eq!(java_double(12_345_000.0), "1.2345E7");
        assert_eq!(java_double(f64::NAN), "NaN");
        assert_eq!(java_double(0.0001), "1.0E-4");
    }
}

fn prom_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn prom_labels(key: &MetricKey, which: &str) -> String {
    format!(
        "namespace=\"{}\",name=\"{}\",step=\"{}\",value=\"{which}\"",
        prom_label(&key.name.namespace),
        prom_label(&key.name.name),
        prom_label(key.step.as_deref().unwrap_or(""))
    )
}

fn prom_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{x}")
    }
}

/// The Prometheus text exposition format (for a Pushgateway): Beam counters and gauges as
/// `gauge`s (Beam counters may go down), distributions as a summary without quantiles plus
/// min/max gauges; Beam's namespace, name and step in labels, and `value` telling attempted
/// from committed.
pub fn prometheus_text(r: &MetricQueryResults) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<String>| {
        if samples.is_empty() {
            return;
        }
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for s in samples {
            out.push_str(&s);
            out.push('\n');
        }
    };
    let both = |committed: bool| if committed { vec!["attempted", "committed"] } else { vec!["attempted"] };
    let mut counters = Vec::new();
    for c in &r.counters {
        for which in both(c.committed.is_some()) {
            let v = if which == "committed" { c.committed.unwrap_or(0) } else { c.attempted };
            counters.push(format!("beam_counter{{{}}} {v}", prom_labels(&c.key, which)));
        }
    }
    family("beam_counter", "gauge", "Beam counters (may decrease).", counters);
    let mut gauges = Vec::new();
    for g in &r.gauges {
        for which in both(g.committed.is_some()) {
            let v = if which == "committed" { g.committed.unwrap_or(g.attempted) } else { g.attempted };
            // No sample timestamp: a Pushgateway refuses pushed metrics that carry one (400
            // "pushed metrics must not have timestamps"); Prometheus stamps them when it scrapes.
            gauges.push(format!("beam_gauge{{{}}} {}", prom_labels(&g.key, which), v.value));
        }
    }
    family("beam_gauge", "gauge", "Beam gauges.", gauges);
    let mut summary = Vec::new();
    let mut mins = Vec::new();
    let mut maxs = Vec::new();
    for d in &r.distributions {
        for which in both(d.committed.is_some()) {
            let v = if which == "committed" { d.committed.unwrap_or(d.attempted) } else { d.attempted };
            let l = prom_labels(&d.key, which);
            summary.push(format!("beam_distribution_sum{{{l}}} {}", v.sum));
            summary.push(format!("beam_distribution_count{{{l}}} {}", v.count));
            if v.count > 0 {
                mins.push(format!("beam_distribution_min{{{l}}} {}", prom_float(v.min as f64)));
                maxs.push(format!("beam_distribution_max{{{l}}} {}", prom_float(v.max as f64)));
            }
        }
    }
    family("beam_distribution", "summary", "Beam distributions.", summary);
    family("beam_distribution_min", "gauge", "Smallest value of Beam distributions.", mins);
    family("beam_distribution_max", "gauge", "Largest value of Beam distributions.", maxs);
    out
}

/// Prometheus remote-write v1 messages.
pub mod remote_write {
    /// `WriteRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        /// Time series.
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }
    /// `TimeSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Labels, sorted by name, with `__name__`.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// Samples in time order.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }
    /// `Label`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Value.
        #[prost(string, tag = "2")]
        pub value: String,
    }
    /// `Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Value.
        #[prost(double, tag = "1")]
        pub value: f64,
        /// Milliseconds since the epoch.
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// A remote-write request for one push at `now_ms`, protobuf-encoded and snappy
/// block-compressed, ready to POST.
pub fn remote_write_body(r: &MetricQueryResults, now_ms: i64) -> Result<Vec<u8>, snap::Error> {
    use remote_write::{Label, Sample, TimeSeries, WriteRequest};
    let series = |name: &str, key: &MetricKey, which: &str, value: f64, ts: i64| {
        let mut labels = vec![
            Label { name: "__name__".into(), value: name.into() },
            Label { name: "name".into(), value: key.name.name.clone() },
            Label { name: "namespace".into(), value: key.name.namespace.clone() },
            Label { name: "step".into(), value: key.step.clone().unwrap_or_default() },
            Label { name: "value".into(), value: which.into() },
        ];
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        TimeSeries { labels, samples: vec![Sample { value, timestamp: ts }] }
    };
    let mut ts = Vec::new();
    for c in &r.counters {
        ts.push(series("beam_counter", &c.key, "attempted", c.attempted as f64, now_ms));
        if let Some(v) = c.committed {
            ts.push(series("beam_counter", &c.key, "committed", v as f64, now_ms));
        }
    }
    for g in &r.gauges {
        ts.push(series("beam_gauge", &g.key, "attempted", g.attempted.value as f64, g.attempted.timestamp));
    }
    for d in &r.distributions {
        ts.push(series("beam_distribution_sum", &d.key, "attempted", d.attempted.sum as f64, now_ms));
        ts.push(series("beam_distribution_count", &d.key, "attempted", d.attempted.count as f64, now_ms));
    }
    let bytes = prost::Message::encode_to_vec(&WriteRequest { timeseries: ts });
    snap::raw::Encoder::new().compress_vec(&bytes)
}

#[cfg(test)]
mod prometheus_tests {
    use super::*;
    use weir_sdk::metrics::{DistributionResult, GaugeResult, MetricName};

    fn key() -> MetricKey {
        MetricKey { step: Some("Outer/\"q\"".into()), name: MetricName::new("ns", "n").unwrap() }
    }

    #[test]
    fn text_format() {
        let r = MetricQueryResults {
            counters: vec![MetricResult { key: key(), attempted: -3, committed: Some(2) }],
            distributions: vec![MetricResult {
                key: key(),
                attempted: DistributionResult { sum: 10, count: 2, min: 4, max: 6 },
                committed: None,
            }],
            gauges: vec![MetricResult {
                key: key(),
                attempted: GaugeResult { value: 9, timestamp: 1234 },
                committed: None,
            }],
        };
        let text = prometheus_text(&r);
        assert!(text.contains("# TYPE beam_counter gauge\n"), "{text}");
        assert!(
            text.contains(r#"beam_counter{namespace="ns",name="n",step="Outer/\"q\"",value="attempted"} -3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"beam_counter{namespace="ns",name="n",step="Outer/\"q\"",value="committed"} 2"#),
            "{text}"
        );
        // Issue 16: a Pushgateway refuses samples with timestamps.
        assert!(
            text.contains("beam_gauge{namespace=\"ns\",name=\"n\",step=\"Outer/\\\"q\\\"\",value=\"attempted\"} 9\n"),
            "{text}"
        );
        assert!(text.lines().filter(|l| !l.starts_with('#')).all(|l| l.split(' ').count() == 2), "{text}");
        assert!(text.contains("# TYPE beam_distribution summary\n"));
        assert!(
            text.contains(r#"beam_distribution_count{namespace="ns",name="n",step="Outer/\"q\"",value="attempted"} 2"#)
        );
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn remote_write_round_trips() {
        let r = MetricQueryResults {
            counters: vec![MetricResult { key: key(), attempted: 5, committed: None }],
            ..Default::default()
        };
        let body = remote_write_body(&r, 1000).unwrap();
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let req: remote_write::WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(req.timeseries.len(), 1);
        let names: Vec<&str> = req.timeseries[0].labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, vec!["__name__", "name", "namespace", "step", "value"]);
        assert_eq!(req.timeseries[0].samples[0].value, 5.0);
        assert_eq!(req.timeseries[0].samples[0].timestamp, 1000);
    }
}
