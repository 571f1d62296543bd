//! Combine conformance: globally (with and without defaults), per key, grouped values, and the
//! standard combiners.

use weir_sdk::prelude::*;
use weir_sdk::transforms::combiners::TopFn;
use weir_tests::conformance;

/// Concatenates strings in sorted order: associative and commutative.
#[derive(Clone)]
struct ConcatFn;

impl CombineFn for ConcatFn {
    type In = String;
    type Accum = Vec<String>;
    type Out = String;
    fn create_accumulator(&self) -> Vec<String> {
        vec![]
    }
    fn add_input(&self, acc: &mut Vec<String>, v: String) {
        acc.push(v);
    }
    fn merge_accumulators(&self, accs: Vec<Vec<String>>) -> Vec<String> {
        accs.into_iter().flatten().collect()
    }
    fn extract_output(&self, mut acc: Vec<String>) -> String {
        acc.sort();
        format!("[{}]", acc.join(","))
    }
}

fn kvs(v: &[(&str, i64)]) -> Vec<KV<String, i64>> {
    v.iter().map(|(k, x)| KV::new(k.to_string(), *x)).collect()
}

conformance! {
    fn combine_globally(p) {
        let input = p.apply("Create", Create::of(vec!["c".to_string(), "a".into(), "b".into()]));
        assert_that(&input.apply("Concat", Combine::globally(ConcatFn))).contains_in_any_order(vec!["[a,b,c]".to_string()]);
        p.run();
    }

    fn combine_globally_empty_gives_default(p) {
        let empty = p.apply("Create", Create::<i64>::of(vec![]));
        assert_that_singleton(&empty.apply("Sum", Sum::globally())).equal_to(0);
        assert_that_singleton(&empty.apply("Count", Count::globally())).equal_to(0);
        assert_that_singleton(&empty.apply("Min", Min::globally())).equal_to(i64::MAX);
        assert_that_singleton(&empty.apply("Concat", Map::new(|i: i64| i.to_string())).apply("C", Combine::globally(ConcatFn)))
            .equal_to("[]".to_string());
        assert_that(&empty.apply("NoDefault", Combine::globally(weir_sdk::transforms::combiners::SumFn::<i64>::default()).without_defaults())).empty();
        p.run();
    }

    fn combine_per_key(p) {
        let input = p.apply("Create", Create::of(kvs(&[("a", 1), ("b", 10), ("a", 2), ("c", 5), ("a", 3)])));
        assert_that(&input.apply("Sum", Sum::per_key())).contains_in_any_order(kvs(&[("a", 6), ("b", 10), ("c", 5)]));
        assert_that(&input.apply("Count", Count::per_key())).contains_in_any_order(kvs(&[("a", 3), ("b", 1), ("c", 1)]));
        assert_that(&input.apply("Max", Max::per_key())).contains_in_any_order(kvs(&[("a", 3), ("b", 10), ("c", 5)]));
        assert_that(&input.apply("Min", Min::per_key())).contains_in_any_order(kvs(&[("a", 1), ("b", 10), ("c", 5)]));
        let means = input.apply("Mean", Mean::per_key()).apply("Render", Map::new(|kv: KV<String, f64>| format!("{}={:.3}", kv.key, kv.value)));
        assert_that(&means).contains_in_any_order(vec!["a=2.000".to_string(), "b=10.000".into(), "c=5.000".into()]);
        p.run();
    }

    fn hot_key_fanout_gives_the_same_results(p) {
        // Beam's withHotKeyFanout / withFanout: pre-combined per (key, nonce), then merged.
        let values: Vec<KV<String, i64>> = (0..200).map(|i| KV::new(["a", "b", "c"][i % 3].to_string(), i as i64)).collect();
        let sums: Vec<KV<String, i64>> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(j, k)| KV::new(k.to_string(), (0..200).filter(|i| i % 3 == j).map(|i| i as i64).sum()))
            .collect();
        let input = p.apply("Create", Create::of(values));
        assert_that(&input.apply("Sum", Sum::per_key().with_hot_key_fanout(4))).contains_in_any_order(sums);
        let concat = input
            .apply("Render", Map::new(|kv: KV<String, i64>| KV::new(kv.key, (kv.value % 5).to_string())))
            .apply("Concat", Combine::per_key(ConcatFn).with_hot_key_fanout(7))
            .apply("Lengths", Map::new(|kv: KV<String, String>| KV::new(kv.key, kv.value.len() as i64)));
        // 67, 67 and 66 one-digit values: "[" + 2n-1 characters + "]".
        assert_that(&concat).contains_in_any_order(kvs(&[("a", 135), ("b", 135), ("c", 133)]));
        let numbers = p.apply("Numbers", Create::of((1..=100i64).collect::<Vec<_>>()));
        assert_that_singleton(&numbers.apply("Total", Combine::globally(weir_sdk::transforms::combiners::SumFn::<i64>::default()).with_fanout(3))).equal_to(5050);
        let empty = p.apply("Empty", Create::<i64>::of(vec![]));
        assert_that_singleton(&empty.apply("EmptyTotal", Sum::globally().with_fanout(3))).equal_to(0);
        let windowed = p
            .apply("Timed", Create::timestamped((0..40i64).map(|i| TimestampedValue::new(KV::new("k".to_string(), i), i * 10))))
            .apply("Window", Window::into(FixedWindows::of(std::time::Duration::from_millis(100))))
            .apply("WindowedSum", Sum::per_key().with_hot_key_fanout(3));
        let per_window: Vec<KV<String, i64>> = (0..4).map(|w| KV::new("k".to_string(), (w * 10..w * 10 + 10).sum())).collect();
        assert_that(&windowed).contains_in_any_order(per_window);
        p.run();
    }

    fn combine_grouped_values(p) {
        let input = p.apply("Create", Create::of(vec![KV::new(1, "x".to_string()), KV::new(1, "y".into()), KV::new(2, "z".into())]));
        let out = input.apply("GroupByKey", GroupByKey::create()).apply("Combine", Combine::grouped_values(ConcatFn));
        assert_that(&out).contains_in_any_order(vec![KV::new(1, "[x,y]".to_string()), KV::new(2, "[z]".to_string())]);
        p.run();
    }

    fn numeric_combiners_globally(p) {
        let input = p.apply("Create", Create::of(vec![4i64, -2, 9, 1]));
        assert_that_singleton(&input.apply("Sum", Sum::globally())).equal_to(12);
        assert_that_singleton(&input.apply("Min", Min::globally())).equal_to(-2);
        assert_that_singleton(&input.apply("Max", Max::globally())).equal_to(9);
        assert_that_singleton(&input.apply("Mean", Mean::globally())).equal_to(3.0);
        assert_that_singleton(&input.apply("Count", Count::globally())).equal_to(4);
        let floats = p.apply("Floats", Create::of(vec![0.5f64, 0.25]));
        assert_that_singleton(&floats.apply("FSum", Sum::globally())).equal_to(0.75);
        let empty = p.apply("Empty", Create::<i64>::of(vec![]));
        assert_that_singleton(&empty.apply("EmptyMean", Mean::globally()).apply("IsNan", Map::new(|m: f64| m.is_nan()))).equal_to(true);
        p.run();
    }

    fn top_largest_smallest_and_custom(p) {
        let input = p.apply("Create", Create::of(vec![5i64, 1, 9, 3, 7, 9]));
        assert_that_singleton(&input.apply("Largest", Top::largest(3))).equal_to(vec![9, 9, 7]);
        assert_that_singleton(&input.apply("Smallest", Top::smallest(2))).equal_to(vec![1, 3]);
        assert_that_singleton(&input.apply("ByLastDigitDesc", Top::of(2, |a: &i64, b: &i64| (a % 3).cmp(&(b % 3)).then(a.cmp(b))))).equal_to(vec![5, 7]);
        assert_that_singleton(&input.apply("All", Top::largest(100))).equal_to(vec![9, 9, 7, 5, 3, 1]);
        let empty = p.apply("Empty", Create::<i64>::of(vec![]));
        assert_that_singleton(&empty.apply("EmptyTop", Top::largest(3))).equal_to(vec![]);
        let keyed = p.apply("Keyed", Create::of(kvs(&[("a", 1), ("a", 5), ("a", 3), ("b", 2)])));
        assert_that(&keyed.apply("PerKey", Top::largest_per_key(2))).contains_in_any_order(vec![
            KV::new("a".to_string(), vec![5, 3]),
            KV::new("b".to_string(), vec![2]),
        ]);
        assert_that(&keyed.apply("SmallestPerKey", Top::smallest_per_key(1))).contains_in_any_order(vec![
            KV::new("a".to_string(), vec![1]),
            KV::new("b".to_string(), vec![2]),
        ]);
        let custom = keyed.apply("CustomPerKey", Top::per_key(1, |a: &i64, b: &i64| b.cmp(a)));
        assert_that(&custom).contains_in_any_order(vec![KV::new("a".to_string(), vec![1]), KV::new("b".to_string(), vec![2])]);
        p.run();
    }

    fn count_per_element(p) {
        let input = p.apply("Create", Create::of(vec!["a".to_string(), "b".into(), "a".into(), "c".into(), "a".into()]));
        assert_that(&input.apply("Count", Count::per_element())).contains_in_any_order(kvs(&[("a", 3), ("b", 1), ("c", 1)]));
        p.run();
    }
}

