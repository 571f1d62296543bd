//! Encoded rows: key-value batches as bytes (keys and values encoded once, at the exchange that
//! needs them), their collection operations, and the groups they form.

use super::*;
use crate::batch::{Batch, BatchData, BatchKind, Bundle};
use crate::coders::CoderError;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// One row of an [`EncodedKvBatch`]: byte ranges of the key and value in `data`, plus metadata.
#[derive(Clone, Debug)]
pub struct EncodedRow {
    /// Start and end of the encoded key in the batch's data.
    pub key: (usize, usize),
    /// Start and end of the encoded value in the batch's data.
    pub value: (usize, usize),
    /// Element timestamp.
    pub timestamp: Timestamp,
    /// Element window.
    pub window: Window,
    /// Element pane.
    pub pane: PaneInfo,
}

/// KV elements with keys and values encoded into one buffer (no allocation per element).
#[derive(Default, Debug, Clone)]
pub struct EncodedKvBatch {
    /// Encoded keys and values, back to back.
    pub data: Vec<u8>,
    /// One row per element.
    pub rows: Vec<EncodedRow>,
    /// Whether the rows are [lifted rows](lifted_value), partial accumulators: the batch's
    /// length is then the number of inputs they combine, so element counts stay the input's.
    pub lifted: bool,
}

impl EncodedKvBatch {
    /// Encodes a batch of `KV<K, V>` (keys with `key`, values with `value`) and appends it.
    pub fn append<K, V>(
        &mut self,
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        value: &impl crate::coders::Coder<V>,
    ) -> Result<(), CoderError>
    where
        K: Clone + Send + 'static,
        V: Clone + Send + 'static,
    {
        self.append_with::<K, V>(input, key, |v, data| value.encode(v, data))
    }

    /// [`EncodedKvBatch::append`] with values written by `value` (which may keep scratch space).
    pub fn append_with<K: Clone + Send + 'static, V: Clone + Send + 'static>(
        &mut self,
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        value: impl FnMut(&V, &mut Vec<u8>) -> Result<(), CoderError>,
    ) -> Result<(), CoderError> {
        Self::append_split(std::slice::from_mut(self), input, key, value)
    }

    /// [`EncodedKvBatch::append_with`] into `parts`, each row into the part of its encoded
    /// key (as [`partition_of`] assigns keys among `parts.len()`): an exchange by key that
    /// encodes its input splits it on the way, without copying the rows again
    /// ([`EncodedKvBatch::partition`] does that for rows already encoded).
    pub fn append_split<K: Clone + Send + 'static, V: Clone + Send + 'static>(
        parts: &mut [EncodedKvBatch],
        input: Batch,
        key: &impl crate::coders::Coder<K>,
        mut value: impl FnMut(&V, &mut Vec<u8>) -> Result<(), CoderError>,
    ) -> Result<(), CoderError> {
        let input = Bundle::<crate::kv::KV<K, V>>::from_batch(input)?;
        let (n, n_parts) = (input.len(), parts.len());
        if n_parts == 0 {
            return Err(CoderError::new("internal error: rows split into no parts"));
        }
        let starts: Vec<usize> = parts.iter().map(|p| p.data.len()).collect();
        for p in parts.iter_mut() {
            p.rows.reserve(if n_parts == 1 { n } else { n / n_parts + n / (4 * n_parts) + 16 });
        }
        // One key is encoded aside to find its part when there are several.
        let mut scratch: Vec<u8> = Vec::new();
        let mut i = 0;
        input.try_for_each(|wv| {
            if i == 64 && n > 128 {
                // Room for the rest at the first rows' size: the buffers do not grow (and
                // copy themselves) a dozen times over a large batch.
                let written: usize = parts.iter().zip(&starts).map(|(p, s)| p.data.len() - s).sum();
                let rest = written / 64 * (n - 64) * 9 / 8;
                for p in parts.iter_mut() {
                    p.data.reserve(if n_parts == 1 { rest } else { rest / n_parts + rest / (4 * n_parts) });
                }
            }
            i += 1;
            let part = if n_parts == 1 {
                let part = &mut parts[0];
                let k0 = part.data.len();
                key.encode(&wv.value.key, &mut part.data)?;
                (part, k0)
            } else {
                scratch.clear();
                key.encode(&wv.value.key, &mut scratch)?;
                let part = &mut parts[partition_of(&scratch, n_parts)];
                let k0 = part.data.len();
                part.data.extend_from_slice(&scratch);
                (part, k0)
            };
            let (part, k0) = part;
            let k1 = part.data.len();
            value(&wv.value.value, &mut part.data)?;
            let v1 = part.data.len();
            part.rows.push(EncodedRow {
                key: (k0, k1),
                value: (k1, v1),
                timestamp: wv.timestamp,
                window: wv.window,
                pane: wv.pane,
            });
            Ok(())
        })
    }

