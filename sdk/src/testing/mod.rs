//! Testing utilities: [`TestPipeline`] and [`assert_that`].

mod passert;
mod test_pipeline;

pub use passert::{assert_that, assert_that_singleton, IterableAssert, SingletonAssert};
pub use test_pipeline::TestPipeline;
