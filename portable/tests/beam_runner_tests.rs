//! Beam Python's own runner tests (`FnApiRunnerTest`, through Beam's `PortableRunnerTest`)
//! against `weir-job-server`, as `tests/python/weir_runner_test.py` subclasses them: none may
//! fail, and what is skipped says what Weir lacks.

mod common;
use std::path::Path;

/// Runs the suite with the job server's `args`; the pytest summary lines (`PASSED ...`,
/// `SKIPPED ...`), after checking that nothing failed.
fn suite(python: &str, args: &str) -> Vec<String> {
    let test = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/weir_runner_test.py");
    let mut pytest = std::process::Command::new(python);
    pytest
        .args(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"])
        .arg(&test)
        .env("WEIR_JOB_SERVER", env!("CARGO_BIN_EXE_weir-job-server"))
        .env("WEIR_JOB_SERVER_ARGS", args);
    summary(pytest, args)
}

/// Runs `pytest` and returns its summary lines (`PASSED ...`, `SKIPPED ...`), after checking
/// that nothing failed.
fn summary(mut pytest: std::process::Command, args: &str) -> Vec<String> {
    let out = pytest.output().expect("pytest runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let summary: Vec<String> = stdout
        .lines()
        .filter(|l| ["PASSED ", "FAILED ", "ERROR ", "SKIPPED "].iter().any(|p| l.starts_with(p)))
        // A result names its test (`path::Class::test`) or where it was skipped; a log line
        // at level ERROR does neither.
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|w| w.contains("::") || w.starts_with('[')))
        .map(String::from)
        .collect();
    println!("Beam's runner tests on weir-job-server {args}:\n{}", summary.join("\n"));
    let failed: Vec<&String> = summary.iter().filter(|l| l.starts_with("FAILED") || l.starts_with("ERROR")).collect();
    assert!(
        failed.is_empty() && out.status.success(),
        "failed: {failed:#?}\n{}",
        &stdout[stdout.len().saturating_sub(20_000)..]
    );
    summary
}

#[test]
fn beam_s_runner_tests_pass_on_weir() {
    let Some(py) = common::beam_python() else { return };
    for args in ["", "--runner timely --workers 2"] {
        let summary = suite(&py, args);
        let passed = summary.iter().filter(|l| l.starts_with("PASSED")).count();
        // Every batch, state and timer test passes; what is skipped names the feature it needs.
        assert!(passed >= 65, "{passed} passed");
        for skip in summary.iter().filter(|l| l.starts_with("SKIPPED")) {
            assert!(!skip.trim_end().ends_with(':'), "a skip without its reason: {skip}");
        }
    }
}

/// Beam's tests of user state and timers (`StatefulDoFnOnDirectRunnerTest`, which runs on the
/// runner a `TestPipeline` is given) and of Reshuffle (in every windowing, sessions included),
/// on Weir's job server: Beam's DirectRunner keeps pipelines with `CombiningValueState` or
/// session windows away from Prism.
#[test]
fn beam_s_state_and_reshuffle_tests_pass_on_weir() {
    let Some(py) = common::beam_python() else { return };
    let found = std::process::Command::new(&py)
        .args(["-c", "import os, apache_beam; print(os.path.dirname(apache_beam.__file__))"])
        .output()
        .expect("python runs");
    let beam = String::from_utf8_lossy(&found.stdout).trim().to_string();
    let server = common::JobServer::start(&["--runner", "timely", "--workers", "2"]);
    let mut pytest = std::process::Command::new(&py);
    pytest
        .args(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "weir_test_pipeline"])
        .arg(format!("--test-pipeline-options={}", server.options().join(" ")))
        .arg(format!("{beam}/transforms/userstate_test.py::StatefulDoFnOnDirectRunnerTest"))
        .arg(format!("{beam}/transforms/util_test.py::ReshuffleTest"))
        // These two assert that the on-time pane of a merging window under the default
        // trigger is not the last, as Beam Python's own runner marks it; Beam's Java runners
        // and Weir mark it the last (with no allowed lateness, no pane can follow it).
        .args(["-k", "not test_reshuffle_window_fn_preserved and not test_reshuffle_windows_unchanged"])
        .env("PYTHONPATH", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python"));
    let summary = summary(pytest, "--runner timely --workers 2");
    let passed = summary.iter().filter(|l| l.starts_with("PASSED")).count();
    assert!(passed >= 39, "{passed} passed");
    assert!(summary.iter().any(|l| l.contains("test_simple_stateful_dofn_combining") && l.starts_with("PASSED")));
}