    /// Appends one row: `key`'s bytes, and a value `value` writes after them.
    pub fn push_row<E>(
        &mut self,
        key: &[u8],
        timestamp: Timestamp,
        window: Window,
        value: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let k0 = self.data.len();
        self.data.extend_from_slice(key);
        let k1 = self.data.len();
        value(&mut self.data)?;
        let v1 = self.data.len();
        self.rows.push(EncodedRow {
            key: (k0, k1),
            value: (k1, v1),
            timestamp,
            window,
            pane: crate::pane::PaneInfo::NO_FIRING,
        });
        Ok(())
    }

    /// An empty batch with room for `rows` rows of `bytes` bytes in all, in recycled buffers
    /// when there are some that size.
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        EncodedKvBatch { data: recycle::take(bytes), rows: recycle::take(rows), lifted: false }
    }

    /// Gives the batch's buffers back for reuse.
    pub fn recycle(self) {
        recycle::give(self.data);
        recycle::give(self.rows);
    }

    /// Appends the rows of `other` (moving its buffers when this batch is empty); the buffers
    /// left over go back for reuse.
    pub fn extend(&mut self, mut other: EncodedKvBatch) {
        if self.rows.is_empty() {
            std::mem::replace(self, other).recycle();
            return;
        }
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.rows.extend(other.rows.drain(..).map(|mut r| {
            r.key = (r.key.0 + base, r.key.1 + base);
            r.value = (r.value.0 + base, r.value.1 + base);
            r
        }));
        other.recycle();
    }

    /// Splits the rows into `n` batches by the partition of their encoded key (as
    /// [`partition_of`] assigns keys), keeping their order.
    pub fn partition(self, n: usize) -> Vec<EncodedKvBatch> {
        if n <= 1 {
            return vec![self];
        }
        // Where each row goes, then parts sized exactly: growing them row by row would copy
        // and page-fault every part's buffers several times over.
        let targets: Vec<u32> =
            self.rows.iter().map(|r| partition_of(&self.data[r.key.0..r.key.1], n) as u32).collect();
        let mut sizes = vec![(0usize, 0usize); n];
        for (r, &t) in self.rows.iter().zip(&targets) {
            let s = &mut sizes[t as usize];
            s.0 += 1;
            s.1 += (r.key.1 - r.key.0) + (r.value.1 - r.value.0);
        }
        let mut parts: Vec<EncodedKvBatch> = sizes
            .iter()
            .map(|&(rows, bytes)| EncodedKvBatch { lifted: self.lifted, ..EncodedKvBatch::with_capacity(rows, bytes) })
            .collect();
        for (r, &t) in self.rows.iter().zip(&targets) {
            parts[t as usize].push_copy(&self.data, r);
        }
        self.recycle();
        parts
    }

    /// The encoded key of row `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let (a, b) = self.rows[i].key;
        &self.data[a..b]
    }
    /// The encoded value of row `i`.
    pub fn value(&self, i: usize) -> &[u8] {
        let (a, b) = self.rows[i].value;
        &self.data[a..b]
    }
}

