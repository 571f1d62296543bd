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
