//! The launcher's HTML reports in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) renders a run's report and a history, the test reads the rendered DOM,
//! checks from Chromium's network log that the pages requested nothing, and keeps screenshots
//! in `target/test-artifacts/`. Without Chromium the test is skipped, except under CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use weir_nexmark::launcher::run;

fn chromium() -> Option<&'static str> {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("CI").is_none(), "chromium is not installed (Debian package chromium)");
        eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
        return None;
    }
    Some("chromium")
}

/// Chromium headless with the flags a closed machine needs, a fresh profile, and `extra`.
fn browse(dir: &Path, page: &Path, extra: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir_in(dir).unwrap();
    Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs")
}

/// The rendered DOM of `page`, and the http(s) URLs the page asked for (Chromium's own service
/// hosts, which it calls whatever it shows, are left out).
fn render(dir: &Path, page: &Path) -> (String, Vec<String>) {
    let log = dir.join(format!("{}.netlog.json", page.file_name().unwrap().to_string_lossy()));
    let out = browse(dir, page, &["--dump-dom".into(), format!("--log-net-log={}", log.display())]);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let net = std::fs::read_to_string(&log).unwrap_or_default();
    let own = ["google.com", "googleapis.com", "gstatic.com", "gvt1.com"];
    let requested = net
        .split("\"url\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .filter(|u| {
            let host = u.split('/').nth(2).unwrap_or("");
            !own.iter().any(|o| host == *o || host.ends_with(&format!(".{o}")))
        })
        .map(str::to_string)
        .collect();
    (String::from_utf8(out.stdout).unwrap(), requested)
}

fn screenshot(dir: &Path, page: &Path, name: &str) {
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join(name);
    let out = browse(dir, page, &["--window-size=1300,1300".into(), format!("--screenshot={}", png.display())]);
    assert!(out.status.success() && png.is_file(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn run_and_history_reports_render_offline_in_chromium() {
    if chromium().is_none() {
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

    let (dom, requested) = render(d, &report);
    assert!(requested.is_empty(), "the report asked for {requested:?}");
    for q in ["PASSTHROUGH", "HOT_ITEMS", "PROCESSING_TIME_WINDOWS"] {
        assert!(dom.contains(&format!("data-query=\"{q}\"")), "{q}'s row is in the rendered report");
        assert!(dom.contains(&format!("data-label=\"{q}\"")), "{q}'s bar is in the chart");
    }
    assert_eq!(dom.matches("class=\"pass\">passed<").count(), 2, "two queries checked against their models");
    assert!(dom.contains("no model"), "PROCESSING_TIME_WINDOWS has none");
    assert!(dom.contains("vs baseline"), "the baseline's columns");
    screenshot(d, &report, "nexmark-report.png");

    let (dom, requested) = render(d, &history);
    assert!(requested.is_empty(), "the history asked for {requested:?}");
    for q in ["PASSTHROUGH", "HOT_ITEMS", "PROCESSING_TIME_WINDOWS"] {
        let name = format!("{q} (microbatch, batch)");
        assert_eq!(dom.matches(&format!("data-name=\"{name}\" data-points=\"2\"")).count(), 2, "{q}'s two lines");
    }
    screenshot(d, &history, "nexmark-history.png");
}
