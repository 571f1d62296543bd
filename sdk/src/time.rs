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

/// The wall clock now, in milliseconds since the epoch (0 if the clock is before 1970).
pub fn now_millis() -> Timestamp {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, duration_millis)
}

/// Formats milliseconds since the epoch as ISO 8601 UTC with milliseconds, e.g.
/// `2026-11-29T18:45:00.000Z` (the form Spark's progress reports and Beam's HTTP sink use).
pub fn iso8601(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(1_454_293_425_123), "2016-02-01T02:23:45.123Z");
        assert_eq!(super::iso8601(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(super::iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
