//! Recycled bundle buffers.
//!
//! A batch flows through the engine as bundles of up to 64 k elements: a source fills a buffer,
//! a DoFn reads it and fills another, and so on. Each of those buffers is large (megabytes),
//! and an allocator that hands such blocks back to the kernel (glibc does) makes every batch
//! page-fault its buffers in afresh. Kernels that consume a bundle give its emptied buffer
//! back here, and kernels that fill one take a buffer of the same element type from here, so a
//! pipeline in its steady state reuses the memory it already touched.
//!
//! What is kept is bounded ([`MAX_KEPT_BYTES`] in all, or less under a memory budget: see
//! [`limit_kept_bytes`]; [`MAX_KEPT_PER_TYPE`] buffers per element type); buffers below
//! [`MIN_BYTES`] are left to the allocator, which reuses small blocks well.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this are not kept.
pub const MIN_BYTES: usize = 256 << 10;
/// Most bytes kept over all element types.
pub const MAX_KEPT_BYTES: usize = 1 << 30;
/// Most buffers kept per element type.
pub const MAX_KEPT_PER_TYPE: usize = 128;

/// A kept buffer (a `Vec<E>`) with its size in bytes.
type Kept = (usize, Box<dyn Any + Send>);

struct Pool {
    /// Emptied buffers (`Vec<E>`) per element type `E` (a `WindowedValue<T>` for a bundle of
    /// rows, `T` for the values of a uniform bundle).
    spare: HashMap<TypeId, Vec<Kept>>,
    bytes: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Most bytes kept now: [`MAX_KEPT_BYTES`], or less once [`limit_kept_bytes`] lowered it.
static KEPT_LIMIT: AtomicUsize = AtomicUsize::new(MAX_KEPT_BYTES);

/// Keeps at most `bytes` of buffers from now on (the least of every limit asked for; kept
/// buffers over it are dropped): a job with a memory budget for its state
/// (`--state-memory-budget`) asks for a part of it, so that buffers kept for reuse do not
/// hold more than the state itself (at most 128 buffers of each type, a grouping's input
/// buffers alone kept 190 MB beside a 128 MiB budget). The limit holds for the process.
pub fn limit_kept_bytes(bytes: usize) {
    let before = KEPT_LIMIT.fetch_min(bytes, Ordering::Relaxed);
    if bytes < before {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = pool.as_mut() {
            while pool.bytes > bytes {
                let Some(list) = pool.spare.values_mut().find(|l| !l.is_empty()) else { break };
                if let Some((bytes, _)) = list.pop() {
                    pool.bytes -= bytes;
                }
            }
        }
    }
}

fn bytes_of<E>(v: &Vec<E>) -> usize {
    v.capacity() * std::mem::size_of::<E>()
}

/// An empty buffer with room for at least `min_capacity` elements: a kept one when there is
/// one that large, else a new one.
pub fn take<E: Send + 'static>(min_capacity: usize) -> Vec<E> {
    take_kept(min_capacity).unwrap_or_else(|| Vec::with_capacity(min_capacity))
}

/// A kept buffer with room for `preferred` elements when there is one, else a new one with
/// room for `first` (for a writer that does not know how much it will write).
pub fn take_or_start<E: Send + 'static>(preferred: usize, first: usize) -> Vec<E> {
    take_kept(preferred).unwrap_or_else(|| Vec::with_capacity(first))
}

fn take_kept<E: Send + 'static>(min_capacity: usize) -> Option<Vec<E>> {
    if min_capacity * std::mem::size_of::<E>() >= MIN_BYTES {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = pool.as_mut() {
            if let Some(list) = pool.spare.get_mut(&TypeId::of::<Vec<E>>()) {
                // Not much larger than asked for either: what fills the buffer may keep it.
                let fits = |(_, b): &Kept| {
                    b.downcast_ref::<Vec<E>>()
                        .is_some_and(|v| (min_capacity..=min_capacity.saturating_mul(4)).contains(&v.capacity()))
                };
                if let Some(i) = list.iter().position(fits) {
                    let v = *list.swap_remove(i).1.downcast::<Vec<E>>().expect("kept by element type");
                    pool.bytes -= bytes_of(&v);
                    return Some(v);
                }
            }
        }
    }
    None
}

/// Gives a consumed buffer back for reuse (its elements are dropped here).
pub fn give<E: Send + 'static>(mut v: Vec<E>) {
    let bytes = bytes_of(&v);
    if bytes < MIN_BYTES {
        return;
    }
    v.clear();
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pool = pool.get_or_insert_with(|| Pool { spare: HashMap::new(), bytes: 0 });
    if pool.bytes + bytes > KEPT_LIMIT.load(Ordering::Relaxed) {
        return;
    }
    let list = pool.spare.entry(TypeId::of::<Vec<E>>()).or_default();
    if list.len() < MAX_KEPT_PER_TYPE {
        list.push((bytes, Box::new(v)));
        pool.bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windowed_value::WindowedValue;

    #[test]
    fn a_given_buffer_is_taken_again_by_its_element_type_only() {
        // A type of its own, so that other tests running at the same time cannot take it.
        #[derive(Clone)]
        struct Own(#[allow(dead_code)] [u64; 4]);
        let n = MIN_BYTES / std::mem::size_of::<WindowedValue<Own>>() + 1;
        let mut v: Vec<WindowedValue<Own>> = Vec::with_capacity(n);
        v.push(WindowedValue::timestamped(Own([1; 4]), 0));
        let ptr = v.as_ptr();
        give(v);
        // Another element type gets a new buffer.
        let other: Vec<WindowedValue<[u64; 4]>> = take(n);
        assert_ne!(other.as_ptr() as usize, ptr as usize);
        // The same type gets the kept buffer, emptied.
        let again: Vec<WindowedValue<Own>> = take(n);
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty() && again.capacity() >= n);
        // A request larger than any kept buffer gets a new one, and so does one for much less.
        give(again);
        let bigger: Vec<WindowedValue<Own>> = take(n * 4);
        assert_ne!(bigger.as_ptr(), ptr);
        let big_enough = n * 8;
        let mut large: Vec<WindowedValue<Own>> = Vec::with_capacity(big_enough);
        large.push(WindowedValue::timestamped(Own([2; 4]), 0));
        let large_ptr = large.as_ptr();
        give(large);
        let small: Vec<WindowedValue<Own>> = take(n);
        assert_ne!(small.as_ptr(), large_ptr);
        let again = take::<WindowedValue<Own>>(big_enough);
        assert_eq!(again.as_ptr(), large_ptr);
    }

    #[test]
    fn small_buffers_are_left_to_the_allocator() {
        #[derive(Clone)]
        struct Small;
        let v: Vec<WindowedValue<Small>> = Vec::with_capacity(4);
        give(v);
        let pool = POOL.lock().unwrap();
        assert!(pool.as_ref().is_none_or(|p| !p.spare.contains_key(&TypeId::of::<Vec<WindowedValue<Small>>>())));
    }
}
