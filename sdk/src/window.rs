//! Windows: the global window and half-open interval windows.

use crate::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A half-open interval window `[start, end)` of event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IntervalWindow {
    /// Inclusive start, in milliseconds.
    pub start: Timestamp,
    /// Exclusive end, in milliseconds.
    pub end: Timestamp,
}

impl IntervalWindow {
    /// The window `[start, end)`.
    pub fn new(start: Timestamp, end: Timestamp) -> Self {
        IntervalWindow { start, end }
    }

    /// The last instant inside the window: `end - 1`.
    pub fn max_timestamp(&self) -> Timestamp {
        self.end - 1
    }

    /// Whether `ts` lies in `[start, end)`.
    pub fn contains(&self, ts: Timestamp) -> bool {
        self.start <= ts && ts < self.end
    }

    /// Whether the two windows share at least one instant. Touching windows (`[0,10)`, `[10,20)`)
    /// do not intersect.
    pub fn intersects(&self, other: &IntervalWindow) -> bool {
        self.end > other.start && other.end > self.start
    }

    /// The smallest window containing both.
    pub fn span(&self, other: &IntervalWindow) -> IntervalWindow {
        IntervalWindow::new(self.start.min(other.start), self.end.max(other.end))
    }
}

impl fmt::Display for IntervalWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}..{})", self.start, self.end)
    }
}

/// A window an element belongs to.
///
/// Every element carries exactly one window: an element that a `WindowFn` assigns to several
/// windows is stored as one element per window (the model treats the two forms as the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Window {
    /// The single window covering all of time.
    Global,
    /// A half-open interval of event time.
    Interval(IntervalWindow),
}

impl Window {
    /// The last instant inside the window (`GlobalWindow.maxTimestamp()` for the global window).
    pub fn max_timestamp(&self) -> Timestamp {
        match self {
            Window::Global => GLOBAL_WINDOW_MAX_TIMESTAMP,
            Window::Interval(w) => w.max_timestamp(),
        }
    }

    /// Appends the window's encoding (Beam's global-window / interval-window coders).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Window::Global => {}
            Window::Interval(w) => crate::coders::encode_interval_window(w, out),
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Global => f.write_str("GlobalWindow"),
            Window::Interval(w) => w.fmt(f),
        }
    }
}
