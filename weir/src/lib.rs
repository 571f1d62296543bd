//! # weir: the one crate a pipeline depends on
//!
//! The SDK (`weir::sdk`, also re-exported at the top: `weir::Pipeline`, `weir::prelude`), the
//! runners and the metrics sinks, each behind a feature that is on by default. [`register`] makes
//! every enabled runner, sink and their option groups known to the SDK, so that `--runner`,
//! `--metrics-sink` and their flags work; a program calls it once, first.
//!
//! ```
//! use weir::prelude::*;
//!
//! weir::register();
//! let p = Pipeline::new(PipelineOptions::from_args(["--runner", "direct"]).unwrap());
//! let doubled = p.apply("Create", Create::of([1i64, 2, 3])).apply("Double", Map::new(|x: i64| x * 2));
//! assert_that(&doubled).contains_in_any_order(vec![2, 4, 6]);
//! assert_eq!(p.run().unwrap().wait_until_finish(None).unwrap(), PipelineState::Done);
//! ```
//!
//! The crates are also reachable one by one: [`sdk`], [`core`] (what runners share), and, with
//! their features, [`direct`], [`microbatch`], [`timely`] and [`sinks`].

#![deny(missing_docs)]

pub use weir_runner_core as core;
pub use weir_sdk as sdk;
pub use weir_sdk::*;

#[cfg(feature = "sinks")]
pub use weir_metrics_sinks as sinks;
#[cfg(feature = "parquet")]
pub use weir_parquet as parquet;
#[cfg(feature = "direct")]
pub use weir_runner_direct as direct;
#[cfg(feature = "microbatch")]
pub use weir_runner_microbatch as microbatch;
#[cfg(feature = "timely")]
pub use weir_runner_timely as timely;

/// Everything a pipeline usually needs, and [`register`].
pub mod prelude {
    pub use crate::register;
    pub use weir_sdk::prelude::*;
}

/// Registers every enabled runner, metrics sink and option group with the SDK, once per process
/// (later calls do nothing).
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "direct")]
        weir_runner_direct::register();
        #[cfg(feature = "microbatch")]
        weir_runner_microbatch::register();
        #[cfg(feature = "timely")]
        weir_runner_timely::register();
        #[cfg(feature = "sinks")]
        weir_metrics_sinks::register();
    });
}

/// [`register`], and warnings and errors to standard error (`RUST_LOG` to choose): what a
/// binary calls first.
pub fn register_with_logging() {
    weir_runner_core::logging::init();
    register();
}
