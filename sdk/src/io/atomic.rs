//! Durable file replacement, used by every file the engine and the sinks write.
//!
//! A reader sees either the old file or the whole new one, and once [`write_atomic`] returns the
//! new file survives a power loss: the bytes go to a temporary file in the same directory, which
//! is flushed to disk (`fsync`), renamed over the target, and then the directory itself is
//! flushed so that the rename is durable too. Without the last two steps a crash can leave an
//! empty or missing file under a name a log already points to.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` durably and atomically: temporary file, fsync, rename, fsync of
/// the directory. Creates the parent directories. Errors name the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicWriteError> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// [`write_atomic`], with the content produced by `fill` into a buffered writer.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), AtomicWriteError> {
    let err = |p: &Path, e: std::io::Error| AtomicWriteError { path: p.to_path_buf(), source: e };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(&dir, e))?;
    let tmp = temporary_name(path);
    let result = (|| {
        let file = File::create(&tmp).map_err(|e| err(&tmp, e))?;
        let mut w = std::io::BufWriter::with_capacity(64 * 1024, file);
        fill(&mut w).map_err(|e| err(&tmp, e))?;
        let file = w.into_inner().map_err(|e| err(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| err(&tmp, e))?;
        drop(file);
        crate::testing::fault::point("before-rename");
        std::fs::rename(&tmp, path).map_err(|e| err(path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    sync_dir(&dir).map_err(|e| err(&dir, e))
}

/// Flushes a directory's entries (creations, renames, removals) to disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    // Opening a directory read-only and fsyncing it is how POSIX makes its entries durable; on
    // platforms that cannot open directories there is nothing more to do.
    match File::open(dir) {
        Ok(d) => d.sync_all().or_else(|e| if cfg!(unix) { Err(e) } else { Ok(()) }),
        Err(e) if cfg!(unix) => Err(e),
        Err(_) => Ok(()),
    }
}

/// A temporary name next to `path`, unique to this process and call, starting with a dot so
/// that listings of the engine's own files skip it.
fn temporary_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// Whether `name` is a temporary file left by an interrupted [`write_atomic`].
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// A failed atomic write: the file it was writing and why.
#[derive(Debug)]
pub struct AtomicWriteError {
    /// The file (or directory) that could not be written.
    pub path: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

impl std::fmt::Display for AtomicWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for AtomicWriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_whole_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/file");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["file"]);
    }

    #[test]
    fn a_failed_fill_keeps_the_old_file_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        write_atomic(&path, b"old").unwrap();
        let e = write_atomic_with(&path, |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("disk on fire"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("disk on fire"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_unwritable_target_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), b"").unwrap();
        let e = write_atomic(&dir.path().join("plain/child"), b"x").unwrap_err();
        assert!(e.to_string().contains("plain"), "{e}");
    }

    #[test]
    fn temporaries_are_recognised() {
        let t = temporary_name(Path::new("/x/18"));
        assert!(is_temporary(t.file_name().unwrap().to_str().unwrap()));
        assert!(!is_temporary("18"));
    }
}
