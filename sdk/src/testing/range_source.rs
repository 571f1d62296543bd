//! A bounded source for tests of sources and of `Read`.

use crate::error::UserResult;
use crate::io::source::{BoundedReader, BoundedSource};
use crate::time::Timestamp;

/// The numbers `from..to`, each at its own value as timestamp, split into pieces of the size
/// asked for. Its reader says how many it has left when `counted`, and nothing otherwise, as a
/// user's reader may: tests read it both ways.
#[derive(Clone, Debug)]
pub struct RangeSource {
    /// The first number.
    pub from: i64,
    /// One past the last.
    pub to: i64,
    /// Whether the reader knows how many numbers it has left.
    pub counted: bool,
}

/// The reader of a [`RangeSource`].
pub struct RangeReader {
    next: i64,
    to: i64,
    counted: bool,
}

impl BoundedSource for RangeSource {
    type Output = i64;
    type Reader = RangeReader;
    fn split(&self, size: u64) -> UserResult<Vec<Self>> {
        let size = (size as i64).max(1);
        Ok((self.from..self.to)
            .step_by(size as usize)
            .map(|f| RangeSource { from: f, to: (f + size).min(self.to), counted: self.counted })
            .collect())
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok((self.to - self.from) as u64)
    }
    fn create_reader(&self) -> UserResult<RangeReader> {
        Ok(RangeReader { next: self.from, to: self.to, counted: self.counted })
    }
}

impl BoundedReader for RangeReader {
    type Output = i64;
    fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        if self.next >= self.to {
            return Ok(None);
        }
        self.next += 1;
        Ok(Some((self.next - 1, self.next - 1)))
    }
    fn remaining(&self) -> Option<u64> {
        self.counted.then_some((self.to - self.next) as u64)
    }
}
