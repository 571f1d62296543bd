//! Window aggregation conformance: Combine.perKey over windows that each fire once, at their
//! end, runs as a hash aggregation per key and window (`--window-aggregation hash`, the
//! default). Each test builds the same pipeline twice, once on that fast path and once on the
//! general GroupAlsoByWindow engine (`--window-aggregation general`), checks from the plan that
//! each ran where it should, and requires the same panes of both: values, windows, timestamps
//! and pane info, with late data dropped alike.

use std::fmt::Debug;
use std::time::Duration;
use weir_sdk::options::WindowAggregation;
use weir_sdk::prelude::*;
use weir_sdk::testing::TestPipeline;
use weir_sdk::time::GLOBAL_WINDOW_MAX_TIMESTAMP;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

/// Renders each element with its window, timestamp and pane:
/// `value window@timestamp timing index nonSpeculativeIndex first last`.
#[derive(Clone)]
struct Render;

impl<T: Element + Debug> DoFn for RenderOf<T> {
    type In = T;
    type Out = String;
    fn process(&mut self, v: T, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let p = *ctx.pane();
        let timing = p.timing.beam_name();
        let window = match ctx.window() {
            W::Global => "global".to_string(),
            W::Interval(w) => format!("[{},{})", w.start, w.end),
            W::Custom(c) => format!("{c:?}"),
            W::Sdk(s) => format!("{s:?}"),
        };
        let (i, n, first, last) = (p.index, p.non_speculative_index, p.is_first, p.is_last);
        ctx.output(format!("{v:?} {window}@{} {timing} {i} {n} {first} {last}", ctx.timestamp()));
        Ok(())
    }
}

/// [`Render`] for elements of type `T`.
#[derive(Clone)]
struct RenderOf<T>(std::marker::PhantomData<fn() -> T>);

