//! Partitioning and key groups: how a key's bytes pick its key group and its partition, the same
//! in every process and every runner (a checkpoint's state is keyed by key group).

use crate::batch::{downcast_batch, Batch};
use crate::coders::{CoderError, Element};
use crate::windowed_value::WindowedValue;

/// Splits keyed batches by key into partitions (the exchange before a keyed operator). The
/// partition of a key depends only on its encoded bytes, so it is stable across runs.
pub trait KeyPartitioner: Send + Sync {
    /// Splits `input` into `n` batches by the hash of each element's encoded key.
    fn partition(&self, input: Batch, n: usize) -> Result<Vec<Batch>, CoderError>;
}

/// The name and version of [`partition_of`]'s key-to-partition mapping. Checkpoints record it:
/// state written under one mapping cannot be read back under another.
pub const PARTITIONING: &str = "fnv1a64+fmix64 into 4096 key groups, range-assigned, v3";

/// The number of key groups keys fall into (Flink's maximum parallelism): a partition holds a
/// contiguous range of them, so state written by some number of partitions can be spread over
/// another number, key group by key group.
pub const KEY_GROUPS: usize = 4096;

/// The key group of an encoded key: FNV-1a over the bytes, then MurmurHash3's 64-bit finalizer,
/// stable across processes and versions ([`PARTITIONING`]). FNV-1a alone leaves the low bits of
/// the hash a function of the low bits of each byte only, so one-byte keys that differ in high
/// bits (small integers) would all share a group; the finalizer mixes every input bit into every
/// output bit.
pub fn key_group(key: &[u8]) -> usize {
    (fmix64(fnv1a(FNV1A_BASIS, key)) % KEY_GROUPS as u64) as usize
}

/// FNV-1a's offset basis: the hash of no bytes.
pub const FNV1A_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// Hash `h` (FNV-1a, 64 bits) continued over `bytes`: stable across processes, platforms and
/// versions, as what checkpoints and brokers keep needs (a key group, a restriction's
/// fingerprint, a sink's transactional id).
pub fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The partition of an encoded key among `n`: its key group's, groups assigned to partitions in
/// contiguous ranges (group `g` to partition `g * n / KEY_GROUPS`, as Flink assigns them).
pub fn partition_of(key: &[u8], n: usize) -> usize {
    key_group(key) * n.max(1) / KEY_GROUPS
}

/// MurmurHash3's 64-bit finalizer: every input bit flips each output bit with probability
/// about one half.
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// [`KeyPartitioner`] for `KV<K, V>` batches.
pub struct KvPartitioner<K, V>(std::marker::PhantomData<fn() -> (K, V)>);

impl<K, V> Default for KvPartitioner<K, V> {
    fn default() -> Self {
        KvPartitioner(std::marker::PhantomData)
    }
}

impl<K: Element, V: Element> KeyPartitioner for KvPartitioner<K, V> {
    fn partition(&self, input: Batch, n: usize) -> Result<Vec<Batch>, CoderError> {
        use crate::coders::Coder;
        if n <= 1 {
            // One partition: every key goes there, no key needs encoding.
            return Ok(vec![input]);
        }
        let input = downcast_batch::<crate::kv::KV<K, V>>(input)?;
        let mut parts: Vec<Vec<WindowedValue<crate::kv::KV<K, V>>>> = (0..n).map(|_| Vec::new()).collect();
        let coder = crate::coders::ElementCoder::<K>::new();
        let mut key = Vec::new();
        for wv in input {
            key.clear();
            coder.encode(&wv.value.key, &mut key)?;
            parts[partition_of(&key, n)].push(wv);
        }
        Ok(parts.into_iter().map(Batch::new).collect())
    }
}
