//! GenerateSequence: a bounded source of consecutive numbers (Beam's `GenerateSequence`).

use crate::error::UserResult;
use crate::io::source::{BoundedReader, BoundedSource, Read};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::{Timestamp, MIN_TIMESTAMP};

/// The numbers `[from, to)`, each at the minimum timestamp (or at `from + i * period` ms with
/// [`GenerateSequence::with_timestamps_every`]), split into ranges.
#[derive(Clone, Copy, Debug)]
pub struct GenerateSequence {
    from: i64,
    to: i64,
    period_ms: Option<i64>,
}

impl GenerateSequence {
    /// The numbers `[from, to)`.
    pub fn from_to(from: i64, to: i64) -> Self {
        GenerateSequence { from, to: to.max(from), period_ms: None }
    }
    /// Number `n` gets timestamp `n * period_ms`.
    pub fn with_timestamps_every(mut self, period_ms: i64) -> Self {
        self.period_ms = Some(period_ms);
        self
    }
}

impl BoundedSource for GenerateSequence {
    type Output = i64;
    type Reader = SequenceReader;
    fn describe(&self) -> String {
        format!("{self:?}")
    }
    fn split(&self, desired_bytes: u64) -> UserResult<Vec<Self>> {
        let per = (desired_bytes / 8).max(1) as i64;
        let mut out = Vec::new();
        let mut s = self.from;
        while s < self.to {
            let e = s.saturating_add(per).min(self.to);
            out.push(GenerateSequence { from: s, to: e, period_ms: self.period_ms });
            s = e;
        }
        if out.is_empty() {
            out.push(*self);
        }
        Ok(out)
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(((self.to - self.from) as u64).saturating_mul(8))
    }
    fn create_reader(&self) -> UserResult<SequenceReader> {
        Ok(SequenceReader { next: self.from, to: self.to, period_ms: self.period_ms })
    }
}

/// Reads a [`GenerateSequence`].
pub struct SequenceReader {
    next: i64,
    to: i64,
    period_ms: Option<i64>,
}

impl BoundedReader for SequenceReader {
    type Output = i64;
    fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        if self.next >= self.to {
            return Ok(None);
        }
        let n = self.next;
        self.next += 1;
        Ok(Some((n, self.period_ms.map_or(MIN_TIMESTAMP, |p| n.saturating_mul(p)))))
    }
    fn remaining(&self) -> Option<u64> {
        Some(self.to.saturating_sub(self.next).max(0) as u64)
    }
    fn skip(&mut self, n: u64) -> UserResult<u64> {
        let n = n.min(self.to.saturating_sub(self.next).max(0) as u64);
        self.next += n as i64;
        Ok(n)
    }
    fn next_values(&mut self, max: usize, out: &mut Vec<i64>) -> UserResult<Option<Timestamp>> {
        if self.period_ms.is_some() {
            return Ok(None);
        }
        let end = self.to.min(self.next.saturating_add(max as i64));
        out.extend(self.next..end);
        self.next = end.max(self.next);
        Ok(Some(MIN_TIMESTAMP))
    }
}

impl PTransform<PBegin> for GenerateSequence {
    type Output = PCollection<i64>;
    fn expand(self, input: PBegin) -> Self::Output {
        input.apply("Read", Read::from(self))
    }
}
