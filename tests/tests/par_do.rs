//! ParDo conformance: lifecycle, tagged outputs, timestamps, failures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use weir_sdk::prelude::*;
use weir_tests::conformance;

#[derive(Default, Debug)]
struct Calls {
    setup: AtomicUsize,
    start: AtomicUsize,
    process: AtomicUsize,
    finish: AtomicUsize,
    teardown: AtomicUsize,
    violations: Mutex<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    NotSetUp,
    Unstarted,
    Started,
    Processing,
    Finished,
}

/// Beam's `ParDoTest.TestDoFn` state machine, recording every call and every out-of-order call.
#[derive(Clone)]
struct LifecycleFn {
    calls: Arc<Calls>,
    state: State,
}

impl LifecycleFn {
    fn expect(&mut self, allowed: &[State], method: &str) {
        if !allowed.contains(&self.state) {
            self.calls.violations.lock().unwrap().push(format!("{method} called in state {:?}", self.state));
        }
    }
}

impl DoFn for LifecycleFn {
    type In = i64;
    type Out = i64;
    fn setup(&mut self) -> UserResult {
        self.expect(&[State::NotSetUp], "setup");
        self.calls.setup.fetch_add(1, Ordering::SeqCst);
        self.state = State::Unstarted;
        Ok(())
    }
    fn start_bundle(&mut self) -> UserResult {
        self.expect(&[State::Unstarted, State::Finished], "start_bundle");
        self.calls.start.fetch_add(1, Ordering::SeqCst);
        self.state = State::Started;
        Ok(())
    }
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        self.expect(&[State::Started, State::Processing], "process");
        self.calls.process.fetch_add(1, Ordering::SeqCst);
        self.state = State::Processing;
        ctx.output(e);
        Ok(())
    }
    fn finish_bundle(&mut self, ctx: &mut FinishBundleContext<'_, i64>) -> UserResult {
        self.expect(&[State::Started, State::Processing], "finish_bundle");
        self.calls.finish.fetch_add(1, Ordering::SeqCst);
        self.state = State::Finished;
        ctx.output(-1, MIN_TIMESTAMP, weir_sdk::window::Window::Global);
        Ok(())
    }
    fn teardown(&mut self) -> UserResult {
        self.expect(&[State::Unstarted, State::Finished], "teardown");
        self.calls.teardown.fetch_add(1, Ordering::SeqCst);
        self.state = State::NotSetUp;
        Ok(())
    }
}

#[derive(Clone)]
struct FailingFn {
    method: &'static str,
    panic: bool,
    calls: Arc<Calls>,
}

impl FailingFn {
    fn maybe_fail(&self, method: &str) -> UserResult {
        if self.method != method {
            return Ok(());
        }
        if self.panic {
            panic!("boom in {method}");
        }
        Err(format!("failure in {method}").into())
    }
}

impl DoFn for FailingFn {
    type In = i64;
    type Out = i64;
    fn setup(&mut self) -> UserResult {
        self.calls.setup.fetch_add(1, Ordering::SeqCst);
        self.maybe_fail("setup")
    }
    fn start_bundle(&mut self) -> UserResult {
        self.maybe_fail("start_bundle")
    }
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        self.maybe_fail("process")?;
        ctx.output(e);
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, i64>) -> UserResult {
        self.maybe_fail("finish_bundle")
    }
    fn teardown(&mut self) -> UserResult {
        self.calls.teardown.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[derive(Clone)]
struct SplitFn {
    evens: TupleTag<i64>,
    words: TupleTag<String>,
}

impl DoFn for SplitFn {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        ctx.output(e);
        if e % 2 == 0 {
            ctx.output_tagged(&self.evens, e)?;
        }
        ctx.output_tagged(&self.words, format!("n{e}"))
    }
}

#[derive(Clone)]
struct ShiftFn {
    by: i64,
    skew: i64,
}

impl DoFn for ShiftFn {
    type In = i64;
    type Out = KV<i64, i64>;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, KV<i64, i64>>) -> UserResult {
        let ts = ctx.timestamp() + self.by;
        ctx.output_with_timestamp(KV::new(e, ts), ts)
    }
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        self.skew
    }
}

#[derive(Clone)]
struct TimestampOfFn;

impl DoFn for TimestampOfFn {
    type In = KV<i64, i64>;
    type Out = bool;
    fn process(&mut self, e: KV<i64, i64>, ctx: &mut ProcessContext<'_, bool>) -> UserResult {
        ctx.output(ctx.timestamp() == e.value);
        Ok(())
    }
}

#[derive(Clone)]
struct WindowAndPaneFn;

impl DoFn for WindowAndPaneFn {
    type In = i64;
    type Out = String;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let out = format!("{e}@{}:{}:{:?}", ctx.timestamp(), ctx.window(), ctx.pane().timing);
        ctx.output(out);
        Ok(())
    }
}

fn numbers(p: &TestPipeline, n: i64) -> PCollection<i64> {
    p.apply("Create", Create::of(0..n))
}

