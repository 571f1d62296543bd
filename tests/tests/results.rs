//! PipelineResult: states, waiting with a timeout, cancellation, encodability checks.

use serde::{Deserialize, Serialize, Serializer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::prelude::*;

#[test]
fn a_finished_pipeline_is_done() {
    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![1, 2, 3])).apply("Sum", Sum::globally());
    let result = Pipeline::run(&p).unwrap();
    assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
    assert_eq!(result.state(), PipelineState::Done);
    assert_eq!(result.wait_until_finish(Some(Duration::from_millis(1))).unwrap(), PipelineState::Done);
}

#[derive(Clone)]
struct Gate(Arc<AtomicBool>);

impl DoFn for Gate {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        while !self.0.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        ctx.output(e);
        Ok(())
    }
}

#[test]
fn wait_with_timeout_returns_running_and_cancel_stops() {
    let p = weir_tests::pipeline("direct");
    let open = Arc::new(AtomicBool::new(false));
    p.apply("Create", Create::of(vec![1, 2, 3]))
        .apply("Gate", ParDo::of(Gate(open.clone())))
        .apply("After", Map::new(|x: i64| x + 1));
    let result = Pipeline::run(&p).unwrap();
    assert_eq!(result.wait_until_finish(Some(Duration::from_millis(20))).unwrap(), PipelineState::Running);
    result.cancel().unwrap();
    open.store(true, Ordering::SeqCst);
    assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Cancelled);
}

/// A value whose serialisation always fails.
#[derive(Clone, Debug, Deserialize)]
struct Unencodable;

impl Serialize for Unencodable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value cannot be encoded"))
    }
}

#[test]
fn unencodable_elements_fail_at_the_step_that_made_them() {
    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![1])).apply("MakeBad", Map::new(|_: i64| Unencodable));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("'MakeBad/ParDo'") && err.contains("cannot encode Unencodable"), "{err}");

    let mut options = weir_tests::configuration("direct");
    options.group_mut::<weir::direct::DirectOptions>().check_encodability = false;
    let q = TestPipeline::from_options(options);
    q.apply("Create", Create::of(vec![1])).apply("MakeBad", Map::new(|_: i64| Unencodable));
    assert_eq!(q.try_run().unwrap(), PipelineState::Done);
}

#[test]
fn streaming_detection() {
    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![1]));
    assert!(!p.graph().is_streaming());
}

#[derive(Clone)]
struct Record(Arc<std::sync::Mutex<Vec<i64>>>);

impl DoFn for Record {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, _: &mut ProcessContext<'_, i64>) -> UserResult {
        self.0.lock().unwrap().push(e);
        Ok(())
    }
}

fn arrival_order(shuffle: bool, seed: u64) -> Vec<i64> {
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let mut options = weir_tests::configuration("direct");
    options.group_mut::<weir::direct::DirectOptions>().shuffle = shuffle;
    options.group_mut::<weir::direct::DirectOptions>().seed = seed;
    let p = TestPipeline::from_options(options);
    p.apply("Create", Create::of(0..200i64)).apply("Record", ParDo::of(Record(seen.clone())));
    p.run();
    let v = seen.lock().unwrap().clone();
    v
}

#[test]
fn direct_runner_shuffles_by_seed() {
    weir_tests::register_runners();
    let ordered = arrival_order(false, 1);
    assert_eq!(ordered, (0..200).collect::<Vec<_>>());
    let a = arrival_order(true, 1);
    let b = arrival_order(true, 2);
    assert_ne!(a, ordered);
    assert_ne!(a, b);
    assert_eq!(a, arrival_order(true, 1), "the same seed gives the same order");
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, ordered);
}
