//! # weir-tests: the conformance suite
//!
//! One test body, every runner configuration (ARCHITECTURE.md, "Semantics live once"). [`conformance!`] expands each test
//! into one `#[test]` per configuration in [`CONFIGURATIONS`], so a runner added there inherits
//! the whole suite, and a difference between runners shows up as a failing test named after
//! the configuration.

#![deny(missing_docs)]

use weir::core::streaming::StreamingOptions;
use weir::direct::DirectOptions;
use weir::microbatch::MicroBatchOptions;
use weir::timely::TimelyOptions;
use weir_sdk::testing::TestPipeline;
use weir_sdk::PipelineOptions;

/// Every runner configuration the suite runs on.
pub const CONFIGURATIONS: &[&str] = &[
    "direct",
    "direct_unshuffled",
    "microbatch_p1",
    "microbatch_p4_small_batches",
    "timely_w1",
    "timely_w3_small_batches",
    "microbatch_p2_disk",
];

/// Registers every runner with the SDK's registry (once per process).
pub fn register_runners() {
    weir::register();
}

/// The options of a configuration.
pub fn configuration(name: &str) -> PipelineOptions {
    let mut o = PipelineOptions::default();
    match name {
        "direct" => {
            o.runner = "direct".into();
            let d = o.group_mut::<DirectOptions>();
            d.shuffle = true;
            d.bundle_size = 7;
            d.seed = std::env::var("WEIR_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261129);
        }
        "direct_unshuffled" => {
            o.runner = "direct".into();
            o.group_mut::<DirectOptions>().shuffle = false;
        }
        "microbatch_p1" => {
            o.runner = "microbatch".into();
            o.group_mut::<MicroBatchOptions>().parallelism = 1;
        }
        "microbatch_p4_small_batches" => {
            o.runner = "microbatch".into();
            o.group_mut::<MicroBatchOptions>().parallelism = 4;
            o.group_mut::<StreamingOptions>().max_batch_size = 3;
        }
        "timely_w1" => {
            o.runner = "timely".into();
            o.group_mut::<TimelyOptions>().workers = 1;
        }
        "timely_w3_small_batches" => {
            o.runner = "timely".into();
            o.group_mut::<TimelyOptions>().workers = 3;
            o.group_mut::<StreamingOptions>().max_batch_size = 5;
        }
        "microbatch_p2_disk" => {
            // Keyed state past a kilobyte waits on disk (`--state-backend disk`).
            o.runner = "microbatch".into();
            o.group_mut::<MicroBatchOptions>().parallelism = 2;
            o.group_mut::<StreamingOptions>().max_batch_size = 4;
            o.state = weir_sdk::options::StateOptions {
                backend: weir_sdk::options::StateBackendKind::Disk,
                memory_budget: 1 << 10,
                local_dir: None,
            };
        }
        other => panic!("unknown conformance configuration '{other}'; known: {CONFIGURATIONS:?}"),
    }
    o
}

/// A DoFn reporting one metric of each kind per element (counter `test:elements`,
/// distribution `test:values` of the elements, gauge `test:last` at 7), passing elements on.
#[derive(Clone)]
pub struct Measured;

impl weir_sdk::DoFn for Measured {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut weir_sdk::ProcessContext<'_, i64>) -> weir_sdk::UserResult {
        weir_sdk::Metrics::counter("test", "elements")?.inc();
        weir_sdk::Metrics::distribution("test", "values")?.update(e);
        weir_sdk::Metrics::gauge("test", "last")?.set(7);
        ctx.output(e);
        Ok(())
    }
}

mod state_fixtures {
    use weir_sdk::prelude::*;

    /// Buffers values in a bag and flushes their sum at the end of the window (event-time timer).
    #[derive(Clone)]
    pub struct BufferUntilEndOfWindow;

    impl weir_sdk::DoFn for BufferUntilEndOfWindow {
        type In = weir_sdk::KV<String, i64>;
        type Out = weir_sdk::KV<String, i64>;
        fn process(
            &mut self,
            e: weir_sdk::KV<String, i64>,
            ctx: &mut weir_sdk::ProcessContext<'_, weir_sdk::KV<String, i64>>,
        ) -> weir_sdk::UserResult {
            ctx.bag_state::<i64>("buffer").add(&e.value)?;
            let end = ctx.window().max_timestamp();
            ctx.timer("flush", weir_sdk::state::TimeDomain::EventTime).set(end)?;
            Ok(())
        }
        fn on_timer(
            &mut self,
            t: &weir_sdk::do_fn::TimerFiring,
            ctx: &mut weir_sdk::do_fn::OnTimerContext<'_, weir_sdk::KV<String, i64>>,
        ) -> weir_sdk::UserResult {
            assert_eq!(t.id, "flush");
            let values = ctx.bag_state::<i64>("buffer").read()?;
            ctx.bag_state::<i64>("buffer").clear()?;
            let key: String = ctx.key()?;
            ctx.output(weir_sdk::KV::new(key, values.iter().sum()))
        }
    }
}

