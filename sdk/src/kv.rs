//! Key/value pairs, the input of every keyed transform.

use serde::{Deserialize, Serialize};

/// A key/value pair (Beam's `KV`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KV<K, V> {
    /// The key.
    pub key: K,
    /// The value.
    pub value: V,
}

impl<K, V> KV<K, V> {
    /// A new pair.
    pub fn new(key: K, value: V) -> Self {
        KV { key, value }
    }
}

impl<K, V> From<(K, V)> for KV<K, V> {
    fn from((key, value): (K, V)) -> Self {
        KV { key, value }
    }
}
