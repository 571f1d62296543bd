//! Test and demo streams: a memory stream fed while the pipeline runs (Spark's `MemoryStream`)
//! and a rate source emitting rows per second (Spark's `rate` source). Both are unbounded sources,
//! replayable from their checkpoints, so they run on every runner and survive restarts.

use crate::coders::Element;
use crate::error::UserResult;
use crate::io::source::{UnboundedReader, UnboundedSource};
use crate::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use crate::windowed_value::TimestampedValue;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

struct MemoryState<T> {
    items: Vec<TimestampedValue<T>>,
    watermark: Timestamp,
    finished: bool,
}

/// A stream fed from the test while the pipeline runs: `stream.add(..)`,
/// `stream.advance_watermark_to(..)`, `stream.finish()`. Read it with
/// `ReadUnbounded::from(stream.clone())`.
pub struct MemoryStream<T> {
    state: Arc<Mutex<MemoryState<T>>>,
}

impl<T> Clone for MemoryStream<T> {
    fn clone(&self) -> Self {
        MemoryStream { state: self.state.clone() }
    }
}

impl<T: Element> MemoryStream<T> {
    /// An empty stream.
    pub fn new() -> Self {
        MemoryStream {
            state: Arc::new(Mutex::new(MemoryState { items: Vec::new(), watermark: MIN_TIMESTAMP, finished: false })),
        }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Appends elements; returns the offset after them.
    pub fn add(&self, items: Vec<TimestampedValue<T>>) -> usize {
        let mut s = self.lock();
        s.items.extend(items);
        s.items.len()
    }
    /// Advances the stream's watermark (it never goes back).
    pub fn advance_watermark_to(&self, ts: Timestamp) {
        let mut s = self.lock();
        s.watermark = s.watermark.max(ts);
    }
    /// No more data: the watermark goes to the end of time once everything is read.
    pub fn finish(&self) {
        self.lock().finished = true;
    }
}

impl<T: Element> Default for MemoryStream<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Element> UnboundedSource for MemoryStream<T> {
    type Output = T;
    type Checkpoint = u64;
    type Reader = MemoryReader<T>;
    fn split(&self, _: usize) -> UserResult<Vec<Self>> {
        Ok(vec![self.clone()])
    }
    fn create_reader(&self, checkpoint: Option<u64>) -> UserResult<MemoryReader<T>> {
        Ok(MemoryReader { stream: self.clone(), next: checkpoint.unwrap_or(0) as usize })
    }
}

/// Reads a [`MemoryStream`].
pub struct MemoryReader<T> {
    stream: MemoryStream<T>,
    next: usize,
}

impl<T: Element> UnboundedReader for MemoryReader<T> {
    type Output = T;
    type Checkpoint = u64;
    fn advance(&mut self) -> UserResult<Option<(T, Timestamp)>> {
        let s = self.stream.lock();
        match s.items.get(self.next) {
            Some(v) => {
                self.next += 1;
                Ok(Some((v.value.clone(), v.timestamp)))
            }
            None => Ok(None),
        }
    }
    fn watermark(&self) -> Timestamp {
        let s = self.stream.lock();
        if s.finished && self.next >= s.items.len() {
            MAX_TIMESTAMP
        } else {
            s.watermark
        }
    }
    fn checkpoint(&self) -> u64 {
        self.next as u64
    }
}

/// A row of the [`RateSource`]: a counter and the time it was generated for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateRow {
    /// When the row was due, ms since the epoch (also its event timestamp).
    pub timestamp: Timestamp,
    /// 0, 1, 2, ...
    pub value: i64,
}

/// Emits `rows_per_second` rows per second of wall-clock time, forever or up to a limit, each
/// stamped with the time it was due; the watermark is the time of the last row.
#[derive(Clone, Debug)]
pub struct RateSource {
    rows_per_second: i64,
    start: Timestamp,
    limit: Option<i64>,
}

impl RateSource {
    /// Rows at `rows_per_second`, starting now.
    pub fn new(rows_per_second: i64) -> Self {
        let start = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        RateSource { rows_per_second: rows_per_second.max(1), start, limit: None }
    }
    /// Stop after `n` rows.
    pub fn with_limit(mut self, n: i64) -> Self {
        self.limit = Some(n);
        self
    }
    fn due(&self, value: i64) -> Timestamp {
        self.start + value * 1000 / self.rows_per_second
    }
}

impl UnboundedSource for RateSource {
    type Output = RateRow;
    type Checkpoint = i64;
    type Reader = RateReader;
    fn split(&self, _: usize) -> UserResult<Vec<Self>> {
        Ok(vec![self.clone()])
    }
    fn create_reader(&self, checkpoint: Option<i64>) -> UserResult<RateReader> {
        Ok(RateReader { source: self.clone(), next: checkpoint.unwrap_or(0) })
    }
    fn describe(&self) -> String {
        // Not the start time: it is the wall clock when the source was built.
        format!("RateSource(rowsPerSecond={}, limit={:?})", self.rows_per_second, self.limit)
    }
}

/// Reads a [`RateSource`].
pub struct RateReader {
    source: RateSource,
    next: i64,
}

impl UnboundedReader for RateReader {
    type Output = RateRow;
    type Checkpoint = i64;
    fn advance(&mut self) -> UserResult<Option<(RateRow, Timestamp)>> {
        if self.source.limit.is_some_and(|l| self.next >= l) {
            return Ok(None);
        }
        let due = self.source.due(self.next);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        if due > now {
            return Ok(None);
        }
        let row = RateRow { timestamp: due, value: self.next };
        self.next += 1;
        Ok(Some((row, due)))
    }
    fn watermark(&self) -> Timestamp {
        if self.source.limit.is_some_and(|l| self.next >= l) {
            MAX_TIMESTAMP
        } else {
            self.source.due(self.next) - 1
        }
    }
    fn checkpoint(&self) -> i64 {
        self.next
    }
}
