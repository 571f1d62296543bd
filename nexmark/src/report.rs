//! The HTML reports of the launcher: one run (`--report FILE.html`) and the history of many
//! (`--report-history PERF_FILES...`).
//!
//! Each report is one self-contained file: the styles are inline, the charts are SVG drawn
//! here, there is no script, and a Content-Security-Policy forbids the page to load anything,
//! so it opens the same offline, from a mail attachment, or from a CI artifact.

use crate::perf::NexmarkPerf;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One configuration of a run, as the report shows it.
#[derive(Debug, Clone)]
pub struct ReportRow {
    /// The configuration's description (`query:HOT_ITEMS; numEvents:100000`).
    pub conf: String,
    /// Its performance, when it ran.
    pub perf: Option<NexmarkPerf>,
    /// Why it did not run, or failed.
    pub note: Option<String>,
    /// The `--check` verdict: `None` without `--check`.
    pub check: Option<Verdict>,
}

/// What `--check` said of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The results equal the model's.
    Passed,
    /// They do not (the errors say how).
    Failed,
    /// The query has no model.
    NoModel,
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}\
.query-charts{display:inline-block;vertical-align:top;margin:0 18px 12px 0}.query-charts h2{font-size:13px;margin:8px 0}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.slow td{background:#fde2e2}tr.changed td{background:#fff3cd}\
.pass{color:#176f2c}.fail{color:#b00020;font-weight:bold}.muted{color:#777}\
svg text{font:11px system-ui,sans-serif}";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n{body}</body></html>\n",
        esc(title)
    )
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

/// A horizontal bar chart of `(label, value)` pairs, as SVG.
fn bar_chart(id: &str, title: &str, bars: &[(String, f64)]) -> String {
    let (w, row, left) = (820.0, 22.0, 270.0);
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1e-9);
    let h = row * bars.len() as f64 + 30.0;
    let mut s = format!(
        "<svg id=\"{id}\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">",
        esc(title)
    );
    let _ = write!(s, "<text x=\"0\" y=\"14\" font-weight=\"bold\">{}</text>", esc(title));
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = 24.0 + row * i as f64;
        let bw = (w - left - 90.0) * v / max;
        let _ = write!(
            s,
            "<g class=\"bar\" data-label=\"{l}\" data-value=\"{v}\"><text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{l}</text>\
             <rect x=\"{left}\" y=\"{y}\" width=\"{bw:.1}\" height=\"{bh}\" fill=\"#3b6fb6\"></rect>\
             <text x=\"{vx:.1}\" y=\"{ty}\">{}</text></g>",
            fmt_num(*v),
            l = esc(label),
            tx = left - 6.0,
            ty = y + 14.0,
            bh = row - 6.0,
            vx = left + bw + 4.0,
        );
    }
    s.push_str("</svg>");
    s
}

