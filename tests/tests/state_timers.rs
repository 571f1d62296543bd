//! State and timer conformance.

use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::transforms::combiners::SumFn;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn kv(k: &str, v: i64) -> KV<String, i64> {
    KV::new(k.to_string(), v)
}

fn tkv(k: &str, v: i64, t: i64) -> TimestampedValue<KV<String, i64>> {
    TimestampedValue::new(kv(k, v), t)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Counts elements per key with ValueState; emits the running count.
#[derive(Clone)]
struct RunningCount;

impl DoFn for RunningCount {
    type In = KV<String, i64>;
    type Out = KV<String, i64>;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, KV<String, i64>>) -> UserResult {
        let n = ctx.value_state::<i64>("count").read()?.unwrap_or(0) + 1;
        ctx.value_state::<i64>("count").write(&n)?;
        ctx.output(KV::new(e.key, n));
        Ok(())
    }
}

use weir_tests::BufferUntilEndOfWindow;

/// Exercises combining, set, map and ordered-list state; emits a summary at window expiration.
#[derive(Clone)]
struct AllKinds;

impl DoFn for AllKinds {
    type In = KV<String, i64>;
    type Out = String;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        ctx.combining_state("sum", SumFn::<i64>::default()).add(e.value)?;
        ctx.set_state::<i64>("distinct").add(&(e.value % 3))?;
        let seen = ctx.map_state::<i64, i64>("hist").get(&(e.value % 2))?.unwrap_or(0);
        ctx.map_state::<i64, i64>("hist").put(&(e.value % 2), &(seen + 1))?;
        let ts = ctx.timestamp();
        ctx.ordered_list_state::<i64>("ordered").add(&TimestampedValue::new(e.value, ts))?;
        // A read is a snapshot: adding afterwards does not change it.
        let mut bag = ctx.bag_state::<i64>("bag");
        bag.add(&1)?;
        let snapshot = bag.read()?;
        bag.add(&2)?;
        if snapshot.len() + 1 != bag.read()?.len() {
            return Err("bag snapshot changed".into());
        }
        Ok(())
    }
    fn on_window_expiration(&mut self, ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, String>) -> UserResult {
        let sum = ctx.combining_state("sum", SumFn::<i64>::default()).read()?;
        let mut distinct = ctx.set_state::<i64>("distinct").read()?;
        distinct.sort();
        let hist = ctx.map_state::<i64, i64>("hist").entries()?;
        let ordered: Vec<i64> =
            ctx.ordered_list_state::<i64>("ordered").read_range(0, 25)?.into_iter().map(|t| t.value).collect();
        let key: String = ctx.key()?;
        ctx.output(format!("{key} sum={sum} distinct={distinct:?} hist={hist:?} ordered<25={ordered:?}"))
    }
}

/// A timer that re-sets itself: counts down from the element's value in 1 ms steps.
#[derive(Clone)]
struct Countdown;

impl DoFn for Countdown {
    type In = KV<String, i64>;
    type Out = i64;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        ctx.value_state::<i64>("left").write(&e.value)?;
        let t = ctx.timestamp() + 1;
        ctx.timer("tick", TimeDomain::EventTime).set(t)
    }
    fn on_timer(
        &mut self,
        t: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, i64>,
    ) -> UserResult {
        let left = ctx.value_state::<i64>("left").read()?.unwrap_or(0);
        ctx.output(left)?;
        if left > 1 {
            ctx.value_state::<i64>("left").write(&(left - 1))?;
            ctx.timer("tick", TimeDomain::EventTime).set(t.fire_timestamp + 1)?;
        }
        Ok(())
    }
}

/// Processing-time timeouts per key (the mapWithState pattern): emits the number of elements
/// seen when no element arrived for 10 ms of processing time.
#[derive(Clone)]
struct Timeout;

