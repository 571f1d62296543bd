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
        // Every batch, state, timer and window test passes; what is skipped names why.
        assert!(passed >= 68, "{passed} passed");
        for skip in summary.iter().filter(|l| l.starts_with("SKIPPED")) {
            assert!(!skip.trim_end().ends_with(':'), "a skip without its reason: {skip}");
        }
    }
}

/// What Weir does not pass among the Beam tests below, each with why.
const NOT_ON_WEIR: [(&str, &str); 6] = [
    // The on-time pane of a merging window under the default trigger: Beam Python's own runner
    // marks it not the last; Beam's Java runners and Weir mark it the last (with no allowed
    // lateness, no pane can follow it).
    ("test_reshuffle_window_fn_preserved", "pane of a merging window"),
    ("test_reshuffle_windows_unchanged", "pane of a merging window"),
    // Under an old `update_compatibility_version`, Beam Python's Reshuffle resets panes to
    // unknown; Weir's Reshuffle keeps every element's pane, as the current Beam does.
    ("test_reshuffle_default_window_preserves_metadata_1", "panes in Beam's compatibility mode"),
    // Events from a TestStream service are refused at Prepare.
    ("test_basic_execution_with_service", "TestStream service"),
    // Beam Python's DirectRunner's own features: windowed values inside a TestStream's
    // elements, and its ReverseTestStream transform (refused at Prepare: Weir does not know it).
    ("test_windowed_values_interpreted_correctly", "DirectRunner's windowed value holders"),
    ("ReverseTestStreamTest", "DirectRunner's ReverseTestStream"),
];

/// Runs Beam's tests `files` (paths inside the `apache_beam` package, `::Class` allowed) with
/// Beam's `TestPipeline`s pointed at `server` with its options and `extra` ones, less those in
/// [`NOT_ON_WEIR`]; the summary lines (nothing failed), after checking that every test of
/// `musts` passed and at least `at_least` did.
fn beam_tests_on(
    py: &str,
    server: &common::JobServer,
    extra: &[&str],
    files: &[&str],
    at_least: usize,
    musts: &[&str],
) -> Vec<String> {
    let found = std::process::Command::new(py)
        .args(["-c", "import os, apache_beam; print(os.path.dirname(apache_beam.__file__))"])
        .output()
        .expect("python runs");
    let beam = String::from_utf8_lossy(&found.stdout).trim().to_string();
    let skipped: Vec<String> = NOT_ON_WEIR.iter().map(|(t, _)| format!("not {t}")).collect();
    let mut options = server.options();
    options.extend(extra.iter().map(|s| s.to_string()));
    let mut pytest = std::process::Command::new(py);
    pytest
        .args(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "weir_test_pipeline"])
        .arg(format!("--test-pipeline-options={}", options.join(" ")))
        .arg("--test-pipeline-options-override")
        .args(files.iter().map(|f| format!("{beam}/{f}")))
        .args(["-k", &skipped.join(" and ")])
        .env("PYTHONPATH", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python"));
    let summary = summary(pytest, &options.join(" "));
    let passed = summary.iter().filter(|l| l.starts_with("PASSED")).count();
    assert!(passed >= at_least, "{passed} passed");
    for must in musts {
        assert!(summary.iter().any(|l| l.contains(must) && l.starts_with("PASSED")), "{must} did not pass");
    }
    summary
}

/// Beam's tests of user state and timers (`StatefulDoFnOnDirectRunnerTest`, which runs on the
/// runner a `TestPipeline` is given), of Reshuffle (in every windowing, sessions included) and
/// of TestStream (`TestStreamTest`, whose streaming `TestPipeline`s are pointed at Weir too),
/// on Weir's job server: Beam's DirectRunner keeps pipelines with `CombiningValueState`,
/// session windows or a TestStream away from Prism.
#[test]
fn beam_s_state_reshuffle_and_test_stream_tests_pass_on_weir() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&["--runner", "timely", "--workers", "2"]);
    let files = [
        "transforms/userstate_test.py::StatefulDoFnOnDirectRunnerTest",
        "transforms/util_test.py::ReshuffleTest",
        "testing/test_stream_test.py",
    ];
    let musts = [
        "test_simple_stateful_dofn_combining",
        "test_gbk_execution_after_watermark_trigger",
        // A TestStream of several tagged outputs, each with its own watermark.
        "test_multiple_outputs_with_watermark_advancement",
        "test_basic_execution_sideinputs",
        // A side input read after a WindowInto fused into the same stage.
        "test_basic_execution_sideinputs_fixed_windows",
        // No extra pane at a window's expiry for Beam Python's EMIT_ALWAYS, as on Prism.
        "test_gbk_execution_no_triggers",
    ];
    beam_tests_on(&py, &server, &[], &files, 48, &musts);
}

/// Beam's side input tests (`SideInputsTest`) in streaming: there Beam Python's `Create` ends in
/// a no-op whose output is its own input, which must not be taken for the side input's maker.
#[test]
fn beam_s_side_input_tests_pass_on_weir_in_streaming() {
    let Some(py) = common::beam_python() else { return };
    let server = common::JobServer::start(&[]);
    let musts = [
        "test_as_singleton_with_different_defaults",
        "test_empty_singleton_side_input",
        "test_flattened_side_input",
        "test_default_value_singleton_side_input",
        "test_same_fixed_windows",
        // A TestStream of tagged outputs feeding a side input of several triggered panes: the
        // main element waits for the side input's watermark and sees every pane, as on Beam's
        // portable runners.
        "test_multi_triggered_gbk_side_input",
    ];
    beam_tests_on(&py, &server, &["--streaming"], &["transforms/sideinputs_test.py"], 22, &musts);
}
