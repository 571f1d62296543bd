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

/// A custom window: an interval plus a user tag and kind, for custom (merging) window
/// functions such as Nexmark's auction-or-bid windows. Two custom windows are the same window
/// when all four fields are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CustomWindow {
    /// Inclusive start.
    pub start: Timestamp,
    /// Exclusive end.
    pub end: Timestamp,
    /// A user tag, e.g. an auction id.
    pub tag: i64,
    /// A user kind, e.g. 1 for an auction window and 0 for a bid window.
    pub kind: u8,
}

impl CustomWindow {
    /// The interval the window covers.
    pub fn interval(&self) -> IntervalWindow {
        IntervalWindow::new(self.start, self.end)
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
    /// A custom window from a user [`crate::window_fn::WindowFn`].
    Custom(CustomWindow),
}

impl Window {
    /// The first instant inside the window (the earliest timestamp for the global window).
    pub fn min_timestamp(&self) -> Timestamp {
        match self {
            Window::Global => crate::time::MIN_TIMESTAMP,
            Window::Interval(w) => w.start,
            Window::Custom(w) => w.start,
        }
    }

    /// The last instant inside the window (`GlobalWindow.maxTimestamp()` for the global window).
    pub fn max_timestamp(&self) -> Timestamp {
        match self {
            Window::Global => GLOBAL_WINDOW_MAX_TIMESTAMP,
            Window::Interval(w) => w.max_timestamp(),
            Window::Custom(w) => w.end - 1,
        }
    }

    /// The interval of an interval or custom window.
    pub fn interval(&self) -> Option<IntervalWindow> {
        match self {
            Window::Global => None,
            Window::Interval(w) => Some(*w),
            Window::Custom(w) => Some(w.interval()),
        }
    }

    /// Appends the window's encoding (Beam's global-window / interval-window coders).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Window::Global => {}
            Window::Interval(w) => crate::coders::encode_interval_window(w, out),
            Window::Custom(w) => {
                crate::coders::encode_interval_window(&w.interval(), out);
                crate::coders::write_varint(w.tag as u64, out);
                out.push(w.kind);
            }
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Global => f.write_str("GlobalWindow"),
            Window::Interval(w) => w.fmt(f),
            Window::Custom(w) => write!(f, "[{}..{})#{}/{}", w.start, w.end, w.tag, w.kind),
        }
    }
}
