//! Construction-time validation: each error names its step.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use weir_sdk::prelude::*;

fn p() -> TestPipeline {
    weir_tests::pipeline("direct")
}

#[test]
fn duplicate_step_names() {
    let p = p();
    let a = p.apply("Create", Create::of(vec![1, 2]));
    a.apply("Double", Map::new(|x: i64| x * 2));
    a.apply("Double", Map::new(|x: i64| x * 3));
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("duplicate step name 'Double'"), "{err}");
    assert!(p.try_run().is_err());
}

#[test]
fn nested_names_are_hierarchical() {
    let p = p();
    p.apply("Create", Create::of(vec![1])).apply("Count", Count::globally());
    let names: Vec<String> = p.graph().nodes.iter().map(|n| n.full_name.clone()).collect();
    for expected in [
        "Create",
        "Create/Read",
        "Count",
        "Count/WithKeys",
        "Count/Combine.perKey/GroupByKey",
        "Count/Combine.perKey/Combine.GroupedValues",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} not in {names:?}");
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Point {
    x: f64,
}

#[test]
fn group_by_key_needs_a_deterministic_key_coder() {
    let p = p();
    p.apply("Create", Create::of(vec![KV::new(Point { x: 1.0 }, 1)])).apply("Group", GroupByKey::create());
    let err = p.validate().unwrap_err().to_string();
    assert!(
        err.contains("'Group'") && err.contains("must be deterministic") && err.contains("floating-point"),
        "{err}"
    );
}

#[test]
fn distinct_of_floats_is_rejected() {
    let p = p();
    p.apply("Create", Create::of(vec![1.5f64])).apply("Distinct", Distinct::create());
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("Distinct/Combine.perKey/GroupByKey") && err.contains("deterministic"), "{err}");
}

#[test]
fn flatten_of_incompatible_windowing() {
    let p = p();
    let a = p.apply("A", Create::of(vec![1])).apply("Fixed", Window::into(FixedWindows::of(Duration::from_secs(1))));
    let b = p.apply("B", Create::of(vec![2]));
    PCollectionList::of(&p, vec![a, b]).apply("Flatten", Flatten::pcollections());
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("'Flatten'") && err.contains("incompatible windowing"), "{err}");
}

#[test]
fn combine_globally_with_defaults_needs_the_global_window() {
    let p = p();
    p.apply("A", Create::of(vec![1i64]))
        .apply("Fixed", Window::into(FixedWindows::of(Duration::from_secs(1))))
        .apply("Sum", Sum::globally());
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("'Sum'") && err.contains("without_defaults()") && err.contains("as_singleton_view"), "{err}");
    // Top is a Combine.globally with defaults: the same advice.
    let q = weir_tests::pipeline("direct");
    q.apply("A", Create::of(vec![1i64]))
        .apply("Fixed", Window::into(FixedWindows::of(Duration::from_secs(1))))
        .apply("Top", Top::largest(2));
    let err = q.validate().unwrap_err().to_string();
    assert!(err.contains("'Top'") && err.contains("without_defaults()") && err.contains("as_singleton_view"), "{err}");
}

#[test]
fn set_coder_after_consumption_is_rejected() {
    let p = p();
    let a = p.apply("A", Create::of(vec![1i64]));
    a.apply("Use", Map::new(|x: i64| x));
    a.set_coder(std::sync::Arc::new(weir_sdk::coders::VarLongCoder));
    assert!(p.validate().unwrap_err().to_string().contains("set_coder must be called before"));
}

#[test]
fn unknown_runner_lists_the_registered_ones() {
    let p = p();
    p.set_options(PipelineOptions::default().with_runner("flink"));
    p.apply("A", Create::of(vec![1]));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("unknown runner 'flink'") && err.contains("direct"), "{err}");
}

#[test]
fn text_io_needs_a_pattern() {
    let p = p();
    p.apply("Read", TextIO::read());
    assert!(p.validate().unwrap_err().to_string().contains("needs a file pattern"));
}

#[test]
fn test_stream_refuses_what_beams_builder_refuses() {
    use weir_sdk::time::{GLOBAL_WINDOW_MAX_TIMESTAMP, MAX_TIMESTAMP};
    // An element at the maximum timestamp: only that is invalid.
    let q = p();
    q.apply("Stream", TestStream::create().add_elements(vec![TimestampedValue::new(1i64, MAX_TIMESTAMP)]));
    let err = q.validate().unwrap_err().to_string();
    assert!(err.contains("'Stream'") && err.contains("before the maximum timestamp"), "{err}");
    // The watermark advanced to the maximum timestamp by hand.
    let q = p();
    q.apply("Stream", TestStream::<i64>::create().advance_watermark_to(MAX_TIMESTAMP));
    let err = q.validate().unwrap_err().to_string();
    assert!(err.contains("'Stream'") && err.contains("advance_watermark_to_infinity()"), "{err}");
    // The way to finish, and elements up to one millisecond before the maximum (the end of the
    // global window included), are fine, as in Beam.
    let q = p();
    q.apply(
        "Stream",
        TestStream::create()
            .add_elements(vec![
                TimestampedValue::new(1i64, GLOBAL_WINDOW_MAX_TIMESTAMP - 1),
                TimestampedValue::new(2i64, GLOBAL_WINDOW_MAX_TIMESTAMP),
                TimestampedValue::new(3i64, MAX_TIMESTAMP - 1),
            ])
            .advance_watermark_to(GLOBAL_WINDOW_MAX_TIMESTAMP)
            .advance_watermark_to_infinity(),
    );
    q.validate().unwrap();
}

/// A flag of another runner's options is refused, naming the flag and the runner, rather than
/// ignored: the direct runner has no checkpoints to resume, the micro-batch runner no
/// `--workers`. A flag the runner reads, or one every runner reads, passes.
#[test]
fn a_flag_of_another_runner_is_refused_by_name() {
    weir_tests::register_runners();
    let refused = |args: &[&str], flag: &str, runner: &str| {
        let p = TestPipeline::from_options(PipelineOptions::from_args(args).unwrap());
        p.apply("Nums", Create::of(vec![1i64]));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains(&format!("{flag} is an option of the")), "{err}");
        assert!(err.contains(&format!("the {runner} runner does not use it")), "{err}");
    };
    refused(&["--runner", "direct", "--checkpoint-dir", "/tmp/x"], "--checkpoint-dir", "direct");
    refused(&["--runner", "direct", "--trigger", "once"], "--trigger", "direct");
    refused(&["--runner", "microbatch", "--workers", "2"], "--workers", "microbatch");
    refused(&["--runner", "timely", "--direct-seed", "3"], "--direct-seed", "timely");
    for ok in [
        &["--runner", "timely", "--trigger", "once", "--workers", "1"][..],
        &["--runner", "microbatch", "--parallelism", "1", "--metrics-push-period", "1"][..],
        &["--runner", "direct", "--job-name", "x"][..],
    ] {
        let p = TestPipeline::from_options(PipelineOptions::from_args(ok).unwrap());
        p.apply("Nums", Create::of(vec![1i64]));
        p.try_run().unwrap_or_else(|e| panic!("{ok:?}: {e}"));
    }
}
