//! Sources as a runner reads them: bounded and unbounded, split and read without their types.

use crate::batch::Batch;
use crate::error::UserError;
use crate::time::Timestamp;
use std::sync::Arc;

/// Reads one bounded source split. Built for a typed [`crate::io::BoundedSource`].
pub trait ErasedBoundedSource: Send + Sync {
    /// Splits into sources of about `desired_bundle_size_bytes` each.
    fn split(&self, desired_bundle_size_bytes: u64) -> Result<Vec<Arc<dyn ErasedBoundedSource>>, UserError>;
    /// Estimated size in bytes.
    fn estimated_size_bytes(&self) -> Result<u64, UserError>;
    /// Opens a reader.
    fn reader(&self) -> Result<Box<dyn ErasedBoundedReader>, UserError>;
    /// What the source reads ([`crate::io::BoundedSource::describe`]).
    fn describe(&self) -> String;
}

/// Reads a bounded source batch by batch.
pub trait ErasedBoundedReader: Send {
    /// Reads up to `max` elements; `None` once exhausted.
    fn read_batch(&mut self, max: usize) -> Result<Option<Batch>, UserError>;
    /// The exact number of elements left to read, when the reader knows it without reading
    /// ([`crate::io::BoundedReader::remaining`]).
    fn remaining(&self) -> Option<u64> {
        None
    }
    /// Skips the next `n` elements ([`crate::io::BoundedReader::skip`]); how many there were.
    fn skip(&mut self, n: u64) -> Result<u64, UserError>;
}

/// Reads one split of an unbounded source. Built for a typed [`crate::io::UnboundedSource`].
pub trait ErasedUnboundedSource: Send + Sync {
    /// Splits into about `desired` sources.
    fn split(&self, desired: usize) -> Result<Vec<Arc<dyn ErasedUnboundedSource>>, UserError>;
    /// Opens a reader, resuming from an encoded checkpoint mark when given.
    fn reader(&self, checkpoint: Option<&[u8]>) -> Result<Box<dyn ErasedUnboundedReader>, UserError>;
    /// What the source reads ([`crate::io::UnboundedSource::describe`]).
    fn describe(&self) -> String;
}

/// Reads an unbounded source batch by batch.
pub trait ErasedUnboundedReader: Send {
    /// Reads up to `max` elements available now (possibly none).
    fn read_batch(&mut self, max: usize) -> Result<Batch, UserError>;
    /// The source's watermark: no element before it will be read any more. `MAX_TIMESTAMP`
    /// once the source is exhausted.
    fn watermark(&self) -> Timestamp;
    /// The encoded checkpoint mark: where a new reader resumes.
    fn checkpoint(&self) -> Result<Vec<u8>, UserError>;
}
