//! Leases on object-store checkpoints: the lock a local directory has through `flock`, for a
//! checkpoint in S3 that processes on several machines share.
//!
//! A lease is an object (`lease-N` for process N) naming its holder and when it expires. It is
//! taken with a conditional create (`If-None-Match: *`), so of two clusters started on one URL
//! only one gets it; it is renewed while the holder runs (a conditional replace, `If-Match` the
//! holder's last write), so it never expires under a live holder; and it is taken over only
//! when it has expired, or when its holder was a process of this machine that no longer runs
//! (a restart after a SIGKILL need not wait for the expiry). A holder that finds its lease
//! replaced has lost it: [`Lease::check`] then fails, naming the new holder, before anything
//! more is committed. The holder releases its lease when it stops (writes it expired, so the
//! next holder takes it over at once).

use super::lock::{host_name, this_process};
use super::log::refused;
use super::store::Location;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_sdk::Result;

/// How long a lease lasts without a renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(30);
/// How often a holder renews its lease.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// What a lease object holds.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Held {
    /// `pid P on host H since T`.
    holder: String,
    pid: u32,
    host: String,
    /// Wall-clock ms when the lease ends without a renewal.
    expires_ms: i64,
}

impl Held {
    fn mine() -> Held {
        Held {
            holder: this_process(),
            pid: std::process::id(),
            host: host_name(),
            expires_ms: weir_sdk::time::now_millis() + LEASE_TTL.as_millis() as i64,
        }
    }

    /// Whether nobody holds it any more: it expired, or its holder ran here and is gone.
    fn is_stale(&self) -> bool {
        let dead_here = self.host == host_name() && self.pid != std::process::id() && !runs(self.pid);
        dead_here || self.expires_ms < weir_sdk::time::now_millis()
    }
}

/// Whether process `pid` of this machine runs (a zombie, killed but not yet reaped, does not).
fn runs(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The state a lease shares with its renewing thread.
struct Shared {
    loc: Location,
    key: String,
    /// The entity tag of the holder's last write.
    tag: Mutex<String>,
    /// Why the lease is no longer held, once it is not.
    lost: Mutex<Option<String>>,
    stop: AtomicBool,
}

impl Shared {
    /// Renews the lease (a conditional replace of the holder's last write).
    fn renew(&self) -> Result<()> {
        if let Some(why) = self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(refused(&self.loc.name(&self.key), why));
        }
        let mut tag = self.tag.lock().unwrap_or_else(|e| e.into_inner());
        let body = serde_json::to_vec(&Held::mine()).unwrap_or_default();
        match self.loc.put_conditionally(&self.key, body, Some(&tag))? {
            Some(new) => {
                *tag = new;
                Ok(())
            }
            None => {
                let holder = match self.loc.get_tagged(&self.key) {
                    Ok(Some((bytes, _))) => {
                        serde_json::from_slice::<Held>(&bytes).map_or_else(|_| "another process".into(), |h| h.holder)
                    }
                    _ => "another process".into(),
                };
                let why = format!(
                    "this query lost its lease on the checkpoint to {holder} (its renewals were late by more than \
                     {}s); stopping before it commits anything more",
                    LEASE_TTL.as_secs()
                );
                *self.lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                Err(refused(&self.loc.name(&self.key), why))
            }
        }
    }
}

/// A held lease (see the module documentation); released when dropped.
pub struct Lease {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Lease {
    /// Takes the lease `name` of the object-store checkpoint `loc`, waiting up to `patience`
    /// for a holder that is stopping; a lease still held after that is refused, naming its
    /// holder.
    pub fn acquire(loc: &Location, name: &str, patience: Duration) -> Result<Lease> {
        let deadline = Instant::now() + patience;
        let shown = loc.name(name);
        let tag = loop {
            let body = serde_json::to_vec(&Held::mine()).unwrap_or_default();
            if let Some(tag) = loc.put_conditionally(name, body.clone(), None)? {
                break tag;
            }
            match loc.get_tagged(name)? {
                // Released in between: try again.
                None => continue,
                Some((bytes, tag)) => {
                    let held = serde_json::from_slice::<Held>(&bytes).ok();
                    if held.as_ref().is_none_or(Held::is_stale) {
                        let was = held.map_or_else(|| "an unreadable lease".to_string(), |h| h.holder);
                        if let Some(tag) = loc.put_conditionally(name, body, Some(&tag))? {
                            tracing::warn!(lease = %shown, "taking over a stale checkpoint lease: its holder, {was}, no longer runs");
                            break tag;
                        }
                        continue;
                    }
                    if Instant::now() >= deadline {
                        let holder = held.map(|h| h.holder).unwrap_or_default();
                        return Err(refused(
                            &loc.name(""),
                            format!(
                                "in use: leased by {holder} ({shown}); two queries on one checkpoint would overwrite \
                                 each other's commits. Stop that query first, or use another --checkpoint-dir"
                            ),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        };
        let shared = Arc::new(Shared {
            loc: loc.clone(),
            key: name.to_string(),
            tag: Mutex::new(tag),
            lost: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let renewing = shared.clone();
        let thread = std::thread::Builder::new()
            .name("weir-lease".into())
            .spawn(move || {
                let mut last = Instant::now();
                while !renewing.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                    if last.elapsed() >= RENEW_EVERY {
                        last = Instant::now();
                        if let Err(e) = renewing.renew() {
                            tracing::warn!("{e}");
                            if renewing.lost.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                                return;
                            }
                        }
                    }
                }
            })
            .map_err(|e| super::log::io(&shown, format!("cannot start renewing the lease: {e}")))?;
        Ok(Lease { shared, thread: Some(thread) })
    }

    /// Renews the lease now, failing if it was lost: called before each commit, so that a
    /// process whose lease another took over commits nothing more.
    pub fn check(&self) -> Result<()> {
        self.shared.renew()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.shared.lost.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            // Released: expired at once, for whoever comes next (a conditional replace, so a
            // lease another has taken is left alone).
            let tag = self.shared.tag.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let released = Held { expires_ms: 0, ..Held::mine() };
            let _ = self.shared.loc.put_conditionally(
                &self.shared.key,
                serde_json::to_vec(&released).unwrap_or_default(),
                Some(&tag),
            );
        }
    }
}
