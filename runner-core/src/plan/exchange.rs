//! Exchanges: how a node's input reaches its partitions.
//!
//! Keyed nodes need every element of a key in one partition, so their input is split by the
//! hash of each element's encoded key ([`weir_sdk::kernel::partition_of`]). Two keyed nodes also
//! change the form of their input on the way: a natively translated CoGroupByKey encodes each
//! input's elements with its tag, and a lifted Combine.perKey combines each upstream batch per
//! key before anything is sent. Both are exchangers too, so a runner routes every node's input
//! the same way: through `exchange`, then into the partitions' pending input.

use std::sync::{Arc, Mutex};
use weir_sdk::kernel::{Batch, CollectionOps, CombineKernel, EncodedKvBatch, EncodedKvOps, KeyPartitioner};
use weir_sdk::runner_api::UnionEncoder;
use weir_sdk::{Error, Result};

/// Splits the batches going to a node into per-partition batches.
pub trait Exchanger: Send + Sync {
    /// Splits `batches` (what one upstream call produced for this input) into `partitions`
    /// lists of batches; empty batches are left out.
    fn exchange(&self, batches: Vec<Batch>, partitions: usize) -> Result<Vec<Vec<Batch>>>;
    /// The operations on the batches delivered, when they are not the input collection's (the
    /// exchange encodes them).
    fn delivered_ops(&self) -> Option<Arc<dyn CollectionOps>> {
        None
    }
}

/// How one main input reaches a node's partitions.
#[derive(Clone)]
pub enum Exchange {
    /// Each upstream partition's output goes to the same partition.
    Forward,
    /// Spread evenly over the partitions (Reshuffle).
    RoundRobin(Arc<dyn Exchanger>),
    /// By the hash of each element's encoded key.
    Hash(Arc<dyn Exchanger>),
}

impl Exchange {
    /// The exchange by key of a keyed input, split by `partitioner`.
    pub fn by_key(step: &str, partitioner: Arc<dyn KeyPartitioner>) -> Self {
        Exchange::Hash(Arc::new(KeyExchange { step: step.to_string(), partitioner }))
    }

    /// The exchange of a co-group's input: encoded with `encoder` (the input's tag), then split
    /// by key.
    pub fn encoding(step: &str, encoder: Arc<dyn UnionEncoder>) -> Self {
        Exchange::Hash(Arc::new(EncodingExchange { step: step.to_string(), encoder, hint: Mutex::default() }))
    }

    /// The exchange of a lifted combine: each upstream call's input combined per key and
    /// window into partial accumulators, which alone are encoded and split by key.
    pub fn partial_combine(step: &str, kernel: Arc<dyn CombineKernel>) -> Self {
        Exchange::Hash(Arc::new(PartialCombineExchange { step: step.to_string(), kernel }))
    }

    /// Routes what one upstream call produced (its batches per upstream partition) to
    /// `partitions` partitions. An exchange that moves data sees all of it at once: a lifted
    /// combine then combines every key of the call once, and a co-group encodes one batch.
    pub fn route(&self, per_partition: Vec<Vec<Batch>>, partitions: usize) -> Result<Vec<Vec<Batch>>> {
        let partitions = partitions.max(1);
        match self {
            Exchange::Forward => {
                let mut out: Vec<Vec<Batch>> = (0..partitions).map(|_| Vec::new()).collect();
                for (from, batches) in per_partition.into_iter().enumerate() {
                    out[from % partitions].extend(batches);
                }
                Ok(out)
            }
            Exchange::RoundRobin(x) | Exchange::Hash(x) => {
                let all: Vec<Batch> = per_partition.into_iter().flatten().collect();
                if all.is_empty() {
                    return Ok((0..partitions).map(|_| Vec::new()).collect());
                }
                x.exchange(all, partitions)
            }
        }
    }

    /// The exchanger of an exchange that moves data between partitions.
    pub fn exchanger(&self) -> Option<&Arc<dyn Exchanger>> {
        match self {
            Exchange::Forward => None,
            Exchange::RoundRobin(x) | Exchange::Hash(x) => Some(x),
        }
    }

    /// What the batches delivered are, when the exchange changes their form.
    pub fn delivered_ops(&self) -> Option<Arc<dyn CollectionOps>> {
        match self {
            Exchange::Forward => None,
            Exchange::RoundRobin(x) | Exchange::Hash(x) => x.delivered_ops(),
        }
    }

    /// The exchange as Spark's plans print it.
    pub fn describe(&self, partitions: usize) -> String {
        match self {
            Exchange::Forward => "forward".to_string(),
            Exchange::RoundRobin(_) => format!("roundrobinpartitioning({partitions})"),
            Exchange::Hash(_) => format!("hashpartitioning(encoded key, {partitions})"),
        }
    }
}

