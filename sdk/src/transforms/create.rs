//! Create: a PCollection from in-memory values.

use crate::coders::{Coder, Element, ElementCoder};
use crate::error::UserResult;
use crate::io::source::{BoundedReader, BoundedSource, Read};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::{Timestamp, MIN_TIMESTAMP};
use crate::windowed_value::TimestampedValue;
use std::sync::Arc;

/// Creates a bounded PCollection from values: `p.apply("Create", Create::of(vec![1, 2, 3]))`.
/// Elements are in the global window at the minimum timestamp unless given timestamps with
/// [`Create::timestamped`]. It is a composite over `Read` of a splittable in-memory source.
pub struct Create<T> {
    values: Vec<TimestampedValue<T>>,
}

impl<T: Element> Create<T> {
    /// Values at the minimum timestamp.
    pub fn of(values: impl IntoIterator<Item = T>) -> Self {
        Create { values: values.into_iter().map(|v| TimestampedValue::new(v, MIN_TIMESTAMP)).collect() }
    }
    /// Values with explicit timestamps.
    pub fn timestamped(values: impl IntoIterator<Item = TimestampedValue<T>>) -> Self {
        Create { values: values.into_iter().collect() }
    }
}

/// The in-memory source behind [`Create`], split by element ranges.
pub struct CreateSource<T> {
    values: Arc<Vec<TimestampedValue<T>>>,
    start: usize,
    end: usize,
}

impl<T: Element> CreateSource<T> {
    /// A source over all of `values`.
    pub fn new(values: Vec<TimestampedValue<T>>) -> Self {
        let end = values.len();
        CreateSource { values: Arc::new(values), start: 0, end }
    }
    fn average_size(&self) -> u64 {
        let coder = ElementCoder::<T>::new();
        let sample = &self.values[self.start..self.end.min(self.start + 16)];
        if sample.is_empty() {
            return 1;
        }
        let mut buf = Vec::new();
        for v in sample {
            // Unencodable values are reported by the runner's encodability check; here they
            // only make the estimate rougher.
            let _ = coder.encode(&v.value, &mut buf);
        }
        (buf.len() as u64 / sample.len() as u64).max(1)
    }
}

impl<T: Element> BoundedSource for CreateSource<T> {
    type Output = T;
    type Reader = CreateReader<T>;
    fn describe(&self) -> String {
        // The values themselves, hashed: a Create of other values reads other data.
        let coder = ElementCoder::<T>::new();
        let mut buf = Vec::new();
        let mut hash = crate::kernel::FNV1A_BASIS;
        for v in &self.values[self.start..self.end] {
            buf.clear();
            buf.extend_from_slice(&v.timestamp.to_le_bytes());
            let _ = coder.encode(&v.value, &mut buf);
            hash = crate::kernel::fnv1a(hash, &buf);
        }
        format!("Create<{}>({} values, fnv1a {hash:016x})", std::any::type_name::<T>(), self.end - self.start)
    }
    fn split(&self, desired: u64) -> UserResult<Vec<Self>> {
        let per = (desired / self.average_size()).max(1) as usize;
        let mut out = Vec::new();
        let mut s = self.start;
        while s < self.end {
            let e = (s + per).min(self.end);
            out.push(CreateSource { values: self.values.clone(), start: s, end: e });
            s = e;
        }
        if out.is_empty() {
            out.push(CreateSource { values: self.values.clone(), start: self.start, end: self.end });
        }
        Ok(out)
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(self.average_size() * (self.end - self.start) as u64)
    }
    fn create_reader(&self) -> UserResult<CreateReader<T>> {
        Ok(CreateReader { values: self.values.clone(), pos: self.start, end: self.end })
    }
}

/// Reads a [`CreateSource`].
pub struct CreateReader<T> {
    values: Arc<Vec<TimestampedValue<T>>>,
    pos: usize,
    end: usize,
}

impl<T: Element> BoundedReader for CreateReader<T> {
    type Output = T;
    fn next(&mut self) -> UserResult<Option<(T, Timestamp)>> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let v = &self.values[self.pos];
        self.pos += 1;
        Ok(Some((v.value.clone(), v.timestamp)))
    }
    fn remaining(&self) -> Option<u64> {
        Some(self.end.saturating_sub(self.pos) as u64)
    }
    fn skip(&mut self, n: u64) -> UserResult<u64> {
        let n = n.min(self.end.saturating_sub(self.pos) as u64);
        self.pos += n as usize;
        Ok(n)
    }
    fn next_values(&mut self, max: usize, out: &mut Vec<T>) -> UserResult<Option<Timestamp>> {
        if self.pos >= self.end {
            return Ok(Some(MIN_TIMESTAMP));
        }
        let ts = self.values[self.pos].timestamp;
        let run =
            self.values[self.pos..self.end.min(self.pos.saturating_add(max))].iter().take_while(|v| v.timestamp == ts);
        let before = out.len();
        out.extend(run.map(|v| v.value.clone()));
        self.pos += out.len() - before;
        Ok(Some(ts))
    }
}

impl<T: Element> PTransform<PBegin> for Create<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PBegin) -> Self::Output {
        input.apply("Read", Read::from(CreateSource::new(self.values)))
    }
}
