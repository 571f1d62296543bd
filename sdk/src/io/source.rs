//! The source API and the Read primitive.

use crate::coders::Element;
use crate::error::{UserError, UserResult};
use crate::graph::{Boundedness, Payload, ReadPayload};
use crate::kernel::{Batch, ErasedBoundedReader, ErasedBoundedSource};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::Timestamp;
use crate::window_fn::WindowingStrategy;
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
}

/// Reads the elements of one bounded source in order.
pub trait BoundedReader: Send + 'static {
    /// Element type.
    type Output: Element;
    /// The next element and its timestamp, or `None` at the end.
    fn next(&mut self) -> UserResult<Option<(Self::Output, Timestamp)>>;
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
        Ok(Box::new(ReaderKernel(Some(self.0.create_reader()?))))
    }
}

struct ReaderKernel<R>(Option<R>);

impl<R: BoundedReader> ErasedBoundedReader for ReaderKernel<R> {
    fn read_batch(&mut self, max: usize) -> Result<Option<Batch>, UserError> {
        let Some(reader) = self.0.as_mut() else {
            return Ok(None);
        };
        let mut out: Vec<WindowedValue<R::Output>> = Vec::with_capacity(max.min(4096));
        while out.len() < max {
            match reader.next()? {
                Some((v, ts)) => out.push(WindowedValue::timestamped(v, ts)),
                None => {
                    self.0 = None;
                    break;
                }
            }
        }
        if out.is_empty() && self.0.is_none() {
            return Ok(None);
        }
        Ok(Some(Box::new(out)))
    }
}

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
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input_pipeline(&input);
        let node = p.make_primitive(
            crate::urns::READ,
            Payload::Read(ReadPayload::Bounded(Arc::new(SourceKernel(Arc::new(self.source))))),
        );
        p.new_output(node, "out", Boundedness::Bounded, WindowingStrategy::global())
    }
}

pub(crate) fn input_pipeline(b: &PBegin) -> crate::pipeline::Pipeline {
    b.pipeline_handle()
}
