//! Conformance of the composite library and of the assertions themselves.

use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn words(p: &TestPipeline) -> PCollection<String> {
    p.apply("Create", Create::of(["hi there", "hi", "sue bob", "hi sue", "", "bob hi"].map(String::from)))
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

conformance! {
    fn element_wise(p) {
        let lines = words(p);
        let lengths = lines.apply("Len", Map::new(|l: String| l.len() as i64));
        assert_that(&lengths).contains_in_any_order(vec![8, 2, 7, 6, 0, 6]);
        let tokens = lines.apply("Split", FlatMap::new(|l: String| l.split_whitespace().map(String::from).collect::<Vec<_>>()));
        assert_that(&tokens).contains_in_any_order(s(&["hi", "there", "hi", "sue", "bob", "hi", "sue", "bob", "hi"]));
        let long = tokens.apply("Long", Filter::by(|w: &String| w.len() > 2));
        assert_that(&long).contains_in_any_order(s(&["there", "sue", "bob", "sue", "bob"]));
        p.run();
    }

    fn keys_values_swap(p) {
        let pairs = p.apply("Create", Create::of(vec![KV::new("a".to_string(), 1), KV::new("b".to_string(), 2)]));
        assert_that(&pairs.apply("Keys", Keys::create())).contains_in_any_order(s(&["a", "b"]));
        assert_that(&pairs.apply("Values", Values::create())).contains_in_any_order(vec![1, 2]);
        assert_that(&pairs.apply("Swap", KvSwap::create())).contains_in_any_order(vec![KV::new(1, "a".to_string()), KV::new(2, "b".to_string())]);
        let keyed = p.apply("Words", Create::of(s(&["x", "yy", "zz"]))).apply("WithKeys", WithKeys::of(|w: &String| w.len()));
        assert_that(&keyed).contains_in_any_order(vec![KV::new(1usize, "x".to_string()), KV::new(2, "yy".into()), KV::new(2, "zz".into())]);
        let constant = p.apply("More", Create::of(vec![1, 2])).apply("Const", weir_sdk::transforms::keys::with_constant_key("k".to_string()));
        assert_that(&constant).contains_in_any_order(vec![KV::new("k".to_string(), 1), KV::new("k".to_string(), 2)]);
        p.run();
    }

    fn distinct(p) {
        let input = p.apply("Create", Create::of(s(&["k1", "k5", "k5", "k2", "k1", "k2", "k3"])));
        assert_that(&input.apply("Distinct", Distinct::create())).contains_in_any_order(s(&["k1", "k5", "k2", "k3"]));
        let empty = p.apply("Empty", Create::<String>::of(vec![]));
        assert_that(&empty.apply("DistinctEmpty", Distinct::create())).empty();
        // Distinct by length, one representative each (which one is arbitrary, as in Beam).
        let words = p.apply("Words", Create::of(s(&["a", "bb", "cc", "dd", "e", "fff"])));
        let lengths = words
            .apply("ByLength", Distinct::with_representative_value_fn(|w: &String| w.len()))
            .apply("Length", Map::new(|w: String| w.len()));
        assert_that(&lengths).contains_in_any_order(vec![1usize, 2, 3]);
        let windowed = p
            .apply("Timed", Create::timestamped(vec![TimestampedValue::new("x".to_string(), 1), TimestampedValue::new("xx".to_string(), 2), TimestampedValue::new("y".to_string(), 12)]))
            .apply("Fixed", Window::into(FixedWindows::of(std::time::Duration::from_millis(10))))
            .apply("PerWindow", Distinct::with_representative_value_fn(|w: &String| w.len()))
            .apply("Len", Map::new(|w: String| w.len()));
        assert_that(&windowed).contains_in_any_order(vec![1usize, 2, 1]);
        p.run();
    }

    fn latest(p) {
        let input = p.apply("Create", Create::timestamped(vec![
            TimestampedValue::new("old".to_string(), 10),
            TimestampedValue::new("new".to_string(), 30),
            TimestampedValue::new("mid".to_string(), 20),
        ]));
        assert_that_singleton(&input.apply("Latest", Latest::globally())).equal_to(Some("new".to_string()));
        let empty = p.apply("Empty", Create::<String>::of(vec![]));
        assert_that_singleton(&empty.apply("LatestEmpty", Latest::globally())).equal_to(None);
        let keyed = p.apply("Keyed", Create::timestamped(vec![
            TimestampedValue::new(KV::new("a".to_string(), 1), 5),
            TimestampedValue::new(KV::new("a".to_string(), 2), 50),
            TimestampedValue::new(KV::new("b".to_string(), 3), 1),
        ]));
        assert_that(&keyed.apply("PerKey", Latest::per_key())).contains_in_any_order(vec![KV::new("a".to_string(), 2), KV::new("b".to_string(), 3)]);
        p.run();
    }

    fn sample_any(p) {
        let input = p.apply("Create", Create::of(0..100i64));
        let sample = input.apply("Sample", Sample::any(10));
        assert_that(&sample).satisfies(|v: Vec<i64>| {
            let mut d = v.clone();
            d.sort();
            d.dedup();
            if v.len() == 10 && d.len() == 10 && v.iter().all(|x| (0..100).contains(x)) { Ok(()) } else { Err(format!("bad sample {v:?}")) }
        });
        let small = p.apply("Small", Create::of(vec![1, 2])).apply("SampleSmall", Sample::any(5));
        assert_that(&small).contains_in_any_order(vec![1, 2]);
        p.run();
    }

    fn partition(p) {
        let parts = p.apply("Create", Create::of(0..10i64)).apply("Partition", Partition::of(3, |x: &i64, n: usize| (*x as usize) % n));
        assert_eq!(parts.len(), 3);
        assert_that(parts.get(0).unwrap()).contains_in_any_order(vec![0, 3, 6, 9]);
        assert_that(parts.get(1).unwrap()).contains_in_any_order(vec![1, 4, 7]);
        assert_that(parts.get(2).unwrap()).contains_in_any_order(vec![2, 5, 8]);
        p.run();
    }

    fn partition_out_of_bounds_fails(p) {
        p.apply("Create", Create::of(0..3i64)).apply("Partition", Partition::of(2, |_: &i64, _: usize| 5));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("Partition") && err.contains("out of bounds index: 5"), "{err}");
    }

    fn reshuffle_keeps_elements_timestamps_and_windows(p) {
        let input = p
            .apply("Create", Create::timestamped((0..20).map(|i| TimestampedValue::new(i, i * 3))))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(30))));
        let out = input.apply("Reshuffle", Reshuffle::via_random_key());
        assert_that(&out).contains_in_any_order((0..20).collect());
        assert_that(&out).in_window(W::Interval(IntervalWindow::new(0, 30))).contains_in_any_order((0..10).collect());
        let bucketed = input.apply("Buckets", Reshuffle::via_random_key().with_num_buckets(3));
        assert_that(&bucketed).in_window(W::Interval(IntervalWindow::new(30, 60))).contains_in_any_order((10..20).collect());
        let reified = out.apply("Reify", ParDo::of(weir_sdk::transforms::combiners::ReifyTimestampsFn::default()));
        assert_that(&reified).contains_in_any_order((0..20).map(|i| TimestampedValue::new(i, i * 3)).collect());
        p.run();
    }

    fn to_string(p) {
        let ints = p.apply("Ints", Create::of(vec![1, 22]));
        assert_that(&ints.apply("Elements", weir_sdk::ToString::elements())).contains_in_any_order(s(&["1", "22"]));
        let kv = p.apply("Kvs", Create::of(vec![KV::new("a".to_string(), 1)]));
        assert_that(&kv.apply("KvToString", weir_sdk::ToString::kvs(":"))).contains_in_any_order(s(&["a:1"]));
        let lists = p.apply("Lists", Create::of(vec![vec![1, 2, 3]]));
        assert_that(&lists.apply("Iterables", weir_sdk::ToString::iterables("|"))).contains_in_any_order(s(&["1|2|3"]));
        p.run();
    }

    fn failed_assertions_fail_the_pipeline(p) {
        let input = p.apply("Create", Create::of(vec![1, 2, 3]));
        assert_that(&input).contains_in_any_order(vec![1, 2, 4]);
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("PAssert$") && err.contains("missing: [4]") && err.contains("unexpected: [3]"), "{err}");
    }

    fn assertions_on_empty_collections_run(p) {
        let empty = p.apply("Create", Create::<i64>::of(vec![]));
        assert_that(&empty).contains_in_any_order(vec![1]);
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("missing: [1]"), "{err}");
    }

    fn singleton_assertions(p) {
        let two = p.apply("Create", Create::of(vec![1, 2]));
        assert_that_singleton(&two).equal_to(1);
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("a single element") && err.contains("got 2"), "{err}");
        let q = weir_tests::pipeline("direct");
        let one = q.apply("Create", Create::of(vec![5]));
        assert_that_singleton(&one).not_equal_to(5);
        assert!(q.try_run().unwrap_err().to_string().contains("Expected: not 5"));
    }

    fn window_assertions_only_see_their_window(p) {
        let input = p
            .apply("Create", Create::timestamped(vec![TimestampedValue::new(1, 1), TimestampedValue::new(2, 11)]))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(10))));
        assert_that(&input).in_window(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![2]);
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("[0..10)") && err.contains("missing: [2]") && err.contains("unexpected: [1]"), "{err}");
    }
}

