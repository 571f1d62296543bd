//! Beam Java's own ValidatesRunner tests against `weir-job-server`: the fast subset of
//! `portable/java-tests/fast-tests.txt` (a few tests of every kind the suite has), run by Maven
//! from beam-sdks-java-core's tests jar with Beam's `TestUniversalRunner`: with LOOPBACK
//! harnesses on micro-batch and on timely with 2 workers, and with PROCESS harnesses (Beam's
//! Java boot, started by the job server, fetching the staged jars from it) on micro-batch.
//! Every test selected must run and pass. The whole suite is `portable/java-tests/run.sh` (see
//! `docs/beam-java.md`).
//!
//! It needs Java and Maven (`mvn` on the PATH), which fetches Beam's jars from Maven Central
//! into `~/.m2` once, and for PROCESS Go, which builds Beam's boot (`java-tests/boot.sh`).
//! Without them the tests are skipped, saying so; under CI they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::JobServer;

fn java_tests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("java-tests")
}

/// Whether `mvn` runs here; under CI it must.
fn maven() -> bool {
    let ok = Command::new("mvn").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "mvn is not on the PATH (.ci/run needs Java 17 and Maven)");
        eprintln!("SKIPPED: no mvn on the PATH, which Beam Java's tests need");
    }
    ok
}

/// The tests of the fast subset, one `Class#method` (or `Class`) per line.
fn fast_tests() -> Vec<String> {
    let list = std::fs::read_to_string(java_tests().join("fast-tests.txt")).expect("fast-tests.txt");
    list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect()
}

/// Where the Java harnesses run.
enum Harness {
    /// In the test's JVM.
    Loopback,
    /// Started by the job server with Beam's Java boot.
    Process,
}

/// Beam's Java boot, built by `java-tests/boot.sh`; `None` (the test skipped) without Go,
/// outside CI.
fn boot() -> Option<String> {
    let out = Command::new(java_tests().join("boot.sh")).output().expect("boot.sh runs");
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(std::env::var_os("CI").is_none(), "Beam's Java boot did not build: {why}");
        eprintln!("SKIPPED: Beam's Java boot did not build: {why}");
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs the fast subset against a job server started with `weir_flags`, its harnesses as
/// `harness` says; asserts that every selected test ran and passed.
fn run_fast_subset(weir_flags: &[&str], harness: Harness) {
    if !maven() {
        return;
    }
    let environment = match harness {
        Harness::Loopback => r#""--defaultEnvironmentType=LOOPBACK","--experiments=beam_fn_api""#.to_string(),
        Harness::Process => {
            let Some(boot) = boot() else { return };
            // The boot finds the harness and logging jars among the staged ones (the test's
            // classpath), not in a container's /opt/apache/beam/jars.
            let experiments =
                "beam_fn_api,use_staged_dataflow_worker_jar,use_custom_logging_libraries,disable_jamm_agent";
            format!(
                r#""--defaultEnvironmentType=PROCESS","--defaultEnvironmentConfig={{\"command\":\"{boot}\"}}","--experiments={experiments}""#
            )
        }
    };
    let work = tempfile::tempdir().unwrap();
    let artifacts = work.path().join("artifacts");
    let mut args = vec!["--artifact-dir", artifacts.to_str().unwrap()];
    args.extend_from_slice(weir_flags);
    let server = JobServer::start(&args);
    let port = server.endpoint.rsplit(':').next().unwrap().to_string();
    let tests = fast_tests();
    let options = format!(r#"["--runner=TestUniversalRunner","--jobEndpoint=127.0.0.1:{port}",{environment}]"#);
    let reports = work.path().join("reports");
    let out = Command::new("mvn")
        .args(["-B", "-q", "-f"])
        .arg(java_tests().join("pom.xml"))
        .arg("test")
        .arg(format!("-Dweir.options={options}"))
        .arg(format!("-Dweir.test={}", tests.join(",")))
        .arg(format!("-Dweir.build={}", work.path().join("build").display()))
        .arg(format!("-Dweir.reports={}", reports.display()))
        .arg("-Dweir.forks=2")
        .arg("-Dsurefire.failIfNoSpecifiedTests=false")
        .output()
        .expect("mvn runs");
    let report = Command::new("python3")
        .arg(java_tests().join("report.py"))
        .arg(&reports)
        .arg(weir_flags.join(" "))
        .output()
        .expect("python3 runs report.py");
    let table = String::from_utf8_lossy(&report.stdout);
    println!("{table}");
    let maven_said = String::from_utf8_lossy(&out.stdout);
    let tail: Vec<&str> = maven_said.lines().filter(|l| !l.trim_start().starts_with("at ")).collect();
    assert!(
        out.status.success() && report.status.success(),
        "Beam Java's tests failed on Weir ({weir_flags:?}):\n{table}\n{}",
        tail[tail.len().saturating_sub(40)..].join("\n")
    );
    // Every test selected ran: Class#a+b selects two, a whole Class at least one.
    let selected: usize = tests.iter().map(|t| t.split_once('#').map_or(1, |(_, m)| m.split('+').count())).sum();
    let ran: usize = table
        .lines()
        .find_map(|l| l.strip_prefix("== ").and_then(|l| l.split(" tests ran").next()?.parse().ok()))
        .expect("report.py prints how many tests ran");
    assert!(ran >= selected, "only {ran} tests ran of the {selected} selected:\n{table}");
}

#[test]
fn beam_java_validates_runner_fast_subset_on_micro_batch() {
    run_fast_subset(&["--runner", "microbatch"], Harness::Loopback);
}

#[test]
fn beam_java_validates_runner_fast_subset_on_timely_with_2_workers() {
    run_fast_subset(&["--runner", "timely", "--workers", "2"], Harness::Loopback);
}

#[test]
fn beam_java_validates_runner_fast_subset_with_process_harnesses() {
    run_fast_subset(&["--runner", "microbatch"], Harness::Process);
}