impl DoFn for Timeout {
    type In = KV<String, i64>;
    type Out = KV<String, i64>;
    fn process(&mut self, _: KV<String, i64>, ctx: &mut ProcessContext<'_, KV<String, i64>>) -> UserResult {
        let n = ctx.value_state::<i64>("n").read()?.unwrap_or(0);
        ctx.value_state::<i64>("n").write(&(n + 1))?;
        ctx.timer("timeout", TimeDomain::ProcessingTime).offset(ms(10)).set_relative()
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, KV<String, i64>>,
    ) -> UserResult {
        let n = ctx.value_state::<i64>("n").read()?.unwrap_or(0);
        ctx.value_state::<i64>("n").clear()?;
        let key: String = ctx.key()?;
        ctx.output(KV::new(key, n))
    }
}

/// Timer families: one timer per value parity, each flushing its own count.
#[derive(Clone)]
struct Families;

impl DoFn for Families {
    type In = KV<String, i64>;
    type Out = String;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let id = if e.value % 2 == 0 { "even" } else { "odd" };
        let n = ctx.value_state::<i64>(id).read()?.unwrap_or(0);
        ctx.value_state::<i64>(id).write(&(n + 1))?;
        let end = ctx.window().max_timestamp();
        ctx.timer_in_family("parity", id, TimeDomain::EventTime).set(end)
    }
    fn on_timer(
        &mut self,
        t: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, String>,
    ) -> UserResult {
        let n = ctx.value_state::<i64>(&t.id).read()?.unwrap_or(0);
        ctx.output(format!("{}:{}={n}", t.family, t.id))
    }
}

/// Outputs at a timer's output timestamp, earlier than its firing time, so a downstream
/// aggregation sees it on time.
#[derive(Clone)]
struct HeldOutput;

impl DoFn for HeldOutput {
    type In = KV<String, i64>;
    type Out = KV<String, i64>;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, KV<String, i64>>) -> UserResult {
        ctx.value_state::<i64>("v").write(&e.value)?;
        let ts = ctx.timestamp();
        ctx.timer("late", TimeDomain::EventTime).with_output_timestamp(ts).set(ts + 50)
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, KV<String, i64>>,
    ) -> UserResult {
        let v = ctx.value_state::<i64>("v").read()?.unwrap_or(0);
        let key: String = ctx.key()?;
        ctx.output(KV::new(key, v))
    }
}

/// Uses state outside a stateful ParDo.
#[derive(Clone)]
struct NotStateful;

impl DoFn for NotStateful {
    type In = KV<String, i64>;
    type Out = i64;
    fn process(&mut self, _: KV<String, i64>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        ctx.value_state::<i64>("x").write(&1)
    }
}

/// Sets a timer the rules forbid.
#[derive(Clone)]
struct BadTimer(u8);

impl DoFn for BadTimer {
    type In = KV<String, i64>;
    type Out = i64;
    fn process(&mut self, _: KV<String, i64>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        let end = ctx.window().max_timestamp();
        let ts = ctx.timestamp();
        match self.0 {
            0 => ctx.timer("t", TimeDomain::ProcessingTime).set(5),
            1 => ctx.timer("t", TimeDomain::EventTime).set(end + 1),
            _ => ctx.timer("t", TimeDomain::EventTime).with_output_timestamp(ts - 1).set(ts + 1),
        }
    }
}

/// After a GroupByKey in the global window: keeps the group's sum and sets a relative event-time
/// timer 1 s past the input watermark, with no output timestamp given (it defaults to the
/// firing time, which is before the element's timestamp at the end of the global window).
#[derive(Clone)]
struct RelativeAfterGroup;

impl DoFn for RelativeAfterGroup {
    type In = KV<String, Vec<i64>>;
    type Out = i64;
    fn process(&mut self, e: KV<String, Vec<i64>>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        ctx.value_state::<i64>("sum").write(&e.value.iter().sum())?;
        ctx.timer("later", TimeDomain::EventTime).offset(Duration::from_secs(1)).set_relative()
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, i64>,
    ) -> UserResult {
        let sum = ctx.value_state::<i64>("sum").read()?.unwrap_or(0);
        ctx.output(sum)
    }
}