pub use state_fixtures::BufferUntilEndOfWindow;

/// The numbers `0..n` of an element `n`, number `i` at `i * 10` ms, seven per call: the rest of
/// the restriction is resumed after `resume_delay`, from the operator's checkpointed state.
#[derive(Clone)]
pub struct SevenAtATime {
    /// How long the rest waits for its next call.
    pub resume_delay: std::time::Duration,
}

impl weir_sdk::splittable::SplittableDoFn for SevenAtATime {
    type In = i64;
    type Out = i64;
    type Restriction = weir_sdk::splittable::OffsetRange;
    type Tracker = weir_sdk::splittable::OffsetRangeTracker;
    fn initial_restriction(&self, n: &i64) -> weir_sdk::UserResult<Self::Restriction> {
        Ok(weir_sdk::splittable::OffsetRange::new(0, *n))
    }
    fn new_tracker(&self, _: &i64, r: Self::Restriction) -> Self::Tracker {
        weir_sdk::splittable::OffsetRangeTracker::new(r)
    }
    fn process(
        &mut self,
        _: &i64,
        tracker: &mut weir_sdk::splittable::Claims<'_, Self::Tracker>,
        ctx: &mut weir_sdk::splittable::SdfContext<'_, i64>,
    ) -> weir_sdk::UserResult<weir_sdk::splittable::ProcessContinuation> {
        use weir_sdk::splittable::ProcessContinuation;
        let from = tracker.current_restriction().from;
        for i in from..from + 7 {
            if !tracker.try_claim(i) {
                return Ok(ProcessContinuation::stop());
            }
            ctx.output_with_timestamp(i, i * 10)?;
        }
        Ok(ProcessContinuation::resume().with_resume_delay(self.resume_delay))
    }
}

/// Checks per-window counts `(window start, count)` of a drained run against the elements
/// `seen` (a drain stops sources where they are, so what was read is known only at the end):
/// every window that got an element fired, and counted each element once. `window_start`
/// gives an element's window.
pub fn counted_once_in_every_window(
    seen: &std::sync::Mutex<Vec<i64>>,
    mut counts: Vec<(i64, i64)>,
    window_start: impl Fn(i64) -> i64,
) -> Result<(), String> {
    counts.sort();
    let mut want = std::collections::BTreeMap::new();
    for &e in seen.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        *want.entry(window_start(e)).or_insert(0i64) += 1;
    }
    let want: Vec<(i64, i64)> = want.into_iter().collect();
    if want.is_empty() || counts != want {
        return Err(format!("counted {counts:?}, read {want:?}"));
    }
    Ok(())
}

/// Records every element it passes on (a drain stops sources where they are, so what was read is
/// known only once the run is over).
#[derive(Clone)]
pub struct Seen(pub std::sync::Arc<std::sync::Mutex<Vec<i64>>>);

impl weir_sdk::DoFn for Seen {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut weir_sdk::ProcessContext<'_, i64>) -> weir_sdk::UserResult {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
        ctx.output(e);
        Ok(())
    }
}

/// The options of configuration `config` with the metrics flags `flags` (`--metrics-sink`,
/// the pusher's and the sinks' settings) applied.
pub fn with_metrics_flags(config: &str, flags: &[&str]) -> PipelineOptions {
    register_runners();
    let parsed = PipelineOptions::from_args(flags.iter().copied()).expect("valid metrics flags");
    let mut options = configuration(config);
    options.metrics = parsed.metrics.clone();
    options.with(parsed.get::<weir::sinks::SinkOptions>().into_owned())
}

/// A fresh test pipeline for a configuration, with every runner registered.
pub fn pipeline(config: &str) -> TestPipeline {
    register_runners();
    TestPipeline::from_options(configuration(config))
}

/// Defines conformance tests: each `fn name(p) { .. }` becomes a module `name` with one
/// `#[test]` per configuration, each given a fresh [`TestPipeline`] as `p`.
#[macro_export]
macro_rules! conformance {
    ($($(#[$meta:meta])* fn $name:ident($p:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($p: &weir_sdk::testing::TestPipeline) $body
            $crate::configurations! {
                direct direct_unshuffled microbatch_p1 microbatch_p4_small_batches timely_w1 timely_w3_small_batches
                microbatch_p2_disk
            }
        }
    )*};
}

/// One `#[test]` per configuration named, each running the enclosing module's `body` on a fresh
/// pipeline of that configuration (used by [`conformance!`]; the names are [`CONFIGURATIONS`]).
#[macro_export]
macro_rules! configurations {
    ($($config:ident)*) => {$(
        #[test]
        fn $config() {
            body(&$crate::pipeline(stringify!($config)))
        }
    )*};
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_configuration_has_options() {
        for c in super::CONFIGURATIONS {
            assert!(!super::configuration(c).runner.is_empty());
        }
    }
}

