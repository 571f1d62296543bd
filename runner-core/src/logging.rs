//! Logging for binaries: `tracing` events to standard error, warnings and errors by default,
//! `RUST_LOG` to choose (`RUST_LOG=info`, `RUST_LOG=warn,weir_runner_microbatch=debug`).
//!
//! Library code only emits events; without a subscriber they would go nowhere, and push
//! failures, retried batches or skipped records would be invisible. Every binary of the project
//! (the Nexmark launcher, the examples) calls [`init`] first. Standard output stays free for
//! results and tables.

use std::str::FromStr;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter of `RUST_LOG`, or warnings when it is unset. A malformed `RUST_LOG` is reported on
/// standard error and the default used.
fn filter(spec: Option<&str>) -> Targets {
    let default = || Targets::new().with_default(tracing::Level::WARN);
    match spec.map(str::trim).filter(|s| !s.is_empty()) {
        None => default(),
        Some(s) => Targets::from_str(s).unwrap_or_else(|e| {
            eprintln!("warning: ignoring RUST_LOG='{s}' ({e}); logging warnings and errors");
            default()
        }),
    }
}

/// Installs the stderr subscriber for this process. Calling it again does nothing.
pub fn init() {
    let spec = std::env::var("RUST_LOG").ok();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(true);
    let _ = tracing_subscriber::registry().with(fmt).with(filter(spec.as_deref())).try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::level_filters::LevelFilter;

    #[test]
    fn warnings_by_default_and_rust_log_chooses() {
        assert!(filter(None).would_enable("weir_runner_microbatch", &tracing::Level::WARN));
        assert!(!filter(None).would_enable("weir_runner_microbatch", &tracing::Level::INFO));
        let f = filter(Some("error,weir_runner_microbatch=debug"));
        assert!(f.would_enable("weir_runner_microbatch::engine", &tracing::Level::DEBUG));
        assert!(!f.would_enable("weir_sdk", &tracing::Level::WARN));
        let bad = filter(Some("weir=loud"));
        assert_eq!(bad.default_level(), Some(LevelFilter::WARN));
        assert!(bad.would_enable("weir", &tracing::Level::WARN) && !bad.would_enable("weir", &tracing::Level::INFO));
    }
}
