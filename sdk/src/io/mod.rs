//! Sources and the built-in IOs.

pub mod json_lines;
pub mod source;
pub mod text;

pub use json_lines::WriteJsonLines;
pub use source::{BoundedReader, BoundedSource, Read, ReadUnbounded, UnboundedReader, UnboundedSource};
pub use text::TextIO;
