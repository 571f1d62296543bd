//! A streaming pipeline for recovery tests: `recovery_child CHECKPOINT_DIR OUT_DIR EVENTS [variant]`.
//!
//! Reads EVENTS numbers from a replayable unbounded source (element i at i*10 ms), sums them per
//! key (i % 3) in 100 ms windows on the micro-batch runner with a checkpoint directory, and writes
//! `key window-start sum` lines with the exactly-once JSON-lines sink. Crash injection comes from
//! `WEIR_CRASH_AT` (see the runner's fault points); the `variant` argument builds a pipeline with a
//! different stateful shape, which a checkpoint of the normal one must refuse. With
//! `WEIR_CHILD_SOURCE=bounded` the numbers come from a bounded `GenerateSequence` instead, and
//! with `WEIR_CHILD_SOURCE=splittable` from a splittable DoFn that claims seven per call. With
//! `WEIR_CHILD_SHAPE=stateful` the sums come from a stateful DoFn instead (a value per key and
//! window, emitted and cleared by an event-time timer at the window's end): the same output,
//! from state that is written, read and removed every batch; `stateful-side` adds a side input's
//! offset (0) to each value, so the stateful step keeps side inputs and waiting elements in its
//! state too. `WEIR_CHILD_KEYS=runs` keys number
//! i by i / 100 instead.

use std::time::Duration;
use weir_sdk::io::{ReadUnbounded, WriteJsonLines};
use weir_sdk::prelude::*;
use weir_sdk::splittable::SplittableParDo;
use weir_tests::sources::Numbers;
use weir_tests::SevenAtATime;

/// Sums a key's values in a window in value state, and emits the sum when the window ends.
#[derive(Clone)]
struct StatefulSum;

impl DoFn for StatefulSum {
    type In = KV<i64, i64>;
    type Out = KV<i64, i64>;
    fn process(&mut self, kv: KV<i64, i64>, ctx: &mut ProcessContext<'_, KV<i64, i64>>) -> UserResult {
        let sum = ctx.value_state::<i64>("sum").read()?.unwrap_or(0) + kv.value;
        ctx.value_state::<i64>("sum").write(&sum)?;
        let end = ctx.window().max_timestamp();
        ctx.timer("end", weir_sdk::state::TimeDomain::EventTime).set(end)
    }
    fn on_timer(
        &mut self,
        _: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, KV<i64, i64>>,
    ) -> UserResult {
        let sum = ctx.value_state::<i64>("sum").read()?.unwrap_or(0);
        ctx.value_state::<i64>("sum").clear()?;
        let key: i64 = ctx.key()?;
        ctx.output(KV::new(key, sum))
    }
}

/// [`StatefulSum`], each value plus a side input's offset (0): the stateful step then keeps
/// its side inputs, and the elements waiting for them, in its state too.
#[derive(Clone)]
struct StatefulSumWithOffset(PCollectionView<weir_sdk::view::Singleton<i64>>);

