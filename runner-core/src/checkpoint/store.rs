//! Where a checkpoint lives: a local directory, or an object store (`s3://bucket/prefix`)
//! that the processes of a cluster on different machines share.
//!
//! Keys are `/`-separated paths under the location's root. Every write is atomic: a local file
//! is written to a temporary name, synced and renamed; an object store's PUT replaces an object
//! whole. So a reader sees a key's old bytes or its new ones, never a mix.
//!
//! S3 is reached with the standard AWS settings from the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT` for an S3-compatible server,
//! `AWS_ALLOW_HTTP=true` for plain HTTP). A request is retried briefly; a store that stays
//! unreachable is an error naming the URL, not a hang.

use super::log::io;
pub use super::object::ObjectLocation;
use std::path::PathBuf;
use std::sync::Arc;
use weir_sdk::{Error, Result};

/// A local file written by [`Location::put_unflushed`] and not yet flushed to the disk.
pub struct Unflushed {
    file: std::fs::File,
    shown: String,
}

impl Unflushed {
    /// Flushes the file's bytes to the disk; an error names the file.
    pub fn flush(self) -> Result<()> {
        self.file.sync_all().map_err(|e| io(&self.shown, e))
    }
}

/// Writes `bytes` to the file at `key` under `root` (its folders made as needed), flushing its
/// data every `flush_every` bytes if given; the last flush is the caller's.
fn write_local(root: &std::path::Path, key: &str, bytes: &[u8], flush_every: Option<usize>) -> Result<Unflushed> {
    let path = root.join(key);
    let shown = path.display().to_string();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(&dir.display().to_string(), e))?;
    }
    let mut file = std::fs::File::create(&path).map_err(|e| io(&shown, e))?;
    for chunk in bytes.chunks(flush_every.unwrap_or(bytes.len()).max(1)) {
        std::io::Write::write_all(&mut file, chunk).map_err(|e| io(&shown, e))?;
        if flush_every.is_some() {
            file.sync_data().map_err(|e| io(&shown, e))?;
        }
    }
    Ok(Unflushed { file, shown })
}

/// A checkpoint location.
#[derive(Clone)]
pub enum Location {
    /// A directory on this machine.
    Local(PathBuf),
    /// A prefix in an object store.
    Object(Arc<ObjectLocation>),
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name(""))
    }
}

