//! Versioned state files (ARCHITECTURE.md, "Exactly once"), shared by the runners that
//! checkpoint: each stateful operator partition's state is committed per batch (or epoch) as an
//! Arrow IPC file — a full snapshot at a run's first commit, then deltas (changed entries, and
//! tombstones for removed ones), folded into snapshots in the background
//! ([`super::compaction`]) — so state can be read with any Arrow tool, and a restart loads the
//! latest snapshot and replays the deltas after it.
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
use std::sync::Arc;
use weir_sdk::Result;

/// The layout of state files and of the entries in them, recorded in checkpoint fingerprints.
pub const FORMAT: &str = "arrow-ipc key/value v1, postcard entries";

/// Rows of a state file: entry key and value (`None` for a removed entry).
pub type Rows = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Whether a state file holds everything or the changes since the previous batch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum FileKind {
    /// Every entry of the partition.
    Snapshot,
    /// The entries changed since the previous file, with tombstones for removed ones.
    Delta,
}

/// A state file as the batch manifest records it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StateFile {
    /// The plan node whose state it is.
    pub node: String,
    /// The node's partition (worker).
    pub partition: usize,
    /// Snapshot or delta.
    pub kind: FileKind,
    /// The file's name in its folder.
    pub file: String,
    /// CRC-32 of the file's bytes.
    pub crc32: u32,
    /// Rows in the file.
    pub entries: usize,
    /// The file's size.
    pub bytes: u64,
    /// Where it starts in `file`, when `file` is a pack of several state files written as one
    /// ([`pack`]); each is a whole Arrow IPC file of `bytes` bytes. `None`: the whole file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// Packs state files into one file named `name` (one write and one flush for all of them):
/// each entry's `file` becomes `name` and its `offset` where its bytes start. Returns the
/// pack's bytes.
pub fn pack(name: &str, files: &mut [(StateFile, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(files.iter().map(|(_, b)| b.len()).sum());
    for (f, bytes) in files.iter_mut() {
        f.file = name.to_string();
        f.offset = Some(out.len() as u64);
        out.extend_from_slice(bytes);
        bytes.clear();
    }
    out
}

/// What one operator partition committed last: entry key to a hash of its value, for an
/// operator that does not report what it changed ([`crate::operator::Operator::take_changed_entries`]);
/// one that does is never diffed (`tracked`).
#[derive(Default)]
pub struct StoreVersion {
    last: HashMap<Vec<u8>, u64>,
    tracked: bool,
    /// Debug builds: the entries as committed, to check every delta an operator reports
    /// against its whole state ([`StoreVersion::check_changes`]).
    #[cfg(debug_assertions)]
    shadow: Option<HashMap<Vec<u8>, Vec<u8>>>,
}

/// What an operator changed since its last commit: the entries it wrote, and the keys of the
/// entries it removed.
pub type ChangedEntries = (Vec<(Vec<u8>, Vec<u8>)>, Vec<Vec<u8>>);

fn hash(v: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("key", DataType::Binary, false), Field::new("value", DataType::Binary, true)]))
}

use super::log::{corrupt, io};

/// The most bytes of keys and values in one record batch of a state file: a reader holds the
/// file and one batch decoded, not the file twice.
const BATCH_BYTES: usize = 8 << 20;

/// Encodes rows as an Arrow IPC file, in record batches of about [`BATCH_BYTES`], appended to
/// `buf` (the file's offsets count from where it starts).
fn to_arrow(path: &str, rows: &[(&[u8], Option<&[u8]>)], buf: &mut Vec<u8>) -> Result<()> {
    {
        let mut w = FileWriter::try_new(&mut *buf, &schema()).map_err(|e| io(path, e))?;
        let mut rest = rows;
        // An empty file still holds one (empty) batch, as it always has.
        loop {
            let (mut n, mut bytes) = (0, 0);
            while n < rest.len() && (n == 0 || bytes < BATCH_BYTES) {
                bytes += rest[n].0.len() + rest[n].1.map_or(0, <[u8]>::len);
                n += 1;
            }
            let (chunk, later) = rest.split_at(n);
            let keys = BinaryArray::from_iter_values(chunk.iter().map(|r| r.0));
            let values: BinaryArray = chunk.iter().map(|r| r.1).collect();
            let batch =
                RecordBatch::try_new(schema(), vec![Arc::new(keys), Arc::new(values)]).map_err(|e| io(path, e))?;
            w.write(&batch).map_err(|e| io(path, e))?;
            rest = later;
            if rest.is_empty() {
                break;
            }
        }
        w.finish().map_err(|e| io(path, e))?;
    }
    Ok(())
}