conformance! {
    fn value_state_is_per_key(p) {
        let out = p
            .apply("Create", Create::of(vec![kv("a", 1), kv("b", 1), kv("a", 1), kv("a", 1), kv("b", 1)]))
            .apply("Count", ParDo::stateful(RunningCount));
        assert_that(&out).contains_in_any_order(vec![kv("a", 1), kv("a", 2), kv("a", 3), kv("b", 1), kv("b", 2)]);
        // The same state id in another ParDo is separate storage.
        let again = p.apply("Again", Create::of(vec![kv("a", 9)])).apply("Count2", ParDo::stateful(RunningCount));
        assert_that(&again).contains_in_any_order(vec![kv("a", 1)]);
        p.run();
    }

    fn state_is_per_window_and_timers_flush_at_end_of_window(p) {
        let out = p
            .apply("Create", Create::timestamped(vec![tkv("a", 1, 1), tkv("a", 2, 5), tkv("a", 4, 12), tkv("b", 8, 3)]))
            .apply("Window", Window::into(FixedWindows::of(ms(10))))
            .apply("Buffer", ParDo::stateful(BufferUntilEndOfWindow));
        assert_that(&out).in_window(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![kv("a", 3), kv("b", 8)]);
        assert_that(&out).in_window(W::Interval(IntervalWindow::new(10, 20))).contains_in_any_order(vec![kv("a", 4)]);
        p.run();
    }

    fn every_state_kind(p) {
        let out = p
            .apply("Create", Create::timestamped(vec![tkv("a", 1, 30), tkv("a", 2, 10), tkv("a", 4, 20), tkv("a", 5, 5)]))
            .apply("All", ParDo::stateful(AllKinds));
        assert_that(&out).contains_in_any_order(vec!["a sum=12 distinct=[1, 2] hist=[(0, 2), (1, 2)] ordered<25=[5, 2, 4]".to_string()]);
        p.run();
    }

    fn timers_that_set_timers(p) {
        let out = p.apply("Create", Create::timestamped(vec![tkv("a", 3, 100)])).apply("Countdown", ParDo::stateful(Countdown));
        assert_that(&out).contains_in_any_order(vec![3, 2, 1]);
        p.run();
    }

    fn processing_time_timeouts(p) {
        let stream = TestStream::create()
            .add_elements(vec![tkv("a", 1, 1), tkv("b", 1, 1)])
            .advance_processing_time(ms(5))
            .add_elements(vec![tkv("a", 1, 2)])
            .advance_processing_time(ms(8))
            .add_elements(vec![tkv("a", 1, 3)])
            .advance_processing_time(ms(20))
            .advance_watermark_to_infinity();
        let out = p
            .apply("Stream", stream)
            .apply("Global", Window::configure().triggering(Repeatedly::forever(AfterPane::element_count_at_least(1))).discarding_fired_panes())
            .apply("Timeout", ParDo::stateful(Timeout));
        // b times out at 10 ms (1 element); a's timeout moves to 15 ms, then to 23 ms: one count of 3.
        assert_that(&out).contains_in_any_order(vec![kv("b", 1), kv("a", 3)]);
        p.run();
    }

    fn timer_families(p) {
        let out = p
            .apply("Create", Create::of(vec![kv("a", 1), kv("a", 2), kv("a", 4)]))
            .apply("Families", ParDo::stateful(Families));
        assert_that(&out).contains_in_any_order(vec!["parity:even=2".to_string(), "parity:odd=1".to_string()]);
        p.run();
    }

    fn timer_output_timestamps_hold_the_watermark(p) {
        let stream = TestStream::create()
            .add_elements(vec![tkv("a", 7, 2)])
            .advance_watermark_to(30)
            .advance_watermark_to(100)
            .advance_watermark_to_infinity();
        let out = p
            .apply("Stream", stream)
            .apply("Window", Window::into(FixedWindows::of(ms(10))).with_allowed_lateness(ms(100)))
            .apply("Held", ParDo::stateful(HeldOutput))
            .apply("Sum", Sum::per_key());
        // The timer fires at 52 but outputs at 2 and holds the watermark there: when the watermark
        // reaches 30 the sum of [0,10) still waits, and is on time, not late.
        assert_that(&out).in_on_time_pane(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![kv("a", 7)]);
        p.run();
    }

    fn a_defaulted_timer_output_timestamp_is_not_checked_against_the_element(p) {
        // Beam checks only an output timestamp the user set; the defaulted one (the firing
        // time) may be before the element, and the timer is set and fires.
        let out = p
            .apply("Create", Create::of(vec![kv("a", 1), kv("a", 2), kv("b", 5)]))
            .apply("Group", GroupByKey::create())
            .apply("Later", ParDo::stateful(RelativeAfterGroup));
        assert_that(&out).contains_in_any_order(vec![3, 5]);
        p.run();
    }

    fn late_elements_never_reach_stateful_dofns(p) {
        let stream = TestStream::create()
            .add_elements(vec![tkv("a", 1, 1)])
            .advance_watermark_to(50)
            .add_elements(vec![tkv("a", 1, 2)])
            .advance_watermark_to_infinity();
        let out = p
            .apply("Stream", stream)
            .apply("Window", Window::into(FixedWindows::of(ms(10))))
            .apply("Count", ParDo::stateful(RunningCount));
        assert_that(&out).contains_in_any_order(vec![kv("a", 1)]);
        p.run();
    }
}