#[test]
fn top_fn_merges_partial_results() {
    let f: TopFn<i64> = weir_sdk::transforms::combiners::top_fn(3, i64::cmp);
    let mut a = f.create_accumulator();
    for i in 0..100 {
        f.add_input(&mut a, i);
    }
    let mut b = f.create_accumulator();
    f.add_input(&mut b, 1000);
    assert_eq!(f.extract_output(f.merge_accumulators(vec![a, b])), vec![1000, 99, 98]);
}

mod with_context {
    use super::*;
    use std::time::Duration;
    use weir_sdk::transforms::combine_with_context::{
        CombineContext, CombineFnWithContext, CombineGloballyWithContext, CombinePerKeyWithContext,
    };
    use weir_sdk::view::{PCollectionView, Singleton};
    use weir_sdk::window::Window as W;

    /// Sums values times a factor read from a side input, and reports the end of the window
    /// being combined.
    #[derive(Clone)]
    struct ScaledSum(PCollectionView<Singleton<i64>>);

    impl CombineFnWithContext for ScaledSum {
        type In = i64;
        type Accum = i64;
        type Out = (i64, i64);
        fn create_accumulator(&self, _: &CombineContext<'_>) -> Result<i64, UserError> {
            Ok(0)
        }
        fn add_input(&self, acc: &mut i64, v: i64, ctx: &CombineContext<'_>) -> UserResult {
            *acc += v * ctx.side_input(&self.0)?;
            Ok(())
        }
        fn merge_accumulators(&self, accs: Vec<i64>, _: &CombineContext<'_>) -> Result<i64, UserError> {
            Ok(accs.into_iter().sum())
        }
        fn extract_output(&self, acc: i64, ctx: &CombineContext<'_>) -> Result<(i64, i64), UserError> {
            let end = match ctx.window() {
                W::Interval(w) => w.end,
                _ => -1,
            };
            Ok((acc, end))
        }
    }