/// Checks that a manifest entry names a file inside its folder; `manifest` names the manifest.
pub fn check_name(manifest: &str, f: &StateFile) -> Result<()> {
    if f.file.is_empty() || f.file.contains(['/', '\\']) || f.file.starts_with('.') {
        return Err(corrupt(manifest, format!("names a state file outside its folder: '{}'", f.file)));
    }
    Ok(())
}

/// The rows of a state file's bytes `data`, read from `path`, checked against its manifest
/// entry `f`.
pub fn decode_file(path: &str, f: &StateFile, data: Vec<u8>) -> Result<Rows> {
    decode_file_where(path, f, data, &mut |_| Ok(true))
}

/// The rows of a state file whose keys `keep` accepts (see [`decode_file`]): the others are
/// never copied out of the file's bytes.
pub fn decode_file_where(path: &str, f: &StateFile, data: Vec<u8>, keep: &mut Keep<'_>) -> Result<Rows> {
    if crc32fast::hash(&data) != f.crc32 {
        return Err(corrupt(path, "checksum mismatch"));
    }
    // Arrow's IPC reader trusts the offsets inside the file and panics on some damaged ones
    // (it slices buffers past their end). A file that passed its checksum but was written
    // damaged must still be an error naming it, so its panics are caught here.
    let entries = f.entries;
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode_rows(path, data, entries, keep)));
    decoded.unwrap_or_else(|p| {
        Err(corrupt(path, format!("unreadable Arrow IPC data ({})", weir_sdk::panic::panic_message(&*p))))
    })
}

/// Checks that the blocks an Arrow IPC file's footer lists lie inside the file. Arrow's reader
/// allocates what a block says it holds before reading it, so a damaged length would ask for
/// terabytes.
fn check_blocks(path: &str, data: &[u8]) -> Result<()> {
    let n = data.len();
    if n < 10 || &data[n - 6..] != b"ARROW1" {
        return Err(corrupt(path, "not an Arrow IPC file (no trailing magic)"));
    }
    let footer_len = i32::from_le_bytes([data[n - 10], data[n - 9], data[n - 8], data[n - 7]]);
    let footer_len = usize::try_from(footer_len).ok().filter(|&l| l <= n - 10);
    let footer_len = footer_len.ok_or_else(|| corrupt(path, "Arrow footer length out of the file"))?;
    let footer = arrow_ipc::root_as_footer(&data[n - 10 - footer_len..n - 10])
        .map_err(|e| corrupt(path, format!("unreadable Arrow footer: {e}")))?;
    let blocks = footer.recordBatches().into_iter().flatten().chain(footer.dictionaries().into_iter().flatten());
    for b in blocks {
        let end = [b.offset(), i64::from(b.metaDataLength()), b.bodyLength()].into_iter().try_fold(0i64, |acc, x| {
            if x < 0 {
                None
            } else {
                acc.checked_add(x)
            }
        });
        if end.is_none_or(|e| e as u64 > n as u64) {
            return Err(corrupt(path, "an Arrow block lies outside the file"));
        }
    }
    Ok(())
}

/// The rows of an Arrow IPC state file's bytes.
/// Which entry keys a read keeps (a rescaled restore reads only its partition's keys).
pub type Keep<'a> = dyn FnMut(&[u8]) -> Result<bool> + 'a;

fn decode_rows(path: &str, data: Vec<u8>, entries: usize, keep: &mut Keep<'_>) -> Result<Rows> {
    check_blocks(path, &data)?;
    // The manifest's count is a hint: never reserve more than the file could hold.
    let mut out = Vec::with_capacity(entries.min(data.len() / 16));
    let reader = FileReader::try_new(std::io::Cursor::new(data), None).map_err(|e| corrupt(path, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(path, e))?;
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| corrupt(path, "key column is not binary"))?;
        let values = batch
            .column(1)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| corrupt(path, "value column is not binary"))?;
        for i in 0..batch.num_rows() {
            if !keep(keys.value(i))? {
                continue;
            }
            let v = (!values.is_null(i)).then(|| values.value(i).to_vec());
            out.push((keys.value(i).to_vec(), v));
        }
    }
    Ok(out)
}

impl StoreVersion {
    /// The committed version restored from `entries`.
    pub fn from_entries(entries: &[(Vec<u8>, Vec<u8>)]) -> Self {
        StoreVersion {
            last: entries.iter().map(|(k, v)| (k.clone(), hash(v))).collect(),
            tracked: false,
            #[cfg(debug_assertions)]
            shadow: Some(entries.iter().cloned().collect()),
        }
    }

