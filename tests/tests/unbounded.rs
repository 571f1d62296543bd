//! Unbounded sources on every runner: watermarks from the source, windows closing as it
//! advances, completion when it is exhausted, cancellation while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::io::ReadUnbounded;
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_tests::conformance;
use weir_tests::sources::Numbers;

conformance! {
    fn windowed_counts_over_an_unbounded_source(p) {
        let counts = p
            .apply("Read", ReadUnbounded::from(Numbers::new(Some(100), true)))
            .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
            .apply("Count", Count::globally().without_defaults());
        assert_that(&counts).contains_in_any_order(vec![10; 10]);
        assert_that(&counts).in_on_time_pane(W::Interval(IntervalWindow::new(500, 600))).contains_in_any_order(vec![10]);
        assert!(p.graph().is_streaming());
        p.run();
    }
}

#[derive(Clone)]
struct Flag(Arc<AtomicBool>);

impl DoFn for Flag {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        self.0.store(true, Ordering::SeqCst);
        ctx.output(e);
        Ok(())
    }
}

#[test]
fn an_endless_source_runs_until_cancelled() {
    let p = weir_tests::pipeline("direct");
    let started = Arc::new(AtomicBool::new(false));
    p.apply("Read", ReadUnbounded::from(Numbers::new(None, true))).apply("Flag", ParDo::of(Flag(started.clone())));
    let result = Pipeline::run(&p).unwrap();
    for _ in 0..500 {
        if started.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(started.load(Ordering::SeqCst));
    assert_eq!(result.wait_until_finish(Some(Duration::from_millis(50))).unwrap(), PipelineState::Running);
    result.cancel().unwrap();
    assert_eq!(result.wait_until_finish(Some(Duration::from_secs(10))).unwrap(), PipelineState::Cancelled);
}

mod streams {
    use super::*;
    use weir_sdk::io::{MemoryStream, RateSource};

    conformance! {
        fn rate_source_emits_rows_on_time(p) {
            let counts = p
                .apply("Rate", ReadUnbounded::from(RateSource::new(2000).with_limit(60)))
                .apply("Values", Map::new(|r: weir_sdk::io::RateRow| r.value))
                .apply("Window", Window::into(GlobalWindows).triggering(Never::ever()).discarding_fired_panes())
                .apply("Count", Count::globally());
            assert_that(&counts).contains_in_any_order(vec![60]);
            p.run();
        }
    }

    #[test]
    fn memory_stream_fed_while_running() {
        let p = weir_tests::pipeline("microbatch_p1");
        let stream = MemoryStream::<i64>::new();
        let handle = weir_sdk::io::CollectHandle::new();
        p.apply("Read", ReadUnbounded::from(stream.clone()))
            .apply("Double", Map::new(|x: i64| x * 2))
            .apply("Collect", weir_sdk::io::Collect::into(&handle));
        let result = Pipeline::run(&p).unwrap();
        stream.add(vec![TimestampedValue::new(1, 1), TimestampedValue::new(2, 2)]);
        for _ in 0..1000 {
            if handle.items().len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(result.state(), PipelineState::Running);
        stream.add(vec![TimestampedValue::new(3, 3)]);
        stream.finish();
        assert_eq!(result.wait_until_finish(Some(Duration::from_secs(10))).unwrap(), PipelineState::Done);
        let mut items = handle.items();
        items.sort();
        assert_eq!(items, vec![2, 4, 6]);
    }
}

mod periodic_impulse {
    use super::*;
    use weir_sdk::io::periodic::PeriodicImpulse;
    use weir_sdk::view::Singleton;

    /// 11 ticks 20 ms apart, the first 5 already due (caught up at once), the rest as the wall
    /// clock reaches them.
    fn impulse() -> (PeriodicImpulse, Vec<i64>) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        let start = now / 20 * 20 - 100;
        let ticks = (0..=10).map(|i| start + 20 * i).collect();
        (PeriodicImpulse::create().start_at(start).stop_at(start + 200).with_interval(Duration::from_millis(20)), ticks)
    }

    /// Pairs each main tick with the side input's value for its window.
    #[derive(Clone)]
    struct WithSide(weir_sdk::PCollectionView<Singleton<i64>>);

    impl DoFn for WithSide {
        type In = i64;
        type Out = (i64, i64);
        fn process(&mut self, tick: i64, ctx: &mut ProcessContext<'_, (i64, i64)>) -> UserResult {
            let side = ctx.side_input(&self.0)?;
            ctx.output((tick, side));
            Ok(())
        }
    }

    conformance! {
        fn periodic_impulse_ticks_once_each_in_their_windows(p) {
            let (impulse, ticks) = impulse();
            let got = p.apply("Ticks", impulse.apply_windowing()).apply("Windows", Reify::windows());
            let rendered = got.apply("Render", Map::new(|v: ValueInSingleWindow<i64>| (v.value, v.timestamp, v.window)));
            let want: Vec<(i64, i64, W)> = ticks.iter().map(|&t| (t, t, W::Interval(IntervalWindow::new(t, t + 20)))).collect();
            assert_that(&rendered).contains_in_any_order(want);
            assert!(p.graph().is_streaming());
            p.run();
        }

        fn periodic_impulse_refreshes_a_side_input_per_window(p) {
            // Beam's slowly changing side input: each window's side value comes from that
            // window's tick.
            let (impulse, ticks) = impulse();
            let side = p.apply("SideTicks", impulse.clone().apply_windowing()).apply("Refresh", Map::new(|t: i64| t * 2));
            let view = View::as_singleton(&side);
            let main = p.apply("MainTicks", impulse.apply_windowing());
            let joined = main.apply("Join", ParDo::of(WithSide(view.clone())).with_side_inputs(vec![view.spec().clone()]));
            assert_that(&joined).contains_in_any_order(ticks.iter().map(|&t| (t, 2 * t)).collect::<Vec<_>>());
            p.run();
        }
    }
}

mod drain {
    use super::*;
    use std::sync::Mutex;

    use weir_tests::Seen;

    /// Checks the per-window counts of a drained run of `Numbers` (element `i` at `10 * i`,
    /// windows of 100 ms) against the elements read.
    fn counted_once_in_every_window(seen: &Mutex<Vec<i64>>, counts: Vec<(i64, i64)>) -> Result<(), String> {
        weir_tests::counted_once_in_every_window(seen, counts, |e| e * 10 / 100 * 100)
    }

    conformance! {
        fn drain_fires_every_window_and_ends_done(p) {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let counts = p
                .apply("Read", ReadUnbounded::from(Numbers::new(None, true)))
                .apply("Seen", ParDo::of(Seen(seen.clone())))
                .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
                .apply("Count", Count::globally().without_defaults())
                .apply("Windows", Reify::windows())
                .apply("Starts", Map::new(|v: ValueInSingleWindow<i64>| match v.window {
                    W::Interval(w) => (w.start, v.value),
                    _ => (-1, v.value),
                }));
            let read = seen.clone();
            assert_that(&counts).satisfies(move |counts| counted_once_in_every_window(&read, counts));
            let result = Pipeline::run(p).unwrap();
            for _ in 0..2000 {
                if !seen.lock().unwrap().is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            assert!(!seen.lock().unwrap().is_empty(), "the source never produced");
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(result.state(), PipelineState::Running);
            result.drain().unwrap();
            // The assertion ran (it fails the pipeline otherwise) and the run is Done.
            assert_eq!(result.wait_until_finish(Some(Duration::from_secs(20))).unwrap(), PipelineState::Done);
        }
    }
}