impl Render {
    fn of<T: Element + Debug>(pc: &PCollection<T>) -> PCollection<String> {
        pc.apply("Render", ParDo::of(RenderOf::<T>(std::marker::PhantomData)))
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn kv(k: &str, v: i64, t: i64) -> TimestampedValue<KV<String, i64>> {
    TimestampedValue::new(KV::new(k.to_string(), v), t)
}

/// A key longer than the 16 bytes a key is held inline in.
const LONG: &str = "a key longer than sixteen bytes";

/// Runs `build` on `p` (the window aggregation) and on a copy of `p` running the general
/// engine; both must output `expected`. `steps` is how many of the pipeline's combines run as
/// window aggregations.
fn on_both_engines(
    p: &TestPipeline,
    steps: usize,
    expected: Vec<String>,
    build: impl Fn(&TestPipeline) -> PCollection<String>,
) {
    let mut general = p.options();
    general.window_aggregation = WindowAggregation::General;
    let g = TestPipeline::from_options(general);
    for (pipeline, aggregations) in [(p, steps), (&g, 0)] {
        let out = build(pipeline);
        assert_that(&out).contains_in_any_order(expected.clone());
        let plan = pipeline.explain().expect("a plan");
        assert_eq!(plan.matches("WindowAggregation[").count(), aggregations, "{plan}");
        pipeline.run();
    }
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

conformance! {
    fn fixed_windows_fire_once_at_their_end_and_drop_late_data(p) {
        let expected = lines(&[
            "KV { key: \"a\", value: 1 } [0,10)@9 ON_TIME 0 0 true true",
            "KV { key: \"b\", value: 2 } [0,10)@9 ON_TIME 0 0 true true",
            &format!("KV {{ key: \"{LONG}\", value: 4 }} [0,10)@9 ON_TIME 0 0 true true"),
            "KV { key: \"a\", value: 3 } [10,20)@19 ON_TIME 0 0 true true",
            "KV { key: \"b\", value: 6 } [10,20)@19 ON_TIME 0 0 true true",
            &format!("KV {{ key: \"{LONG}\", value: 8 }} [10,20)@19 ON_TIME 0 0 true true"),
        ]);
        on_both_engines(p, 1, expected, |p| {
            let stream = TestStream::create()
                .add_elements(vec![kv("a", 1, 1), kv("b", 2, 5), kv("a", 3, 12), kv(LONG, 4, 3)])
                .advance_watermark_to(10)
                // Behind the watermark, in an expired window: dropped as late.
                .add_elements(vec![kv("a", 5, 7), kv(LONG, 7, 9)])
                .add_elements(vec![kv("b", 6, 15), kv(LONG, 8, 19)])
                .advance_watermark_to_infinity();
            let sums = p
                .apply("Stream", stream)
                .apply("Window", Window::into(FixedWindows::of(ms(10))))
                .apply("Sum", Sum::per_key());
            Render::of(&sums)
        });
    }

    fn sliding_windows_count_integer_keys(p) {
        let expected = lines(&[
            "KV { key: 1, value: 1 } [-5,5)@4 ON_TIME 0 0 true true",
            "KV { key: 1, value: 2 } [0,10)@9 ON_TIME 0 0 true true",
            "KV { key: 2, value: 1 } [0,10)@9 ON_TIME 0 0 true true",
            "KV { key: 1, value: 2 } [5,15)@14 ON_TIME 0 0 true true",
            "KV { key: 2, value: 1 } [5,15)@14 ON_TIME 0 0 true true",
            "KV { key: 1, value: 1 } [10,20)@19 ON_TIME 0 0 true true",
        ]);
        on_both_engines(p, 1, expected, |p| {
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new(1i64, 1), TimestampedValue::new(1, 6)])
                .advance_watermark_to(5)
                .add_elements(vec![TimestampedValue::new(2i64, 7), TimestampedValue::new(1, 12)])
                .advance_watermark_to_infinity();
            let counts = p
                .apply("Stream", stream)
                .apply("Window", Window::into(SlidingWindows::of(ms(10)).every(ms(5))))
                .apply("Count", Count::per_element());
            Render::of(&counts)
        });
    }

    fn means_of_long_keys_in_the_global_window(p) {
        let end = GLOBAL_WINDOW_MAX_TIMESTAMP;
        let expected = vec![
            format!("KV {{ key: \"{LONG}\", value: \"2.50\" }} global@{end} ON_TIME 0 0 true true"),
            format!("KV {{ key: \"{LONG}!\", value: \"10.00\" }} global@{end} ON_TIME 0 0 true true"),
        ];
        on_both_engines(p, 1, expected, |p| {
            let values = vec![KV::new(LONG.to_string(), 1i64), KV::new(LONG.into(), 4), KV::new(format!("{LONG}!"), 10)];
            let means = p
                .apply("Create", Create::of(values))
                .apply("Mean", Mean::per_key())
                .apply("Format", Map::new(|kv: KV<String, f64>| KV::new(kv.key, format!("{:.2}", kv.value))));
            Render::of(&means)
        });
    }

    fn combine_globally_with_fanout_in_fixed_windows(p) {
        // Two combines (pre-combined per nonce, then merged), both window aggregations.
        let expected = lines(&["9 [0,100)@99 ON_TIME 0 0 true true", "150 [100,200)@199 ON_TIME 0 0 true true"]);
        on_both_engines(p, 2, expected, |p| {
            let values: Vec<TimestampedValue<i64>> =
                (0..10).chain(140..151).map(|i| TimestampedValue::new(i, if i < 100 { i } else { i + 10 })).collect();
            let stream = TestStream::create().add_elements(values).advance_watermark_to_infinity();
            let max = p
                .apply("Stream", stream)
                .apply("Window", Window::into(FixedWindows::of(ms(100))))
                .apply("Max", Max::globally::<i64>().without_defaults().with_fanout(3));
            Render::of(&max)
        });
    }

    fn late_data_and_triggers_stay_on_the_general_engine(p) {
        // Allowed lateness (a late pane may follow the on-time one) and early firings: no
        // window aggregation.
        let expected = lines(&[
            "KV { key: \"a\", value: 1 } [0,10)@9 ON_TIME 0 0 true false",
            "KV { key: \"a\", value: 6 } [0,10)@9 LATE 1 1 false false",
            "KV { key: \"a\", value: 6 } [0,10)@9 ON_TIME 0 0 true true",
        ]);
        on_both_engines(p, 0, expected, |p| {
            let stream = TestStream::create()
                .add_elements(vec![kv("a", 1, 1)])
                .advance_watermark_to(10)
                .add_elements(vec![kv("a", 5, 7)])
                .advance_watermark_to_infinity();
            let stream = p.apply("Stream", stream);
            let late = stream
                .apply("Lateness", Window::into(FixedWindows::of(ms(10))).with_allowed_lateness(ms(100)).accumulating_fired_panes())
                .apply("Sum", Sum::per_key());
            let merged = stream
                .apply("NoLateness", Window::into(FixedWindows::of(ms(10))).with_allowed_lateness(ms(100)).triggering(Never::ever()).accumulating_fired_panes())
                .apply("Sum2", Sum::per_key());
            let both = PCollectionList::of(p, vec![Render::of(&late), merged.apply("Render2", ParDo::of(RenderOf::<KV<String, i64>>(std::marker::PhantomData)))]);
            both.apply("Flatten", Flatten::pcollections())
        });
    }
}
