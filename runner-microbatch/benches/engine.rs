//! Micro-batch engine benchmarks.
//!
//! Run with `cargo bench -p weir-runner-microbatch --bench engine`. Each benchmark pairs the
//! engine with the same work done by hand, so the ratio of the two is the engine's overhead:
//!
//! - `empty_trigger`: the cost of one batch that carries no data (a watermark move), per batch.
//! - `fused_chain`: three element-wise transforms (map, filter, map) over 10 M numbers at
//!   parallelism 1, against the same closures in a plain loop.
//! - `count_per_key`: Count.perKey over 10 M numbers with 100 k keys at parallelism 1, against a
//!   plain hash-map loop.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::io::GenerateSequence;
use weir_sdk::prelude::*;

const N: i64 = 10_000_000;
const KEYS: i64 = 100_000;

/// Batches of 4 M records (10 M elements in three batches): `--max-batch-size` bounds a batch
/// across all of a source's splits, and per-batch work is not what these benchmarks measure.
fn options() -> PipelineOptions {
    PipelineOptions::from_args(["--runner", "microbatch", "--parallelism", "1", "--max-batch-size", "4000000"]).unwrap()
}

fn run(p: &Pipeline) {
    let state = p.run().unwrap().wait_until_finish(None).unwrap();
    assert_eq!(state, PipelineState::Done);
}

/// Adds up what reaches it, so nothing is optimized away.
#[derive(Clone)]
struct Total(Arc<AtomicI64>, i64);

impl DoFn for Total {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, _: &mut ProcessContext<'_, i64>) -> UserResult {
        self.1 = self.1.wrapping_add(e);
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, i64>) -> UserResult {
        self.0.fetch_add(std::mem::take(&mut self.1), Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Clone)]
struct TotalKv(Arc<AtomicI64>, i64);

impl DoFn for TotalKv {
    type In = KV<i64, i64>;
    type Out = i64;
    fn process(&mut self, e: KV<i64, i64>, _: &mut ProcessContext<'_, i64>) -> UserResult {
        self.1 = self.1.wrapping_add(e.value);
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, i64>) -> UserResult {
        self.0.fetch_add(std::mem::take(&mut self.1), Ordering::Relaxed);
        Ok(())
    }
}

fn empty_trigger(c: &mut Criterion) {
    weir_runner_microbatch::register();
    const BATCHES: i64 = 500;
    let mut g = c.benchmark_group("empty_trigger");
    g.throughput(Throughput::Elements(BATCHES as u64));
    g.bench_function("engine_per_batch", |b| {
        b.iter(|| {
            let p = Pipeline::new(options());
            let mut stream = TestStream::<i64>::create();
            for i in 0..BATCHES {
                stream = stream.advance_watermark_to(i);
            }
            p.apply("Stream", stream).apply("Double", Map::new(|x: i64| x * 2));
            run(&p);
        })
    });
    g.finish();
}

fn fused_chain(c: &mut Criterion) {
    weir_runner_microbatch::register();
    let mut g = c.benchmark_group("fused_chain");
    g.sample_size(10).measurement_time(Duration::from_secs(20)).throughput(Throughput::Elements(N as u64));
    g.bench_function("engine", |b| {
        b.iter(|| {
            let total = Arc::new(AtomicI64::new(0));
            let p = Pipeline::new(options());
            p.apply("Numbers", GenerateSequence::from_to(0, N))
                .apply("Times3", Map::new(|x: i64| x * 3))
                .apply("Even", Filter::by(|x: &i64| x % 2 == 0))
                .apply("Plus1", Map::new(|x: i64| x + 1))
                .apply("Total", ParDo::of(Total(total.clone(), 0)));
            run(&p);
            total.load(Ordering::Relaxed)
        })
    });
    g.bench_function("plain_loop", |b| {
        b.iter(|| {
            let (f, keep, g2) = (|x: i64| x * 3, |x: &i64| x % 2 == 0, |x: i64| x + 1);
            let mut total = 0i64;
            for x in 0..N {
                let y = f(std::hint::black_box(x));
                if keep(&y) {
                    total = total.wrapping_add(g2(y));
                }
            }
            total
        })
    });
    g.finish();
}

fn count_per_key(c: &mut Criterion) {
    weir_runner_microbatch::register();
    let mut g = c.benchmark_group("count_per_key");
    g.sample_size(10).measurement_time(Duration::from_secs(30)).throughput(Throughput::Elements(N as u64));
    g.bench_function("engine", |b| {
        b.iter(|| {
            let total = Arc::new(AtomicI64::new(0));
            let p = Pipeline::new(options());
            p.apply("Numbers", GenerateSequence::from_to(0, N))
                .apply("Key", Map::new(|x: i64| KV::new(x % KEYS, x)))
                .apply("Count", Count::per_key())
                .apply("Total", ParDo::of(TotalKv(total.clone(), 0)));
            run(&p);
            assert_eq!(total.load(Ordering::Relaxed), N);
        })
    });
    g.bench_function("plain_hash_map", |b| {
        b.iter(|| {
            let mut counts: HashMap<i64, i64> = HashMap::new();
            for x in 0..N {
                *counts.entry(std::hint::black_box(x) % KEYS).or_insert(0) += 1;
            }
            assert_eq!(counts.values().sum::<i64>(), N);
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, empty_trigger, fused_chain, count_per_key);
}
use group::benches;
criterion_main!(benches);
