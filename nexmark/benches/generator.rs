//! The Nexmark generator alone: events per second of one unsplit timeline (what a single source
//! split produces), and of the Beam-JSON rendering used by `--export-events`.
//!
//! Run with `cargo bench -p weir-nexmark --bench generator`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_nexmark::generator::standard_events;
use weir_nexmark::NexmarkConfig;

const N: i64 = 100_000;

fn generator(c: &mut Criterion) {
    let config = NexmarkConfig { num_events: N, num_event_generators: 1, ..NexmarkConfig::default() };
    let mut g = c.benchmark_group("generator");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.bench_function("events", |b| b.iter(|| standard_events(&config).count()));
    g.bench_function("events_to_json", |b| {
        b.iter(|| standard_events(&config).map(|e| e.to_json().len()).sum::<usize>())
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, generator);
}
use group::benches;
criterion_main!(benches);
