//! Per-collection operations a runner calls without the element type: empty batches, joins,
//! encodings, renderings, splits by window.

use super::*;
use crate::batch::BatchRef;
use crate::batch::{Batch, BatchKind, Bundle, UniformBatch};
use crate::coders::{check_roundtrip, CoderError, CoderRef, Element};
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use crate::windowed_value::WindowedValue;

/// What a runner does with the batches of one PCollection that needs its element type or
/// coder: make empty batches, join them, check and estimate encodings, render elements for
/// messages, split by window. Built when the element type was known. (What every batch knows
/// by itself, its length, kind, clones and splits, is [`Batch`]'s.)
pub trait CollectionOps: Send + Sync {
    /// The Rust element type, for messages.
    fn type_name(&self) -> &'static str;
    /// A new empty batch.
    fn empty(&self) -> Batch;
    /// A new empty batch with room for `n` elements (a recycled buffer when one fits).
    fn empty_with_capacity(&self, n: usize) -> Batch {
        let _ = n;
        self.empty()
    }
    /// Concatenates batches.
    fn concat(&self, parts: Vec<Batch>) -> Batch;
    /// Checks that every element round-trips through the PCollection's coder.
    fn check_encodable(&self, b: &Batch) -> Result<(), CoderError>;
    /// Renders up to `limit` elements for messages.
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String>;
    /// Splits a batch by window: each window with its elements and the highest pane index among
    /// them, or -1 when no trigger produced them (their window is complete only once the
    /// watermark passes its end).
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)>;
    /// Splits a batch into the elements whose window `keep` accepts and the others.
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch);
    /// The encoded size of a batch, estimated from a sample of up to 16 elements.
    fn estimated_bytes(&self, b: &Batch) -> usize;
    /// Encodes a whole batch (values with timestamps, windows and panes), for checkpoints.
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError>;
    /// Decodes a batch written by `encode_batch`.
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError>;
}

/// [`CollectionOps`] for elements of type `T` with a given coder.
pub struct TypedCollectionOps<T> {
    coder: CoderRef<T>,
}

impl<T: Element> TypedCollectionOps<T> {
    /// Operations for `T` coded with `coder`.
    pub fn new(coder: CoderRef<T>) -> Self {
        TypedCollectionOps { coder }
    }
}

fn batch_ref<T: 'static>(b: &Batch) -> BatchRef<'_, T> {
    let r = match b.kind() {
        BatchKind::Rows => b.downcast_ref::<Vec<WindowedValue<T>>>().map(|r| BatchRef::Rows(r)),
        BatchKind::Uniform => b.downcast_ref::<UniformBatch<T>>().map(BatchRef::Uniform),
        _ => None,
    };
    r.unwrap_or_else(|| {
        panic!("internal error: a batch of {:?} is not of type {}", b.kind(), std::any::type_name::<T>())
    })
}

fn unbox<T: Clone + Send + 'static>(b: Batch) -> Bundle<T> {
    Bundle::from_batch(b).unwrap_or_else(|e| panic!("{e}"))
}

