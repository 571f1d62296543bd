//! The source API and the Read primitive.

use crate::coders::Element;
use crate::error::{UserError, UserResult};
use crate::graph::{Payload, ReadPayload};
use crate::io::source_sdf::{BoundedSourceFn, UnboundedSourceFn};
use crate::kernel::{Batch, ErasedBoundedReader, ErasedBoundedSource, UniformBatch};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::splittable::SplittableParDo;
use crate::time::Timestamp;
use crate::transforms::impulse::Impulse;
use crate::windowed_value::WindowedValue;
use std::sync::Arc;

/// A finite source that runners can split into bundles (Beam's `BoundedSource`).
pub trait BoundedSource: Send + Sync + Sized + 'static {
    /// Element type.
    type Output: Element;
    /// Reader type.
    type Reader: BoundedReader<Output = Self::Output>;
    /// Splits into sources of about `desired_bundle_size_bytes` each, together reading exactly
    /// what `self` reads.
    fn split(&self, desired_bundle_size_bytes: u64) -> UserResult<Vec<Self>>;
    /// Estimated size in bytes.
    fn estimated_size_bytes(&self) -> UserResult<u64>;
    /// Opens a reader.
    fn create_reader(&self) -> UserResult<Self::Reader>;
    /// What this source reads, for checkpoint fingerprints and plans (Beam's display data):
    /// two sources that read different data must describe themselves differently. The default
    /// is the type's name; sources with configuration (a file pattern, a range, a generator's
    /// settings) include it.
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }
}

/// Reads the elements of one bounded source in order.
pub trait BoundedReader: Send + 'static {
    /// Element type.
    type Output: Element;
    /// The next element and its timestamp, or `None` at the end.
    fn next(&mut self) -> UserResult<Option<(Self::Output, Timestamp)>>;
    /// Optional bulk read: appends up to `max` next values that share one timestamp to `out`
    /// and returns that timestamp (with nothing appended at the end of input). `None` (the
    /// default) means the reader does not read in bulk here, and [`BoundedReader::next`] is
    /// called instead; a reader may decline at any point.
    fn next_values(&mut self, _max: usize, _out: &mut Vec<Self::Output>) -> UserResult<Option<Timestamp>> {
        Ok(None)
    }
    /// The exact number of elements left, when known without reading them (an offset-based
    /// source: a range of numbers, a slice of a list). A runner may then plan how much a batch
    /// reads before reading it, and read it later in small pieces. `None` (the default): not
    /// known. A reader that reports a count must deliver exactly that many elements.
    fn remaining(&self) -> Option<u64> {
        None
    }
    /// Skips the next `n` elements, returning how many there were (fewer at the end). Runners
    /// skip what was read before when they resume a reader after a restart or a split. The
    /// default reads them; a reader that can seek (a generator, an indexed file) does better.
    fn skip(&mut self, n: u64) -> UserResult<u64> {
        let mut skipped = 0;
        while skipped < n && self.next()?.is_some() {
            skipped += 1;
        }
        Ok(skipped)
    }
}

struct SourceKernel<S>(Arc<S>);

