//! GroupIntoBatches conformance: batches by count, by byte size, after a buffering time, per
//! window, with sharded keys, and batches held on time.

use std::sync::Arc;
use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::transforms::group_into_batches::{GroupIntoBatches, ShardedKey};
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn a(v: i64) -> KV<String, i64> {
    KV::new("a".to_string(), v)
}

fn at(v: i64, t: i64) -> TimestampedValue<KV<String, i64>> {
    TimestampedValue::new(a(v), t)
}

fn sorted(kv: KV<String, Vec<i64>>) -> Vec<i64> {
    let mut v = kv.value;
    v.sort();
    v
}

conformance! {
    fn batches_by_count_per_key(p) {
        let rows = p.apply("Create", Create::of((1..=5).map(a).chain([KV::new("b".to_string(), 9)]).collect::<Vec<_>>()));
        let batches = rows.apply("Batch", GroupIntoBatches::of_size(2));
        let sizes = batches.apply("Sizes", Map::new(|kv: KV<String, Vec<i64>>| (kv.key, kv.value.len())));
        assert_that(&sizes).contains_in_any_order(vec![("a".to_string(), 2), ("a".to_string(), 2), ("a".to_string(), 1), ("b".to_string(), 1)]);
        let values = batches.apply("Values", FlatMap::new(|kv: KV<String, Vec<i64>>| kv.value));
        assert_that(&values).contains_in_any_order(vec![1, 2, 3, 4, 5, 9]);
        p.run();
    }

    fn batches_never_cross_windows(p) {
        let rows = p
            .apply("Create", Create::timestamped(vec![at(1, 1), at(2, 2), at(3, 12), at(4, 13), at(5, 14)]))
            .apply("Fixed", Window::into(FixedWindows::of(ms(10))));
        let batches = rows.apply("Batch", GroupIntoBatches::of_size(10)).apply("Sorted", Map::new(sorted));
        assert_that(&batches).in_window(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![vec![1, 2]]);
        assert_that(&batches).in_window(W::Interval(IntervalWindow::new(10, 20))).contains_in_any_order(vec![vec![3, 4, 5]]);
        p.run();
    }

    fn batches_by_byte_size_flush_before_overflowing(p) {
        // Beam flushes a batch before a value that would take it past the limit: 6+3, 4+5, 9, 2.
        let mut stream = TestStream::create();
        for (i, v) in [6, 3, 4, 5, 9, 2].into_iter().enumerate() {
            stream = stream.add_elements(vec![at(v, i as i64)]);
        }
        let weigh: Arc<dyn Fn(&i64) -> u64 + Send + Sync> = Arc::new(|v: &i64| *v as u64);
        let batches = p
            .apply("Stream", stream.advance_watermark_to_infinity())
            .apply("Batch", GroupIntoBatches::of_byte_size_with(10, weigh))
            .apply("Values", Map::new(|kv: KV<String, Vec<i64>>| kv.value));
        assert_that(&batches).contains_in_any_order(vec![vec![6, 3], vec![4, 5], vec![9], vec![2]]);
        p.run();
    }

    fn batches_after_the_maximum_buffering_duration_at_their_earliest_timestamp(p) {
        let stream = TestStream::create()
            .add_elements(vec![at(2, 2)])
            .add_elements(vec![at(1, 1)])
            .advance_processing_time(ms(10))
            .add_elements(vec![at(3, 3)])
            .advance_watermark_to_infinity();
        let batches = p
            .apply("Stream", stream)
            .apply("Batch", GroupIntoBatches::of_size(100).with_max_buffering_duration(ms(5)))
            .apply("Sorted", Map::new(sorted))
            .apply("Stamps", Reify::timestamps());
        assert_that(&batches).contains_in_any_order(vec![TimestampedValue::new(vec![1, 2], 1), TimestampedValue::new(vec![3], 3)]);
        p.run();
    }

    fn buffered_values_hold_the_watermark(p) {
        // The batch waits in [0, 100) while the watermark passes 10; held at its earliest
        // timestamp, it is still on time in [0, 10) downstream.
        let stream = TestStream::create()
            .add_elements(vec![at(1, 1), at(2, 2)])
            .advance_watermark_to(50)
            .advance_watermark_to_infinity();
        let counts = p
            .apply("Stream", stream)
            .apply("Wide", Window::into(FixedWindows::of(ms(100))))
            .apply("Batch", GroupIntoBatches::of_size(100))
            .apply("Narrow", Window::into(FixedWindows::of(ms(10))))
            .apply("Count", Count::per_element())
            .apply("Sizes", Map::new(|kv: KV<KV<String, Vec<i64>>, i64>| (kv.key.value.len(), kv.value)));
        assert_that(&counts).in_on_time_pane(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![(2usize, 1i64)]);
        p.run();
    }

    fn sharded_keys_batch_each_shard(p) {
        let batches = p
            .apply("Create", Create::of((1..=6).map(a).collect::<Vec<_>>()))
            .apply("Batch", GroupIntoBatches::of_size(2).with_sharded_key());
        let keys = batches.apply("Keys", Map::new(|kv: KV<ShardedKey<String>, Vec<i64>>| (kv.key.key, kv.value.len() <= 2)));
        let values = batches.apply("Values", FlatMap::new(|kv: KV<ShardedKey<String>, Vec<i64>>| kv.value));
        assert_that(&values).contains_in_any_order(vec![1, 2, 3, 4, 5, 6]);
        let all_a = keys.apply("AllA", Filter::by(|k: &(String, bool)| k.0 != "a" || !k.1));
        assert_that(&all_a).empty();
        p.run();
    }
}