    fn kt(k: &str, v: i64, t: i64) -> TimestampedValue<KV<String, i64>> {
        TimestampedValue::new(KV::new(k.to_string(), v), t)
    }

    conformance! {
        fn combine_fn_with_context_reads_side_inputs_per_key_and_globally(p) {
            let factor = View::as_singleton(&p.apply("Factor", Create::of(vec![10i64])));
            let values = p.apply("Values", Create::of(vec![KV::new("a".to_string(), 1i64), KV::new("a".to_string(), 2), KV::new("b".to_string(), 3)]));
            let sums = values.apply("Sum", Combine::per_key_with_context(ScaledSum(factor.clone())).with_side_inputs(vec![factor.spec().clone()]));
            assert_that(&sums).contains_in_any_order(vec![KV::new("a".to_string(), (30, -1)), KV::new("b".to_string(), (30, -1))]);
            let total = values
                .apply("Vals", Values::create())
                .apply("Total", Combine::globally_with_context(ScaledSum(factor.clone())).with_side_inputs(vec![factor.spec().clone()]));
            assert_that(&total).contains_in_any_order(vec![(60, -1)]);
            // An empty input gives the default, computed with the context too.
            let none = p
                .apply("None", Create::<i64>::of(vec![]))
                .apply("Default", CombineGloballyWithContext::of(ScaledSum(factor.clone())).with_side_inputs(vec![factor.spec().clone()]));
            assert_that(&none).contains_in_any_order(vec![(0, -1)]);
            p.run();
        }

        fn combine_fn_with_context_sees_each_windows_side_input_and_merged_sessions(p) {
            // Factor 2 in [0, 10), 3 in [10, 20): each window combines with its own.
            let factors = p
                .apply("Factors", Create::timestamped(vec![TimestampedValue::new(2i64, 1), TimestampedValue::new(3i64, 11)]))
                .apply("FactorWindows", Window::into(FixedWindows::of(Duration::from_millis(10))));
            let factor = View::as_singleton(&factors);
            let sums = p
                .apply("Values", Create::timestamped(vec![kt("a", 1, 1), kt("a", 2, 5), kt("a", 4, 12)]))
                .apply("Fixed", Window::into(FixedWindows::of(Duration::from_millis(10))))
                .apply("Sum", CombinePerKeyWithContext::of(ScaledSum(factor.clone())).with_side_inputs(vec![factor.spec().clone()]));
            assert_that(&sums).contains_in_any_order(vec![KV::new("a".to_string(), (6, 10)), KV::new("a".to_string(), (12, 20))]);
            // Sessions merge [1, 11) and [5, 15) into [1, 15): the context has the merged window,
            // and the side input of the window it maps to ([0, 100), by its end).
            let wide = View::as_singleton(
                &p.apply("Wide", Create::timestamped(vec![TimestampedValue::new(7i64, 50)]))
                    .apply("WideWindow", Window::into(FixedWindows::of(Duration::from_millis(100)))),
            );
            let sessions = p
                .apply("Clicks", Create::timestamped(vec![kt("u", 1, 1), kt("u", 2, 5)]))
                .apply("Sessions", Window::into(Sessions::with_gap_duration(Duration::from_millis(10))))
                .apply("SessionSum", CombinePerKeyWithContext::of(ScaledSum(wide.clone())).with_side_inputs(vec![wide.spec().clone()]));
            assert_that(&sessions).contains_in_any_order(vec![KV::new("u".to_string(), (21, 15))]);
            p.run();
        }
    }
}
