//! Processing time as runners see it.

use std::time::{SystemTime, UNIX_EPOCH};
use weir_sdk::time::Timestamp;

/// Processing time: the wall clock, or a test clock moved only by TestStream events (so a
/// test of processing-time triggers does not depend on how fast the machine is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The wall clock.
    Wall,
    /// A test clock at this time, ms.
    Test(Timestamp),
}

impl Clock {
    /// The clock a plan runs with: the test clock when it plays a TestStream.
    pub fn for_plan(plan: &crate::plan::PhysicalPlan) -> Self {
        if plan.has_test_stream() {
            Clock::Test(0)
        } else {
            Clock::Wall
        }
    }

    /// The time now, ms since the epoch.
    pub fn now(&self) -> Timestamp {
        match self {
            Clock::Wall => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0),
            Clock::Test(t) => *t,
        }
    }

    /// The test clock's time, when this is one.
    pub fn test_time(&self) -> Option<Timestamp> {
        match self {
            Clock::Test(t) => Some(*t),
            Clock::Wall => None,
        }
    }

    /// Sets a test clock to `t` (a restart resuming a TestStream); the wall clock is left alone.
    pub fn set_test_time(&mut self, t: Timestamp) {
        if let Clock::Test(now) = self {
            *now = t;
        }
    }
}
