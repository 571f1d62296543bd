//! Side-input conformance: every view kind, window mapping, defaults and errors, readiness in
//! streaming.

use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::view::{ListOf, MapOf, MultimapOf, Singleton};
use weir_sdk::window::Window as W;
use weir_tests::conformance;

fn iw(a: i64, b: i64) -> W {
    W::Interval(IntervalWindow::new(a, b))
}

#[derive(Clone)]
struct AddSingleton(PCollectionView<Singleton<i64>>);

impl DoFn for AddSingleton {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        let s = ctx.side_input(&self.0)?;
        ctx.output(e + s);
        Ok(())
    }
}

#[derive(Clone)]
struct Describe {
    list: PCollectionView<ListOf<String>>,
    map: PCollectionView<MapOf<String, i64>>,
    multi: PCollectionView<MultimapOf<String, i64>>,
}

impl DoFn for Describe {
    type In = String;
    type Out = String;
    fn process(&mut self, key: String, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let mut list = (*ctx.side_input(&self.list)?).clone();
        list.sort();
        let map = ctx.side_input(&self.map)?;
        let multi = ctx.side_input(&self.multi)?;
        let mut values = multi.get(&key).to_vec();
        values.sort();
        ctx.output(format!("{key}: list={list:?} map={:?} multi={values:?}", map.get(&key)));
        Ok(())
    }
}

fn tv(v: i64, t: i64) -> TimestampedValue<i64> {
    TimestampedValue::new(v, t)
}

