//! Parquet and Arrow for Weir.
//!
//! **Reading.** [`ParquetFormat`] reads Parquet files as typed rows (through serde, with
//! `serde_arrow`), and [`ParquetBatches`] as Arrow record batches for columnar pipelines. Both
//! are [`FileFormat`]s of the SDK's splittable file reader: a file's units are its row groups,
//! each an initial split of its own, so the row groups of one file are read by every worker,
//! and a reader is checkpointed or split between row groups (as Spark splits Parquet). A row
//! group is read whole once claimed: resuming inside one would decompress its pages again. A projection
//! ([`ParquetFormat::columns`]) reads only the columns named, which Parquet's layout makes
//! cheap. Rows that do not fit the type follow the read's bad-record policy, as lines of a CSV
//! file do.
//!
//! ```no_run
//! use weir_sdk::prelude::*;
//! use weir_parquet::ParquetIO;
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! struct Trip { city: String, fare: f64 }
//! let p = Pipeline::create();
//! let trips: PCollection<Trip> = p.apply("Read", ParquetIO::read::<Trip>("trips/*.parquet"));
//! ```
//!
//! [`CsvBatches`] reads CSV files as record batches too, of a schema the user gives.
//!
//! **Writing.** [`ParquetSinkFormat`] renders a sink's batch of typed elements as one Parquet
//! file, with the schema traced from the type; [`ParquetIO::write`] is the SDK's exactly-once
//! file sink with it.

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::sync::Arc;
use weir_sdk::io::file_io::FileMetadata;
use weir_sdk::io::file_sink::WriteFiles;
use weir_sdk::io::read_files::{FileFormat, ReadPattern, Records};
use weir_sdk::splittable::{Claims, OffsetRange, OffsetRangeTracker};
use weir_sdk::{Element, UserResult};

mod batch;
mod csv;
mod write;

pub use batch::ArrowBatch;
pub use csv::CsvBatches;
pub use write::ParquetSinkFormat;

/// Entry points: `ParquetIO::read::<Row>("in/*.parquet")`, `ParquetIO::write::<Row>("out/")`.
pub struct ParquetIO;

impl ParquetIO {
    /// Reads the files matching `pattern` as rows of `T`, by column name.
    pub fn read<T: Element>(pattern: impl Into<String>) -> ReadPattern<ParquetFormat<T>> {
        ReadPattern::new(pattern, ParquetFormat::new())
    }
    /// Reads the files matching `pattern` as Arrow record batches.
    pub fn read_batches(pattern: impl Into<String>) -> ReadPattern<ParquetBatches> {
        ReadPattern::new(pattern, ParquetBatches::new())
    }
    /// Writes elements of `T` as Parquet files under `dir`, exactly once: the SDK's file sink
    /// with [`ParquetSinkFormat`] (`.windowed(true)` for a file per window, `.overwrite(true)`).
    pub fn write<T: Element>(dir: impl Into<String>) -> WriteFiles<T> {
        WriteFiles::to(dir, ParquetSinkFormat::<T>::new())
    }
}

/// The row groups of Parquet files, read with a projection: what both formats share.
#[derive(Clone, Default)]
pub struct RowGroups {
    columns: Option<Vec<String>>,
    batch_size: Option<usize>,
    /// The footer of the file read last, so a file's splits do not parse it again.
    footer: Option<(FileMetadata, ArrowReaderMetadata)>,
}

fn parquet_err(path: &str, e: impl std::fmt::Display) -> weir_sdk::UserError {
    format!("{path}: {e}").into()
}

impl RowGroups {
    fn footer(&mut self, file: &FileMetadata) -> UserResult<ArrowReaderMetadata> {
        if let Some((f, m)) = &self.footer {
            if f == file {
                return Ok(m.clone());
            }
        }
        let f = std::fs::File::open(&file.path).map_err(|e| parquet_err(&file.path, e))?;
        let m = ArrowReaderMetadata::load(&f, ArrowReaderOptions::new())
            .map_err(|e| parquet_err(&file.path, format!("not a readable Parquet file: {e}")))?;
        self.footer = Some((file.clone(), m.clone()));
        Ok(m)
    }

    /// The number of row groups of `file`: its units.
    pub fn count(&self, file: &FileMetadata) -> UserResult<i64> {
        Ok(self.clone().footer(file)?.metadata().num_row_groups() as i64)
    }

    fn mask(&self, file: &FileMetadata, meta: &ArrowReaderMetadata) -> UserResult<ProjectionMask> {
        let Some(columns) = &self.columns else { return Ok(ProjectionMask::all()) };
        let schema = meta.schema();
        let mut roots = Vec::new();
        for c in columns {
            let i = schema.index_of(c).map_err(|_| {
                let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                parquet_err(&file.path, format!("no column '{c}' to project (the file has {})", have.join(", ")))
            })?;
            roots.push(i);
        }
        Ok(ProjectionMask::roots(meta.parquet_schema(), roots))
    }

