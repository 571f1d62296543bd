//! A streaming pipeline for recovery tests: `recovery_child CHECKPOINT_DIR OUT_DIR EVENTS [variant]`.
//!
//! Reads EVENTS numbers from a replayable unbounded source (element i at i*10 ms), sums them per
//! key (i % 3) in 100 ms windows on the micro-batch runner with a checkpoint directory, and writes
//! `key window-start sum` lines with the exactly-once JSON-lines sink. Crash injection comes from
//! `WEIR_CRASH_AT` (see the runner's fault points); the `variant` argument builds a pipeline with a
//! different stateful shape, which a checkpoint of the normal one must refuse.

use std::time::Duration;
use weir_sdk::io::{ReadUnbounded, UnboundedReader, UnboundedSource, WriteJsonLines};
use weir_sdk::prelude::*;

#[derive(Clone)]
struct Numbers {
    count: i64,
    parts: i64,
    part: i64,
}

struct Reader {
    src: Numbers,
    next: i64,
}

impl UnboundedSource for Numbers {
    type Output = i64;
    type Checkpoint = i64;
    type Reader = Reader;
    fn split(&self, desired: usize) -> UserResult<Vec<Self>> {
        let parts = desired.max(1) as i64;
        Ok((0..parts).map(|part| Numbers { parts, part, ..self.clone() }).collect())
    }
    fn create_reader(&self, checkpoint: Option<i64>) -> UserResult<Reader> {
        Ok(Reader { src: self.clone(), next: checkpoint.unwrap_or(self.part) })
    }
}

impl UnboundedReader for Reader {
    type Output = i64;
    type Checkpoint = i64;
    fn advance(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        if self.next >= self.src.count {
            return Ok(None);
        }
        let v = self.next;
        self.next += self.src.parts;
        Ok(Some((v, v * 10)))
    }
    fn watermark(&self) -> Timestamp {
        if self.next >= self.src.count {
            MAX_TIMESTAMP
        } else {
            self.next * 10 - 1
        }
    }
    fn checkpoint(&self) -> i64 {
        self.next
    }
}

#[derive(Clone)]
struct Render;

impl DoFn for Render {
    type In = KV<i64, i64>;
    type Out = String;
    fn process(&mut self, kv: KV<i64, i64>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let start = ctx.window().interval().map(|w| w.start).unwrap_or(0);
        ctx.output(format!("{} {} {}", kv.key, start, kv.value));
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: recovery_child CHECKPOINT_DIR OUT_DIR EVENTS [variant]");
        std::process::exit(2);
    }
    let events: i64 = args[3].parse().unwrap_or(300);
    weir_runner_microbatch::register();
    let options = match PipelineOptions::from_args([
        "--runner",
        "microbatch",
        "--checkpoint-dir",
        &args[1],
        "--max-batch-size",
        "7",
        "--parallelism",
        "2",
    ]) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let p = Pipeline::new(options);
    let windowed = p
        .apply("Read", ReadUnbounded::from(Numbers { count: events, parts: 1, part: 0 }))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 3, i)));
    let summed = if args.get(4).map(String::as_str) == Some("variant") {
        windowed.apply("Max", Max::per_key())
    } else {
        windowed.apply("Sum", Sum::per_key())
    };
    summed.apply("Render", ParDo::of(Render)).apply("Write", WriteJsonLines::to(args[2].clone()));
    let outcome = p.run().and_then(|r| r.wait_until_finish(None));
    match outcome {
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
