//! Streams N events (default 10 M) through a windowed Count.perKey on the micro-batch runner and
//! prints the state operator's `memoryUsedBytes` and `numRowsTotal` as batches go by, to show
//! that windowed state stays bounded: windows close as the watermark passes them.
//!
//! Run with: `cargo run --release -p weir-runner-microbatch --example windowed_state_memory -- 10000000`

use std::time::Duration;
use weir_runner_microbatch::MicroBatchRunner;
use weir_sdk::io::{ReadUnbounded, UnboundedReader, UnboundedSource};
use weir_sdk::prelude::*;

/// Event `i` at `i` ms, key `i % 1000`.
#[derive(Clone)]
struct Events(i64);

struct Reader {
    n: i64,
    next: i64,
}

impl UnboundedSource for Events {
    type Output = i64;
    type Checkpoint = i64;
    type Reader = Reader;
    fn split(&self, _: usize) -> UserResult<Vec<Self>> {
        Ok(vec![self.clone()])
    }
    fn create_reader(&self, checkpoint: Option<i64>) -> UserResult<Reader> {
        Ok(Reader { n: self.0, next: checkpoint.unwrap_or(0) })
    }
}

impl UnboundedReader for Reader {
    type Output = i64;
    type Checkpoint = i64;
    fn advance(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        if self.next >= self.n {
            return Ok(None);
        }
        self.next += 1;
        Ok(Some((self.next - 1, self.next - 1)))
    }
    fn watermark(&self) -> Timestamp {
        if self.next >= self.n {
            MAX_TIMESTAMP
        } else {
            self.next - 1
        }
    }
    fn checkpoint(&self) -> i64 {
        self.next
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let n: i64 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(10_000_000);
    let options =
        PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "2", "--max-batch-size", "200000"])?;
    let p = Pipeline::new(options.clone());
    p.apply("Events", ReadUnbounded::from(Events(n)))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_secs(1))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 1000, i)))
        .apply("Count", Count::per_key())
        .apply("Discard", Filter::by(|_: &KV<i64, i64>| false));
    let query = MicroBatchRunner.start(p.graph(), &options)?;
    query.add_listener(|pr| {
        if let Some(op) = pr.state_operators.first() {
            if pr.batch_id % 10 == 0 {
                println!(
                    "batch {:4}  input rows {:7}  state rows {:6}  memoryUsedBytes {:9}  watermark {}",
                    pr.batch_id, pr.num_input_rows, op.num_rows_total, op.memory_used_bytes, pr.event_time.watermark
                );
            }
        }
    });
    let start = std::time::Instant::now();
    query.await_termination(None)?;
    println!("{n} events in {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}
