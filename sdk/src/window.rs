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

/// How many bytes of an [`SdkWindow`] are kept inline; a longer window is kept once per process
/// in a table and named by its index there.
const SDK_WINDOW_INLINE: usize = 23;

/// `SdkWindow::len` of a window kept in the table.
const SDK_WINDOW_INTERNED: u8 = u8::MAX;

/// A window that only the SDK that made it can read: a portable pipeline's window in a coder of
/// the SDK's own (a Beam Java `BoundedWindow` of the user's, with its coder). Weir carries the
/// window's bytes in that coder as they are, and knows of it only its last instant, which the
/// harness writes before the bytes (Beam's `beam:coder:custom_window:v1`). Two are the same
/// window when their bytes are equal (Beam requires window coders to be deterministic).
///
/// It is `Copy`, as every window is, and no larger than Weir's other windows: windows of up to
/// 23 bytes (an interval, an id and a flag take about 15) are kept inline; a longer window is
/// kept once per process in a table that lives as long as the process.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SdkWindow {
    max_timestamp: Timestamp,
    len: u8,
    bytes: [u8; SDK_WINDOW_INLINE],
}

/// The table of longer SDK windows: their bytes by index, and their indexes by bytes.
#[derive(Default)]
struct SdkWindowTable {
    bytes: Vec<std::sync::Arc<[u8]>>,
    index: std::collections::HashMap<std::sync::Arc<[u8]>, u64>,
}

fn sdk_window_table() -> &'static std::sync::RwLock<SdkWindowTable> {
    static TABLE: std::sync::OnceLock<std::sync::RwLock<SdkWindowTable>> = std::sync::OnceLock::new();
    TABLE.get_or_init(Default::default)
}

impl SdkWindow {
    /// The window whose last instant is `max_timestamp` and whose encoding in its SDK's coder is
    /// `bytes`.
    pub fn new(max_timestamp: Timestamp, bytes: &[u8]) -> SdkWindow {
        let mut inline = [0u8; SDK_WINDOW_INLINE];
        if bytes.len() <= SDK_WINDOW_INLINE {
            inline[..bytes.len()].copy_from_slice(bytes);
            return SdkWindow { max_timestamp, len: bytes.len() as u8, bytes: inline };
        }
        let known = sdk_window_table().read().unwrap_or_else(|e| e.into_inner()).index.get(bytes).copied();
        let id = known.unwrap_or_else(|| {
            let mut table = sdk_window_table().write().unwrap_or_else(|e| e.into_inner());
            if let Some(id) = table.index.get(bytes) {
                return *id;
            }
            let shared: std::sync::Arc<[u8]> = bytes.into();
            let id = table.bytes.len() as u64;
            table.bytes.push(shared.clone());
            table.index.insert(shared, id);
            id
        });
        inline[..8].copy_from_slice(&id.to_le_bytes());
        SdkWindow { max_timestamp, len: SDK_WINDOW_INTERNED, bytes: inline }
    }

    /// The last instant inside the window.
    pub fn max_timestamp(&self) -> Timestamp {
        self.max_timestamp
    }

    /// Calls `f` with the window's encoding in its SDK's coder.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.len != SDK_WINDOW_INTERNED {
            return f(&self.bytes[..self.len as usize]);
        }
        let id = u64::from_le_bytes(self.bytes[..8].try_into().expect("8 bytes"));
        let shared = sdk_window_table().read().unwrap_or_else(|e| e.into_inner()).bytes[id as usize].clone();
        f(&shared)
    }

    /// The window's encoding in its SDK's coder.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.with_bytes(<[u8]>::to_vec)
    }
}

impl fmt::Debug for SdkWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SdkWindow(..{}, ", self.max_timestamp)?;
        self.with_bytes(|b| b.iter().try_for_each(|x| write!(f, "{x:02x}")))?;
        f.write_str(")")
    }
}

/// The form an SDK window is written in checkpoints and between processes: its last instant and
/// its bytes (a window kept in the table has another index in another process).
#[derive(Serialize, Deserialize)]
#[serde(rename = "SdkWindow")]
struct SdkWindowForm {
    max_timestamp: Timestamp,
    #[serde(with = "serde_bytes")]
    bytes: Vec<u8>,
}

