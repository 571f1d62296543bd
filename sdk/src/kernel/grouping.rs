//! The grouping and window-assignment kernels.

use super::*;
use crate::batch::Batch;
use crate::coders::CoderError;
use crate::error::UserError;

/// The typed edges of a GroupByKey: encode `KV<K, V>` batches into key and value bytes, and build
/// `KV<K, Vec<V>>` batches from finished groups. Grouping itself is runner-core's.
pub trait GroupKernel: Send + Sync {
    /// Encodes a batch of `KV<K, V>` and appends it to `out`.
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError>;
    /// Decodes finished groups into a batch of `KV<K, Vec<V>>`.
    fn decode_groups(&self, groups: Vec<EncodedGroup>) -> Result<Batch, CoderError>;
}

/// Assigns windows to a batch (the typed side of WindowInto).
pub trait AssignKernel: Send + Sync {
    /// Re-windows every element of `input`.
    fn assign(&self, input: Batch) -> Result<Batch, UserError>;
}
