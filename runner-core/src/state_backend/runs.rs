//! Sorted runs: a bounded grouping's keys leave memory as flat files of key-ordered records,
//! and come back, at the end of the input, by merging the files: each byte written once and
//! read once, as Spark's and Flink's batch shuffles spill (an LSM store, which suits keys read
//! back one by one, would also journal every write and compact every byte into deeper levels).
//!
//! A run holds records `[key length: u32 LE][key][value length: u32 LE][value]`, its keys in
//! the order [`key_order`] defines (each at most once). Runs are numbered in the order they
//! were written, and the merge gives a key's records oldest run first.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Most runs merged at once: with more, the oldest are first merged into one (file handles
/// and read buffers stay bounded).
const FAN_IN: usize = 64;
/// Read buffer of each run in a merge.
const READ_BUFFER: usize = 32 << 10;

/// The order of keys in runs (and of the store's keys): shorter first, then by bytes.
pub fn key_order(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// One operator instance's runs.
pub(super) struct Runs {
    dir: PathBuf,
    name: String,
    next: u64,
    /// Oldest first.
    files: Vec<PathBuf>,
    merge: Option<Merge>,
}

/// A run being written.
pub(super) struct Writer {
    w: BufWriter<File>,
    path: PathBuf,
}

impl Writer {
    /// Appends a record.
    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        write_record(&mut self.w, key, value)
    }
}

/// A record read from run `run`.
struct Head {
    key: Vec<u8>,
    run: usize,
    value: Vec<u8>,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order(&self.key, &other.key).then(self.run.cmp(&other.run))
    }
}

/// A merge of runs: the next record of each, smallest key (then oldest run) first.
struct Merge {
    readers: Vec<BufReader<File>>,
    heap: BinaryHeap<Reverse<Head>>,
}

impl Merge {
    fn open(files: &[PathBuf]) -> io::Result<Merge> {
        let mut m = Merge { readers: Vec::with_capacity(files.len()), heap: BinaryHeap::new() };
        for (run, path) in files.iter().enumerate() {
            let mut r = BufReader::with_capacity(READ_BUFFER, File::open(path)?);
            if let Some((key, value)) = read_record(&mut r, path)? {
                m.heap.push(Reverse(Head { key, run, value }));
            }
            m.readers.push(r);
        }
        Ok(m)
    }

    fn peek_key(&self) -> Option<&[u8]> {
        self.heap.peek().map(|h| h.0.key.as_slice())
    }

    fn pop(&mut self, files: &[PathBuf]) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(Reverse(head)) = self.heap.pop() else { return Ok(None) };
        if let Some((key, value)) = read_record(&mut self.readers[head.run], &files[head.run])? {
            self.heap.push(Reverse(Head { key, run: head.run, value }));
        }
        Ok(Some((head.key, head.value)))
    }
}

/// The next record of a run; `None` at its end.
fn read_record(r: &mut impl Read, path: &Path) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let corrupt = |e: io::Error| io::Error::new(e.kind(), format!("{} is cut short: {e}", path.display()));
    let mut key = vec![0; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut key).map_err(corrupt)?;
    r.read_exact(&mut len).map_err(corrupt)?;
    let mut value = vec![0; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut value).map_err(corrupt)?;
    Ok(Some((key, value)))
}

fn write_record(w: &mut impl Write, key: &[u8], value: &[u8]) -> io::Result<()> {
    let len = |n: usize| u32::try_from(n).map(u32::to_le_bytes).map_err(|_| io::Error::other("a record over 4 GiB"));
    w.write_all(&len(key.len())?)?;
    w.write_all(key)?;
    w.write_all(&len(value.len())?)?;
    w.write_all(value)
}

impl Runs {
    /// Runs kept in `dir`, their files named after `name`.
    pub(super) fn new(dir: PathBuf, name: String) -> Runs {
        Runs { dir, name, next: 0, files: Vec::new(), merge: None }
    }

    /// Whether no run is left.
    pub(super) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Whether a merge has started (records were taken).
    pub(super) fn merging(&self) -> bool {
        self.merge.is_some()
    }

    fn new_path(&mut self) -> PathBuf {
        self.next += 1;
        self.dir.join(format!("{}-run-{}", self.name, self.next))
    }

