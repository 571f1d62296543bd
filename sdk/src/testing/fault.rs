//! Fault injection for recovery tests: `WEIR_CRASH_AT=<point>:<batch>` aborts the process at
//! that point of that batch, as a kill would. Points: `wal-commit` (after the offset log entry),
//! `add-batch` (after processing), `state-commit` (after state files), `sink-commit` (after
//! sink files), `commit-log` (after the commit log entry), `before-rename` (inside any atomic
//! write), `snapshot-manifest` (a background snapshot taken at that batch, its files written
//! and its manifest not). Unset in normal runs; reading it costs one environment lookup per point. Runners call
//! these at the phases of their commit protocol; pipelines have no use for them.

use std::sync::atomic::{AtomicU64, Ordering};

static BATCH: AtomicU64 = AtomicU64::new(0);

/// Sets the batch id the next points refer to.
pub fn set_batch(batch: u64) {
    BATCH.store(batch, Ordering::SeqCst);
}

/// Aborts the process if `WEIR_CRASH_AT` names this point and the current batch.
pub fn point(name: &str) {
    if let Ok(spec) = std::env::var("WEIR_CRASH_AT") {
        if let Some((p, b)) = spec.split_once(':') {
            if p == name && b.parse::<u64>().ok() == Some(BATCH.load(Ordering::SeqCst)) {
                std::process::abort();
            }
        }
    }
}

/// Aborts the process if `WEIR_CRASH_AT` names this point and batch `at` (for work off the
/// batch's thread, such as a background snapshot taken at an earlier batch).
pub fn point_at(name: &str, at: u64) {
    if let Ok(spec) = std::env::var("WEIR_CRASH_AT") {
        if let Some((p, b)) = spec.split_once(':') {
            if p == name && b.parse::<u64>().ok() == Some(at) {
                std::process::abort();
            }
        }
    }
}