/// [`CollectionOps`] for batches of [`EncodedKvBatch`]: the input of a grouping operator whose
/// inputs were encoded on the way in (a natively translated CoGroupByKey, a lifted combine).
#[derive(Default)]
pub struct EncodedKvOps;

impl BatchData for EncodedKvBatch {
    fn kind(&self) -> BatchKind {
        BatchKind::EncodedRows
    }
    fn len(&self) -> usize {
        if !self.lifted {
            return self.rows.len();
        }
        (0..self.rows.len()).map(|i| lifted_value(self.value(i)).map_or(1, |(n, _)| n as usize)).sum()
    }
    fn clone_batch(&self) -> Batch {
        Batch::new(self.clone())
    }
    fn split_batch(self: Box<Self>, max_len: usize) -> Vec<Batch> {
        if self.rows.len() <= max_len {
            return vec![Batch::new(*self)];
        }
        (0..self.rows.len())
            .step_by(max_len)
            .map(|start| Batch::new(self.copy_rows(self.rows[start..(start + max_len).min(self.rows.len())].iter())))
            .collect()
    }
    fn shuffle(&mut self, seed: u64) {
        self.rows.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
    }
    fn timestamp_stats(&self) -> crate::batch::TimestampStats {
        self.rows.iter().fold(crate::batch::NO_TIMESTAMPS, |(lo, hi, sum, n), r| {
            (lo.min(r.timestamp), hi.max(r.timestamp), sum + i128::from(r.timestamp), n + 1)
        })
    }
}

fn encoded(b: &Batch) -> &EncodedKvBatch {
    b.downcast_ref::<EncodedKvBatch>().unwrap_or_else(|| panic!("internal error: batch is not an EncodedKvBatch"))
}

fn take_encoded(b: Batch) -> EncodedKvBatch {
    *b.downcast::<EncodedKvBatch>().unwrap_or_else(|_| panic!("internal error: batch is not an EncodedKvBatch"))
}

impl EncodedKvBatch {
    /// A new batch of the rows `keep` selects (by index and row), in order.
    fn select(&self, mut keep: impl FnMut(usize, &EncodedRow) -> bool) -> EncodedKvBatch {
        self.copy_rows(self.rows.iter().enumerate().filter(|(i, r)| keep(*i, r)).map(|(_, r)| r))
    }

    /// A new batch holding copies of `rows` (rows of this batch).
    fn copy_rows<'a>(&self, rows: impl Iterator<Item = &'a EncodedRow>) -> EncodedKvBatch {
        let mut out = EncodedKvBatch { lifted: self.lifted, ..EncodedKvBatch::default() };
        for r in rows {
            out.push_copy(&self.data, r);
        }
        out
    }

    /// Appends a copy of row `r` of another batch whose buffer is `data`.
    fn push_copy(&mut self, data: &[u8], r: &EncodedRow) {
        let k0 = self.data.len();
        self.data.extend_from_slice(&data[r.key.0..r.key.1]);
        let k1 = self.data.len();
        self.data.extend_from_slice(&data[r.value.0..r.value.1]);
        self.rows.push(EncodedRow { key: (k0, k1), value: (k1, self.data.len()), ..r.clone() });
    }
}