    /// The committed version restored from `entries` for an operator that reports what changed
    /// from the restore on ([`crate::operator::Operator::restore_keeps_changes`]): nothing is
    /// kept of them (debug builds keep them to check its deltas).
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    pub fn restored_tracked(entries: &[(Vec<u8>, Vec<u8>)]) -> Self {
        StoreVersion {
            last: HashMap::new(),
            tracked: true,
            #[cfg(debug_assertions)]
            shadow: Some(entries.iter().cloned().collect()),
        }
    }

    /// Debug builds: checks that the delta just committed, applied to the entries committed
    /// before it, gives the operator's whole state `now`; a change an operator failed to
    /// report would be lost on restart. Every test that checkpoints runs this check.
    #[cfg(debug_assertions)]
    pub fn check_changes(&self, node: &str, now: Vec<(Vec<u8>, Vec<u8>)>) {
        let Some(shadow) = &self.shadow else { return };
        let now: HashMap<Vec<u8>, Vec<u8>> = now.into_iter().collect();
        if &now != shadow {
            let missed = now.iter().filter(|(k, v)| shadow.get(*k) != Some(v)).count();
            let stale = shadow.keys().filter(|k| !now.contains_key(*k)).count();
            panic!(
                "step {node}'s delta misses changes: {missed} entries differ from the state, {stale} removed \
                 entries were not reported"
            );
        }
    }

    /// This batch's version of the partition's state (`entries`): everything when `snapshot`,
    /// otherwise only what changed. Returns the manifest entry and the file's bytes, or `None`
    /// when there is nothing to write; the caller writes the bytes under the entry's file name.
    pub fn commit(
        &mut self,
        node: &str,
        partition: usize,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        snapshot: bool,
    ) -> Result<Option<(StateFile, Vec<u8>)>> {
        #[cfg(debug_assertions)]
        {
            self.shadow = Some(entries.iter().cloned().collect());
        }
        // An operator that reported its changes keeps reporting them between snapshots: a
        // delta diffed against nothing would leave its removed entries in the checkpoint.
        debug_assert!(snapshot || !self.tracked, "step {node} stopped reporting its changes");
        if entries.is_empty() && self.last.is_empty() && !(snapshot && self.tracked) {
            return Ok(None);
        }
        // An operator that reports its changes is not diffed: its snapshot is hashed for nothing.
        let next: HashMap<Vec<u8>, u64> = match self.tracked {
            true => HashMap::new(),
            false => entries.iter().map(|(k, v)| (k.clone(), hash(v))).collect(),
        };
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
        let written = write_rows(node, partition, &rows, snapshot)?;
        self.last = next;
        Ok(Some(written))
    }

    /// A delta of what an operator reports it `changed` since its last commit: nothing else is
    /// encoded, hashed or compared (the cost follows what changed, not the state's size). From
    /// then on the store is not diffed.
    pub fn commit_changes(
        &mut self,
        node: &str,
        partition: usize,
        (written, removed): ChangedEntries,
    ) -> Result<Option<(StateFile, Vec<u8>)>> {
        self.tracked = true;
        self.last = HashMap::new();
        #[cfg(debug_assertions)]
        if let Some(shadow) = &mut self.shadow {
            shadow.extend(written.iter().cloned());
            removed.iter().for_each(|k| {
                shadow.remove(k);
            });
        }
        if written.is_empty() && removed.is_empty() {
            return Ok(None);
        }
        let mut rows: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(written.len() + removed.len());
        rows.extend(written.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))));
        rows.extend(removed.iter().map(|k| (k.as_slice(), None)));
        write_rows(node, partition, &rows, false).map(Some)
    }
}

/// A snapshot file of `rows` of partition `partition` of `node`: its manifest entry and bytes.
pub fn write_snapshot(node: &str, partition: usize, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<(StateFile, Vec<u8>)> {
    let mut bytes = Vec::new();
    let f = write_snapshot_into(node, partition, rows, (None, &mut bytes))?;
    Ok((f, bytes))
}

/// Writes the snapshot file of `rows` at the end of `buf`; returns its manifest entry, which
/// names its slice of pack `packed` when given (as [`pack`] does), else a file of its own.
pub fn write_snapshot_into(
    node: &str,
    partition: usize,
    rows: &[(Vec<u8>, Vec<u8>)],
    (packed, buf): (Option<&str>, &mut Vec<u8>),
) -> Result<StateFile> {
    let rows: Vec<(&[u8], Option<&[u8]>)> = rows.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))).collect();
    let start = buf.len() as u64;
    let mut f = write_rows_into(node, partition, &rows, true, buf)?;
    if let Some(name) = packed {
        (f.file, f.offset) = (name.to_string(), Some(start));
    }
    Ok(f)
}

