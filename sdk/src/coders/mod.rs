//! Coders: how elements become bytes.
//!
//! Two families live here. [`standard`] holds Beam's model coders, byte-exact with Beam's
//! `standard_coders.yaml` (bytes, bool, UTF-8 strings, varints, big-endian longs, doubles, KV,
//! iterable, nullable, windows, windowed values), for data exchanged with Beam or written in its
//! formats. [`ElementCoder`] is the default coder of every element type: any type that derives
//! serde's traits gets a compact, fast encoding, and its determinism (required of grouping keys) is
//! read off the type's serde shape once, without needing a value.
//!
//! Runners group and compare keys by their encoded bytes, never by `Eq`/`Hash` of decoded values.

mod element;
pub mod standard;

pub use element::{Element, ElementCoder};
pub use standard::*;

use std::fmt::Debug;

/// An encoding or decoding failure, with what was being coded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coder error: {message}")]
pub struct CoderError {
    /// What went wrong.
    pub message: String,
}

impl CoderError {
    /// A new error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        CoderError { message: message.into() }
    }
}

/// Encodes and decodes values of `T`.
///
/// `encode`/`decode` use the *nested* context (the value is followed by other data, so its
/// length must be recoverable); `encode_outer`/`decode_outer` the *outer* context (the value owns
/// the rest of the buffer), which some of Beam's coders encode more compactly.
pub trait Coder<T>: Send + Sync + 'static {
    /// Appends the nested encoding of `value`.
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CoderError>;
    /// Decodes one value in the nested context, advancing `input` past it.
    fn decode(&self, input: &mut &[u8]) -> Result<T, CoderError>;
    /// Appends the outer-context encoding of `value`.
    fn encode_outer(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CoderError> {
        self.encode(value, out)
    }
    /// Decodes a value that owns all of `input`.
    fn decode_outer(&self, input: &[u8]) -> Result<T, CoderError> {
        let mut rest = input;
        let v = self.decode(&mut rest)?;
        if !rest.is_empty() {
            return Err(CoderError::new(format!("{} trailing bytes after value", rest.len())));
        }
        Ok(v)
    }
    /// `Ok` when equal values always have equal encodings (required of grouping keys);
    /// otherwise the reason they may not.
    fn verify_deterministic(&self) -> Result<(), String>;
    /// A short name for messages, e.g. Beam's URN for standard coders.
    fn name(&self) -> String;
    /// The length of the nested encoding of `value` (what size metrics count). Coders that
    /// can count without writing override it.
    fn encoded_len(&self, value: &T) -> Result<usize, CoderError> {
        let mut out = Vec::new();
        self.encode(value, &mut out)?;
        Ok(out.len())
    }
}

/// Encodes `value` with `coder` in the outer context into a new vector.
pub fn encode_to_vec<T, C: Coder<T> + ?Sized>(coder: &C, value: &T) -> Result<Vec<u8>, CoderError> {
    let mut out = Vec::new();
    coder.encode_outer(value, &mut out)?;
    Ok(out)
}

/// Appends `v` as an unsigned LEB128 varint.
pub fn write_varint(v: u64, out: &mut Vec<u8>) {
    // Most varints (tags, short lengths) are one byte.
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    let mut buf = [0u8; 16];
    let n = varint_into(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// Writes `v` as an unsigned LEB128 varint (postcard's too) into `buf`; returns the bytes
/// written (at most 10).
#[inline]
pub(crate) fn varint_into(mut v: u64, buf: &mut [u8; 16]) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// Appends `value` to `out` in postcard's format.
///
/// postcard's own `to_extend` copies strings and byte strings into a `Vec` one byte at a time
/// (a quarter of Nexmark Q15's time went there), and its `to_allocvec` cannot append; this
/// writes slices with one copy each, in place.
pub fn postcard_into<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(value, AppendVec(out))
}

/// A postcard output appending to a borrowed `Vec`.
struct AppendVec<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for AppendVec<'_> {
    type Output = ();
    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if data.len() <= 10 {
            // Varints (postcard writes each through here): a call to memcpy costs more than
            // copying a few bytes.
            self.0.reserve(10);
            for &b in data {
                self.0.push(b);
            }
        } else {
            self.0.extend_from_slice(data);
        }
        Ok(())
    }
    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Reads an unsigned LEB128 varint of at most 10 bytes.
pub fn read_varint(input: &mut &[u8]) -> Result<u64, CoderError> {
    // Most varints (tags, short lengths) are one byte.
    if let Some((&b, rest)) = input.split_first() {
        if b < 0x80 {
            *input = rest;
            return Ok(u64::from(b));
        }
    }
    let mut result: u64 = 0;
    for i in 0..10 {
        let b = read_byte(input)?;
        result |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(result);
        }
    }
    Err(CoderError::new("varint longer than 10 bytes"))
}

/// Reads one byte.
pub fn read_byte(input: &mut &[u8]) -> Result<u8, CoderError> {
    match input.split_first() {
        Some((b, rest)) => {
            *input = rest;
            Ok(*b)
        }
        None => Err(CoderError::new("unexpected end of input")),
    }
}

/// Reads exactly `n` bytes.
pub fn read_bytes<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], CoderError> {
    if input.len() < n {
        return Err(CoderError::new(format!("expected {n} bytes, found {}", input.len())));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

/// Writes a timestamp as Beam's `InstantCoder` does: 8 bytes big-endian with the sign bit flipped,
/// so that encoded bytes sort like the timestamps.
pub fn write_timestamp(ts: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&((ts as u64) ^ (1u64 << 63)).to_be_bytes());
}

/// Reads a timestamp written by [`write_timestamp`].
pub fn read_timestamp(input: &mut &[u8]) -> Result<i64, CoderError> {
    let b = read_bytes(input, 8)?;
    let raw = u64::from_be_bytes(b.try_into().expect("8 bytes"));
    Ok((raw ^ (1u64 << 63)) as i64)
}

/// A type-erased handle to a `Coder<T>`, shared by the graph and the runners.
pub type CoderRef<T> = std::sync::Arc<dyn Coder<T>>;

/// Checks that `coder` round-trips `value` (the direct runner's encodability check).
pub fn check_roundtrip<T: Debug, C: Coder<T> + ?Sized>(coder: &C, value: &T) -> Result<(), CoderError> {
    let mut buf = Vec::new();
    coder.encode(value, &mut buf)?;
    let mut slice = buf.as_slice();
    coder.decode(&mut slice)?;
    if !slice.is_empty() {
        return Err(CoderError::new(format!(
            "coder {} left {} bytes undecoded for {value:?}",
            coder.name(),
            slice.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postcard_into_appends_what_postcard_writes() {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            id: i64,
            name: String,
            #[serde(with = "serde_bytes")]
            blob: &'a [u8],
            tags: Vec<&'a str>,
        }
        let row = Row { id: -7, name: "x".repeat(300), blob: &[1, 2, 3], tags: vec!["a", "bc"] };
        let mut out = vec![0xAA, 0xBB];
        postcard_into(&row, &mut out).unwrap();
        assert_eq!(&out[..2], &[0xAA, 0xBB]);
        assert_eq!(&out[2..], &postcard::to_stdvec(&row).unwrap()[..]);
    }
}
