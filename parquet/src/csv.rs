//! CSV files as Arrow record batches of a schema the user gives ([`CsvBatches`]): the SDK's
//! splittable CSV reader (byte ranges, a header, quoting) hands over each record's fields, and
//! each column is cast from text to its type with `arrow-cast`, a batch at a time.

use crate::ArrowBatch;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use std::sync::Arc;
use weir_sdk::io::file_io::FileMetadata;
use weir_sdk::io::read_files::{CsvOptions, FileFormat, ReadPattern, Records};
use weir_sdk::splittable::{Claims, OffsetRangeTracker};
use weir_sdk::UserResult;

/// CSV files as Arrow record batches of `schema`: each field of the schema is the header's
/// column of the same name, cast from its text (`"42"` to `Int64`, `"2.5"` to `Float64`,
/// dates and timestamps as `arrow-cast` parses them); an empty field is null. A record whose
/// field does not parse as its column's type, or is empty in a non-nullable column, is a bad
/// record and follows the read's policy, as with typed rows. A header without one of the
/// schema's columns fails the read.
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow_schema::{DataType, Field, Schema};
/// use weir_sdk::prelude::*;
/// use weir_parquet::CsvBatches;
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("city", DataType::Utf8, false),
///     Field::new("fare", DataType::Float64, true),
/// ]));
/// let p = Pipeline::create();
/// let batches = p.apply("Read", CsvBatches::read("trips/*.csv", schema));
/// ```
#[derive(Clone)]
pub struct CsvBatches {
    schema: SchemaRef,
    options: CsvOptions,
    batch_size: usize,
}

impl CsvBatches {
    /// Comma-separated, `"`-quoted files as batches of up to 8192 rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        CsvBatches { schema, options: CsvOptions::default(), batch_size: 8192 }
    }
    /// Reads the CSV files matching `pattern` as batches of `schema`.
    pub fn read(pattern: impl Into<String>, schema: SchemaRef) -> ReadPattern<CsvBatches> {
        ReadPattern::new(pattern, Self::new(schema))
    }
    /// The delimiter, quote and line handling.
    pub fn options(mut self, options: CsvOptions) -> Self {
        self.options = options;
        self
    }
    /// Batches of at most `rows` rows.
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Where each of the schema's columns is in `header`.
    fn columns(&self, path: &str, header: &csv::ByteRecord) -> UserResult<Vec<usize>> {
        self.schema
            .fields()
            .iter()
            .map(|f| {
                header.iter().position(|h| h == f.name().as_bytes()).ok_or_else(|| {
                    format!("{path}: the header has no column '{}' (it has: {})", f.name(), header_text(header)).into()
                })
            })
            .collect()
    }
}

fn header_text(header: &csv::ByteRecord) -> String {
    header.iter().map(String::from_utf8_lossy).collect::<Vec<_>>().join(", ")
}

/// Records gathered for the next batch: per record, the schema's fields (`None` when empty),
/// where it starts, and its text (for the bad-record policy).
#[derive(Default)]
struct Pending {
    rows: Vec<Vec<Option<String>>>,
    at: Vec<u64>,
    raw: Vec<Vec<u8>>,
}

impl CsvBatches {
    /// Casts the pending records into a batch; records with a field that does not fit go to
    /// the bad-record policy, and the batch is made of the others.
    fn flush(&self, path: &str, pending: &mut Pending, out: &mut Records<'_, '_, ArrowBatch>) -> UserResult {
        if pending.rows.is_empty() {
            return Ok(());
        }
        let Pending { rows, at, raw } = std::mem::take(pending);
        let (columns, bad) = self.cast(&rows)?;
        if bad.iter().all(Option::is_none) {
            return self.emit(columns, out);
        }
        let mut kept = Vec::with_capacity(rows.len());
        for (((row, at), raw), why) in rows.into_iter().zip(at).zip(raw).zip(bad) {
            match why {
                None => kept.push(row),
                Some(why) => out.bad(&format!("{path}, byte {at}"), &raw, &why)?,
            }
        }
        if kept.is_empty() {
            return Ok(());
        }
        let (columns, _) = self.cast(&kept)?;
        self.emit(columns, out)
    }

    /// Each column cast from text, and per row why it does not fit (if it does not).
    fn cast(&self, rows: &[Vec<Option<String>>]) -> UserResult<(Vec<ArrayRef>, Vec<Option<String>>)> {
        let mut bad: Vec<Option<String>> = vec![None; rows.len()];
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for (c, field) in self.schema.fields().iter().enumerate() {
            let text = StringArray::from_iter(rows.iter().map(|r| r[c].as_deref()));
            let cast = arrow_cast::cast::cast(&text, field.data_type())
                .map_err(|e| format!("column '{}': cannot read text as {}: {e}", field.name(), field.data_type()))?;
            for (i, why) in bad.iter_mut().enumerate() {
                if why.is_some() {
                    continue;
                }
                if text.is_valid(i) && cast.is_null(i) {
                    *why =
                        Some(format!("column '{}': '{}' is not a {}", field.name(), text.value(i), field.data_type()));
                } else if text.is_null(i) && !field.is_nullable() {
                    *why = Some(format!("column '{}' is empty, and it is not nullable", field.name()));
                }
            }
            columns.push(cast);
        }
        Ok((columns, bad))
    }

    fn emit(&self, columns: Vec<ArrayRef>, out: &mut Records<'_, '_, ArrowBatch>) -> UserResult {
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| e.to_string())?;
        out.emit(ArrowBatch(Arc::new(batch)))
    }
}

impl FileFormat for CsvBatches {
    type Out = ArrowBatch;
    fn name(&self) -> &'static str {
        "CSV"
    }
    fn units(&self, file: &FileMetadata) -> UserResult<i64> {
        Ok(self.options.units(file))
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, ArrowBatch>,
    ) -> UserResult {
        let path = file.path.as_str();
        let mut index: Option<Vec<usize>> = None;
        let mut pending = Pending::default();
        let delimiter = self.options.delimiter_byte();
        self.options.read_records(path, tracker, |header, line, at| {
            let record = match line.record() {
                Ok(r) => r,
                Err((raw, why)) => return out.bad(&format!("{path}, byte {at}"), raw, &why),
            };
            if index.is_none() {
                index = Some(self.columns(path, header)?);
            }
            let index = index.as_deref().unwrap_or_default();
            let mut fields = Vec::with_capacity(index.len());
            for &i in index {
                match record.get(i).map(std::str::from_utf8) {
                    Some(Ok("")) | None => fields.push(None),
                    Some(Ok(f)) => fields.push(Some(f.to_string())),
                    Some(Err(e)) => {
                        let raw = weir_sdk::io::read_files::record_text(record, delimiter);
                        return out.bad(&format!("{path}, byte {at}"), &raw, &e);
                    }
                }
            }
            pending.rows.push(fields);
            pending.at.push(at);
            pending.raw.push(weir_sdk::io::read_files::record_text(record, delimiter));
            if pending.rows.len() >= self.batch_size {
                self.flush(path, &mut pending, out)?;
            }
            Ok(())
        })?;
        // What was claimed before the range ended (or was split off) is output.
        self.flush(path, &mut pending, out)
    }
}