mod deduplicate {
    use super::*;

    conformance! {
        fn deduplicate_values_and_keys(p) {
            let input = p.apply("Create", Create::of(s(&["a", "b", "a", "c", "b", "a"])));
            assert_that(&input.apply("Dedup", Deduplicate::values())).contains_in_any_order(s(&["a", "b", "c"]));
            let keyed = p.apply("Keyed", Create::timestamped(vec![
                TimestampedValue::new(KV::new("k".to_string(), 1), 10),
                TimestampedValue::new(KV::new("j".to_string(), 2), 10),
            ]));
            let first = keyed.apply("DedupKeys", Deduplicate::keyed_values());
            assert_that(&first).contains_in_any_order(vec![KV::new("k".to_string(), 1), KV::new("j".to_string(), 2)]);
            p.run();
        }

        fn deduplicate_forgets_after_the_duration(p) {
            // "x" at 0 and again at 50 (within 100 ms): one. Again at 500, after the watermark
            // passed 0 + 100: remembered no longer, so emitted again.
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new("x".to_string(), 0)])
                .add_elements(vec![TimestampedValue::new("x".to_string(), 50)])
                .advance_watermark_to(300)
                .add_elements(vec![TimestampedValue::new("x".to_string(), 500)])
                .advance_watermark_to_infinity();
            let out = p
                .apply("Stream", stream)
                .apply("Global", Window::configure().triggering(Repeatedly::forever(AfterPane::element_count_at_least(1))).discarding_fired_panes())
                .apply("Dedup", Deduplicate::values().with_duration(std::time::Duration::from_millis(100)));
            assert_that(&out).contains_in_any_order(s(&["x", "x"]));
            p.run();
        }

        fn deduplicate_per_window_keeps_timestamps_and_drops_late_data(p) {
            // Fixed 100 ms windows: "a" once per window, the first to arrive (bundles in order)
            // with its own timestamp; "late" arrives after its window expired and is dropped, not deduplicated.
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new("a".to_string(), 10), TimestampedValue::new("b".to_string(), 30)])
                .add_elements(vec![TimestampedValue::new("a".to_string(), 20), TimestampedValue::new("a".to_string(), 150)])
                .add_elements(vec![TimestampedValue::new("a".to_string(), 160)])
                .advance_watermark_to(400)
                .add_elements(vec![TimestampedValue::new("late".to_string(), 50)])
                .advance_watermark_to_infinity();
            let out = p
                .apply("Stream", stream)
                .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
                .apply("Dedup", Deduplicate::values())
                .apply("Reify", ParDo::of(weir_sdk::transforms::combiners::ReifyTimestampsFn::<String>::default()))
                .apply("Stamp", Map::new(|tv: TimestampedValue<String>| format!("{}@{}", tv.value, tv.timestamp)));
            assert_that(&out).contains_in_any_order(s(&["a@10", "b@30", "a@150"]));
            p.run();
        }
    }
}

