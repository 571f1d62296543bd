//! GroupByKey, CoGroupByKey and Flatten conformance.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn sort_values<K: Element, V: Element + Ord>(pc: &PCollection<KV<K, Vec<V>>>) -> PCollection<KV<K, Vec<V>>> {
    pc.apply("SortValues", Map::new(|kv: KV<K, Vec<V>>| KV::new(kv.key, sorted(kv.value))))
}

/// A key whose `PartialEq` is deliberately wrong: grouping must use encoded bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BadEq(String);

impl PartialEq for BadEq {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

conformance! {
    fn group_by_key_groups_values(p) {
        let input = p.apply("Create", Create::of(vec![
            KV::new("k1".to_string(), 3), KV::new("k5".to_string(), i64::MAX), KV::new("k5".to_string(), i64::MIN),
            KV::new("k2".to_string(), 66), KV::new("k1".to_string(), 4), KV::new("k2".to_string(), -33), KV::new("k3".to_string(), 0),
        ]));
        let grouped = sort_values(&input.apply("GroupByKey", GroupByKey::create()));
        assert_that(&grouped).contains_in_any_order(vec![
            KV::new("k1".to_string(), vec![3, 4]),
            KV::new("k5".to_string(), vec![i64::MIN, i64::MAX]),
            KV::new("k2".to_string(), vec![-33, 66]),
            KV::new("k3".to_string(), vec![0]),
        ]);
        p.run();
    }

    fn group_by_key_empty_input(p) {
        let grouped = p.apply("Create", Create::<KV<String, i64>>::of(vec![])).apply("GroupByKey", GroupByKey::create());
        assert_that(&grouped).empty();
        p.run();
    }

    fn group_by_key_uses_encoded_keys(p) {
        let input = p.apply("Create", Create::of(vec![KV::new(BadEq("a".into()), 1), KV::new(BadEq("b".into()), 2), KV::new(BadEq("a".into()), 3)]));
        let sizes = input
            .apply("GroupByKey", GroupByKey::create())
            .apply("Sizes", Map::new(|kv: KV<BadEq, Vec<i64>>| (kv.key.0, kv.value.len())));
        assert_that(&sizes).contains_in_any_order(vec![("a".to_string(), 2), ("b".to_string(), 1)]);
        p.run();
    }

    fn group_by_key_output_is_on_time_at_end_of_window(p) {
        let out = p
            .apply("Create", Create::of(vec![KV::new(1, 1)]))
            .apply("GroupByKey", GroupByKey::create())
            .apply("Describe", weir_sdk::ParDo::of(DescribeFn));
        assert_that(&out).contains_in_any_order(vec![format!("{GLOBAL_WINDOW_MAX_TIMESTAMP} GlobalWindow OnTime first=true last=true")]);
        p.run();
    }

    fn group_by_key_in_fixed_windows(p) {
        let input = p.apply("Create", Create::timestamped(vec![
            TimestampedValue::new(KV::new("a".to_string(), 1), 1),
            TimestampedValue::new(KV::new("a".to_string(), 2), 9),
            TimestampedValue::new(KV::new("a".to_string(), 3), 10),
            TimestampedValue::new(KV::new("b".to_string(), 4), 15),
        ]));
        let grouped = sort_values(
            &input
                .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(10))))
                .apply("GroupByKey", GroupByKey::create()),
        );
        assert_that(&grouped).in_window(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![KV::new("a".to_string(), vec![1, 2])]);
        assert_that(&grouped).in_window(W::Interval(IntervalWindow::new(10, 20))).contains_in_any_order(vec![
            KV::new("a".to_string(), vec![3]),
            KV::new("b".to_string(), vec![4]),
        ]);
        assert_that(&grouped).in_window(W::Interval(IntervalWindow::new(20, 30))).empty();
        p.run();
    }

    fn co_group_by_key_joins(p) {
        let emails = TupleTag::<String>::new("emails");
        let phones = TupleTag::<String>::new("phones");
        let pe = p.apply("Emails", Create::of(vec![
            KV::new("amy".to_string(), "amy@example.com".to_string()),
            KV::new("carl".to_string(), "carl@example.com".to_string()),
            KV::new("julia".to_string(), "julia@example.com".to_string()),
            KV::new("carl".to_string(), "carl@email.com".to_string()),
        ]));
        let pp = p.apply("Phones", Create::of(vec![
            KV::new("amy".to_string(), "111-222-3333".to_string()),
            KV::new("james".to_string(), "222-333-4444".to_string()),
            KV::new("amy".to_string(), "333-444-5555".to_string()),
            KV::new("carl".to_string(), "444-555-6666".to_string()),
        ]));
        let joined = KeyedPCollectionTuple::of(&emails, &pe).and(&phones, &pp).apply("Join", CoGroupByKey);
        let (e, ph) = (emails.clone(), phones.clone());
        let rendered = joined.apply("Render", TryMap::new(move |kv: KV<String, CoGbkResult>| -> UserResult<(String, Vec<String>, Vec<String>)> {
            // Read in place (borrowed &str), the values are the same as decoded whole.
            let borrowed: Vec<&str> = kv.value.get_all_borrowed(&ph)?;
            let phones = kv.value.get_all(&ph)?;
            if borrowed != phones.iter().map(String::as_str).collect::<Vec<_>>() {
                return Err(format!("borrowed {borrowed:?} differ from decoded {phones:?}").into());
            }
            Ok((kv.key, sorted(kv.value.get_all(&e)?), sorted(phones)))
        }));
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_that(&rendered).contains_in_any_order(vec![
            ("amy".into(), s(&["amy@example.com"]), s(&["111-222-3333", "333-444-5555"])),
            ("carl".into(), s(&["carl@email.com", "carl@example.com"]), s(&["444-555-6666"])),
            ("james".into(), vec![], s(&["222-333-4444"])),
            ("julia".into(), s(&["julia@example.com"]), vec![]),
        ]);
        p.run();
    }

    fn co_group_by_key_of_a_collection_with_itself_and_in_windows(p) {
        // The same collection under two tags (each value in both), and fixed windows: a key's
        // values from different windows are never joined.
        let (left, right) = (TupleTag::<i64>::new("left"), TupleTag::<i64>::new("right"));
        let pc = p
            .apply("Create", Create::timestamped(vec![
                TimestampedValue::new(KV::new("k".to_string(), 1i64), 5),
                TimestampedValue::new(KV::new("k".to_string(), 2), 15),
                TimestampedValue::new(KV::new("j".to_string(), 3), 7),
            ]))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(10))));
        let joined = KeyedPCollectionTuple::of(&left, &pc).and(&right, &pc).apply("SelfJoin", CoGroupByKey);
        let (l, r) = (left.clone(), right.clone());
        let rendered = joined.apply("Render", TryMap::new(move |kv: KV<String, CoGbkResult>| -> UserResult<(String, Vec<i64>, Vec<i64>)> {
            Ok((kv.key, kv.value.get_all(&l)?, kv.value.get_all(&r)?))
        }));
        assert_that(&rendered).contains_in_any_order(vec![
            ("k".to_string(), vec![1], vec![1]),
            ("k".to_string(), vec![2], vec![2]),
            ("j".to_string(), vec![3], vec![3]),
        ]);
        p.run();
    }

    fn flatten_unions_inputs(p) {
        let a = p.apply("A", Create::of(vec![1, 2, 3]));
        let b = p.apply("B", Create::of(vec![4, 5]));
        let c = p.apply("C", Create::<i64>::of(vec![]));
        let all = PCollectionList::of(p, vec![a.clone(), b, c, a]).apply("Flatten", Flatten::pcollections());
        assert_that(&all).contains_in_any_order(vec![1, 2, 3, 4, 5, 1, 2, 3]);
        p.run();
    }

    fn flatten_empty_list(p) {
        let none = PCollectionList::<String>::empty(p).apply("Flatten", Flatten::pcollections());
        assert_that(&none).empty();
        assert_that(&none.apply("Count", Count::globally())).contains_in_any_order(vec![0]);
        p.run();
    }

    fn flatten_keeps_windows(p) {
        let a = p.apply("A", Create::timestamped(vec![TimestampedValue::new(1, 5)])).apply("WA", Window::into(FixedWindows::of(Duration::from_millis(10))));
        let b = p.apply("B", Create::timestamped(vec![TimestampedValue::new(2, 15)])).apply("WB", Window::into(FixedWindows::of(Duration::from_millis(10))));
        let all = PCollectionList::of(p, vec![a, b]).apply("Flatten", Flatten::pcollections());
        assert_that(&all).in_window(W::Interval(IntervalWindow::new(0, 10))).contains_in_any_order(vec![1]);
        assert_that(&all).in_window(W::Interval(IntervalWindow::new(10, 20))).contains_in_any_order(vec![2]);
        p.run();
    }
}

#[derive(Clone)]
struct DescribeFn;

impl DoFn for DescribeFn {
    type In = KV<i64, Vec<i64>>;
    type Out = String;
    fn process(&mut self, _: Self::In, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let pane = *ctx.pane();
        let out = format!(
            "{} {} {:?} first={} last={}",
            ctx.timestamp(),
            ctx.window(),
            pane.timing,
            pane.is_first,
            pane.is_last
        );
        ctx.output(out);
        Ok(())
    }
}