#[test]
fn state_outside_a_stateful_par_do_is_an_error() {
    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![kv("a", 1)])).apply("NotStateful", ParDo::of(NotStateful));
    let err = p.try_run().unwrap_err().to_string();
    assert!(err.contains("'NotStateful'") && err.contains("ParDo::stateful"), "{err}");
}

/// Sets a timer on an input that is not keyed (a plain ParDo).
#[derive(Clone)]
struct UnkeyedTimer(bool);

impl DoFn for UnkeyedTimer {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        let timer = ctx.timer("t", TimeDomain::EventTime);
        if self.0 {
            timer.offset(ms(1)).set_relative()
        } else {
            timer.set(e)
        }
    }
}

#[test]
fn a_timer_on_an_unkeyed_input_says_timers_need_a_keyed_input() {
    for relative in [false, true] {
        let p = weir_tests::pipeline("direct");
        p.apply("Create", Create::of(vec![1i64])).apply("Unkeyed", ParDo::of(UnkeyedTimer(relative)));
        let err = p.try_run().unwrap_err().to_string();
        assert!(
            err.contains("'Unkeyed'") && err.contains("keyed (KV) input") && !err.contains("expiration"),
            "{relative}: {err}"
        );
    }
}

#[test]
fn timer_rules_are_enforced() {
    for (case, expected) in [
        (0u8, "absolute processing-time timer"),
        (1, "after the expiration of window"),
        (2, "before the element timestamp"),
    ] {
        let p = weir_tests::pipeline("direct");
        p.apply("Create", Create::timestamped(vec![tkv("a", 1, 5)]))
            .apply("Window", Window::into(FixedWindows::of(ms(10))))
            .apply("Bad", ParDo::stateful(BadTimer(case)));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("'Bad'") && err.contains(expected), "{case}: {err}");
    }
}

#[derive(Clone)]
struct FloatKeyed;

impl DoFn for FloatKeyed {
    type In = KV<f64, i64>;
    type Out = i64;
    fn process(&mut self, _: KV<f64, i64>, _: &mut ProcessContext<'_, i64>) -> UserResult {
        Ok(())
    }
}

