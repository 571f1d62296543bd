//! GroupAlsoByWindow benchmarks.
//!
//! Run with `cargo bench -p weir-runner-core --bench group_also_by_window`. Each benchmark
//! pairs the engine with the same grouping done by hand in a plain hash-map loop, so the ratio
//! of the two is what the engine's generality costs (encoded keys and values, triggers, panes,
//! holds, timers):
//!
//! - `fixed_windows`: 1 M `KV<i64, i64>` over 1 000 keys in 1 s fixed windows, grouped in one
//!   batch (100 k groups of 10 values), then the watermark moves to the end of time and every
//!   window fires.
//! - `sessions`: the same elements in sessions with a 100 ms gap (merging windows).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use weir_runner_core::group_also_by_window::{GroupAlsoByWindow, Values};
use weir_sdk::kernel::Batch;
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::MAX_TIMESTAMP;
use weir_sdk::window::Window;
use weir_sdk::window_fn::{FixedWindows, Sessions, WindowingStrategy};
use weir_sdk::windowed_value::WindowedValue;
use weir_sdk::KV;

const N: i64 = 1_000_000;
const KEYS: i64 = 1_000;

/// Element `i`: key `i % KEYS`, value `i`, at `i / 10` ms (a million elements over 100 s).
fn element(i: i64) -> (i64, i64, i64) {
    (i % KEYS, i, i / 10)
}

fn input(strategy: &WindowingStrategy) -> Batch {
    let mut windows = Vec::new();
    let mut rows = Vec::with_capacity(N as usize);
    for i in 0..N {
        let (k, v, t) = element(i);
        windows.clear();
        strategy.window_fn.assign_windows(t, &Window::Global, &mut windows);
        for &window in &windows {
            rows.push(WindowedValue { value: KV::new(k, v), timestamp: t, window, pane: PaneInfo::NO_FIRING });
        }
    }
    Batch::new(rows)
}

fn engine(strategy: &WindowingStrategy, input: Batch) -> usize {
    let kernel = weir_sdk::runner_api::group_kernel::<i64, i64>();
    let mut gaw = GroupAlsoByWindow::new("G", strategy.clone(), Values::Buffer(kernel));
    let mut groups = gaw.process(input, 0).unwrap().len();
    groups += gaw.advance(MAX_TIMESTAMP, 0).unwrap().len();
    groups
}

/// Fixed windows by hand: a map from (key, window start) to the values.
fn by_hand_fixed(size_ms: i64) -> usize {
    let mut groups: HashMap<(i64, i64), Vec<i64>> = HashMap::new();
    for i in 0..N {
        let (k, v, t) = element(i);
        groups.entry((k, t - t.rem_euclid(size_ms))).or_default().push(v);
    }
    groups.len()
}

/// Sessions by hand: per key, elements in time order, cut where the gap is at least `gap_ms`.
fn by_hand_sessions(gap_ms: i64) -> usize {
    let mut per_key: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for i in 0..N {
        let (k, v, t) = element(i);
        per_key.entry(k).or_default().push((t, v));
    }
    let mut sessions = 0;
    for (_, mut elements) in per_key {
        elements.sort_unstable();
        let mut end = i64::MIN;
        for (t, _) in elements {
            if t >= end {
                sessions += 1;
            }
            end = end.max(t + gap_ms);
        }
    }
    sessions
}

fn fixed_windows(c: &mut Criterion) {
    let strategy = WindowingStrategy::of(Arc::new(FixedWindows::of(Duration::from_secs(1))));
    let mut g = c.benchmark_group("fixed_windows");
    g.throughput(Throughput::Elements(N as u64)).sample_size(10);
    g.bench_function("group_also_by_window", |b| {
        b.iter_batched(|| input(&strategy), |batch| engine(&strategy, batch), criterion::BatchSize::LargeInput)
    });
    g.bench_function("by_hand", |b| b.iter(|| by_hand_fixed(1000)));
    g.finish();
}

fn sessions(c: &mut Criterion) {
    let strategy = WindowingStrategy::of(Arc::new(Sessions::with_gap_duration(Duration::from_millis(100))));
    let mut g = c.benchmark_group("sessions");
    g.throughput(Throughput::Elements(N as u64)).sample_size(10);
    g.bench_function("group_also_by_window", |b| {
        b.iter_batched(|| input(&strategy), |batch| engine(&strategy, batch), criterion::BatchSize::LargeInput)
    });
    g.bench_function("by_hand", |b| b.iter(|| by_hand_sessions(100)));
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, fixed_windows, sessions);
}
use group::benches;
criterion_main!(benches);