impl CollectionOps for EncodedKvOps {
    fn type_name(&self) -> &'static str {
        "encoded key-value rows"
    }
    fn empty(&self) -> Batch {
        Batch::new(EncodedKvBatch::default())
    }
    fn concat(&self, parts: Vec<Batch>) -> Batch {
        let mut out = EncodedKvBatch::default();
        for p in parts {
            out.extend(take_encoded(p));
        }
        Batch::new(out)
    }
    fn check_encodable(&self, _: &Batch) -> Result<(), CoderError> {
        Ok(())
    }
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String> {
        let e = encoded(b);
        (0..e.rows.len().min(limit)).map(|i| format!("key {:?} value {:?}", e.key(i), e.value(i))).collect()
    }
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)> {
        let e = take_encoded(b);
        let mut groups: Vec<(Window, i64, EncodedKvBatch)> = Vec::new();
        let mut index: std::collections::HashMap<Window, usize> = std::collections::HashMap::new();
        for r in &e.rows {
            let pane = if r.pane.timing == crate::pane::Timing::Unknown { -1 } else { r.pane.index };
            let g = *index.entry(r.window).or_insert_with(|| {
                groups.push((r.window, pane, EncodedKvBatch::default()));
                groups.len() - 1
            });
            groups[g].1 = groups[g].1.max(pane);
            groups[g].2.push_copy(&e.data, r);
        }
        groups.into_iter().map(|(w, p, b)| (w, p, Batch::new(b))).collect()
    }
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch) {
        let e = take_encoded(b);
        let flags: Vec<bool> = e.rows.iter().map(|r| keep(&r.window)).collect();
        (Batch::new(e.select(|i, _| flags[i])), Batch::new(e.select(|i, _| !flags[i])))
    }
    fn estimated_bytes(&self, b: &Batch) -> usize {
        encoded(b).data.len()
    }
    /// The rows, for a batch that crosses processes: whether they are lifted, their count, then
    /// per row its key and value (each length-prefixed) and its timestamp, window and pane.
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError> {
        let e = encoded(b);
        let mut out = Vec::with_capacity(e.data.len() + 24 * e.rows.len() + 16);
        out.push(u8::from(e.lifted));
        crate::coders::write_varint(e.rows.len() as u64, &mut out);
        for r in &e.rows {
            for (a, z) in [r.key, r.value] {
                crate::coders::write_varint((z - a) as u64, &mut out);
                out.extend_from_slice(&e.data[a..z]);
            }
            let meta = postcard::to_stdvec(&(r.timestamp, r.window, r.pane))
                .map_err(|e| CoderError::new(format!("cannot encode element metadata: {e}")))?;
            out.extend_from_slice(&meta);
        }
        Ok(out)
    }
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError> {
        let (&lifted, mut rest) =
            bytes.split_first().ok_or_else(|| CoderError::new("an empty buffer is not encoded key-value rows"))?;
        if lifted > 1 {
            return Err(CoderError::new(format!("bad lifted flag {lifted} in encoded key-value rows")));
        }
        let n = crate::coders::read_varint(&mut rest)? as usize;
        let mut out = EncodedKvBatch { lifted: lifted == 1, ..Default::default() };
        out.rows.reserve(n.min(rest.len()));
        for _ in 0..n {
            let mut span = || -> Result<(usize, usize), CoderError> {
                let len = crate::coders::read_varint(&mut rest)? as usize;
                if len > rest.len() {
                    return Err(CoderError::new("encoded key-value rows end inside a row"));
                }
                let start = out.data.len();
                out.data.extend_from_slice(&rest[..len]);
                rest = &rest[len..];
                Ok((start, start + len))
            };
            let (key, value) = (span()?, span()?);
            let ((timestamp, window, pane), r): ((Timestamp, Window, PaneInfo), &[u8]) =
                postcard::take_from_bytes(rest)
                    .map_err(|e| CoderError::new(format!("cannot decode element metadata: {e}")))?;
            rest = r;
            out.rows.push(EncodedRow { key, value, timestamp, window, pane });
        }
        Ok(Batch::new(out))
    }
}

/// A finished group: one key, its values encoded back to back, and the output metadata.
#[derive(Debug)]
pub struct EncodedGroup {
    /// The encoded key.
    pub key: Vec<u8>,
    /// The encoded values, back to back.
    pub values: Vec<u8>,
    /// How many values `values` holds.
    pub count: usize,
    /// Output timestamp.
    pub timestamp: Timestamp,
    /// Output window.
    pub window: Window,
    /// Output pane.
    pub pane: PaneInfo,
}