/// A state file of `rows` (a value, or `None` for a removal) of partition `partition` of
/// `node`: its manifest entry and its bytes.
fn write_rows(
    node: &str,
    partition: usize,
    rows: &[(&[u8], Option<&[u8]>)],
    snapshot: bool,
) -> Result<(StateFile, Vec<u8>)> {
    let mut bytes = Vec::new();
    let f = write_rows_into(node, partition, rows, snapshot, &mut bytes)?;
    Ok((f, bytes))
}

/// [`write_rows`], the file's bytes appended to `buf`.
fn write_rows_into(
    node: &str,
    partition: usize,
    rows: &[(&[u8], Option<&[u8]>)],
    snapshot: bool,
    buf: &mut Vec<u8>,
) -> Result<StateFile> {
    let kind = if snapshot { FileKind::Snapshot } else { FileKind::Delta };
    let safe: String = node.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let file = format!(
        "{safe}-{:08x}-{partition}.{}.arrow",
        crc32fast::hash(node.as_bytes()),
        if snapshot { "snapshot" } else { "delta" }
    );
    let start = buf.len();
    to_arrow(&file, rows, buf)?;
    let bytes = &buf[start..];
    Ok(StateFile {
        node: node.to_string(),
        partition,
        kind,
        file,
        crc32: crc32fast::hash(bytes),
        entries: rows.len(),
        bytes: bytes.len() as u64,
        offset: None,
    })
}

/// Reads state file `f` of `folder` (its slice of a pack, or the whole file): the name to show
/// in errors, and the bytes.
pub fn read_file(loc: &super::store::Location, folder: &str, f: &StateFile) -> Result<(String, Vec<u8>)> {
    let key = format!("{folder}/{}", f.file);
    let shown = match f.offset {
        Some(at) => format!("{} (bytes {at}..{})", loc.name(&key), at.saturating_add(f.bytes)),
        None => loc.name(&key),
    };
    let data = match f.offset {
        Some(at) => loc.get_slice(&key, at, f.bytes)?,
        None => loc.get(&key)?,
    };
    let data = data.ok_or_else(|| corrupt(&shown, "state file is missing"))?;
    Ok((shown, data))
}

/// The state files of one operator partition from its last snapshot on, each in its folder, in
/// the order written (a snapshot, then deltas; a later snapshot starts afresh).
pub type Chain = Vec<(String, StateFile)>;

/// The entries of one operator partition as the state files of `chain` make them, each file's
/// rows read by `read` (its folder and manifest entry). Only the deltas after the last snapshot
/// are held in a map; the snapshot's rows are kept as read, but for those a delta changes. A
/// restore so holds one partition's state at a time, once, where folding every file into a map
/// held all of it in a map's entries.
pub fn chain_entries(
    chain: &[(String, StateFile)],
    mut read: impl FnMut(&str, &StateFile) -> Result<Rows>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let last_snapshot = chain.iter().rposition(|(_, f)| f.kind == FileKind::Snapshot);
    let deltas = &chain[last_snapshot.map_or(0, |s| s + 1)..];
    let mut changed: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
    for (folder, f) in deltas {
        changed.extend(read(folder, f)?);
    }
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = match last_snapshot {
        Some(s) => read(&chain[s].0, &chain[s].1)?
            .into_iter()
            .filter_map(|(k, v)| v.filter(|_| !changed.contains_key(&k)).map(|v| (k, v)))
            .collect(),
        None => Vec::new(),
    };
    out.extend(changed.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))));
    Ok(out)
}

