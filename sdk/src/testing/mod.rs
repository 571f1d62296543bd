//! Testing utilities: [`TestPipeline`], [`TestStream`] and [`assert_that`].

#[doc(hidden)]
pub mod fault;
mod passert;
mod range_source;
mod test_pipeline;
mod test_stream;

pub use passert::{assert_that, assert_that_singleton, IterableAssert, SingletonAssert};
pub use range_source::{RangeReader, RangeSource};
pub use test_pipeline::TestPipeline;
pub use test_stream::TestStream;
