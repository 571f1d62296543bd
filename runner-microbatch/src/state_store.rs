//! Versioned state stores (DESIGN D8): each stateful operator partition's state is committed
//! per batch as an Arrow IPC file — a full snapshot every `--state-snapshot-interval` batches and
//! a delta (changed entries, and tombstones for removed ones) in between — so state can be read
//! with any Arrow tool, and a restart loads the latest snapshot and replays the deltas after it.
//!
//! Each file has two columns, `key` (binary) and `value` (binary, null for a removed entry). Its
//! CRC-32 is recorded in the batch's manifest, so a corrupt, truncated or missing file is an
//! error naming it.

use arrow_array::{Array, BinaryArray, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use weir_sdk::{Error, Result};

/// The layout of state files and of the entries in them, recorded in checkpoint fingerprints.
pub(crate) const FORMAT: &str = "arrow-ipc key/value v1, postcard entries";

/// Rows of a state file: entry key and value (`None` for a removed entry).
pub(crate) type Rows = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Whether a state file holds everything or the changes since the previous batch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) enum FileKind {
    Snapshot,
    Delta,
}

/// A state file as the batch manifest records it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct StateFile {
    pub node: String,
    pub partition: usize,
    pub kind: FileKind,
    pub file: String,
    pub crc32: u32,
    pub entries: usize,
    pub bytes: u64,
}

/// What one operator partition committed last: entry key to a hash of its value.
#[derive(Default)]
pub(crate) struct StoreVersion {
    last: HashMap<Vec<u8>, u64>,
}

fn hash(v: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("key", DataType::Binary, false), Field::new("value", DataType::Binary, true)]))
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.display().to_string(), message: e.to_string() }
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Io { path: path.display().to_string(), message: format!("corrupt checkpoint file: {why}") }
}

/// Encodes rows as an Arrow IPC file.
fn to_arrow(path: &Path, rows: &[(&[u8], Option<&[u8]>)]) -> Result<Vec<u8>> {
    let keys = BinaryArray::from_iter_values(rows.iter().map(|r| r.0));
    let values: BinaryArray = rows.iter().map(|r| r.1).collect();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(keys), Arc::new(values)]).map_err(|e| io(path, e))?;
    let mut buf = Vec::new();
    {
        let mut w = FileWriter::try_new(&mut buf, &schema()).map_err(|e| io(path, e))?;
        w.write(&batch).map_err(|e| io(path, e))?;
        w.finish().map_err(|e| io(path, e))?;
    }
    Ok(buf)
}

/// Reads the rows of a state file, checking it against its manifest entry.
pub(crate) fn read_file(dir: &Path, f: &StateFile) -> Result<Rows> {
    let path = dir.join(&f.file);
    if !path.exists() {
        return Err(corrupt(&path, "state file is missing"));
    }
    let data = std::fs::read(&path).map_err(|e| io(&path, e))?;
    if crc32fast::hash(&data) != f.crc32 {
        return Err(corrupt(&path, "checksum mismatch"));
    }
    // The manifest's count is a hint: never reserve more than the file could hold.
    let mut out = Vec::with_capacity(f.entries.min(data.len() / 16));
    let reader = FileReader::try_new(std::io::Cursor::new(data), None).map_err(|e| corrupt(&path, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&path, e))?;
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| corrupt(&path, "key column is not binary"))?;
        let values = batch
            .column(1)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| corrupt(&path, "value column is not binary"))?;
        for i in 0..batch.num_rows() {
            let v = (!values.is_null(i)).then(|| values.value(i).to_vec());
            out.push((keys.value(i).to_vec(), v));
        }
    }
    Ok(out)
}

impl StoreVersion {
    /// The committed version restored from `entries`.
    pub(crate) fn from_entries(entries: &[(Vec<u8>, Vec<u8>)]) -> Self {
        StoreVersion { last: entries.iter().map(|(k, v)| (k.clone(), hash(v))).collect() }
    }

    /// Writes this batch's version of the partition's state (`entries`) into `dir`: everything
    /// when `snapshot`, otherwise only what changed. Returns the manifest entry, or `None` when
    /// there was nothing to write.
    pub(crate) fn commit(
        &mut self,
        dir: &Path,
        node: &str,
        partition: usize,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        snapshot: bool,
    ) -> Result<Option<StateFile>> {
        if entries.is_empty() && self.last.is_empty() {
            return Ok(None);
        }
        let next: HashMap<Vec<u8>, u64> = entries.iter().map(|(k, v)| (k.clone(), hash(v))).collect();
        let mut rows: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        if snapshot {
            rows.extend(entries.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
        } else {
            for (k, v) in &entries {
                if self.last.get(k) != next.get(k) {
                    rows.push((k.as_slice(), Some(v.as_slice())));
                }
            }
            for k in self.last.keys() {
                if !next.contains_key(k) {
                    rows.push((k.as_slice(), None));
                }
            }
            if rows.is_empty() {
                return Ok(None);
            }
        }
        let kind = if snapshot { FileKind::Snapshot } else { FileKind::Delta };
        let safe: String = node.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let file = format!(
            "{safe}-{:08x}-{partition}.{}.arrow",
            crc32fast::hash(node.as_bytes()),
            if snapshot { "snapshot" } else { "delta" }
        );
        let path = dir.join(&file);
        let bytes = to_arrow(&path, &rows)?;
        crate::checkpoint::write_atomic(&path, &bytes)?;
        let entry = StateFile {
            node: node.to_string(),
            partition,
            kind,
            file,
            crc32: crc32fast::hash(&bytes),
            entries: rows.len(),
            bytes: bytes.len() as u64,
        };
        self.last = next;
        Ok(Some(entry))
    }
}

/// Applies a file's rows to an entry map (a snapshot replaces it, a delta updates it).
pub(crate) fn apply(map: &mut HashMap<Vec<u8>, Vec<u8>>, kind: FileKind, rows: Rows) {
    if kind == FileKind::Snapshot {
        map.clear();
    }
    for (k, v) in rows {
        match v {
            Some(v) => {
                map.insert(k, v);
            }
            None => {
                map.remove(&k);
            }
        }
    }
}