/// A line chart of one series per name over runs `0..n`, as SVG.
fn line_chart(id: &str, title: &str, runs: usize, series: &BTreeMap<String, Vec<Option<f64>>>) -> String {
    let (w, h, left, top, bottom) = (400.0, 150.0, 60.0, 24.0, 20.0);
    let right = if series.len() > 1 { 150.0 } else { 12.0 };
    let max = series.values().flatten().flatten().copied().fold(0.0_f64, f64::max).max(1e-9);
    let x = |i: usize| left + (w - left - right) * if runs > 1 { i as f64 / (runs - 1) as f64 } else { 0.5 };
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / max);
    let colours = ["#3b6fb6", "#d9534f", "#5cb85c", "#f0ad4e", "#6f42c1", "#17a2b8", "#795548", "#e83e8c"];
    let mut s = format!(
        "<svg id=\"{id}\" role=\"img\" aria-label=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">",
        esc(title)
    );
    let _ = write!(s, "<text x=\"0\" y=\"14\" font-weight=\"bold\">{}</text>", esc(title));
    let _ = write!(
        s,
        "<line x1=\"{left}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"></line>\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{b}\" stroke=\"#999\"></line>\
         <text x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{}</text><text x=\"{lx}\" y=\"{b}\" text-anchor=\"end\">0</text>",
        fmt_num(max),
        b = h - bottom,
        r = w - right,
        lx = left - 4.0,
        ty = top + 4.0,
    );
    for (k, (name, values)) in series.iter().enumerate() {
        let colour = colours[k % colours.len()];
        let points: Vec<String> =
            values.iter().enumerate().filter_map(|(i, v)| v.map(|v| format!("{:.1},{:.1}", x(i), y(v)))).collect();
        let _ = write!(
            s,
            "<g class=\"series\" data-name=\"{n}\" data-points=\"{}\"><polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"></polyline>",
            points.len(),
            points.join(" "),
            n = esc(name)
        );
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{colour}\"></circle>");
        }
        if series.len() > 1 {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{}</text>",
                w - right + 8.0,
                top + 14.0 * k as f64 + 8.0,
                esc(name)
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

fn key(p: &NexmarkPerf) -> (String, String, String) {
    (p.query.clone(), p.runner.clone(), p.mode.clone())
}

/// The report of one run: the summary table, a bar chart of events per second, and per
/// configuration its runner, mode, runtime, events/s, results and `--check` verdict; with a
/// baseline, the changes, rows highlighted where the runtime grew by more than
/// `threshold_pct` percent or the result count changed.
pub fn run_report(
    started: &str,
    rows: &[ReportRow],
    baseline: Option<&BTreeMap<(String, String, String), NexmarkPerf>>,
    threshold_pct: f64,
) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "<h1>Nexmark run of {}</h1>", esc(started));
    let ran = rows.iter().filter(|r| r.perf.is_some()).count();
    let failed = rows.iter().filter(|r| r.check == Some(Verdict::Failed) || r.note.is_some()).count();
    let _ = writeln!(b, "<p id=\"summary\">{} configurations, {ran} ran, {failed} failed or not run.</p>", rows.len());
    let bars: Vec<(String, f64)> =
        rows.iter().filter_map(|r| r.perf.as_ref().map(|p| (p.query.clone(), p.events_per_sec.max(0.0)))).collect();
    b.push_str(&bar_chart("events-per-sec", "Events per second", &bars));
    let _ = writeln!(b, "<h2>Configurations</h2>");
    b.push_str("<table id=\"runs\"><tr><th>Conf</th><th class=\"l\">Query</th><th class=\"l\">Runner</th><th class=\"l\">Mode</th>\
                <th>Runtime (s)</th><th>Events/s</th><th>Results</th><th class=\"l\">Check</th>");
    if baseline.is_some() {
        b.push_str("<th>Runtime vs baseline</th><th>Events/s vs baseline</th><th>Results vs baseline</th>");
    }
    b.push_str("<th class=\"l\">Description</th></tr>\n");
    for (i, r) in rows.iter().enumerate() {
        let check = match r.check {
            None => "<span class=\"muted\">not checked</span>".to_string(),
            Some(Verdict::Passed) => "<span class=\"pass\">passed</span>".to_string(),
            Some(Verdict::Failed) => "<span class=\"fail\">FAILED</span>".to_string(),
            Some(Verdict::NoModel) => "<span class=\"muted\">no model</span>".to_string(),
        };
        let Some(p) = &r.perf else {
            let note = r.note.as_deref().unwrap_or("");
            let cols = if baseline.is_some() { 11 } else { 8 };
            let _ = writeln!(
                b,
                "<tr class=\"query\" data-conf=\"{i}\"><td>{i:04}</td><td class=\"l fail\" colspan=\"{cols}\">{}</td><td class=\"l\">{}</td></tr>",
                esc(note),
                esc(&r.conf)
            );
            continue;
        };
        let mut class = String::new();
        let mut deltas = String::new();
        if let Some(base) = baseline {
            match base.get(&key(p)) {
                Some(bp) => {
                    let d = |now: f64, was: f64| if was > 0.0 { (now - was) / was * 100.0 } else { 0.0 };
                    let (rt, ev) = (d(p.runtime_sec, bp.runtime_sec), d(p.events_per_sec, bp.events_per_sec));
                    if rt > threshold_pct {
                        class = " slow".into();
                    } else if p.num_results != bp.num_results {
                        class = " changed".into();
                    }
                    let _ = write!(
                        deltas,
                        "<td>{rt:+.1}%</td><td>{ev:+.1}%</td><td>{:+}</td>",
                        p.num_results - bp.num_results
                    );
                    if class.is_empty() && p.num_results != bp.num_results {
                        class = " changed".into();
                    }
                }
                None => deltas.push_str(
                    "<td class=\"muted\">none</td><td class=\"muted\">none</td><td class=\"muted\">none</td>",
                ),
            }
        }
        let results = if p.num_results < 0 { String::new() } else { p.num_results.to_string() };
        let _ = writeln!(
            b,
            "<tr class=\"query{class}\" data-conf=\"{i}\" data-query=\"{q}\"><td>{i:04}</td><td class=\"l\">{q}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td>{:.2}</td><td>{:.1}</td><td>{results}</td><td class=\"l\">{check}</td>{deltas}<td class=\"l\">{}</td></tr>",
            esc(&p.runner),
            esc(&p.mode),
            p.runtime_sec,
            p.events_per_sec,
            esc(&r.conf),
            q = esc(&p.query),
        );
    }
    b.push_str("</table>\n");
    let errors: Vec<(usize, &String)> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.perf.iter().flat_map(move |p| p.errors.iter().map(move |e| (i, e))))
        .collect();
    if !errors.is_empty() {
        b.push_str("<h2>Errors</h2><ul id=\"errors\">");
        for (i, e) in errors {
            let _ = write!(b, "<li>{i:04}: {}</li>", esc(e));
        }
        b.push_str("</ul>\n");
    }
    if baseline.is_some() {
        let _ = writeln!(
            b,
            "<p class=\"muted\">Red rows ran more than {threshold_pct}% longer than the baseline; yellow rows gave a different number of results.</p>"
        );
    }
    page(&format!("Nexmark run of {started}"), &b)
}

