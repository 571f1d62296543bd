//! Unbounded sources on every runner: watermarks from the source, windows closing as it
//! advances, completion when it is exhausted, cancellation while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::io::{ReadUnbounded, UnboundedReader, UnboundedSource};
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_tests::conformance;

/// Emits `count` numbers, element `i` at timestamp `i * 10`, a few per poll; the watermark
/// trails the last emitted timestamp; split into `parts` by residue.
#[derive(Clone)]
struct Numbers {
    count: i64,
    parts: i64,
    part: i64,
    forever: Option<Arc<AtomicBool>>,
}

struct NumbersReader {
    source: Numbers,
    next: i64,
    polls: u64,
}

impl UnboundedSource for Numbers {
    type Output = i64;
    type Checkpoint = i64;
    type Reader = NumbersReader;
    fn split(&self, desired: usize) -> UserResult<Vec<Self>> {
        let parts = desired.clamp(1, 3) as i64;
        Ok((0..parts).map(|part| Numbers { parts, part, ..self.clone() }).collect())
    }
    fn create_reader(&self, checkpoint: Option<i64>) -> UserResult<NumbersReader> {
        Ok(NumbersReader { source: self.clone(), next: checkpoint.unwrap_or(self.part), polls: 0 })
    }
}

impl UnboundedReader for NumbersReader {
    type Output = i64;
    type Checkpoint = i64;
    fn advance(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        self.polls += 1;
        // Data arrives in spurts: every fourth poll finds nothing.
        if self.polls % 4 == 0 {
            return Ok(None);
        }
        if self.source.forever.is_none() && self.next >= self.source.count {
            return Ok(None);
        }
        let v = self.next;
        self.next += self.source.parts;
        Ok(Some((v, v * 10)))
    }
    fn watermark(&self) -> Timestamp {
        if self.source.forever.is_none() && self.next >= self.source.count {
            MAX_TIMESTAMP
        } else {
            self.next * 10 - 1
        }
    }
    fn checkpoint(&self) -> i64 {
        self.next
    }
}

conformance! {
    fn windowed_counts_over_an_unbounded_source(p) {
        let counts = p
            .apply("Read", ReadUnbounded::from(Numbers { count: 100, parts: 1, part: 0, forever: None }))
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
    let forever = Arc::new(AtomicBool::new(true));
    p.apply("Read", ReadUnbounded::from(Numbers { count: 0, parts: 1, part: 0, forever: Some(forever) }))
        .apply("Flag", ParDo::of(Flag(started.clone())));
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
