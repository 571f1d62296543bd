//! Elements as runners see them: a value with its timestamp, window and pane.

use crate::pane::PaneInfo;
use crate::time::{Timestamp, MIN_TIMESTAMP};
use crate::window::Window;

/// A value in one window, with its event timestamp and the pane that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowedValue<T> {
    /// The element.
    pub value: T,
    /// Event timestamp in milliseconds.
    pub timestamp: Timestamp,
    /// The window the element is in.
    pub window: Window,
    /// The firing that produced the element ([`PaneInfo::NO_FIRING`] outside a GroupByKey).
    pub pane: PaneInfo,
}

impl<T> WindowedValue<T> {
    /// `value` at `timestamp` in the global window, not from any firing.
    pub fn timestamped(value: T, timestamp: Timestamp) -> Self {
        WindowedValue { value, timestamp, window: Window::Global, pane: PaneInfo::NO_FIRING }
    }

    /// `value` in the global window at the minimum timestamp (what `Create` produces).
    pub fn in_global_window(value: T) -> Self {
        Self::timestamped(value, MIN_TIMESTAMP)
    }

    /// The same timestamp, window and pane with another value.
    pub fn with_value<U>(&self, value: U) -> WindowedValue<U> {
        WindowedValue { value, timestamp: self.timestamp, window: self.window, pane: self.pane }
    }
}

/// A value with an event timestamp (Beam's `TimestampedValue`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TimestampedValue<T> {
    /// The value.
    pub value: T,
    /// Its event timestamp.
    pub timestamp: Timestamp,
}

impl<T> TimestampedValue<T> {
    /// A value at `timestamp`.
    pub fn new(value: T, timestamp: Timestamp) -> Self {
        TimestampedValue { value, timestamp }
    }
}