impl Serialize for SdkWindow {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SdkWindowForm { max_timestamp: self.max_timestamp, bytes: self.to_bytes() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SdkWindow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = SdkWindowForm::deserialize(deserializer)?;
        Ok(SdkWindow::new(form.max_timestamp, &form.bytes))
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
    /// A window only its SDK can read (a portable pipeline's window in a coder of its own).
    Sdk(SdkWindow),
}

impl Window {
    /// The first instant inside the window (the earliest timestamp for the global window, and
    /// for an SDK's window, whose start Weir does not know).
    pub fn min_timestamp(&self) -> Timestamp {
        match self {
            Window::Global | Window::Sdk(_) => crate::time::MIN_TIMESTAMP,
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
            Window::Sdk(w) => w.max_timestamp,
        }
    }

    /// The interval of an interval or custom window.
    pub fn interval(&self) -> Option<IntervalWindow> {
        match self {
            Window::Global | Window::Sdk(_) => None,
            Window::Interval(w) => Some(*w),
            Window::Custom(w) => Some(w.interval()),
        }
    }

    /// Appends the window's encoding (Beam's global-window / interval-window coders; an SDK's
    /// window as Beam's `beam:coder:custom_window:v1` of a length-prefixed window, the form Weir
    /// asks harnesses for).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Window::Global => {}
            Window::Interval(w) => crate::coders::encode_interval_window(w, out),
            Window::Custom(w) => {
                crate::coders::encode_interval_window(&w.interval(), out);
                crate::coders::write_varint(w.tag as u64, out);
                out.push(w.kind);
            }
            Window::Sdk(w) => {
                crate::coders::write_timestamp(w.max_timestamp, out);
                w.with_bytes(|b| {
                    crate::coders::write_varint(b.len() as u64, out);
                    out.extend_from_slice(b);
                });
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
            Window::Sdk(w) => fmt::Debug::fmt(w, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coders::WindowCoderKind;

    #[test]
    fn sdk_windows_keep_their_bytes_inline_or_in_the_table_and_travel_as_bytes() {
        let short = SdkWindow::new(41, b"0123456789");
        let long_bytes: Vec<u8> = (0..100u8).collect();
        let long = SdkWindow::new(99, &long_bytes);
        assert_eq!(std::mem::size_of::<Window>(), 40, "an SDK window makes no window larger");
        assert_eq!(short.to_bytes(), b"0123456789");
        assert_eq!(long.to_bytes(), long_bytes);
        // The same bytes are the same window, inline or in the table; others are not.
        assert_eq!(SdkWindow::new(99, &long_bytes), long);
        assert_ne!(SdkWindow::new(99, &long_bytes[1..]), long);
        assert_ne!(SdkWindow::new(41, b"012345678"), short);
        for w in [short, long] {
            let window = Window::Sdk(w);
            assert_eq!(window.max_timestamp(), w.max_timestamp());
            assert_eq!(window.interval(), None);
            // As the harness writes it (custom_window of a length-prefixed window) and back.
            let mut bytes = Vec::new();
            window.encode(&mut bytes);
            assert_eq!(&bytes[..8], &((w.max_timestamp() as u64) ^ (1 << 63)).to_be_bytes());
            assert_eq!(WindowCoderKind::Sdk.decode(&mut &bytes[..]).unwrap(), window);
            assert!(WindowCoderKind::Sdk.decode(&mut &bytes[..bytes.len() - 1]).is_err());
            // In checkpoints and between processes: its bytes, not its place in the table.
            let saved = postcard::to_allocvec(&window).unwrap();
            assert!(saved.len() > w.to_bytes().len());
            assert_eq!(postcard::from_bytes::<Window>(&saved).unwrap(), window);
        }
        assert!(WindowCoderKind::Sdk.fits(&Window::Sdk(short)) && !WindowCoderKind::Sdk.fits(&Window::Global));
    }
}
