//! Trigger conformance with TestStream: early, on-time and late panes, accumulation modes,
//! lateness and dropping, pane info, composite triggers, chained aggregations in streaming.

use std::time::Duration;
use weir_sdk::metrics::MetricsFilter;
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn iw(a: i64, b: i64) -> W {
    W::Interval(IntervalWindow::new(a, b))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tv(v: i64, t: i64) -> TimestampedValue<KV<String, i64>> {
    TimestampedValue::new(KV::new("k".to_string(), v), t)
}

fn k(v: i64) -> KV<String, i64> {
    KV::new("k".to_string(), v)
}

/// Renders each element's pane: `value timing index nonSpeculativeIndex first last`.
#[derive(Clone)]
struct PaneOf;

impl DoFn for PaneOf {
    type In = KV<String, i64>;
    type Out = String;
    fn process(&mut self, kv: KV<String, i64>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let p = *ctx.pane();
        let t = p.timing.beam_name();
        ctx.output(format!("{} {t} {} {} {} {}", kv.value, p.index, p.non_speculative_index, p.is_first, p.is_last));
        Ok(())
    }
}

fn panes(pc: &PCollection<KV<String, i64>>) -> PCollection<String> {
    pc.apply("PaneOf", ParDo::of(PaneOf))
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

type Kvs = KV<String, i64>;

fn early_then_on_time(accumulating: bool) -> (TestStream<Kvs>, Window<Kvs>) {
    let stream = TestStream::create()
        .add_elements(vec![tv(1, 1), tv(2, 2)])
        .advance_processing_time(ms(6))
        .add_elements(vec![tv(3, 3)])
        .advance_watermark_to(100)
        .advance_watermark_to_infinity();
    let w = Window::into(FixedWindows::of(ms(100)))
        .triggering(
            AfterWatermark::past_end_of_window()
                .with_early_firings(AfterProcessingTime::past_first_element_in_pane().plus_delay_of(ms(5))),
        )
        .with_allowed_lateness(ms(0));
    (stream, if accumulating { w.accumulating_fired_panes() } else { w.discarding_fired_panes() })
}

conformance! {
    fn early_processing_time_firings_discarding(p) {
        let (stream, window) = early_then_on_time(false);
        let sums = p.apply("Stream", stream).apply("Window", window).apply("Sum", Sum::per_key());
        let w = iw(0, 100);
        assert_that(&sums).in_early_panes(w).contains_in_any_order(vec![k(3)]);
        assert_that(&sums).in_on_time_pane(w).contains_in_any_order(vec![k(3)]);
        assert_that(&sums).in_final_pane(w).contains_in_any_order(vec![k(3)]);
        assert_that(&panes(&sums)).contains_in_any_order(s(&["3 EARLY 0 -1 true false", "3 ON_TIME 1 0 false true"]));
        p.run();
    }

    fn early_processing_time_firings_accumulating(p) {
        let (stream, window) = early_then_on_time(true);
        let sums = p.apply("Stream", stream).apply("Window", window).apply("Sum", Sum::per_key());
        assert_that(&sums).in_early_panes(iw(0, 100)).contains_in_any_order(vec![k(3)]);
        assert_that(&sums).in_on_time_pane(iw(0, 100)).contains_in_any_order(vec![k(6)]);
        p.run();
    }

    fn repeated_count_in_global_window_ends_with_empty_on_time_pane(p) {
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1), tv(2, 2)])
            .add_elements(vec![tv(3, 3)])
            .add_elements(vec![tv(4, 4), tv(5, 5), tv(6, 6)])
            .advance_watermark_to_infinity();
        let windowed = p
            .apply("Stream", stream)
            .apply("Trigger", Window::configure().triggering(Repeatedly::forever(AfterPane::element_count_at_least(2))).discarding_fired_panes());
        let sums = windowed.apply("Sum", Sum::per_key());
        assert_that(&panes(&sums)).contains_in_any_order(s(&["3 EARLY 0 -1 true false", "18 EARLY 1 -1 false false", "0 ON_TIME 2 0 false true"]));
        let groups = windowed.apply("Group", GroupByKey::create()).apply("Sizes", Map::new(|kv: KV<String, Vec<i64>>| kv.value.len()));
        assert_that(&groups).contains_in_any_order(vec![2, 4, 0]);
        p.run();
    }

    fn combine_globally_with_defaults_keeps_the_combines_panes_under_a_trigger(p) {
        // Beam: early 3, early 6, then on time 6 (accumulating); the default joins only an
        // empty global window, once, at its end.
        let stream = TestStream::create()
            .add_elements(vec![TimestampedValue::new(1i64, 1), TimestampedValue::new(2, 2)])
            .advance_processing_time(ms(6))
            .add_elements(vec![TimestampedValue::new(3i64, 3)])
            .advance_processing_time(ms(6))
            .advance_watermark_to_infinity();
        let early = || {
            Window::<i64>::into(GlobalWindows)
                .triggering(
                    AfterWatermark::past_end_of_window()
                        .with_early_firings(AfterProcessingTime::past_first_element_in_pane().plus_delay_of(ms(5))),
                )
                .accumulating_fired_panes()
        };
        let sums = p.apply("Stream", stream).apply("Window", early()).apply("Sum", Sum::globally());
        let keyed = sums.apply("Key", Map::new(k));
        assert_that(&panes(&keyed)).contains_in_any_order(s(&[
            "3 EARLY 0 -1 true false",
            "6 EARLY 1 -1 false false",
            "6 ON_TIME 2 0 false true",
        ]));
        let empty = TestStream::<i64>::create().advance_processing_time(ms(6)).advance_watermark_to_infinity();
        let none = p.apply("Empty", empty).apply("EmptyWindow", early()).apply("EmptySum", Sum::globally());
        assert_that(&none).contains_in_any_order(vec![0]);
        p.run();
    }

    fn distinct_outputs_each_element_once_per_window_under_a_trigger(p) {
        // Beam's Distinct outputs an element on its key's first pane only: a, b in the first
        // early panes, c in its own first pane; the later panes (early and on time, accumulating
        // or discarding) output nothing again.
        let t = |w: &str, at: i64| TimestampedValue::new(w.to_string(), at);
        let stream = || {
            TestStream::create()
                .add_elements(vec![t("apple", 1), t("banana", 2)])
                .advance_processing_time(ms(6))
                .add_elements(vec![t("apple", 3), t("avocado", 4), t("cherry", 5)])
                .advance_processing_time(ms(6))
                .advance_watermark_to_infinity()
        };
        let early = || {
            Window::<String>::into(GlobalWindows).triggering(
                AfterWatermark::past_end_of_window()
                    .with_early_firings(AfterProcessingTime::past_first_element_in_pane().plus_delay_of(ms(5))),
            )
        };
        let words = p.apply("Stream", stream()).apply("Accumulating", early().accumulating_fired_panes());
        assert_that(&words.apply("Distinct", Distinct::create())).contains_in_any_order(s(&["apple", "banana", "avocado", "cherry"]));
        let again = p.apply("Stream2", stream()).apply("Discarding", early().discarding_fired_panes());
        let by_initial = again.apply("ByInitial", Distinct::with_representative_value_fn(|w: &String| w.chars().next()));
        assert_that(&by_initial).contains_in_any_order(s(&["apple", "banana", "cherry"]));
        p.run();
    }

    fn late_data_within_lateness_and_dropped_past_it(p) {
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1)])
            .advance_watermark_to(10)
            .add_elements(vec![tv(2, 2)])
            .advance_watermark_to(15)
            .add_elements(vec![tv(4, 3)])
            .advance_watermark_to_infinity();
        let sums = p
            .apply("Stream", stream)
            .apply("Window", Window::into(FixedWindows::of(ms(10))).with_allowed_lateness(ms(5)))
            .apply("Sum", Sum::per_key());
        assert_that(&panes(&sums)).contains_in_any_order(s(&["1 ON_TIME 0 0 true false", "2 LATE 1 1 false false"]));
        assert_that(&sums).in_late_panes(iw(0, 10)).contains_in_any_order(vec![k(2)]);
        assert_that(&sums).in_combined_non_late_panes(iw(0, 10)).contains_in_any_order(vec![k(1)]);
        let result = Pipeline::run(p).unwrap();
        assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
        let dropped = result.metrics().query_metrics(&MetricsFilter::all().named("weir", "droppedDueToLateness"));
        assert_eq!(dropped.counters.len(), 1, "{dropped:?}");
        assert_eq!(dropped.counters[0].key.step.as_deref(), Some("Sum"));
        assert_eq!(dropped.counters[0].attempted, 1);
    }

    fn late_inputs_of_one_key_are_dropped_and_counted_one_by_one(p) {
        // Three late inputs of one key and window arrive together, after two on-time ones: a
        // runner that combines inputs before the exchange (combiner lifting) still drops and
        // counts each input, and counts each one in.
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1), tv(2, 2)])
            .advance_watermark_to(20)
            .add_elements(vec![tv(3, 3), tv(4, 4), tv(5, 5), tv(6, 25)])
            .advance_watermark_to_infinity();
        let sums = p
            .apply("Stream", stream)
            .apply("Window", Window::into(FixedWindows::of(ms(10))))
            .apply("Sum", Sum::per_key());
        assert_that(&sums).in_window(iw(0, 10)).contains_in_any_order(vec![k(3)]);
        assert_that(&sums).in_window(iw(20, 30)).contains_in_any_order(vec![k(6)]);
        let result = Pipeline::run(p).unwrap();
        assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
        let m = result.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
        let counter = |name: &str| m.counter("Sum", "weir", name).map(|c| c.attempted).unwrap_or(-1);
        assert_eq!(counter("droppedDueToLateness"), 3, "{m:?}");
    }

    fn late_firings_accumulating_versus_discarding(p) {
        for (name, accumulating, expected) in [("Acc", true, vec![1, 3, 6]), ("Disc", false, vec![1, 2, 3])] {
            let stream = TestStream::create()
                .add_elements(vec![tv(1, 1)])
                .advance_watermark_to(10)
                .add_elements(vec![tv(2, 2)])
                .add_elements(vec![tv(3, 3)])
                .advance_watermark_to_infinity();
            let w = Window::into(FixedWindows::of(ms(10)))
                .triggering(AfterWatermark::past_end_of_window().with_late_firings(AfterPane::element_count_at_least(1)))
                .with_allowed_lateness(ms(100));
            let w = if accumulating { w.accumulating_fired_panes() } else { w.discarding_fired_panes() };
            let windowed = p.apply(&format!("{name}Stream"), stream).apply(&format!("{name}Window"), w);
            let sums = windowed.apply(&format!("{name}Sum"), Sum::per_key());
            assert_that(&sums).contains_in_any_order(expected.iter().copied().map(k).collect());
            // With a hot-key fanout, pre-combined panes are discarding and the final combine
            // accumulates: the same panes.
            let fanned = windowed.apply(&format!("{name}FanoutSum"), Sum::per_key().with_hot_key_fanout(3));
            assert_that(&fanned).contains_in_any_order(expected.into_iter().map(k).collect());
        }
        p.run();
    }

    fn or_finally_inside_after_each(p) {
        // Nexmark Q10's trigger shape: counts until the watermark, then one pane per late element.
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1), tv(2, 2)])
            .add_elements(vec![tv(3, 3)])
            .advance_watermark_to(100)
            .add_elements(vec![tv(100, 50)])
            .advance_watermark_to_infinity();
        let sums = p
            .apply("Stream", stream)
            .apply(
                "Window",
                Window::into(FixedWindows::of(ms(100)))
                    .triggering(AfterEach::in_order(vec![
                        Repeatedly::forever(AfterPane::element_count_at_least(2)).or_finally(AfterWatermark::past_end_of_window()),
                        Repeatedly::forever(AfterPane::element_count_at_least(1)),
                    ]))
                    .with_allowed_lateness(ms(10))
                    .discarding_fired_panes(),
            )
            .apply("Sum", Sum::per_key());
        assert_that(&panes(&sums)).contains_in_any_order(s(&[
            "3 EARLY 0 -1 true false",
            "3 ON_TIME 1 0 false false",
            "100 LATE 2 1 false false",
        ]));
        p.run();
    }

    fn after_each_in_order(p) {
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1)])
            .add_elements(vec![tv(2, 2)])
            .add_elements(vec![tv(3, 3)])
            .add_elements(vec![tv(4, 4)])
            .add_elements(vec![tv(5, 5)])
            .advance_watermark_to_infinity();
        let sums = p
            .apply("Stream", stream)
            .apply(
                "Window",
                Window::configure()
                    .triggering(Repeatedly::forever(AfterEach::in_order(vec![
                        AfterPane::element_count_at_least(1),
                        AfterPane::element_count_at_least(2),
                    ])))
                    .discarding_fired_panes(),
            )
            .apply("Sum", Sum::per_key());
        // Panes: {1}, {2,3}, {4}, then {5} at the end of the global window (on time).
        assert_that(&sums).contains_in_any_order(vec![k(1), k(5), k(4), k(5)]);
        p.run();
    }

    fn after_first_and_after_all(p) {
        let stream = TestStream::create()
            .add_elements(vec![tv(1, 1)])
            .advance_processing_time(ms(20))
            .add_elements(vec![tv(2, 2), tv(3, 3), tv(4, 4)])
            .advance_watermark_to_infinity();
        let first = p
            .apply("Stream", stream.clone_events())
            .apply(
                "First",
                Window::configure()
                    .triggering(Repeatedly::forever(AfterFirst::of(vec![
                        AfterPane::element_count_at_least(3),
                        AfterProcessingTime::past_first_element_in_pane().plus_delay_of(ms(10)).into(),
                    ])))
                    .discarding_fired_panes(),
            )
            .apply("SumFirst", Sum::per_key());
        // {1} fires on processing time, {2,3,4} on count, then an empty on-time pane.
        assert_that(&first).contains_in_any_order(vec![k(1), k(9), k(0)]);
        let all = p
            .apply("Stream2", stream)
            .apply(
                "All",
                Window::configure()
                    .triggering(Repeatedly::forever(AfterAll::of(vec![
                        AfterPane::element_count_at_least(2),
                        AfterProcessingTime::past_first_element_in_pane().plus_delay_of(ms(10)).into(),
                    ])))
                    .discarding_fired_panes(),
            )
            .apply("SumAll", Sum::per_key());
        // Both conditions hold only after the second bundle: one pane {1,2,3,4}, then empty on time.
        assert_that(&all).contains_in_any_order(vec![k(10), k(0)]);
        p.run();
    }

    fn chained_aggregations_in_streaming(p) {
        // Aggregate, then aggregate the aggregates, with several bundles and watermark moves:
        // the second aggregation sees every first-level result on time.
        let stream = TestStream::create()
            .add_elements(vec![TimestampedValue::new(KV::new("a".to_string(), 1), 1), TimestampedValue::new(KV::new("b".to_string(), 2), 2)])
            .add_elements(vec![TimestampedValue::new(KV::new("a".to_string(), 3), 12)])
            .advance_watermark_to(10)
            .add_elements(vec![TimestampedValue::new(KV::new("b".to_string(), 4), 15)])
            .advance_watermark_to(25)
            .add_elements(vec![TimestampedValue::new(KV::new("c".to_string(), 5), 27)])
            .advance_watermark_to_infinity();
        let per_key = p
            .apply("Stream", stream)
            .apply("Window", Window::into(FixedWindows::of(ms(10))))
            .apply("Max", Max::per_key());
        let totals = per_key.apply("Values", Values::create()).apply("Total", Sum::globally().without_defaults());
        assert_that(&totals).in_window(iw(0, 10)).contains_in_any_order(vec![3]);
        assert_that(&totals).in_window(iw(10, 20)).contains_in_any_order(vec![7]);
        assert_that(&totals).in_window(iw(20, 30)).contains_in_any_order(vec![5]);
        assert_that(&panes(&per_key)).satisfies(|v: Vec<String>| {
            if v.len() == 5 && v.iter().all(|s| s.contains("ON_TIME")) { Ok(()) } else { Err(format!("{v:?}")) }
        });
        let result = Pipeline::run(p).unwrap();
        result.wait_until_finish(None).unwrap();
        let dropped = result.metrics().query_metrics(&MetricsFilter::all().named("weir", "droppedDueToLateness"));
        assert!(dropped.counters.iter().all(|c| c.attempted == 0), "{dropped:?}");
    }
}