conformance! {
    fn singleton_in_the_global_window(p) {
        let side = p.apply("Side", Create::of(vec![10i64, 20])).apply("Sum", Sum::globally());
        let view = View::as_singleton(&side);
        let out = p.apply("Main", Create::of(vec![1i64, 2, 3])).apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        assert_that(&out).contains_in_any_order(vec![31, 32, 33]);
        p.run();
    }

    fn singleton_defaults_and_errors(p) {
        let empty = p.apply("Empty", Create::<i64>::of(vec![]));
        let view = View::as_singleton_with_default(&empty, 100);
        let out = p.apply("Main", Create::of(vec![1i64])).apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        assert_that(&out).contains_in_any_order(vec![101]);
        p.run();

        let q = weir_tests::pipeline("direct");
        let empty = q.apply("Empty", Create::<i64>::of(vec![]));
        let view = View::as_singleton(&empty);
        q.apply("Main", Create::of(vec![1i64])).apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        let err = q.try_run().unwrap_err().to_string();
        assert!(err.contains("'Add'") && err.contains("Empty PCollection accessed as a singleton view"), "{err}");

        let q = weir_tests::pipeline("direct");
        let two = q.apply("Two", Create::of(vec![1i64, 2]));
        let view = View::as_singleton(&two);
        q.apply("Main", Create::of(vec![1i64])).apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        let err = q.try_run().unwrap_err().to_string();
        assert!(err.contains("more than one element accessed as a singleton view"), "{err}");
    }

    fn list_map_and_multimap(p) {
        let words = p.apply("Words", Create::of(vec!["b".to_string(), "a".to_string()]));
        let pairs = p.apply("Pairs", Create::of(vec![KV::new("a".to_string(), 1i64), KV::new("b".to_string(), 2)]));
        let multi = p.apply("Multi", Create::of(vec![KV::new("a".to_string(), 1i64), KV::new("a".to_string(), 3), KV::new("b".to_string(), 2)]));
        let f = Describe { list: View::as_list(&words), map: View::as_map(&pairs), multi: View::as_multimap(&multi) };
        let specs = vec![f.list.spec().clone(), f.map.spec().clone(), f.multi.spec().clone()];
        let out = p.apply("Keys", Create::of(vec!["a".to_string(), "c".to_string()])).apply("Describe", ParDo::of(f).with_side_inputs(specs));
        assert_that(&out).contains_in_any_order(vec![
            r#"a: list=["a", "b"] map=Some(1) multi=[1, 3]"#.to_string(),
            r#"c: list=["a", "b"] map=None multi=[]"#.to_string(),
        ]);
        p.run();
    }

    fn map_with_duplicate_keys_fails(p) {
        let pairs = p.apply("Pairs", Create::of(vec![KV::new("a".to_string(), 1i64), KV::new("a".to_string(), 2)]));
        let f = Describe {
            list: View::as_iterable(&p.apply("Words", Create::<String>::of(vec![]))),
            map: View::as_map(&pairs),
            multi: View::as_multimap(&p.apply("Multi", Create::<KV<String, i64>>::of(vec![]))),
        };
        let specs = vec![f.list.spec().clone(), f.map.spec().clone(), f.multi.spec().clone()];
        p.apply("Keys", Create::of(vec!["a".to_string()])).apply("Describe", ParDo::of(f).with_side_inputs(specs));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("Multiple values for key \"a\""), "{err}");
    }

    fn windowed_main_and_side_inputs(p) {
        // Spec §6.2: side Fixed(10) sums {1@1}, {2@11, 3@13}; main Fixed(10) A@4, B@15, C@7.
        let side = p
            .apply("Side", Create::timestamped(vec![tv(1, 1), tv(2, 11), tv(3, 13)]))
            .apply("SideWindow", Window::into(FixedWindows::of(Duration::from_millis(10))))
            .apply("Sum", Sum::globally().without_defaults());
        let view = View::as_singleton(&side);
        let out = p
            .apply("Main", Create::timestamped(vec![tv(1000, 4), tv(2000, 15), tv(3000, 7)]))
            .apply("MainWindow", Window::into(FixedWindows::of(Duration::from_millis(10))))
            .apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        assert_that(&out).contains_in_any_order(vec![1001, 2005, 3001]);
        assert_that(&out).in_window(iw(10, 20)).contains_in_any_order(vec![2005]);
        p.run();
    }

    fn combine_as_singleton_view_defaults_per_window(p) {
        let side_input = p
            .apply("Side", Create::timestamped(vec![tv(5, 1)]))
            .apply("SideWindow", Window::into(FixedWindows::of(Duration::from_millis(10))));
        let view = Sum::globally().as_singleton_view("Sum", &side_input);
        let out = p
            .apply("Main", Create::timestamped(vec![tv(100, 4), tv(200, 15)]))
            .apply("MainWindow", Window::into(FixedWindows::of(Duration::from_millis(10))))
            .apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        // [10,20) has no side data: it reads the combine's default, 0.
        assert_that(&out).contains_in_any_order(vec![105, 200]);
        p.run();
    }

    fn sliding_side_input_mapping(p) {
        let side = p
            .apply("Side", Create::timestamped(vec![tv(1, 3), tv(10, 12)]))
            .apply("SideWindow", Window::into(SlidingWindows::of(Duration::from_millis(10)).every(Duration::from_millis(5))))
            .apply("Sum", Sum::globally().without_defaults());
        let view = View::as_singleton_with_default(&side, 0);
        // Main [10,20) maps to the earliest sliding window containing 19: [10,20), which holds 12.
        let out = p
            .apply("Main", Create::timestamped(vec![tv(100, 15)]))
            .apply("MainWindow", Window::into(FixedWindows::of(Duration::from_millis(10))))
            .apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        assert_that(&out).contains_in_any_order(vec![110]);
        p.run();
    }

    fn main_input_waits_for_side_input_in_streaming(p) {
        let side = p
            .apply("SideStream", TestStream::create().advance_watermark_to(0).add_elements(vec![tv(10, 5)]).advance_watermark_to_infinity())
            .apply("SideWindow", Window::into(FixedWindows::of(Duration::from_millis(10))));
        let view = View::as_singleton(&side);
        let out = p
            .apply("MainStream", TestStream::create().add_elements(vec![tv(1, 1)]).advance_watermark_to_infinity())
            .apply("MainWindow", Window::into(FixedWindows::of(Duration::from_millis(10))))
            .apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
        assert_that(&out).contains_in_any_order(vec![11]);
        p.run();
    }
}

#[test]
fn session_windowed_side_inputs_are_rejected() {
    let p = weir_tests::pipeline("direct");
    let side = p
        .apply("Side", Create::of(vec![1i64]))
        .apply("Sessions", Window::into(Sessions::with_gap_duration(Duration::from_secs(1))));
    let view = View::as_singleton(&side);
    p.apply("Main", Create::of(vec![1i64]))
        .apply("Add", ParDo::of(AddSingleton(view.clone())).with_side_inputs(vec![view.spec().clone()]));
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("'Add'") && err.contains("merging windows"), "{err}");
}