#[test]
fn stateful_keys_must_be_deterministic() {
    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![KV::new(1.5f64, 1i64)])).apply("Stateful", ParDo::stateful(FloatKeyed));
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("'Stateful'") && err.contains("deterministically encoded"), "{err}");
}

/// Sets a flush timer per element and clears it when the value is negative.
#[derive(Clone)]
struct Cancelable;

impl DoFn for Cancelable {
    type In = KV<String, i64>;
    type Out = i64;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        if e.value < 0 {
            return ctx.timer("flush", TimeDomain::EventTime).clear();
        }
        ctx.value_state::<i64>("v").write(&e.value)?;
        let end = ctx.window().max_timestamp();
        ctx.timer("flush", TimeDomain::EventTime).set(end)
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, i64>,
    ) -> UserResult {
        let v = ctx.value_state::<i64>("v").read()?.unwrap_or(0);
        ctx.output(v)
    }
}

mod clearing {
    use super::*;

    conformance! {
        fn cleared_timers_do_not_fire(p) {
            let stream = TestStream::create()
                .add_elements(vec![tkv("a", 5, 1), tkv("b", 6, 1)])
                .add_elements(vec![tkv("a", -1, 2)])
                .advance_watermark_to_infinity();
            let out = p.apply("Stream", stream).apply("Window", Window::into(FixedWindows::of(ms(10)))).apply("Cancel", ParDo::stateful(Cancelable));
            assert_that(&out).contains_in_any_order(vec![6]);
            p.run();
        }
    }
}

/// Takes views before writing, and reads them after: Beam's `ReadableState` sees the writes.
#[derive(Clone)]
struct LazyViews;

impl DoFn for LazyViews {
    type In = KV<String, i64>;
    type Out = String;
    fn process(&mut self, e: KV<String, i64>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let empty = ctx.bag_state::<i64>("bag").read_later().is_empty_view();
        let values = ctx.bag_state::<i64>("bag").read_view();
        let entries = ctx.map_state::<i64, i64>("map").entries_view();
        let got = ctx.map_state::<i64, i64>("map").get_view(&e.value);
        let present = ctx.set_state::<i64>("set").contains_view(&e.value);
        let count = ctx.combining_state("sum", SumFn::<i64>::default()).is_empty_view();
        let value = ctx.value_state::<i64>("value").read_view();
        let before = (empty.read(ctx)?, got.read(ctx)?, present.read(ctx)?, count.read(ctx)?, value.read(ctx)?);
        ctx.bag_state::<i64>("bag").add(&e.value)?;
        ctx.map_state::<i64, i64>("map").put(&e.value, &(e.value * 10))?;
        ctx.set_state::<i64>("set").add(&e.value)?;
        ctx.combining_state("sum", SumFn::<i64>::default()).add(e.value)?;
        ctx.value_state::<i64>("value").write(&e.value)?;
        let after = (empty.read(ctx)?, got.read(ctx)?, present.read(ctx)?, count.read(ctx)?, value.read(ctx)?);
        let (values, entries) = (values.read(ctx)?, entries.read(ctx)?);
        ctx.output(format!("{before:?} {after:?} {values:?} {entries:?}"));
        Ok(())
    }
}

mod lazy_state {
    use super::*;

    conformance! {
        fn readable_state_views_observe_writes_made_after_they_were_taken(p) {
            let out = p.apply("Create", Create::of(vec![kv("a", 1), kv("b", 2)])).apply("Lazy", ParDo::stateful(LazyViews));
            assert_that(&out).contains_in_any_order(vec![
                "(true, None, false, true, None) (false, Some(10), true, false, Some(1)) [1] [(1, 10)]".to_string(),
                "(true, None, false, true, None) (false, Some(20), true, false, Some(2)) [2] [(2, 20)]".to_string(),
            ]);
            p.run();
        }
    }
}