impl<S: BoundedSource> ErasedBoundedSource for SourceKernel<S> {
    fn split(&self, size: u64) -> Result<Vec<Arc<dyn ErasedBoundedSource>>, UserError> {
        Ok(self
            .0
            .split(size)?
            .into_iter()
            .map(|s| Arc::new(SourceKernel(Arc::new(s))) as Arc<dyn ErasedBoundedSource>)
            .collect())
    }
    fn estimated_size_bytes(&self) -> Result<u64, UserError> {
        self.0.estimated_size_bytes()
    }
    fn reader(&self) -> Result<Box<dyn ErasedBoundedReader>, UserError> {
        Ok(Box::new(ReaderKernel::new(self.0.create_reader()?)))
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

struct ReaderKernel<R> {
    reader: Option<R>,
    /// Whether the reader has given elements with different timestamps: its bundles are rows
    /// from then on.
    varied: bool,
}

impl<R> ReaderKernel<R> {
    fn new(reader: R) -> Self {
        ReaderKernel { reader: Some(reader), varied: false }
    }
}

impl<R: BoundedReader> ErasedBoundedReader for ReaderKernel<R> {
    fn remaining(&self) -> Option<u64> {
        match &self.reader {
            Some(r) => r.remaining(),
            None => Some(0),
        }
    }
    fn skip(&mut self, n: u64) -> Result<u64, UserError> {
        match self.reader.as_mut() {
            Some(r) => r.skip(n),
            None => Ok(0),
        }
    }
    fn read_batch(&mut self, max: usize) -> Result<Option<Batch>, UserError> {
        use crate::kernel::recycle;
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        let reserve = max.min(MAX_BUNDLE_RESERVE);
        let mut done = false;
        let mut rows: Vec<WindowedValue<R::Output>>;
        if self.varied {
            rows = recycle::take_or_start(reserve, max.min(FIRST_CHUNK));
        } else {
            // Elements with the first one's timestamp are kept as bare values (a uniform
            // batch) until one comes with another timestamp.
            let mut values: Vec<R::Output> = recycle::take_or_start(reserve, max.min(FIRST_CHUNK));
            if let Some(timestamp) = if max > 0 { reader.next_values(max, &mut values)? } else { None } {
                if values.is_empty() {
                    recycle::give(values);
                    self.reader = None;
                    return Ok(None);
                }
                return Ok(Some(Batch::new(UniformBatch::global(fitted(values), timestamp))));
            }
            let (mut first_ts, mut odd) = (None, None);
            while values.len() < max {
                if values.len() == FIRST_CHUNK {
                    // A reader with more than a chunk to give: room for the rest of the bundle
                    // at once instead of doubling (and copying) the buffer several times.
                    values.reserve(reserve.saturating_sub(FIRST_CHUNK));
                }
                match reader.next()? {
                    Some((v, ts)) if *first_ts.get_or_insert(ts) == ts => values.push(v),
                    Some(other) => {
                        odd = Some(other);
                        break;
                    }
                    None => {
                        done = true;
                        break;
                    }
                }
            }
            let Some((v, ts)) = odd else {
                if done {
                    self.reader = None;
                    if values.is_empty() {
                        recycle::give(values);
                        return Ok(None);
                    }
                }
                let timestamp = first_ts.unwrap_or(crate::time::MIN_TIMESTAMP);
                return Ok(Some(Batch::new(UniformBatch::global(fitted(values), timestamp))));
            };
            // Timestamps vary: this bundle and the reader's next ones are rows.
            self.varied = true;
            rows = recycle::take_or_start(reserve, max.min(FIRST_CHUNK).max(values.len() + 1));
            let first = first_ts.unwrap_or(ts);
            rows.extend(values.drain(..).map(|v| WindowedValue::timestamped(v, first)));
            recycle::give(values);
            rows.push(WindowedValue::timestamped(v, ts));
        }
        while rows.len() < max {
            if rows.len() == FIRST_CHUNK {
                rows.reserve(reserve.saturating_sub(FIRST_CHUNK));
            }
            match reader.next()? {
                Some((v, ts)) => rows.push(WindowedValue::timestamped(v, ts)),
                None => {
                    done = true;
                    break;
                }
            }
        }
        if done {
            self.reader = None;
            if rows.is_empty() {
                recycle::give(rows);
                return Ok(None);
            }
        }
        Ok(Some(Batch::new(fitted(rows))))
    }
}

/// A short read into a large recycled buffer: the buffer goes back for reuse and the bundle
/// gets one its size (what consumes it may keep it).
fn fitted<E: Send + 'static>(mut out: Vec<E>) -> Vec<E> {
    if out.capacity() > 4 * out.len().max(FIRST_CHUNK) {
        let mut fitted = Vec::with_capacity(out.len());
        fitted.append(&mut out);
        crate::kernel::recycle::give(std::mem::replace(&mut out, fitted));
    }
    out
}

/// Elements a reader's bundle buffer starts with: small sources allocate little.
const FIRST_CHUNK: usize = 4096;
/// Most elements a bundle buffer reserves at once once a reader proves larger.
const MAX_BUNDLE_RESERVE: usize = 1 << 16;

/// The Read primitive: `p.apply("Read", Read::from(source))`.
pub struct Read<S> {
    source: S,
}

impl<S: BoundedSource> Read<S> {
    /// Reads a bounded source.
    pub fn from(source: S) -> Self {
        Read { source }
    }
}

impl<S: BoundedSource> PTransform<PBegin> for Read<S> {
    type Output = PCollection<S::Output>;
    /// An impulse and the source as a splittable DoFn; runners with a native read of sources
    /// translate the composite whole, from its payload.
    fn expand(self, input: PBegin) -> Self::Output {
        let source = Arc::new(self.source);
        input_pipeline(&input)
            .set_scope_payload(Payload::Read(ReadPayload::Bounded(Arc::new(SourceKernel(source.clone())))));
        input.apply("Impulse", Impulse).apply("ReadSplits", SplittableParDo::of(BoundedSourceFn::new(source)))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::READ)
    }
}