/// The README's code, compiled and run as a doctest so it never rots.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The code of the pages in `docs/`, compiled and run as doctests like the README's (their
/// shell commands are run by `tests/docs.rs`).
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../../docs/rust-sdk.md")]
    pub struct RustSdk;
    #[doc = include_str!("../../docs/runners.md")]
    pub struct Runners;
    #[doc = include_str!("../../docs/io.md")]
    pub struct Io;
    #[doc = include_str!("../../docs/operations.md")]
    pub struct Operations;
    #[doc = include_str!("../../docs/state.md")]
    pub struct State;
    #[doc = include_str!("../../docs/nexmark.md")]
    pub struct Nexmark;
    #[doc = include_str!("../../docs/beam-python.md")]
    pub struct BeamPython;
    #[doc = include_str!("../../docs/beam-java.md")]
    pub struct BeamJava;
    #[doc = include_str!("../../docs/development.md")]
    pub struct Development;
}

/// Sources shared by the tests.
pub mod sources {
    use weir_sdk::io::{UnboundedReader, UnboundedSource};
    use weir_sdk::time::{Timestamp, MAX_TIMESTAMP};
    use weir_sdk::UserResult;

    /// A replayable unbounded source of numbers: element `i` at timestamp `i * 10`, split into
    /// parts by residue, resumable from a checkpoint (the next number), with a watermark just
    /// behind what it has read.
    #[derive(Clone, Debug)]
    pub struct Numbers {
        /// How many numbers; `None` for an endless source.
        pub count: Option<i64>,
        /// Whether every fourth poll finds nothing (data arriving in spurts).
        pub gaps: bool,
        parts: i64,
        part: i64,
    }

    impl Numbers {
        /// The numbers `0..count` (endless when `None`).
        pub fn new(count: Option<i64>, gaps: bool) -> Self {
            Numbers { count, gaps, parts: 1, part: 0 }
        }
        fn exhausted(&self, next: i64) -> bool {
            self.count.is_some_and(|c| next >= c)
        }
    }

    /// Reads [`Numbers`].
    pub struct NumbersReader {
        source: Numbers,
        next: i64,
        polls: u64,
    }

    impl UnboundedSource for Numbers {
        type Output = i64;
        type Checkpoint = i64;
        type Reader = NumbersReader;
        fn split(&self, desired: usize) -> UserResult<Vec<Self>> {
            let parts = desired.clamp(1, 4) as i64;
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
            if (self.source.gaps && self.polls.is_multiple_of(4)) || self.source.exhausted(self.next) {
                return Ok(None);
            }
            let v = self.next;
            self.next += self.source.parts;
            Ok(Some((v, v * 10)))
        }
        fn watermark(&self) -> Timestamp {
            if self.source.exhausted(self.next) {
                MAX_TIMESTAMP
            } else {
                self.next * 10 - 1
            }
        }
        fn checkpoint(&self) -> i64 {
            self.next
        }
    }
}

/// Real receivers started by tests on 127.0.0.1: free ports, waiting until they listen, and
/// stopping them when the test ends. A receiver that is not installed skips its test with a
/// message, except under CI (`CI` set), where `.ci/run` installs it and the test fails.
pub mod receivers {
    use std::net::{TcpListener, TcpStream};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// A port nothing listens on right now.
    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
    }

    /// Whether `command` can be run; if not, skips (or, under CI, fails) naming the Debian
    /// `package` that provides it.
    pub fn installed(command: &str, package: &str) -> bool {
        let found = Command::new(command).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
        if !found {
            assert!(std::env::var_os("CI").is_none(), "{command} is not installed (Debian package {package})");
            eprintln!("SKIPPED: {command} is not installed (apt-get install {package})");
        }
        found
    }

    /// A receiver process, killed when dropped.
    pub struct Receiver {
        child: Child,
        /// The port it listens on.
        pub port: u16,
    }

    impl Drop for Receiver {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Starts `command` with `args`, its output in `log`, and waits up to 60 s until it listens
    /// on `port` on 127.0.0.1.
    pub fn start(command: &str, args: &[String], port: u16, log: &Path) -> Receiver {
        let out = std::fs::File::create(log).expect("receiver log file");
        let err = out.try_clone().expect("receiver log file");
        let child = Command::new(command)
            .args(args)
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let mut receiver = Receiver { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = receiver.child.try_wait() {
                panic!("{command} exited with {status}: {}", std::fs::read_to_string(log).unwrap_or_default());
            }
            assert!(
                Instant::now() < deadline,
                "{command} did not listen on {port}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        receiver
    }

    /// The body of `GET url`, or `None` when the request fails or answers an error.
    pub fn get(url: &str) -> Option<String> {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(5))).build().into();
        agent.get(url).call().ok()?.body_mut().read_to_string().ok()
    }
}