impl Location {
    /// The location `spec` names: `s3://bucket/prefix`, or a local directory (created).
    pub fn parse(spec: &str) -> Result<Self> {
        if let Some(rest) = spec.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Options(format!("--checkpoint-dir {spec}: the URL names no bucket")));
            }
            return Ok(Location::Object(Arc::new(ObjectLocation::open(spec, bucket, prefix)?)));
        }
        if spec.contains("://") {
            return Err(Error::Options(format!(
                "--checkpoint-dir {spec}: only local directories and s3:// URLs are supported"
            )));
        }
        let root = PathBuf::from(spec);
        std::fs::create_dir_all(&root).map_err(|e| io(spec, e))?;
        Ok(Location::Local(root))
    }

    /// The local directory, if the location is one.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        match self {
            Location::Local(p) => Some(p),
            Location::Object(_) => None,
        }
    }

    /// How `key` is named in messages: a path, or a URL.
    pub fn name(&self, key: &str) -> String {
        match self {
            Location::Local(root) if key.is_empty() => root.display().to_string(),
            Location::Local(root) => root.join(key).display().to_string(),
            Location::Object(o) => o.name(key),
        }
    }

    /// Writes `bytes` at `key`, durably and atomically.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        match self {
            Location::Local(root) => weir_sdk::runner_api::write_atomic(&root.join(key), &bytes)
                .map_err(|e| io(&e.path.display().to_string(), e.source)),
            Location::Object(o) => o.put(key, bytes),
        }
    }

    /// Writes `bytes` at `key` durably but not atomically: for a file no reader looks for until
    /// a manifest written after it names it (with its CRC-32, so a torn one is detected). The
    /// file is flushed, its folder is not: the writer calls [`Location::sync_folder`] once for
    /// all of them before writing the manifest. Half the flushes of [`Location::put`], and no
    /// rename. An object store writes objects whole anyway.
    pub fn put_listed(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        match self.put_unflushed(key, bytes)? {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }

    /// Writes `bytes` at `key` as [`Location::put_listed`] does, but leaves the flush to the
    /// caller, who may do it on another thread: a local file comes back to be flushed (and
    /// its folder after it); an object store's write is durable when it returns (`None`).
    pub fn put_unflushed(&self, key: &str, bytes: Vec<u8>) -> Result<Option<Unflushed>> {
        match self {
            Location::Local(root) => write_local(root, key, &bytes, None).map(Some),
            Location::Object(_) => self.put(key, bytes).map(|()| None),
        }
    }

    /// Writes `bytes` at `key` as [`Location::put_listed`] does, flushing a local file every
    /// `every` bytes as it goes (RocksDB's `bytes_per_sync`): a background writer of large
    /// files never leaves much unflushed data that a small synced write of the batch's path
    /// (a commit) would wait behind.
    pub fn put_paced(&self, key: &str, bytes: Vec<u8>, every: usize) -> Result<()> {
        match self {
            Location::Local(root) => write_local(root, key, &bytes, Some(every))?.flush(),
            Location::Object(_) => self.put(key, bytes),
        }
    }

    /// Makes the entries of folder `key` durable (the files [`Location::put_listed`] wrote
    /// there); nothing to do in an object store.
    pub fn sync_folder(&self, key: &str) -> Result<()> {
        match self {
            Location::Local(root) => {
                let dir = root.join(key);
                match weir_sdk::runner_api::sync_dir(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&dir.display().to_string(), e)),
                    _ => Ok(()),
                }
            }
            Location::Object(_) => Ok(()),
        }
    }

    /// Writes `bytes` at `key` of an object store only if nothing is there (`If-None-Match`) or,
    /// with `replacing`, only if the object there is still the one with that entity tag
    /// (`If-Match`). `Ok(Some(tag))` is the new object's tag; `Ok(None)` means another writer
    /// got there first. Local directories have their own locks, and refuse.
    pub fn put_conditionally(&self, key: &str, bytes: Vec<u8>, replacing: Option<&str>) -> Result<Option<String>> {
        let Location::Object(o) = self else {
            return Err(io(&self.name(key), "conditional writes are for object stores"));
        };
        o.put_conditionally(key, bytes, replacing)
    }

    /// The bytes at `key` of an object store and their entity tag, or `None`.
    pub fn get_tagged(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        let Location::Object(o) = self else {
            return Err(io(&self.name(key), "entity tags are for object stores"));
        };
        o.get_tagged(key)
    }

    /// The `len` bytes at `offset` of `key`, or `None` when there is nothing there; fewer when
    /// the file is shorter (the caller's checksum tells).
    pub fn get_slice(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        match self {
            Location::Local(root) => {
                use std::io::{Read, Seek};
                let mut file = match std::fs::File::open(root.join(key)) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(io(&self.name(key), e)),
                };
                file.seek(std::io::SeekFrom::Start(offset)).map_err(|e| io(&self.name(key), e))?;
                let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
                file.take(len).read_to_end(&mut out).map_err(|e| io(&self.name(key), e))?;
                Ok(Some(out))
            }
            Location::Object(o) => o.get_slice(key, offset, len),
        }
    }

    /// The bytes at `key`, or `None` when there is nothing there.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Location::Local(root) => match std::fs::read(root.join(key)) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(&self.name(key), e)),
            },
            Location::Object(o) => o.get(key),
        }
    }

    /// The names directly under `dir` (files and folders), unsorted.
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        match self {
            Location::Local(root) => {
                let path = root.join(dir);
                let entries = match std::fs::read_dir(&path) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(io(&self.name(dir), e)),
                };
                let mut names = Vec::new();
                for e in entries {
                    let e = e.map_err(|e| io(&self.name(dir), e))?;
                    names.push(e.file_name().to_string_lossy().into_owned());
                }
                Ok(names)
            }
            Location::Object(o) => o.list(dir),
        }
    }

    /// Removes `key` and everything under it.
    pub fn delete_all(&self, key: &str) -> Result<()> {
        match self {
            Location::Local(root) => {
                let path = root.join(key);
                let gone = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
                match gone {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&self.name(key), e)),
                    _ => Ok(()),
                }
            }
            Location::Object(o) => o.delete_all(key),
        }
    }
}