conformance! {
    fn lifecycle_call_counts(p) {
        let calls = Arc::new(Calls::default());
        let out = numbers(p, 50).apply("Lifecycle", ParDo::of(LifecycleFn { calls: calls.clone(), state: State::NotSetUp }));
        let real = out.apply("Real", Filter::by(|x: &i64| *x >= 0));
        assert_that(&real).contains_in_any_order((0..50).collect());
        p.run();
        assert!(calls.violations.lock().unwrap().is_empty(), "{:?}", calls.violations.lock().unwrap());
        let get = |a: &AtomicUsize| a.load(Ordering::SeqCst);
        assert_eq!(get(&calls.process), 50);
        assert!(get(&calls.start) >= 1);
        assert_eq!(get(&calls.start), get(&calls.finish));
        assert!(get(&calls.setup) >= 1);
        assert_eq!(get(&calls.setup), get(&calls.teardown));
    }

    fn finish_bundle_outputs_reach_downstream(p) {
        let calls = Arc::new(Calls::default());
        let out = numbers(p, 10).apply("Lifecycle", ParDo::of(LifecycleFn { calls: calls.clone(), state: State::NotSetUp }));
        let finishes = out.apply("Finishes", Filter::by(|x: &i64| *x < 0)).apply("Count", Count::globally());
        assert_that(&finishes).satisfies(|v: Vec<i64>| if v.len() == 1 && v[0] >= 1 { Ok(()) } else { Err(format!("{v:?}")) });
        p.run();
        assert_eq!(calls.finish.load(Ordering::SeqCst) as i64, calls.start.load(Ordering::SeqCst) as i64);
    }

    fn failures_name_the_step_and_tear_down(p) {
        for (method, panic) in [("setup", false), ("start_bundle", true), ("process", false), ("process", true), ("finish_bundle", false)] {
            let calls = Arc::new(Calls::default());
            let q = weir_tests::pipeline("direct");
            numbers(&q, 5).apply("Fails", ParDo::of(FailingFn { method, panic, calls: calls.clone() }));
            let err = q.try_run().unwrap_err().to_string();
            assert!(err.contains("'Fails'"), "{err}");
            assert!(err.contains(method), "{err}");
            let expected = if panic { format!("boom in {method}") } else { format!("failure in {method}") };
            assert!(err.contains(&expected), "{err}");
            assert_eq!(calls.setup.load(Ordering::SeqCst), calls.teardown.load(Ordering::SeqCst), "{method}");
        }
        // The pipeline handed to this configuration still runs.
        assert_that(&numbers(p, 3)).contains_in_any_order(vec![0, 1, 2]);
        p.run();
    }

    fn multiple_outputs(p) {
        let main = TupleTag::<i64>::new("main");
        let evens = TupleTag::<i64>::new("evens");
        let words = TupleTag::<String>::new("words");
        let never = TupleTag::<String>::new("never");
        let out = numbers(p, 6).apply(
            "Split",
            ParDo::of(SplitFn { evens: evens.clone(), words: words.clone() })
                .with_outputs(&main, vec![(&evens).into(), (&words).into(), (&never).into()]),
        );
        assert_that(&out.get(&main).unwrap()).contains_in_any_order((0..6).collect());
        assert_that(&out.get(&evens).unwrap()).contains_in_any_order(vec![0, 2, 4]);
        assert_that(&out.get(&words).unwrap()).contains_in_any_order((0..6).map(|i| format!("n{i}")).collect());
        assert_that(&out.get(&never).unwrap()).empty();
        assert!(out.get(&TupleTag::<i64>::new("other")).is_none());
        p.run();
    }

    fn output_to_undeclared_tag_fails(p) {
        let main = TupleTag::<i64>::new("main");
        let evens = TupleTag::<i64>::new("evens");
        let words = TupleTag::<String>::new("words");
        numbers(p, 3).apply("Split", ParDo::of(SplitFn { evens: evens.clone(), words }).with_outputs(&main, vec![(&evens).into()]));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("'Split'") && err.contains("undeclared tag 'words'"), "{err}");
    }

    fn output_with_timestamp(p) {
        let input = p.apply("Create", Create::timestamped((0..5).map(|i| TimestampedValue::new(i, 1000 * i))));
        let shifted = input.apply("Shift", ParDo::of(ShiftFn { by: 500, skew: 0 }));
        let ok = shifted.apply("Check", ParDo::of(TimestampOfFn));
        assert_that(&ok).contains_in_any_order(vec![true; 5]);
        let values = shifted.apply("Values", Values::create());
        assert_that(&values).contains_in_any_order(vec![500, 1500, 2500, 3500, 4500]);
        let back = input.apply("Back", ParDo::of(ShiftFn { by: -100, skew: 100 }));
        assert_that(&back.apply("Values2", Values::create())).contains_in_any_order(vec![-100, 900, 1900, 2900, 3900]);
        p.run();
    }

    fn output_before_input_timestamp_fails(p) {
        p.apply("Create", Create::timestamped(vec![TimestampedValue::new(1, 1000)]))
            .apply("Back", ParDo::of(ShiftFn { by: -1, skew: 0 }));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("'Back'") && err.contains("Cannot output with timestamp 999"), "{err}");
    }

    fn elements_see_timestamp_window_and_pane(p) {
        let out = p
            .apply("Create", Create::timestamped(vec![TimestampedValue::new(7, 42)]))
            .apply("Describe", ParDo::of(WindowAndPaneFn));
        assert_that(&out).contains_in_any_order(vec!["7@42:GlobalWindow:Unknown".to_string()]);
        p.run();
    }

    fn try_map_errors_fail_the_pipeline(p) {
        p.apply("Create", Create::of(vec!["1".to_string(), "x".to_string()]))
            .apply("Parse", TryMap::new(|s: String| s.parse::<i64>().map_err(|e| -> UserError { format!("'{s}': {e}").into() })));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("Parse") && err.contains("'x': invalid digit"), "{err}");
    }
}