pub(crate) fn input_pipeline(b: &PBegin) -> crate::pipeline::Pipeline {
    b.pipeline_handle()
}

/// An infinite (or not yet finished) source with a watermark and resumable checkpoint marks
/// (Beam's `UnboundedSource`).
pub trait UnboundedSource: Send + Sync + Sized + 'static {
    /// Element type.
    type Output: Element;
    /// Where a reader resumes (offsets), persisted by runners in their checkpoints.
    type Checkpoint: Element;
    /// Reader type.
    type Reader: UnboundedReader<Output = Self::Output, Checkpoint = Self::Checkpoint>;
    /// Splits into about `desired` sources that together read what `self` reads.
    fn split(&self, desired: usize) -> UserResult<Vec<Self>>;
    /// Opens a reader, resuming after `checkpoint` when given.
    fn create_reader(&self, checkpoint: Option<Self::Checkpoint>) -> UserResult<Self::Reader>;
    /// What this source reads, for checkpoint fingerprints and plans; see
    /// [`BoundedSource::describe`].
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }
}

/// Reads an unbounded source.
pub trait UnboundedReader: Send + 'static {
    /// Element type.
    type Output: Element;
    /// Checkpoint mark type.
    type Checkpoint: Element;
    /// The next element available now, or `None` if there is none at the moment.
    fn advance(&mut self) -> UserResult<Option<(Self::Output, Timestamp)>>;
    /// No element earlier than this will be read any more; `MAX_TIMESTAMP` once exhausted.
    fn watermark(&self) -> Timestamp;
    /// The position to resume from.
    fn checkpoint(&self) -> Self::Checkpoint;
}

struct UnboundedKernel<S>(Arc<S>);

