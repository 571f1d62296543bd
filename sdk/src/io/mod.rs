//! Sources and the built-in IOs.

pub mod source;
pub mod text;

pub use source::{BoundedReader, BoundedSource, Read, ReadUnbounded, UnboundedReader, UnboundedSource};
pub use text::TextIO;
