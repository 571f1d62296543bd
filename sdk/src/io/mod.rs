//! Sources and the built-in IOs.

pub mod atomic;
pub mod bad_records;
pub mod commit_sink;
pub mod file_io;
pub mod file_sink;
pub mod for_each_batch;
pub mod generate_sequence;
pub mod json_lines;
pub mod periodic;
pub mod read_files;
pub mod source;
pub mod source_sdf;
pub mod streams;
pub mod text;

pub use bad_records::{BadRecordPolicy, BadRecords};
pub use commit_sink::{CommitSink, CommitSinkWriter, WriteCommitted};
pub use file_io::{EmptyMatchTreatment, FileIO, FileMetadata, Termination};
pub use file_sink::{JsonLinesRows, RowFormat, TextLines, WriteFiles};
pub use for_each_batch::{Collect, CollectHandle, Console, ForEachBatch};
pub use generate_sequence::GenerateSequence;
pub use json_lines::WriteJsonLines;
pub use periodic::{PeriodicImpulse, PeriodicSequence, SequenceDefinition};
pub use read_files::{CsvFormat, CsvOptions, FileFormat, JsonLinesFormat, ReadFiles, TextFormat};
pub use source::{BoundedReader, BoundedSource, Read, ReadUnbounded, UnboundedReader, UnboundedSource};
pub use streams::{MemoryStream, RateRow, RateSource};
pub use text::TextIO;