    /// Writes `records` (keys in [`key_order`], each once) as a new run.
    #[cfg(test)]
    pub(super) fn write<'a>(&mut self, records: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> io::Result<()> {
        let mut w = self.writer()?;
        for (key, value) in records {
            w.push(key, value)?;
        }
        self.finish(w)
    }

    /// A new run to write, record by record (keys in [`key_order`], each once); it counts once
    /// given to [`Runs::finish`].
    pub(super) fn writer(&mut self) -> io::Result<Writer> {
        let path = self.new_path();
        Ok(Writer { w: BufWriter::with_capacity(1 << 20, File::create(&path)?), path })
    }

    /// Adds a written run.
    pub(super) fn finish(&mut self, w: Writer) -> io::Result<()> {
        w.w.into_inner().map_err(|e| e.into_error())?;
        self.files.push(w.path);
        Ok(())
    }

    /// The smallest key left, starting the merge if it has not.
    pub(super) fn peek_key(&mut self) -> io::Result<Option<&[u8]>> {
        self.start()?;
        Ok(self.merge.as_ref().and_then(Merge::peek_key))
    }

    /// Takes the smallest record left (of its key, the oldest run's first).
    pub(super) fn pop(&mut self) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.start()?;
        let Some(merge) = self.merge.as_mut() else { return Ok(None) };
        let next = merge.pop(&self.files)?;
        if next.is_none() {
            // Every run read: gone.
            self.clear()?;
        }
        Ok(next)
    }

    /// Opens the merge, merging the oldest runs into one first while there are more than
    /// [`FAN_IN`].
    fn start(&mut self) -> io::Result<()> {
        if self.merge.is_some() || self.files.is_empty() {
            return Ok(());
        }
        // Each FAN_IN runs in order merged into one, in one pass over them, until few
        // enough are left; a merged run takes the place of the runs it holds.
        while self.files.len() > FAN_IN {
            let all = std::mem::take(&mut self.files);
            for chunk in all.chunks(FAN_IN) {
                if chunk.len() == 1 {
                    self.files.push(chunk[0].clone());
                    continue;
                }
                let mut merge = Merge::open(chunk)?;
                let mut w = self.writer()?;
                while let Some((key, value)) = merge.pop(chunk)? {
                    w.push(&key, &value)?;
                }
                drop(merge);
                self.finish(w)?;
                for f in chunk {
                    std::fs::remove_file(f)?;
                }
            }
        }
        self.merge = Some(Merge::open(&self.files)?);
        Ok(())
    }

    /// Calls `f` with every record, in key order (a key's oldest run first), leaving the runs
    /// as they are (a merge of its own).
    pub(super) fn scan(&self, mut f: impl FnMut(Vec<u8>, Vec<u8>) -> io::Result<()>) -> io::Result<()> {
        if self.merge.is_some() {
            return Err(io::Error::other("the runs are being taken; they cannot be scanned too"));
        }
        let mut merge = Merge::open(&self.files)?;
        while let Some((key, value)) = merge.pop(&self.files)? {
            f(key, value)?;
        }
        Ok(())
    }

    /// Removes every run.
    pub(super) fn clear(&mut self) -> io::Result<()> {
        self.merge = None;
        for f in self.files.drain(..) {
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_in_key_order_with_a_key_s_oldest_record_first_past_the_fan_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path().to_path_buf(), "t".into());
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // More runs than the fan-in, keys overlapping between runs.
        for run in 0..(FAN_IN as u32 * 2 + 3) {
            let mut keys: Vec<Vec<u8>> = (0..20u32).map(|k| format!("k{}", (k * 7 + run) % 50).into_bytes()).collect();
            keys.sort_by(|a, b| key_order(a, b));
            keys.dedup();
            let records: Vec<(Vec<u8>, Vec<u8>)> = keys.into_iter().map(|k| (k, run.to_le_bytes().to_vec())).collect();
            runs.write(records.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).unwrap();
            want.extend(records);
        }
        // Stable: within a key, the order the runs were written.
        want.sort_by(|a, b| key_order(&a.0, &b.0));
        let mut scanned = Vec::new();
        runs.scan(|k, v| {
            scanned.push((k, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(scanned, want);
        let mut got = Vec::new();
        assert_eq!(runs.peek_key().unwrap().map(<[u8]>::to_vec), Some(want[0].0.clone()));
        while let Some(r) = runs.pop().unwrap() {
            got.push(r);
        }
        assert_eq!(got, want);
        assert!(runs.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_run_cut_short_is_an_error_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = Runs::new(dir.path().to_path_buf(), "t".into());
        runs.write([(&b"key"[..], &b"value"[..])].into_iter()).unwrap();
        let path = runs.files[0].clone();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let e = runs.pop().unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("cut short"), "{e}");
    }
}
