//! Type-erased kernels: what a runner calls without knowing element types (ARCHITECTURE.md, "Typed at the surface, erased per batch").
//!
//! Every kernel is built by the SDK at `apply` time, while the element types are known, and works
//! on whole batches: a [`Batch`] is always a `Vec<WindowedValue<T>>` behind `Box<dyn Any>`, and a
//! kernel downcasts it once per call, never per element.
//!
//! One concern per file: [`collections`] (per-collection operations), [`do_fn`] (DoFn erasure),
//! [`side_inputs`], [`encoded`] (key-value rows as bytes), [`partitioning`] (key groups),
//! [`grouping`] (grouping and window assignment), [`combine`] (combine kernels and tables),
//! [`sources`] and [`test_stream`].

pub mod collections;
pub mod combine;
pub mod do_fn;
pub mod encoded;
pub mod grouping;
pub mod partitioning;
pub mod side_inputs;
pub mod sources;
pub mod test_stream;
#[cfg(test)]
mod tests;

pub use crate::batch::recycle;
pub use crate::batch::{downcast_batch, rows_mut, Batch, BatchData, BatchKind, Bundle, UniformBatch};
pub use collections::*;
pub use combine::*;
pub use do_fn::*;
pub use encoded::*;
pub use grouping::*;
pub use partitioning::*;
pub use side_inputs::*;
pub use sources::*;
pub use test_stream::*;