/// Applies a file's rows to an entry map (a snapshot replaces it, a delta updates it).
pub fn apply(map: &mut HashMap<Vec<u8>, Vec<u8>>, kind: FileKind, rows: Rows) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file_entry(name: &str, bytes: &[u8]) -> StateFile {
        StateFile {
            node: "G".into(),
            partition: 0,
            kind: FileKind::Snapshot,
            file: name.into(),
            crc32: crc32fast::hash(bytes),
            entries: usize::MAX,
            bytes: bytes.len() as u64,
            offset: None,
        }
    }

    #[test]
    fn state_files_round_trip_and_stay_in_their_folder() {
        let mut store = StoreVersion::default();
        let entries = vec![(b"k1".to_vec(), b"v1".to_vec()), (b"k2".to_vec(), Vec::new())];
        let (f, bytes) = store.commit("G", 0, entries.clone(), true).unwrap().unwrap();
        let mut rows = decode_file(&f.file, &f, bytes).unwrap();
        rows.sort();
        assert_eq!(rows, entries.into_iter().map(|(k, v)| (k, Some(v))).collect::<Vec<_>>());
        let outside = StateFile { file: "../secrets".into(), ..f };
        assert!(check_name("manifest.json", &outside).unwrap_err().to_string().contains("outside its folder"));
    }

    #[test]
    fn a_large_state_file_is_written_in_batches_and_read_whole() {
        // 40 rows of 1 MiB values: five batches of about 8 MiB.
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            (0..40u32).map(|i| (i.to_be_bytes().to_vec(), vec![i as u8; 1 << 20])).collect();
        let (f, bytes) = write_snapshot("G", 0, &entries).unwrap();
        let batches = FileReader::try_new(std::io::Cursor::new(bytes.clone()), None).unwrap().count();
        assert_eq!(batches, 5);
        let rows = decode_file(&f.file, &f, bytes).unwrap();
        assert_eq!(rows, entries.into_iter().map(|(k, v)| (k, Some(v))).collect::<Vec<_>>());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Issue 52: a partition's chain of files read without folding its snapshot into a map
        /// gives what folding every file in order gives.
        #[test]
        fn a_chain_read_once_equals_every_file_folded(
            files in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec((0u8..12, proptest::option::of(0u8..4)), 0..10)),
                0..6,
            ),
        ) {
            let files: Vec<(FileKind, Rows)> = files
                .into_iter()
                .map(|(snapshot, rows)| {
                    let kind = if snapshot { FileKind::Snapshot } else { FileKind::Delta };
                    // A snapshot holds values only, each key once.
                    let rows: Rows = match kind {
                        FileKind::Snapshot => rows
                            .into_iter()
                            .filter_map(|(k, v)| Some((vec![k], Some(vec![v?]))))
                            .collect::<HashMap<_, _>>()
                            .into_iter()
                            .collect(),
                        FileKind::Delta => rows.into_iter().map(|(k, v)| (vec![k], v.map(|v| vec![v]))).collect(),
                    };
                    (kind, rows)
                })
                .collect();
            let mut folded = HashMap::new();
            for (kind, rows) in &files {
                apply(&mut folded, *kind, rows.clone());
            }
            let chain: Chain = files
                .iter()
                .enumerate()
                .map(|(i, (kind, _))| (i.to_string(), StateFile { kind: *kind, ..file_entry("f", b"") }))
                .collect();
            let mut got = chain_entries(&chain, |folder, _| Ok(files[folder.parse::<usize>().unwrap()].1.clone())).unwrap();
            got.sort();
            let mut want: Vec<_> = folded.into_iter().collect();
            want.sort();
            prop_assert_eq!(&got, &want);
            // A rescaled restore reads the files' rows of a third of the keys: what the whole
            // read gives of those, no more.
            let encoded: Vec<(StateFile, Vec<u8>)> = files
                .iter()
                .map(|(kind, rows)| {
                    let rows: Vec<(&[u8], Option<&[u8]>)> =
                        rows.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
                    write_rows("G", 0, &rows, *kind == FileKind::Snapshot).unwrap()
                })
                .collect();
            for third in 0..3u8 {
                let mut keep = |k: &[u8]| Ok(k[0] % 3 == third);
                let mut some = chain_entries(&chain, |folder, _| {
                    let (f, bytes) = encoded[folder.parse::<usize>().unwrap()].clone();
                    decode_file_where(&f.file, &f, bytes, &mut keep)
                })
                .unwrap();
                some.sort();
                let want: Vec<_> = want.iter().filter(|(k, _)| k[0] % 3 == third).cloned().collect();
                prop_assert_eq!(some, want);
            }
        }

        /// Issue 16: a state file of any bytes, even with a matching checksum, is read or refused
        /// with an error naming it, never a panic.
        #[test]
        fn state_file_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
            if let Err(e) = decode_file("junk.arrow", &file_entry("junk.arrow", &bytes), bytes.clone()) {
                prop_assert!(e.to_string().contains("junk.arrow"), "{}", e);
            }
            // A real snapshot with bytes changed, its checksum recomputed: Arrow's own reader
            // sees the damage.
            let mut store = StoreVersion::default();
            let entries = (0..20u8).map(|i| (vec![i; 3], vec![i; 5])).collect();
            let (f, mut real) = store.commit("G", 0, entries, true).unwrap().unwrap();
            for (at, x) in flips {
                let n = real.len();
                real[at % n] ^= x | 1;
            }
            let _ = decode_file(&f.file, &file_entry(&f.file, &real), real.clone());
        }
    }
}