    /// Reads the row groups of `file` in the tracker's range (the file's units are its row
    /// groups), claiming each before reading it; `f` gets each record batch with its row group.
    pub fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        mut f: impl FnMut(RecordBatch, i64) -> UserResult,
    ) -> UserResult {
        let meta = self.footer(file)?;
        let mask = self.mask(file, &meta)?;
        let range = tracker.current_restriction();
        for rg in range.from..range.to {
            if !tracker.try_claim(rg) {
                return Ok(());
            }
            let input = std::fs::File::open(&file.path).map_err(|e| parquet_err(&file.path, e))?;
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(input, meta.clone())
                .with_row_groups(vec![rg as usize])
                .with_projection(mask.clone())
                .with_batch_size(self.batch_size.unwrap_or(8192))
                .build()
                .map_err(|e| parquet_err(&file.path, format!("row group {rg}: {e}")))?;
            for batch in reader {
                let batch = batch.map_err(|e| parquet_err(&file.path, format!("row group {rg}: {e}")))?;
                f(batch, rg)?;
            }
        }
        Ok(())
    }
}

/// What a Parquet reader makes of the record batches it decodes.
pub trait ParquetRows: Send + Sync + 'static {
    /// What comes out.
    type Out: Element;
    /// Hands on the records of `batch`, read from row group `rg` of `path`.
    fn emit(path: &str, rg: i64, batch: RecordBatch, out: &mut Records<'_, '_, Self::Out>) -> UserResult;
}

/// Rows of `T`, matched to columns by name through serde; rows that do not fit are bad records.
pub struct Rows<T>(PhantomData<fn() -> T>);

impl<T: Element + DeserializeOwned> ParquetRows for Rows<T> {
    type Out = T;
    fn emit(path: &str, rg: i64, batch: RecordBatch, out: &mut Records<'_, '_, T>) -> UserResult {
        match serde_arrow::from_record_batch::<Vec<T>>(&batch) {
            Ok(rows) => rows.into_iter().try_for_each(|r| out.emit(r)),
            // Row by row, to set the ones that do not fit aside and keep the others.
            Err(_) => (0..batch.num_rows()).try_for_each(|i| {
                let row = batch.slice(i, 1);
                match serde_arrow::from_record_batch::<Vec<T>>(&row) {
                    Ok(rows) => rows.into_iter().try_for_each(|r| out.emit(r)),
                    Err(e) => {
                        let raw = batch::row_text(&row);
                        out.bad(&format!("{path}, row group {rg}, row {i}"), raw.as_bytes(), &e)
                    }
                }
            }),
        }
    }
}

/// The record batches themselves, as [`ArrowBatch`] elements.
pub struct Batches;

impl ParquetRows for Batches {
    type Out = ArrowBatch;
    fn emit(_: &str, _: i64, batch: RecordBatch, out: &mut Records<'_, '_, ArrowBatch>) -> UserResult {
        out.emit(ArrowBatch(Arc::new(batch)))
    }
}

/// Parquet files read by row group, their records made by `R` (see the crate documentation).
pub struct Parquet<R> {
    groups: RowGroups,
    _r: PhantomData<fn() -> R>,
}

/// Parquet files as rows of `T`, matched to columns by name.
pub type ParquetFormat<T> = Parquet<Rows<T>>;

/// Parquet files as Arrow record batches of up to 8192 rows (see [`Parquet::batch_size`]).
pub type ParquetBatches = Parquet<Batches>;

impl<R> Clone for Parquet<R> {
    fn clone(&self) -> Self {
        Parquet { groups: self.groups.clone(), _r: PhantomData }
    }
}

impl<R: ParquetRows> Default for Parquet<R> {
    fn default() -> Self {
        Parquet { groups: RowGroups::default(), _r: PhantomData }
    }
}

impl<R: ParquetRows> Parquet<R> {
    /// Every column, batches of 8192 rows.
    pub fn new() -> Self {
        Self::default()
    }
    /// Reads only these columns; a column the file lacks is an error.
    pub fn columns<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.groups.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }
    /// Decodes batches of at most `rows` rows.
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.groups.batch_size = Some(rows.max(1));
        self
    }
}

impl<R: ParquetRows> FileFormat for Parquet<R> {
    type Out = R::Out;
    fn name(&self) -> &'static str {
        "Parquet"
    }
    fn units(&self, file: &FileMetadata) -> UserResult<i64> {
        self.groups.count(file)
    }
    fn initial_splits(&self, _: &FileMetadata, whole: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        Ok(whole.split(1))
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, R::Out>,
    ) -> UserResult {
        let path = file.path.clone();
        self.groups.read(file, tracker, |batch, rg| R::emit(&path, rg, batch, out))
    }
}
