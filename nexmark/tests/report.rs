//! The launcher's HTML reports in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) renders a run's report and a history, the test reads the rendered DOM,
//! checks from Chromium's network log that the pages requested nothing, and keeps screenshots
//! in `target/test-artifacts/`. Without Chromium the test is skipped, except under CI.

mod browser;

use browser::{chromium, render, screenshot};
use weir_nexmark::launcher::run;

fn file_url(page: &std::path::Path) -> String {
    format!("file://{}", page.display())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn run_and_history_reports_render_offline_in_chromium() {
    if !chromium() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (p1, p2, report, history) = (d.join("p1.json"), d.join("p2.json"), d.join("run.html"), d.join("history.html"));
    let queries = ["--query", "0", "--query", "5", "--query", "12", "--num-events", "5000", "--check"];
    let mut first = args(&queries);
    first.extend(args(&["--perf-file", p1.to_str().unwrap()]));
    assert_eq!(run(first), 0);
    let mut second = args(&queries);
    second.extend(args(&["--perf-file", p2.to_str().unwrap(), "--baseline-file", p1.to_str().unwrap()]));
    second.extend(args(&["--report", report.to_str().unwrap()]));
    assert_eq!(run(second), 0);
    let history_args =
        ["--report", history.to_str().unwrap(), "--report-history", p1.to_str().unwrap(), p2.to_str().unwrap()];
    assert_eq!(run(args(&history_args)), 0);

    let (dom, requested) = render(&file_url(&report), None, 2500);
    assert!(requested.is_empty(), "the report asked for {requested:?}");
    for q in ["PASSTHROUGH", "HOT_ITEMS", "PROCESSING_TIME_WINDOWS"] {
        assert!(dom.contains(&format!("data-query=\"{q}\"")), "{q}'s row is in the rendered report");
        assert!(dom.contains(&format!("data-label=\"{q}\"")), "{q}'s bar is in the chart");
    }
    assert_eq!(dom.matches("class=\"pass\">passed<").count(), 2, "two queries checked against their models");
    assert!(dom.contains("no model"), "PROCESSING_TIME_WINDOWS has none");
    assert!(dom.contains("vs baseline"), "the baseline's columns");
    screenshot(&file_url(&report), "nexmark-report.png", (1300, 1300));

    let (dom, requested) = render(&file_url(&history), None, 2500);
    assert!(requested.is_empty(), "the history asked for {requested:?}");
    for q in ["PASSTHROUGH", "HOT_ITEMS", "PROCESSING_TIME_WINDOWS"] {
        let name = format!("{q} (microbatch, batch)");
        assert_eq!(dom.matches(&format!("data-name=\"{name}\" data-points=\"2\"")).count(), 2, "{q}'s two lines");
    }
    screenshot(&file_url(&history), "nexmark-history.png", (1300, 1300));
}