/// The history of many runs (`files`, each a perf file of one or more runs, in order): per
/// query, runner and mode, the runtime and the result count over the runs, as line charts
/// (Beam's performance and output-size dashboards).
pub fn history_report(files: &[(String, Vec<NexmarkPerf>)]) -> String {
    // One point per perf record, in file order: run k is the k-th record of a series.
    let mut runtime: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let mut results: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let runs = files.len();
    for (k, (_, perfs)) in files.iter().enumerate() {
        for p in perfs {
            let name = format!("{} ({}, {})", p.query, p.runner, p.mode);
            for (series, v) in [(&mut runtime, p.runtime_sec), (&mut results, p.num_results as f64)] {
                let s = series.entry(name.clone()).or_insert_with(|| vec![None; runs]);
                s[k] = Some(v.max(0.0));
            }
        }
    }
    let mut b = String::new();
    let _ = writeln!(b, "<h1>Nexmark history of {runs} runs</h1>");
    b.push_str("<ol id=\"runs\">");
    for (f, perfs) in files {
        let _ = write!(b, "<li>{} ({} configurations)</li>", esc(f), perfs.len());
    }
    b.push_str("</ol>\n");
    // Per query (runner, mode): its runtime and its result count over the runs, side by side.
    b.push_str("<div id=\"charts\">");
    for (i, name) in runtime.keys().enumerate() {
        let one = |m: &BTreeMap<String, Vec<Option<f64>>>| -> BTreeMap<String, Vec<Option<f64>>> {
            [(name.clone(), m[name].clone())].into_iter().collect()
        };
        let _ = write!(b, "<section class=\"query-charts\" data-query=\"{}\"><h2>{}</h2>", esc(name), esc(name));
        b.push_str(&line_chart(&format!("runtime-{i}"), "Runtime (s)", runs, &one(&runtime)));
        b.push_str(&line_chart(&format!("results-{i}"), "Results", runs, &one(&results)));
        b.push_str("</section>\n");
    }
    b.push_str("</div>\n");
    b.push_str("<h2>Values</h2><table id=\"values\"><tr><th class=\"l\">Query (runner, mode)</th>");
    for k in 0..runs {
        let _ = write!(b, "<th>Run {}</th>", k + 1);
    }
    b.push_str("</tr>");
    for (name, values) in &runtime {
        let _ = write!(b, "<tr class=\"query\" data-query=\"{0}\"><td class=\"l\">{0}</td>", esc(name));
        let counts = &results[name];
        for (v, n) in values.iter().zip(counts) {
            match (v, n) {
                (Some(v), Some(n)) => {
                    let _ = write!(b, "<td>{v:.2} s, {n} results</td>");
                }
                _ => b.push_str("<td class=\"muted\">-</td>"),
            }
        }
        b.push_str("</tr>\n");
    }
    b.push_str("</table>\n");
    page("Nexmark history", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(query: &str, runtime: f64, results: i64) -> NexmarkPerf {
        serde_json::from_value(serde_json::json!({
            "runtimeSec": runtime, "numEvents": 1000, "eventsPerSec": 1000.0 / runtime, "eventBytesPerSec": 0.0,
            "numResults": results, "resultsPerSec": 0.0, "resultBytesPerSec": 0.0, "startupDelaySec": 0.0,
            "processingDelaySec": 0.0, "shutdownDelaySec": 0.0, "timeDilation": 1.0, "errors": [],
            "snapshots": [], "query": query, "runner": "microbatch", "mode": "batch", "parallelism": 2
        }))
        .unwrap()
    }

    #[test]
    fn a_run_report_marks_slow_and_changed_queries_and_loads_nothing() {
        let rows = vec![
            ReportRow {
                conf: "query:A".into(),
                perf: Some(perf("A", 2.0, 10)),
                note: None,
                check: Some(Verdict::Passed),
            },
            ReportRow {
                conf: "query:B<x>".into(),
                perf: Some(perf("B", 1.0, 7)),
                note: None,
                check: Some(Verdict::Failed),
            },
            ReportRow { conf: "query:C".into(), perf: None, note: Some("error: boom".into()), check: None },
        ];
        let base: BTreeMap<_, _> = [perf("A", 1.0, 10), perf("B", 1.0, 5)].into_iter().map(|p| (key(&p), p)).collect();
        let html = run_report("2026-12-02", &rows, Some(&base), 10.0);
        assert!(html.contains("class=\"query slow\" data-conf=\"0\""), "A is 100% slower");
        assert!(html.contains("class=\"query changed\" data-conf=\"1\""), "B's result count changed");
        assert!(html.contains("query:B&lt;x&gt;") && html.contains("error: boom") && html.contains("FAILED"));
        assert_eq!(html.matches("class=\"bar\"").count(), 2);
        assert!(html.contains("default-src 'none'") && !html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn a_history_draws_a_line_per_query_over_the_runs() {
        let files = vec![
            ("a.json".to_string(), vec![perf("A", 1.0, 10), perf("B", 2.0, 5)]),
            ("b.json".to_string(), vec![perf("A", 1.5, 10)]),
            ("c.json".to_string(), vec![perf("A", 1.2, 11), perf("B", 2.5, 5)]),
        ];
        let html = history_report(&files);
        assert_eq!(html.matches("data-name=\"A (microbatch, batch)\" data-points=\"3\"").count(), 2);
        assert_eq!(html.matches("data-name=\"B (microbatch, batch)\" data-points=\"2\"").count(), 2);
        assert_eq!(html.matches("<li>").count(), 3);
    }
}
