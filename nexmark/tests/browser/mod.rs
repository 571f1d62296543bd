//! Headless Chromium for the page tests (Debian's `chromium`, which `.ci/run` installs): the
//! rendered DOM, the URLs a page asked for, and screenshots kept in `target/test-artifacts/`.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Whether Chromium is here; without it a page test is skipped, except under CI.
pub fn chromium() -> bool {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("CI").is_none(), "chromium is not installed (Debian package chromium)");
        eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
    }
    found
}

/// Chromium headless on `url` with the flags a closed machine needs, a fresh profile, and `extra`.
pub fn browse(url: &str, extra: &[String]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed on {url}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The rendered DOM of `url` (scripts given `budget_ms` of virtual time), and the http(s) URLs
/// the page asked for other than `own_origin`'s (Chromium's own service hosts, which it calls
/// whatever it shows, are left out).
pub fn render(url: &str, own_origin: Option<&str>, budget_ms: u32) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("netlog.json");
    let extra = [
        "--dump-dom".to_string(),
        format!("--log-net-log={}", log.display()),
        format!("--virtual-time-budget={budget_ms}"),
    ];
    let out = browse(url, &extra);
    let net = std::fs::read_to_string(&log).unwrap_or_default();
    let chromium_own = ["google.com", "googleapis.com", "gstatic.com", "gvt1.com"];
    let requested = net
        .split("\"url\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .filter(|u| own_origin.is_none_or(|o| !u.starts_with(o)))
        .filter(|u| {
            let host = u.split('/').nth(2).unwrap_or("");
            !chromium_own.iter().any(|o| host == *o || host.ends_with(&format!(".{o}")))
        })
        .map(str::to_string)
        .collect();
    (String::from_utf8(out.stdout).unwrap(), requested)
}

/// A screenshot of `url` at `width`×`height`, kept as `target/test-artifacts/<name>`.
pub fn screenshot(url: &str, name: &str, (width, height): (u32, u32)) {
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join(name);
    let _ = std::fs::remove_file(&png);
    let extra = [
        format!("--window-size={width},{height}"),
        "--virtual-time-budget=2500".to_string(),
        format!("--screenshot={}", png.display()),
    ];
    browse(url, &extra);
    assert!(png.is_file(), "no screenshot of {url} at {}", png.display());
}
