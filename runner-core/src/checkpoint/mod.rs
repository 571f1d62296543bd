//! Checkpoints, in the parts every runner shares: the encoding of operator state (postcard with a
//! step-named error on failure), log entries ([`log`]), state files ([`state_files`]), where a
//! checkpoint lives ([`store`]) and the lock on a local one ([`lock`]).

pub mod compaction;
pub mod lease;
pub mod lock;
pub mod log;
#[cfg(feature = "s3")]
mod object;
#[cfg(not(feature = "s3"))]
#[path = "object_absent.rs"]
mod object;
pub mod protocol;
pub mod state_files;
pub mod store;

use serde::de::DeserializeOwned;
use serde::Serialize;
use weir_sdk::{Error, Result};

/// An operator's state entries: encoded keys and values.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// What of an operator's state changed since a checkpoint last took it (its keys and windows,
/// or whatever its entries are made of), for deltas that cost what changed
/// ([`crate::operator::Operator::take_changed_entries`]). Nothing is kept until a checkpoint
/// first asks: a run without checkpoints would keep every key it ever touched.
pub struct Changed<K>(Option<hashbrown::HashSet<K>>);

impl<K> Default for Changed<K> {
    fn default() -> Self {
        Changed(None)
    }
}

impl<K: std::hash::Hash + Eq> Changed<K> {
    /// Notes that `k` changed, if changes are kept.
    pub fn mark(&mut self, k: K) {
        if let Some(set) = &mut self.0 {
            set.insert(k);
        }
    }

    /// Notes that each of `ks` changed, if changes are kept.
    pub fn mark_all(&mut self, ks: impl IntoIterator<Item = K>) {
        if let Some(set) = &mut self.0 {
            set.extend(ks);
        }
    }

    /// Whether changes are kept.
    pub fn is_kept(&self) -> bool {
        self.0.is_some()
    }

    /// What changed since the last call; `None` at the first, from which on changes are kept.
    /// The next set starts as large as this one: a batch changes about as much as the last,
    /// and growing the set again, rehashing, cost as much as marking.
    pub fn take(&mut self) -> Option<hashbrown::HashSet<K>> {
        let capacity = self.0.as_ref().map_or(0, hashbrown::HashSet::len);
        self.0.replace(hashbrown::HashSet::with_capacity(capacity))
    }

    /// Keeps changes from now on (a restore: the state is what was committed, so the next
    /// take reports what changed since), keeping those noted so far if changes were kept.
    pub fn keep(&mut self) {
        if self.0.is_none() {
            self.0 = Some(hashbrown::HashSet::new());
        }
    }

    /// Forgets what changed (the state was restored to what was committed).
    pub fn forget(&mut self) {
        if let Some(set) = &mut self.0 {
            set.clear();
        }
    }
}

/// Spreads keyed state that `old.len()` partitions wrote over `n` partitions (a restart at
/// another parallelism): each entry keyed by [`entry_key`] goes to its key's partition
/// ([`weir_sdk::kernel::partition_of`], key group by key group, as the exchange sends the key's
/// elements); the entries with the empty key (each partition's own bookkeeping: watermarks,
/// counts) are merged by `merge_meta` and the result given to every new partition.
pub fn spread_keyed(
    step: &str,
    old: Vec<Entries>,
    n: usize,
    merge_meta: impl FnOnce(Vec<Vec<u8>>) -> Result<Vec<u8>>,
) -> Result<Vec<Entries>> {
    let mut out: Vec<Entries> = (0..n.max(1)).map(|_| Vec::new()).collect();
    let mut metas = Vec::new();
    for (k, v) in old.into_iter().flatten() {
        match keyed_partition(step, &k, n)? {
            Some(p) => out[p].push((k, v)),
            None => metas.push(v),
        }
    }
    if !metas.is_empty() {
        let meta = merge_meta(metas)?;
        for p in &mut out {
            p.push((Vec::new(), meta.clone()));
        }
    }
    Ok(out)
}

/// The partition, of `n`, that [`spread_keyed`] gives entry `entry` to; `None` for the empty
/// key (a partition's bookkeeping, merged).
pub fn keyed_partition(step: &str, entry: &[u8], n: usize) -> Result<Option<usize>> {
    if entry.is_empty() {
        return Ok(None);
    }
    Ok(Some(weir_sdk::kernel::partition_of(entry_key_parts(step, entry)?.0, n.max(1))))
}

/// The key and the encoded window of an entry key written by [`entry_key`], borrowed.
fn entry_key_parts<'a>(step: &str, entry: &'a [u8]) -> Result<(&'a [u8], &'a [u8])> {
    let mut rest = entry;
    let n = weir_sdk::coders::read_varint(&mut rest)
        .map_err(|e| Error::execution(step, format!("corrupt state entry key: {e}")))? as usize;
    if rest.len() < n {
        return Err(Error::execution(step, "corrupt state entry key: truncated"));
    }
    Ok(rest.split_at(n))
}

/// Encodes operator state.
pub fn encode<T: Serialize>(step: &str, value: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(value)
        .map_err(|e| Error::Internal { component: format!("state of {step}"), message: format!("cannot encode: {e}") })
}

/// Decodes operator state written by [`encode`]; a corrupt snapshot is an error naming the step.
pub fn decode<T: DeserializeOwned>(step: &str, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Execution {
        step: step.to_string(),
        message: format!("corrupt state snapshot ({} bytes): {e}", bytes.len()),
    })
}

/// The entry key of a key and window: the key's length, the key, then the window.
pub fn entry_key(step: &str, key: &[u8], window: &weir_sdk::window::Window) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(key.len() + 24);
    weir_sdk::coders::write_varint(key.len() as u64, &mut out);
    out.extend_from_slice(key);
    out.extend_from_slice(&encode(step, window)?);
    Ok(out)
}

/// Splits an entry key written by [`entry_key`].
pub fn split_entry_key(step: &str, entry: &[u8]) -> Result<(Vec<u8>, weir_sdk::window::Window)> {
    let (key, window) = entry_key_parts(step, entry)?;
    Ok((key.to_vec(), decode(step, window)?))
}