mod sinks {
    use super::*;
    use weir_sdk::io::{Collect, CollectHandle, Console, ForEachBatch};

    conformance! {
        fn collect_and_for_each_batch(p) {
            let handle = CollectHandle::new();
            let batches = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, usize)>::new()));
            let input = p.apply("Create", Create::of(0..20i64));
            input.apply("Collect", Collect::into(&handle));
            let b = batches.clone();
            input.apply("Each", ForEachBatch::new(move |id, rows: Vec<i64>| {
                b.lock().unwrap().push((id, rows.len()));
                Ok(())
            }));
            input.apply("Console", Console::sink());
            p.run();
            let mut items = handle.items();
            items.sort();
            assert_eq!(items, (0..20).collect::<Vec<_>>());
            let seen = batches.lock().unwrap().clone();
            assert_eq!(seen.iter().map(|(_, n)| n).sum::<usize>(), 20);
            let mut ids: Vec<u64> = seen.iter().map(|(id, _)| *id).collect();
            let n = ids.len();
            ids.dedup();
            assert_eq!(ids.len(), n, "batch ids are distinct: {seen:?}");
        }

        fn a_failing_sink_fails_the_pipeline(p) {
            p.apply("Create", Create::of(vec![1i64])).apply("Each", ForEachBatch::new(|_, _: Vec<i64>| Err("sink down".into())));
            let err = p.try_run().unwrap_err().to_string();
            assert!(err.contains("Each") && err.contains("sink down"), "{err}");
        }
    }
}

mod reshuffle_windows {
    use super::*;

    conformance! {
        fn reshuffle_keeps_session_windows_unmerged_and_works_in_streaming(p) {
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new(1i64, 1), TimestampedValue::new(2, 5)])
                .advance_watermark_to_infinity();
            let out = p
                .apply("Stream", stream)
                .apply("Sessions", Window::into(Sessions::with_gap_duration(Duration::from_millis(10))))
                .apply("Reshuffle", Reshuffle::via_random_key());
            // Each element keeps its own unmerged session window.
            assert_that(&out).in_window(W::Interval(IntervalWindow::new(1, 11))).contains_in_any_order(vec![1]);
            assert_that(&out).in_window(W::Interval(IntervalWindow::new(5, 15))).contains_in_any_order(vec![2]);
            p.run();
        }
    }
}
