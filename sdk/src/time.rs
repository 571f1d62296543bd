//! Event time: instants as milliseconds since the epoch, with Beam's bounds.

/// An instant in event time, in milliseconds since the Unix epoch (Beam's Java granularity).
pub type Timestamp = i64;

/// `BoundedWindow.TIMESTAMP_MIN_VALUE`: the smallest representable timestamp (`i64::MIN / 1000`).
pub const MIN_TIMESTAMP: Timestamp = -9_223_372_036_854_775;
/// `BoundedWindow.TIMESTAMP_MAX_VALUE`: the largest representable timestamp (`i64::MAX / 1000`).
pub const MAX_TIMESTAMP: Timestamp = 9_223_372_036_854_775;
/// `GlobalWindow.maxTimestamp()`: one day before [`MAX_TIMESTAMP`], so that garbage-collection
/// times computed from it never overflow.
pub const GLOBAL_WINDOW_MAX_TIMESTAMP: Timestamp = MAX_TIMESTAMP - 86_400_000;

/// Converts a [`std::time::Duration`] to whole milliseconds, saturating at `i64::MAX`.
pub fn duration_millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
