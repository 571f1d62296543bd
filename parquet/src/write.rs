//! Parquet as a format of the exactly-once file sink.

use arrow_schema::FieldRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_arrow::schema::{SchemaLike, TracingOptions};
use std::marker::PhantomData;
use weir_sdk::io::file_sink::RowFormat;
use weir_sdk::{Element, UserError};

/// Renders elements of `T` as a Parquet file (Snappy-compressed), with the columns of `T`'s
/// fields: the schema is traced from the type, or, for types serde cannot trace without
/// values, from the rows of the file.
pub struct ParquetSinkFormat<T> {
    fields: Option<Vec<FieldRef>>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> Default for ParquetSinkFormat<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn tracing() -> TracingOptions {
    TracingOptions::default().allow_null_fields(true).enums_without_data_as_strings(true)
}

impl<T: Element> ParquetSinkFormat<T> {
    /// The format, with the schema traced from `T` when it can be.
    pub fn new() -> Self {
        ParquetSinkFormat { fields: Vec::<FieldRef>::from_type::<T>(tracing()).ok(), _t: PhantomData }
    }
}

impl<T: Element> RowFormat<T> for ParquetSinkFormat<T> {
    fn extension(&self) -> &str {
        "parquet"
    }
    fn render(&self, rows: &[&T]) -> Result<Vec<u8>, UserError> {
        let fields = match &self.fields {
            Some(f) => f.clone(),
            None => Vec::<FieldRef>::from_samples(rows, tracing())
                .map_err(|e| format!("cannot make a Parquet schema of {}: {e}", std::any::type_name::<T>()))?,
        };
        let batch = serde_arrow::to_record_batch(&fields, &rows)
            .map_err(|e| format!("cannot write {} as Parquet: {e}", std::any::type_name::<T>()))?;
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).map_err(|e| e.to_string())?;
        w.write(&batch).map_err(|e| e.to_string())?;
        w.close().map_err(|e| e.to_string())?;
        Ok(out)
    }
}
