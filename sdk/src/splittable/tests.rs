//! Tests.

use super::*;

#[test]
fn offset_tracker_claims_splits_and_checks_as_beam() {
    let mut t = OffsetRangeTracker::new(OffsetRange::new(100, 200));
    assert_eq!(t.progress(), Progress { work_completed: 0.0, work_remaining: 100.0 });
    assert!(t.try_claim(100));
    assert!(t.try_claim(110));
    // Half of what is left after the last attempt: [110 + 45, 200).
    assert_eq!(t.try_split(0.5), Some(OffsetRange::new(155, 200)));
    assert_eq!(t.current_restriction(), OffsetRange::new(100, 155));
    assert!(t.try_claim(154));
    assert!(!t.try_claim(155));
    assert!(t.check_done().is_ok());
    // A checkpoint ends the primary right after the last attempt.
    let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
    assert!(t.try_claim(3));
    assert_eq!(t.try_split(0.0), Some(OffsetRange::new(4, 10)));
    assert!(t.check_done().is_ok());
    // Nothing to split off at the end; an unfinished range is reported.
    let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
    assert!(t.try_claim(9));
    assert_eq!(t.try_split(0.0), None);
    let t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
    assert!(t.check_done().unwrap_err().contains("no work was claimed"));
    let mut t = OffsetRangeTracker::new(OffsetRange::new(0, 10));
    t.try_claim(4);
    assert!(t.check_done().unwrap_err().contains("[5, 10) was not attempted"));
    // Huge ranges do not overflow.
    let mut t = OffsetRangeTracker::new(OffsetRange::new(i64::MIN, i64::MAX));
    let r = t.try_split(0.5).unwrap();
    assert!(r.from > i64::MIN && r.to == i64::MAX);
}

#[test]
fn a_growable_tracker_splits_by_its_estimate_and_ends_only_when_split() {
    let mut t = GrowableOffsetRangeTracker::new(0, || 100i64);
    assert!(!t.is_bounded());
    assert!(t.try_claim(9));
    assert_eq!(t.progress(), Progress { work_completed: 10.0, work_remaining: 90.0 });
    assert!(t.check_done().unwrap_err().contains("neither split nor claimed to its end"));
    // Half of the estimated rest: the residual grows on.
    assert_eq!(t.try_split(0.5), Some(OffsetRange::new(54, i64::MAX)));
    assert!(t.is_bounded());
    assert!(t.try_claim(53));
    assert!(t.check_done().is_ok());
    // Past the estimate, a checkpoint still splits right after the last claim.
    let mut t = GrowableOffsetRangeTracker::new(0, || 5i64);
    assert!(t.try_claim(7));
    assert_eq!(t.try_split(0.0), Some(OffsetRange::new(8, i64::MAX)));
    assert_eq!(t.current_restriction(), OffsetRange::new(0, 8));
}

#[test]
fn offset_ranges_split_into_parts_of_a_size() {
    assert_eq!(
        OffsetRange::new(0, 10).split(4),
        vec![OffsetRange::new(0, 4), OffsetRange::new(4, 8), OffsetRange::new(8, 10)]
    );
    assert!(OffsetRange::new(5, 5).split(4).is_empty());
    assert_eq!(OffsetRange::new(5, 3), OffsetRange::new(5, 5));
}