impl DoFn for StatefulSumWithOffset {
    type In = KV<i64, i64>;
    type Out = KV<i64, i64>;
    fn process(&mut self, kv: KV<i64, i64>, ctx: &mut ProcessContext<'_, KV<i64, i64>>) -> UserResult {
        let offset = ctx.side_input(&self.0)?;
        StatefulSum.process(KV::new(kv.key, kv.value + offset), ctx)
    }
    fn on_timer(
        &mut self,
        t: &weir_sdk::do_fn::TimerFiring,
        ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, KV<i64, i64>>,
    ) -> UserResult {
        StatefulSum.on_timer(t, ctx)
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
    // Warnings (a stale lock taken over, a stray file ignored) go to stderr, where tests read them.
    weir::core::logging::init();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: recovery_child CHECKPOINT_DIR OUT_DIR EVENTS [variant]");
        std::process::exit(2);
    }
    let events: i64 = args[3].parse().unwrap_or(300);
    weir::register();
    let mut flags: Vec<String> = ["--runner", "microbatch", "--checkpoint-dir", &args[1], "--max-batch-size", "7"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Extra options for a test, e.g. "--state-snapshot-interval 3"; two threads unless they say
    // otherwise, and one partition per thread unless they say otherwise (the tests count
    // batches and state files at that layout).
    let extra = std::env::var("WEIR_CHILD_OPTIONS").unwrap_or_default();
    let words: Vec<&str> = extra.split_whitespace().collect();
    let threads = words.iter().position(|w| *w == "--parallelism").and_then(|i| words.get(i + 1)).copied();
    if threads.is_none() {
        flags.extend(["--parallelism".to_string(), "2".to_string()]);
    }
    if !words.contains(&"--partitions") {
        flags.extend(["--partitions".to_string(), threads.unwrap_or("2").to_string()]);
    }
    flags.extend(extra.split_whitespace().map(String::from));
    let options = match PipelineOptions::from_args(flags) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let p = Pipeline::new(options);
    // WEIR_CHILD_WATCH=DIR: the names of the files arriving in DIR, each once, until half a
    // second passes without one.
    if let Ok(dir) = std::env::var("WEIR_CHILD_WATCH") {
        let pattern = std::path::Path::new(&dir).join("*.jsonl").to_string_lossy().into_owned();
        let watch = weir_sdk::io::file_io::Continuously::new(
            Duration::from_millis(5),
            weir_sdk::io::Termination::after_time_since_new_output(Duration::from_millis(500)),
        )
        .max_files_per_poll(1);
        p.apply("Watch", weir_sdk::io::FileIO::match_pattern(pattern).watching(watch))
            .apply(
                "Name",
                Map::new(|m: weir_sdk::io::FileMetadata| m.path.rsplit('/').next().unwrap_or("").to_string()),
            )
            .apply("Write", WriteJsonLines::to(args[2].clone()));
        match p.run().and_then(|r| r.wait_until_finish(None)) {
            Ok(_) => return,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    // WEIR_CHILD_SOURCE=bounded: the same numbers from a bounded source (planned reads).
    let numbers = if std::env::var("WEIR_CHILD_SOURCE").as_deref() == Ok("bounded") {
        p.apply("Read", weir_sdk::io::GenerateSequence::from_to(0, events).with_timestamps_every(10))
    } else if std::env::var("WEIR_CHILD_SOURCE").as_deref() == Ok("splittable") {
        p.apply("Count", Create::of(vec![events]))
            .apply("Numbers", SplittableParDo::of(SevenAtATime { resume_delay: Duration::ZERO }))
    } else {
        p.apply("Read", ReadUnbounded::from(Numbers::new(Some(events), false)))
    };
    // WEIR_CHILD_WINDOW_MS: another window size, a pipeline a checkpoint must refuse.
    let window_ms = std::env::var("WEIR_CHILD_WINDOW_MS").ok().and_then(|w| w.parse().ok()).unwrap_or(100);
    // WEIR_CHILD_KEYS=runs: key i / 100 instead of i % 3, so a key's state is left untouched once
    // its run of numbers has passed (with a window as long as the input, it stays until the end).
    let keys_in_runs = std::env::var("WEIR_CHILD_KEYS").is_ok_and(|k| k == "runs");
    let windowed = numbers
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(window_ms))))
        .apply("Key", Map::new(move |i: i64| KV::new(if keys_in_runs { i / 100 } else { i % 3 }, i)));
    let stateful = std::env::var("WEIR_CHILD_SHAPE").is_ok_and(|s| s == "stateful");
    let with_side = std::env::var("WEIR_CHILD_SHAPE").is_ok_and(|s| s == "stateful-side");
    let summed = if args.get(4).map(String::as_str) == Some("variant") {
        windowed.apply("Max", Max::per_key())
    } else if with_side {
        let offset = p.apply("Zero", Create::of(vec![0i64])).apply("Offset", Sum::globally());
        let view = View::as_singleton(&offset);
        windowed.apply(
            "StatefulSum",
            ParDo::stateful(StatefulSumWithOffset(view.clone())).with_side_inputs(vec![view.spec().clone()]),
        )
    } else if stateful {
        windowed.apply("StatefulSum", ParDo::stateful(StatefulSum))
    } else {
        windowed.apply("Sum", Sum::per_key())
    };
    summed.apply("Render", ParDo::of(Render)).apply("Write", WriteJsonLines::to(args[2].clone()));
    // State store cache hits and misses over the run, printed for the tests.
    let cache = std::sync::Arc::new(std::sync::Mutex::new((0u64, 0u64)));
    let outcome = weir::microbatch::MicroBatchRunner.start(p.graph(), &p.options()).and_then(|q| {
        let c = cache.clone();
        q.add_listener(move |pr| {
            let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
            for op in &pr.state_operators {
                c.0 += op.custom_metrics.get("loadedMapCacheHitCount").copied().unwrap_or(0);
                c.1 += op.custom_metrics.get("loadedMapCacheMissCount").copied().unwrap_or(0);
            }
        });
        q.await_termination(None)
    });
    match outcome {
        Ok(_) => {
            let (hits, misses) = *cache.lock().unwrap_or_else(|e| e.into_inner());
            println!("state cache hits {hits} misses {misses}");
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
