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

mod wait_on {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    use weir_sdk::transforms::wait::Wait;

    /// Signal elements seen, by run token: what the waiting branch checks it waited for.
    static SEEN: Mutex<Option<HashSet<(u64, i64)>>> = Mutex::new(None);
    static RUN: AtomicU64 = AtomicU64::new(0);

    /// Records each signal element of run `.0`.
    #[derive(Clone)]
    struct Record(u64);

    impl DoFn for Record {
        type In = i64;
        type Out = i64;
        fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            SEEN.lock().unwrap().get_or_insert_with(HashSet::new).insert((self.0, e));
            ctx.output(e);
            Ok(())
        }
    }

    /// Fails unless the signal element of the same window (`e - 1`) was seen already.
    #[derive(Clone)]
    struct AfterSignal(u64);

    impl DoFn for AfterSignal {
        type In = i64;
        type Out = i64;
        fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            let seen = SEEN.lock().unwrap().as_ref().is_some_and(|s| s.contains(&(self.0, e - 1)));
            if !seen {
                return Err(format!("{e} released before its window's signal {} was done", e - 1).into());
            }
            ctx.output(e);
            Ok(())
        }
    }

    /// Values the Verify step saw, by run token.
    static VERIFIED: Mutex<Option<HashSet<(u64, i64)>>> = Mutex::new(None);

    /// Two DoFns of Beam's WaitTest.testWindowExpiration (for run `.0`): the signal records
    /// each value processed; a marker (`(second, -1)`, after the watermark moved to that second) outputs the two values of the window
    /// before it that were verified by then.
    #[derive(Clone)]
    enum Expiration {
        Signal(u64),
        Marker(u64),
    }

    impl DoFn for Expiration {
        type In = (i64, i64);
        type Out = i64;
        fn process(&mut self, e: (i64, i64), ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            match *self {
                Expiration::Signal(run) => {
                    SEEN.lock().unwrap().get_or_insert_with(HashSet::new).insert((run, e.1));
                    ctx.output(e.1);
                }
                Expiration::Marker(run) if e.0 >= 0 => {
                    let verified = VERIFIED.lock().unwrap().clone().unwrap_or_default();
                    for v in [e.0 - 1, e.0 - 2] {
                        if verified.contains(&(run, v)) {
                            ctx.output(v);
                        }
                    }
                }
                Expiration::Marker(_) => {}
            }
            Ok(())
        }
    }

    /// Passes on, and records as verified, each value the signal processed (of run `.0`).
    #[derive(Clone)]
    struct Verify(u64);

    impl DoFn for Verify {
        type In = i64;
        type Out = i64;
        fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            if SEEN.lock().unwrap().as_ref().is_some_and(|s| s.contains(&(self.0, e))) {
                VERIFIED.lock().unwrap().get_or_insert_with(HashSet::new).insert((self.0, e));
                ctx.output(e);
            }
            Ok(())
        }
    }

    /// Fails unless every signal element of the element's window (known in advance, by the
    /// window's start) was seen already.
    #[derive(Clone)]
    struct AfterWindowsSignals(u64, std::sync::Arc<std::collections::HashMap<i64, Vec<i64>>>);

    impl DoFn for AfterWindowsSignals {
        type In = i64;
        type Out = i64;
        fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
            let weir_sdk::window::Window::Interval(w) = *ctx.window() else {
                return Err("not an interval window".into());
            };
            let seen = SEEN.lock().unwrap();
            let missing: Vec<i64> = self
                .1
                .get(&w.start)
                .into_iter()
                .flatten()
                .copied()
                .filter(|s| !seen.as_ref().is_some_and(|seen| seen.contains(&(self.0, *s))))
                .collect();
            if !missing.is_empty() {
                return Err(format!("{e} released in {w:?} before its signals {missing:?} were done").into());
            }
            ctx.output(e);
            Ok(())
        }
    }

    conformance! {
        fn wait_on_sliding_windows_with_late_signals(p) {
            // Beam's WaitTest shape: main (even) and signal (odd) elements in sliding windows,
            // many behind the watermark but within the allowed lateness; each main element is
            // released in a window only after every signal element of that window.
            let run = RUN.fetch_add(1, Ordering::SeqCst);
            let (size, period, lateness) = (20i64, 10i64, 40i64);
            let mut stream = TestStream::create();
            let mut signals: std::collections::HashMap<i64, Vec<i64>> = Default::default();
            let mut mains = Vec::new();
            let mut id = 0i64;
            for k in 1..12i64 {
                let wm = 10 * k;
                let mut bundle = Vec::new();
                for j in 0..4i64 {
                    id += 1;
                    let behind = (id * 7 + j * 3) % 40;
                    let t = (wm - behind).max(0);
                    // The signals are the elements furthest behind: often after the end of a
                    // window with no signal yet, but within its allowed lateness.
                    if behind >= 25 && k % 4 == 0 {
                        let first = t - t.rem_euclid(period) - size + period;
                        for start in (first..=t).step_by(period as usize) {
                            signals.entry(start).or_default().push(2 * id + 1);
                        }
                        bundle.push(TimestampedValue::new(2 * id + 1, t));
                    } else {
                        mains.push(2 * id);
                        bundle.push(TimestampedValue::new(2 * id, t));
                    }
                }
                stream = stream.add_elements(bundle).advance_watermark_to(wm);
            }
            let windowing = Window::into(SlidingWindows::of(Duration::from_millis(size as u64)).every(Duration::from_millis(period as u64)))
                .with_allowed_lateness(Duration::from_millis(lateness as u64));
            let all = p.apply("Stream", stream.advance_watermark_to_infinity()).apply("Sliding", windowing);
            let signal = all.apply("Odd", Filter::by(|e: &i64| e % 2 == 1)).apply("Record", ParDo::of(Record(run)));
            let released = all
                .apply("Even", Filter::by(|e: &i64| e % 2 == 0))
                .apply("WaitForSignal", Wait::on(&signal))
                .apply("Check", ParDo::of(AfterWindowsSignals(run, std::sync::Arc::new(signals))));
            // Each main element is in two windows, and released in each.
            assert_that(&released).contains_in_any_order(mains.iter().flat_map(|&m| [m, m]).collect());
            p.run();
        }

        fn wait_on_holds_elements_until_the_signals_window_is_done(p) {
            let run = RUN.fetch_add(1, Ordering::SeqCst);
            // Per 10 ms window an even element arrives first, its signal (one less) later.
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new(2i64, 2)])
                .add_elements(vec![TimestampedValue::new(1i64, 3)])
                .advance_watermark_to(10)
                .add_elements(vec![TimestampedValue::new(12i64, 12), TimestampedValue::new(22, 22)])
                .add_elements(vec![TimestampedValue::new(11i64, 13)])
                .advance_watermark_to(20)
                .add_elements(vec![TimestampedValue::new(21i64, 25)])
                .advance_watermark_to_infinity();
            let all = p.apply("Stream", stream).apply("Fixed", Window::into(FixedWindows::of(Duration::from_millis(10))));
            let signal = all.apply("Odd", Filter::by(|e: &i64| e % 2 == 1)).apply("Record", ParDo::of(Record(run)));
            let released = all
                .apply("Even", Filter::by(|e: &i64| e % 2 == 0))
                .apply("WaitForSignal", Wait::on(&signal))
                .apply("Check", ParDo::of(AfterSignal(run)));
            assert_that(&released).contains_in_any_order(vec![2, 12, 22]);
            p.run();
        }

        fn wait_on_waits_for_the_signals_allowed_lateness(p) {
            // The signal's window [0, 10) is empty when the watermark passes its end; a late
            // signal element can still come until the end plus the allowed lateness (39), so
            // the main element waits for that, as in Beam.
            let run = RUN.fetch_add(1, Ordering::SeqCst);
            let stream = TestStream::create()
                .add_elements(vec![TimestampedValue::new(2i64, 2)])
                .advance_watermark_to(15)
                .add_elements(vec![TimestampedValue::new(1i64, 3)])
                .advance_watermark_to(30)
                .advance_watermark_to_infinity();
            let windowing = Window::into(FixedWindows::of(Duration::from_millis(10))).with_allowed_lateness(Duration::from_millis(30));
            let all = p.apply("Stream", stream).apply("Fixed", windowing);
            let signal = all.apply("Odd", Filter::by(|e: &i64| e % 2 == 1)).apply("Record", ParDo::of(Record(run)));
            let released = all
                .apply("Even", Filter::by(|e: &i64| e % 2 == 0))
                .apply("WaitForSignal", Wait::on(&signal))
                .apply("Check", ParDo::of(AfterSignal(run)));
            assert_that(&released).contains_in_any_order(vec![2]);
            p.run();
        }

        fn wait_on_releases_each_window_before_the_next_event_issue_55(p) {
            // Beam's WaitTest.testWindowExpiration: 200 values a second apart in 2 s fixed
            // windows with no allowed lateness; every 2 s the watermark moves to the next window
            // and a marker follows it. A TestStream is synchronous: by the time the marker is
            // processed, the Wait has released the window before it and the values in it have
            // been verified after the Wait, so the marker finds both verified.
            let run = RUN.fetch_add(1, Ordering::SeqCst);
            let mut stream = TestStream::create().advance_watermark_to(0);
            for i in 0..=200i64 {
                if i > 0 && i % 2 == 0 {
                    stream = stream
                        .advance_watermark_to(i * 1000)
                        .add_elements(vec![TimestampedValue::new((i, -1i64), i * 1000)]);
                }
                if i < 200 {
                    stream = stream.add_elements(vec![TimestampedValue::new((-1i64, i), i * 1000)]);
                }
            }
            let longs = p.apply("Stream", stream.advance_watermark_to_infinity());
            let fixed = || Window::into(FixedWindows::of(Duration::from_secs(2))).with_allowed_lateness(Duration::ZERO);
            let signal = longs.apply("Signal", ParDo::of(Expiration::Signal(run))).apply("W2", fixed());
            let markers_saw = longs.apply("Markers", ParDo::of(Expiration::Marker(run)));
            let verified = longs
                .apply("Values", Filter::by(|e: &(i64, i64)| e.0 < 0))
                .apply("Value", Map::new(|e: (i64, i64)| e.1))
                .apply("W1", fixed())
                .apply("WaitForSignal", Wait::on(&signal))
                .apply("Verify", ParDo::of(Verify(run)));
            assert_that(&verified).contains_in_any_order((0..200).collect());
            assert_that(&markers_saw).contains_in_any_order((0..200).collect());
            p.run();
        }

        fn wait_on_several_signals_in_batch_passes_everything(p) {
            let a = p.apply("A", Create::of(vec![1i64, 2]));
            let b = p.apply("B", Create::of(vec!["x".to_string()]));
            let empty = p.apply("Empty", Create::<i64>::of(vec![]));
            let main = p.apply("Main", Create::of(vec![7i64, 8, 9]));
            assert_that(&main.apply("Wait", Wait::on(&a).and(&b).and(&empty))).contains_in_any_order(vec![7, 8, 9]);
            p.run();
        }
    }
}