impl<S: UnboundedSource> crate::kernel::ErasedUnboundedSource for UnboundedKernel<S> {
    fn split(&self, desired: usize) -> Result<Vec<Arc<dyn crate::kernel::ErasedUnboundedSource>>, UserError> {
        Ok(self
            .0
            .split(desired)?
            .into_iter()
            .map(|s| Arc::new(UnboundedKernel(Arc::new(s))) as Arc<dyn crate::kernel::ErasedUnboundedSource>)
            .collect())
    }
    fn reader(&self, checkpoint: Option<&[u8]>) -> Result<Box<dyn crate::kernel::ErasedUnboundedReader>, UserError> {
        use crate::coders::Coder;
        let mark = match checkpoint {
            Some(b) => Some(crate::coders::ElementCoder::<S::Checkpoint>::new().decode_outer(b)?),
            None => None,
        };
        Ok(Box::new(UnboundedReaderKernel(self.0.create_reader(mark)?)))
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

struct UnboundedReaderKernel<R>(R);

impl<R: UnboundedReader> crate::kernel::ErasedUnboundedReader for UnboundedReaderKernel<R> {
    fn read_batch(&mut self, max: usize) -> Result<Batch, UserError> {
        let mut out: Vec<WindowedValue<R::Output>> = Vec::new();
        while out.len() < max {
            if out.len() == FIRST_CHUNK {
                out.reserve(max.min(MAX_BUNDLE_RESERVE).saturating_sub(FIRST_CHUNK));
            }
            match self.0.advance()? {
                Some((v, ts)) => out.push(WindowedValue::timestamped(v, ts)),
                None => break,
            }
        }
        Ok(Batch::new(out))
    }
    fn watermark(&self) -> Timestamp {
        self.0.watermark()
    }
    fn checkpoint(&self) -> Result<Vec<u8>, UserError> {
        use crate::coders::Coder;
        let mut out = Vec::new();
        crate::coders::ElementCoder::<R::Checkpoint>::new().encode(&self.0.checkpoint(), &mut out)?;
        Ok(out)
    }
}

/// Reads an unbounded source: `p.apply("Read", ReadUnbounded::from(source))`. Its output is
/// unbounded, so the pipeline runs in streaming mode.
pub struct ReadUnbounded<S> {
    source: S,
}

impl<S: UnboundedSource> ReadUnbounded<S> {
    /// Reads `source`.
    pub fn from(source: S) -> Self {
        ReadUnbounded { source }
    }
}

impl<S: UnboundedSource> PTransform<PBegin> for ReadUnbounded<S> {
    type Output = PCollection<S::Output>;
    /// An impulse and the source as a splittable DoFn, as for [`Read`].
    fn expand(self, input: PBegin) -> Self::Output {
        let source = Arc::new(self.source);
        input_pipeline(&input)
            .set_scope_payload(Payload::Read(ReadPayload::Unbounded(Arc::new(UnboundedKernel(source.clone())))));
        input.apply("Impulse", Impulse).apply("ReadSplits", SplittableParDo::of(UnboundedSourceFn::new(source)))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::READ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::downcast_batch;

    struct Listed(std::vec::IntoIter<(i64, Timestamp)>);

    impl BoundedReader for Listed {
        type Output = i64;
        fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
            Ok(self.0.next())
        }
    }

    fn read_all(items: Vec<(i64, Timestamp)>, max: usize) -> Vec<Batch> {
        let mut r = ReaderKernel::new(Listed(items.into_iter()));
        let mut out = Vec::new();
        while let Some(b) = r.read_batch(max).unwrap() {
            out.push(b);
        }
        out
    }

    #[test]
    fn reads_with_one_timestamp_are_uniform_and_others_rows() {
        // One timestamp: uniform bundles of at most `max`.
        let b = read_all((0..5).map(|i| (i, 3)).collect(), 2);
        assert_eq!(b.len(), 3);
        assert!(b.iter().all(|b| b.is::<UniformBatch<i64>>()));
        let got: Vec<(i64, Timestamp)> =
            b.into_iter().flat_map(|b| downcast_batch::<i64>(b).unwrap()).map(|wv| (wv.value, wv.timestamp)).collect();
        assert_eq!(got, (0..5).map(|i| (i, 3)).collect::<Vec<_>>());
        // A second timestamp mid-bundle: that bundle and the reader's later ones are rows, in
        // order, nothing lost.
        let items = vec![(0, 1), (1, 1), (2, 2), (3, 1), (4, 1), (5, 1)];
        let b = read_all(items.clone(), 4);
        assert!(b[0].is::<Vec<WindowedValue<i64>>>());
        assert!(b[1].is::<Vec<WindowedValue<i64>>>());
        let got: Vec<(i64, Timestamp)> =
            b.into_iter().flat_map(|b| downcast_batch::<i64>(b).unwrap()).map(|wv| (wv.value, wv.timestamp)).collect();
        assert_eq!(got, items);
        assert!(read_all(Vec::new(), 4).is_empty());
    }
}