#[test]
fn validation_of_triggers() {
    let p = weir_tests::pipeline("direct");
    let input = p.apply("Create", Create::of(vec![k(1)]));
    input
        .apply("Unsafe", Window::configure().triggering(AfterPane::element_count_at_least(2)).discarding_fired_panes())
        .apply("Group", GroupByKey::create());
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("'Group'") && err.contains("Unsafe trigger"), "{err}");

    let p = weir_tests::pipeline("direct");
    p.apply("Stream", TestStream::<KV<String, i64>>::create()).apply("Group", GroupByKey::create());
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("non-bounded PCollection in the GlobalWindow without a trigger"), "{err}");

    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![k(1)])).apply(
        "NoLateness",
        Window::into(FixedWindows::of(ms(10)))
            .triggering(AfterPane::element_count_at_least(2))
            .discarding_fired_panes(),
    );
    assert!(p.validate().unwrap_err().to_string().contains("requires that the allowed lateness be specified"));

    let p = weir_tests::pipeline("direct");
    p.apply("Create", Create::of(vec![k(1)])).apply("NoMode", Window::configure().triggering(Never::ever()));
    assert!(p.validate().unwrap_err().to_string().contains("accumulation mode be specified"));

    let p = weir_tests::pipeline("direct");
    p.apply("Stream", TestStream::<i64>::create().advance_watermark_to(10).advance_watermark_to(5));
    assert!(p.validate().unwrap_err().to_string().contains("moves backwards"));
}

