//! # weir-tests: the conformance suite
//!
//! One test body, every runner configuration (DESIGN D4). [`conformance!`] expands each test
//! into one `#[test]` per configuration in [`CONFIGURATIONS`], so a runner added there inherits
//! the whole suite, and a difference between runners shows up as a failing test named after
//! the configuration.

#![deny(missing_docs)]

use std::sync::Once;
use weir_sdk::testing::TestPipeline;
use weir_sdk::PipelineOptions;

/// Every runner configuration the suite runs on.
pub const CONFIGURATIONS: &[&str] = &["direct", "direct_unshuffled", "microbatch_p1", "microbatch_p4_small_batches"];

/// Registers every runner with the SDK's registry (once per process).
pub fn register_runners() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        weir_runner_direct::register();
        weir_runner_microbatch::register();
    });
}

/// The options of a configuration.
pub fn configuration(name: &str) -> PipelineOptions {
    let mut o = PipelineOptions::default();
    match name {
        "direct" => {
            o.runner = "direct".into();
            o.direct.shuffle = true;
            o.direct.bundle_size = 7;
            o.direct.seed = std::env::var("WEIR_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261129);
        }
        "direct_unshuffled" => {
            o.runner = "direct".into();
            o.direct.shuffle = false;
        }
        "microbatch_p1" => {
            o.runner = "microbatch".into();
            o.microbatch.parallelism = 1;
        }
        "microbatch_p4_small_batches" => {
            o.runner = "microbatch".into();
            o.microbatch.parallelism = 4;
            o.microbatch.max_batch_size = 3;
        }
        other => panic!("unknown conformance configuration '{other}'; known: {CONFIGURATIONS:?}"),
    }
    o
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
            #[test]
            fn direct() {
                body(&$crate::pipeline("direct"))
            }
            #[test]
            fn direct_unshuffled() {
                body(&$crate::pipeline("direct_unshuffled"))
            }
            #[test]
            fn microbatch_p1() {
                body(&$crate::pipeline("microbatch_p1"))
            }
            #[test]
            fn microbatch_p4_small_batches() {
                body(&$crate::pipeline("microbatch_p4_small_batches"))
            }
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
