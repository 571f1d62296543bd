//! Exclusive locks on local checkpoint directories, held for the life of a query.

use super::log::{io, refused};
use std::path::Path;
use std::time::{Duration, Instant};
use weir_sdk::Result;

/// An exclusive lock (`flock`) on a file of a checkpoint directory, held for the life of the
/// query. The lock file says who holds it; the OS releases the lock when its holder dies, so a
/// lock file whose holder is gone is detected as stale and taken over.
pub struct DirLock {
    file: std::fs::File,
}

/// This machine's host name, for lock files.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "an unknown host".into())
}

/// How long a run waits for the holder of its checkpoint's lock to stop before refusing: a
/// process that was just killed (a script's `timeout -s KILL`, then a restart) may not have been
/// reaped yet, and holds its lock until it is.
pub const STOPPING_HOLDER_PATIENCE: Duration = Duration::from_secs(10);

/// How a checkpoint's lock or lease names this process: `pid P on host H since T`.
pub fn this_process() -> String {
    format!(
        "pid {} on host {} since {}",
        std::process::id(),
        host_name(),
        weir_sdk::time::iso8601(weir_sdk::time::now_millis())
    )
}

impl DirLock {
    /// Locks `root/name`, waiting up to `patience` for a holder that is stopping; a lock still
    /// held after that is refused, naming its holder.
    pub fn acquire(root: &Path, name: &str, patience: Duration) -> Result<Self> {
        use std::io::{Read, Seek, Write};
        let path = root.join(name);
        let shown = path.display().to_string();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io(&shown, e))?;
        let mut holder = String::new();
        let deadline = Instant::now() + patience;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim();
                    let holder = if holder.is_empty() { "another process" } else { holder };
                    return Err(refused(
                        &root.display().to_string(),
                        format!(
                            "in use: locked by {holder} ({shown}); two queries on one checkpoint directory would \
                             overwrite each other's logs. Stop that query first, or use another --checkpoint-dir"
                        ),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(&shown, format!("cannot lock: {e}"))),
            }
        }
        file.read_to_string(&mut holder).map_err(|e| io(&shown, e))?;
        if !holder.trim().is_empty() {
            tracing::warn!(
                lock = %shown,
                "taking over a stale checkpoint lock: its holder, {}, no longer runs",
                holder.trim()
            );
        }
        let me = format!("{}\n", this_process());
        file.set_len(0).map_err(|e| io(&shown, e))?;
        file.rewind().map_err(|e| io(&shown, e))?;
        file.write_all(me.as_bytes()).map_err(|e| io(&shown, e))?;
        file.sync_all().map_err(|e| io(&shown, e))?;
        Ok(DirLock { file })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // An empty lock file marks a clean stop; the lock itself goes with the file handle. The
        // file is not removed: a process waiting on the old file would then lock a file nobody
        // else sees.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_names_its_holder_and_a_stale_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path(), "lock", Duration::ZERO).unwrap();
        let e = DirLock::acquire(dir.path(), "lock", Duration::from_millis(100))
            .err()
            .expect("a second lock is refused")
            .to_string();
        assert!(e.contains("in use") && e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        assert_eq!(std::fs::read_to_string(dir.path().join("lock")).unwrap(), "");
        // A lock file left by a holder that died: nobody holds the lock, so it is taken over.
        std::fs::write(dir.path().join("lock"), "pid 1 on host elsewhere since then\n").unwrap();
        let _again = DirLock::acquire(dir.path(), "lock", Duration::ZERO).unwrap();
        assert!(std::fs::read_to_string(dir.path().join("lock"))
            .unwrap()
            .contains(&format!("pid {}", std::process::id())));
    }
}
