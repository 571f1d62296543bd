//! Arrow record batches as elements of a PCollection.

use arrow_array::RecordBatch;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// An Arrow record batch as a PCollection element (shared, so copies are cheap). Between
/// processes and in checkpoints it travels in Arrow's IPC stream format.
#[derive(Clone)]
pub struct ArrowBatch(pub Arc<RecordBatch>);

impl ArrowBatch {
    /// The batch.
    pub fn batch(&self) -> &RecordBatch {
        &self.0
    }
    /// Its number of rows.
    pub fn num_rows(&self) -> usize {
        self.0.num_rows()
    }
}

impl PartialEq for ArrowBatch {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl std::fmt::Debug for ArrowBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArrowBatch({} rows of {})", self.0.num_rows(), self.0.schema())
    }
}

impl Serialize for ArrowBatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut bytes = Vec::new();
        {
            let mut w =
                arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &self.0.schema()).map_err(S::Error::custom)?;
            w.write(&self.0).map_err(S::Error::custom)?;
            w.finish().map_err(S::Error::custom)?;
        }
        s.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for ArrowBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let bytes: Vec<u8> = serde_bytes_vec(d)?;
        let mut r =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(D::Error::custom)?;
        let batch = r.next().ok_or_else(|| D::Error::custom("an Arrow IPC stream without a batch"))?;
        Ok(ArrowBatch(Arc::new(batch.map_err(D::Error::custom)?)))
    }
}

/// Bytes as serialised by `serialize_bytes`, from any serde format.
fn serde_bytes_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut v = Vec::new();
            while let Some(b) = seq.next_element()? {
                v.push(b);
            }
            Ok(v)
        }
    }
    d.deserialize_byte_buf(Bytes)
}

/// The first row of `batch` as `name=value, ...`, for messages and dead-letter files.
pub(crate) fn row_text(batch: &RecordBatch) -> String {
    let options = arrow_cast::display::FormatOptions::default().with_null("null");
    let schema = batch.schema();
    let mut parts = Vec::new();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let value = match arrow_cast::display::ArrayFormatter::try_new(column.as_ref(), &options) {
            Ok(f) if batch.num_rows() > 0 => f.value(0).to_string(),
            _ => "?".to_string(),
        };
        parts.push(format!("{}={value}", field.name()));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    #[test]
    fn batches_travel_in_ipc_and_print_rows() {
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as _),
            ("name", Arc::new(StringArray::from(vec![Some("a"), None])) as _),
        ])
        .unwrap();
        let b = ArrowBatch(Arc::new(batch));
        let json = serde_json::to_vec(&b).unwrap();
        assert_eq!(serde_json::from_slice::<ArrowBatch>(&json).unwrap(), b);
        assert_eq!(row_text(&b.0.slice(1, 1)), "id=2, name=null");
    }
}