/// Splits keyed batches by key with the input's partitioner.
struct KeyExchange {
    step: String,
    partitioner: Arc<dyn KeyPartitioner>,
}

impl Exchanger for KeyExchange {
    fn exchange(&self, batches: Vec<Batch>, partitions: usize) -> Result<Vec<Vec<Batch>>> {
        let mut out: Vec<Vec<Batch>> = (0..partitions).map(|_| Vec::new()).collect();
        for b in batches {
            let pieces = self
                .partitioner
                .partition(b, partitions)
                .map_err(|source| Error::Coder { step: self.step.clone(), source })?;
            for (q, piece) in pieces.into_iter().enumerate() {
                if !piece.is_empty() {
                    out[q].push(piece);
                }
            }
        }
        Ok(out)
    }
}

/// Splits encoded rows by key into partitions, leaving out empty ones.
fn split_encoded(rows: EncodedKvBatch, partitions: usize) -> Vec<Vec<Batch>> {
    delivered(rows.partition(partitions))
}

/// Each partition's rows as its batches: one, or none (its buffers recycled) when empty.
fn delivered(parts: Vec<EncodedKvBatch>) -> Vec<Vec<Batch>> {
    parts
        .into_iter()
        .map(|part| {
            if part.rows.is_empty() {
                part.recycle();
                Vec::new()
            } else {
                vec![Batch::new(part)]
            }
        })
        .collect()
}

/// Encodes a co-group input's batches with its tag, then splits the rows by key.
struct EncodingExchange {
    step: String,
    encoder: Arc<dyn UnionEncoder>,
    /// Rows and bytes of the last call's encoding: the next one starts with room for as much.
    hint: Mutex<(usize, usize)>,
}

impl Exchanger for EncodingExchange {
    fn exchange(&self, batches: Vec<Batch>, partitions: usize) -> Result<Vec<Vec<Batch>>> {
        // The bundles of one call are encoded into one batch per partition, each row straight
        // into its key's part: the grouping operator then takes few, large batches as they
        // are, and no row is copied a second time to split them.
        let partitions = partitions.max(1);
        let (hint_rows, hint_bytes) = *self.hint.lock().unwrap_or_else(|e| e.into_inner());
        let mut parts: Vec<EncodedKvBatch> = (0..partitions)
            .map(|_| EncodedKvBatch::with_capacity(hint_rows / partitions, hint_bytes / partitions))
            .collect();
        for b in batches {
            self.encoder.encode(b, &mut parts).map_err(|source| Error::Coder { step: self.step.clone(), source })?;
        }
        let (rows, bytes) = parts.iter().fold((0, 0), |(r, b), p| (r + p.rows.len(), b + p.data.len()));
        *self.hint.lock().unwrap_or_else(|e| e.into_inner()) = (rows, bytes);
        Ok(delivered(parts))
    }
    fn delivered_ops(&self) -> Option<Arc<dyn CollectionOps>> {
        Some(Arc::new(EncodedKvOps))
    }
}

/// Combiner lifting's first half: partial accumulators per key and window, then split by key.
struct PartialCombineExchange {
    step: String,
    kernel: Arc<dyn CombineKernel>,
}

impl Exchanger for PartialCombineExchange {
    fn exchange(&self, batches: Vec<Batch>, partitions: usize) -> Result<Vec<Vec<Batch>>> {
        let mut rows = EncodedKvBatch { lifted: true, ..EncodedKvBatch::default() };
        crate::do_fn_runner::guarded(&self.step, "partial combine", || self.kernel.partial(batches, &mut rows))?;
        Ok(split_encoded(rows, partitions))
    }
    fn delivered_ops(&self) -> Option<Arc<dyn CollectionOps>> {
        Some(Arc::new(EncodedKvOps))
    }
}

/// Spreads a batch over the partitions in nearly equal parts (Reshuffle).
pub struct Spread;

impl Spread {
    /// The round-robin exchange.
    pub fn exchange() -> Exchange {
        Exchange::RoundRobin(Arc::new(Spread))
    }
}

impl Exchanger for Spread {
    fn exchange(&self, batches: Vec<Batch>, partitions: usize) -> Result<Vec<Vec<Batch>>> {
        let mut out: Vec<Vec<Batch>> = (0..partitions).map(|_| Vec::new()).collect();
        for input in batches {
            let len = input.len();
            if len == 0 {
                continue;
            }
            let parts = input.split(len.div_ceil(partitions).max(1));
            // Rotated so that small batches do not all land in partition 0.
            let shift = (len * 7919) % partitions;
            for (k, part) in parts.into_iter().enumerate() {
                out[(k + partitions - shift) % partitions].push(part);
            }
        }
        Ok(out)
    }
}