impl<T: Element> CollectionOps for TypedCollectionOps<T> {
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn empty(&self) -> Batch {
        Batch::new(Vec::<WindowedValue<T>>::new())
    }
    fn empty_with_capacity(&self, n: usize) -> Batch {
        Batch::new(recycle::take::<WindowedValue<T>>(n))
    }
    fn concat(&self, parts: Vec<Batch>) -> Batch {
        let parts: Vec<Bundle<T>> = parts.into_iter().map(unbox).filter(|p| !p.is_empty()).collect();
        // Uniform parts with one metadata stay uniform.
        if let Some(Bundle::Uniform(first)) = parts.first() {
            if parts.iter().all(|p| matches!(p, Bundle::Uniform(u) if u.same_metadata(first))) {
                let mut uniforms = parts.into_iter().map(|p| match p {
                    Bundle::Uniform(u) => u,
                    Bundle::Rows(_) => unreachable!("all parts are uniform"),
                });
                let mut out = uniforms.next().expect("a first part");
                uniforms.for_each(|u| out.values.extend(u.values));
                return Batch::new(out);
            }
        }
        let mut out: Vec<WindowedValue<T>> = Vec::new();
        for p in parts {
            if out.is_empty() {
                out = p.into_rows();
            } else {
                p.append_rows_to(&mut out);
            }
        }
        Batch::new(out)
    }
    fn check_encodable(&self, b: &Batch) -> Result<(), CoderError> {
        batch_ref::<T>(b).values().try_for_each(|v| check_roundtrip(&*self.coder, v))
    }
    fn describe(&self, b: &Batch, limit: usize) -> Vec<String> {
        batch_ref::<T>(b).values().take(limit).map(|v| format!("{v:?}")).collect()
    }
    fn group_by_window(&self, b: Batch) -> Vec<(Window, i64, Batch)> {
        // Elements no trigger produced (e.g. straight from a source) carry no pane: -1.
        let pane_of = |p: &PaneInfo| if p.timing == crate::pane::Timing::Unknown { -1 } else { p.index };
        let v = match unbox::<T>(b) {
            Bundle::Uniform(u) if u.values.is_empty() => return Vec::new(),
            Bundle::Uniform(u) => return vec![(u.window, pane_of(&u.pane), Batch::new(u))],
            Bundle::Rows(r) => r,
        };
        // One window (fixed windows, a side input's singleton): the batch as it is, not copied.
        if let Some(first) = v.first().map(|wv| wv.window) {
            if v.iter().all(|wv| wv.window == first) {
                let pane = v.iter().map(|wv| pane_of(&wv.pane)).max().unwrap_or(-1);
                return vec![(first, pane, Batch::new(v))];
            }
        }
        // Sessions give a side input thousands of windows per batch: found by hash, not scan.
        // A first pass numbers the groups and counts them, so each is allocated once, exactly.
        let mut groups: Vec<(Window, i64, usize)> = Vec::new();
        let mut index: hashbrown::HashMap<Window, usize> = hashbrown::HashMap::new();
        let of: Vec<u32> = v
            .iter()
            .map(|wv| {
                let g = *index.entry(wv.window).or_insert_with(|| {
                    groups.push((wv.window, -1, 0));
                    groups.len() - 1
                });
                groups[g].1 = groups[g].1.max(pane_of(&wv.pane));
                groups[g].2 += 1;
                g as u32
            })
            .collect();
        let mut parts: Vec<Vec<WindowedValue<T>>> = groups.iter().map(|g| Vec::with_capacity(g.2)).collect();
        for (wv, g) in v.into_iter().zip(of) {
            parts[g as usize].push(wv);
        }
        groups.into_iter().zip(parts).map(|((w, p, _), v)| (w, p, Batch::new(v))).collect()
    }
    fn estimated_bytes(&self, b: &Batch) -> usize {
        let b = batch_ref::<T>(b);
        let sample = b.len().min(16);
        if sample == 0 {
            return 0;
        }
        // An unencodable element counts as nothing here; encodability is checked elsewhere.
        let bytes: usize = b.values().take(sample).map(|v| self.coder.encoded_len(v).unwrap_or(0)).sum();
        bytes * b.len() / sample
    }
    fn encode_batch(&self, b: &Batch) -> Result<Vec<u8>, CoderError> {
        let b = batch_ref::<T>(b);
        let mut out = Vec::new();
        crate::coders::write_varint(b.len() as u64, &mut out);
        b.try_for_each(|value, timestamp, window, pane| {
            self.coder.encode(value, &mut out)?;
            let meta = postcard::to_stdvec(&(timestamp, window, pane))
                .map_err(|e| CoderError::new(format!("cannot encode element metadata: {e}")))?;
            out.extend_from_slice(&meta);
            Ok(())
        })?;
        Ok(out)
    }
    fn decode_batch(&self, bytes: &[u8]) -> Result<Batch, CoderError> {
        let mut rest = bytes;
        let n = crate::coders::read_varint(&mut rest)? as usize;
        let mut out: Vec<WindowedValue<T>> = Vec::with_capacity(n.min(rest.len()));
        for _ in 0..n {
            let value = self.coder.decode(&mut rest)?;
            let ((timestamp, window, pane), r): ((Timestamp, Window, PaneInfo), &[u8]) =
                postcard::take_from_bytes(rest)
                    .map_err(|e| CoderError::new(format!("cannot decode element metadata: {e}")))?;
            rest = r;
            out.push(WindowedValue { value, timestamp, window, pane });
        }
        Ok(Batch::new(out))
    }
    fn partition_by_window(&self, b: Batch, keep: &mut dyn FnMut(&Window) -> bool) -> (Batch, Batch) {
        match unbox::<T>(b) {
            Bundle::Uniform(u) => {
                if keep(&u.window) {
                    (Batch::new(u), self.empty())
                } else {
                    (self.empty(), Batch::new(u))
                }
            }
            Bundle::Rows(v) => {
                // One verdict per element, then either side whole (the usual case: a batch
                // all ready or all waiting is not copied) or both sized exactly.
                let verdicts: Vec<bool> = v.iter().map(|wv| keep(&wv.window)).collect();
                let kept = verdicts.iter().filter(|&&k| k).count();
                if kept == v.len() {
                    return (Batch::new(v), self.empty());
                }
                if kept == 0 {
                    return (self.empty(), Batch::new(v));
                }
                let (mut yes, mut no) = (Vec::with_capacity(kept), Vec::with_capacity(v.len() - kept));
                for (wv, k) in v.into_iter().zip(verdicts) {
                    if k {
                        yes.push(wv);
                    } else {
                        no.push(wv);
                    }
                }
                (Batch::new(yes), Batch::new(no))
            }
        }
    }
}