#[test]
fn streaming_mode_is_detected() {
    let p = weir_tests::pipeline("direct");
    p.apply("Stream", TestStream::<i64>::create()).apply("Double", Map::new(|x: i64| x * 2));
    assert!(p.graph().is_streaming());
}

mod behaviors {
    use super::*;

    conformance! {
        fn on_time_behavior_fire_if_non_empty_suppresses_empty_on_time_panes(p) {
            let stream = TestStream::create()
                .add_elements(vec![tv(1, 1), tv(2, 2)])
                .advance_watermark_to_infinity();
            let sums = p
                .apply("Stream", stream)
                .apply(
                    "Window",
                    Window::configure()
                        .triggering(Repeatedly::forever(AfterPane::element_count_at_least(2)))
                        .discarding_fired_panes()
                        .with_on_time_behavior(OnTimeBehavior::FireIfNonEmpty),
                )
                .apply("Sum", Sum::per_key());
            // Without the empty on-time pane, the only pane is the early one.
            assert_that(&panes(&sums)).contains_in_any_order(s(&["3 EARLY 0 -1 true false"]));
            p.run();
        }

        fn closing_behavior_fire_always_emits_an_empty_final_pane(p) {
            let stream = TestStream::create()
                .add_elements(vec![tv(1, 1)])
                .advance_watermark_to(10)
                .advance_watermark_to_infinity();
            let sums = p
                .apply("Stream", stream)
                .apply(
                    "Window",
                    Window::into(FixedWindows::of(ms(10)))
                        .with_allowed_lateness(ms(5))
                        .with_closing_behavior(ClosingBehavior::FireAlways),
                )
                .apply("Sum", Sum::per_key());
            assert_that(&panes(&sums)).contains_in_any_order(s(&["1 ON_TIME 0 0 true false", "0 LATE 1 1 false true"]));
            p.run();
        }
    }
}
