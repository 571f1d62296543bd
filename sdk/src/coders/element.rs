//! The element bound and its default coder.

use super::{Coder, CoderError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_reflection::{ContainerFormat, Format, Registry, Tracer, TracerConfig, VariantFormat};
use std::fmt::Debug;
use std::marker::PhantomData;

/// What a PCollection can hold: cloneable (an element in several windows is stored once per
/// window), printable (assertion messages), shareable across worker threads, and encodable
/// through serde, which gives every element type a default coder.
pub trait Element: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {}

impl<T: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static> Element for T {}

/// The default coder of every [`Element`]: serde's data model in a compact varint format
/// (postcard). Deterministic for types without floating-point numbers or maps.
pub struct ElementCoder<T>(PhantomData<fn() -> T>);

impl<T> ElementCoder<T> {
    /// The default coder of `T`.
    pub fn new() -> Self {
        ElementCoder(PhantomData)
    }
}

impl<T> Default for ElementCoder<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The unsigned varint postcard writes for an integer value (the usual key types: zigzag for
/// the signed ones), found without serde; `None` for other types. The type tests are on
/// constants and fold away for each `T`.
#[inline]
fn integer_varint<T: 'static>(value: &T) -> Option<u64> {
    let any = value as &dyn std::any::Any;
    if let Some(&v) = any.downcast_ref::<i64>() {
        Some(((v << 1) ^ (v >> 63)) as u64)
    } else if let Some(&v) = any.downcast_ref::<u64>() {
        Some(v)
    } else if let Some(&v) = any.downcast_ref::<i32>() {
        Some(((v << 1) ^ (v >> 31)) as u32 as u64)
    } else {
        any.downcast_ref::<u32>().map(|&v| u64::from(v))
    }
}

/// Reads a postcard varint of at most `max_bytes` bytes whose value fits in `bits` bits, and
/// advances `input` past it; `None` (and `input` untouched) when it is malformed.
#[inline]
fn take_varint(input: &mut &[u8], max_bytes: usize, bits: u32) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, &b) in input.iter().take(max_bytes).enumerate() {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            if 7 * (i as u32 + 1) > bits && u64::from(b) >> (bits - 7 * i as u32) != 0 {
                return None;
            }
            *input = &input[i + 1..];
            return Some(v);
        }
    }
    None
}

/// `value` as a `T` when `T` is `U`.
#[inline]
fn cast<T: 'static, U: 'static>(value: U) -> Option<T> {
    let mut slot = Some(value);
    (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<T>>().and_then(Option::take)
}

/// The inverse of [`integer_varint`]: `None` for other types and for malformed input (which
/// then goes through postcard, for its error).
#[inline]
fn decode_integer<T: 'static>(input: &mut &[u8]) -> Option<T> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<i64>() {
        take_varint(input, 10, 64).and_then(|u| cast((u >> 1) as i64 ^ -((u & 1) as i64)))
    } else if t == TypeId::of::<u64>() {
        take_varint(input, 10, 64).and_then(cast)
    } else if t == TypeId::of::<i32>() {
        take_varint(input, 5, 32).and_then(|u| cast((u >> 1) as u32 as i32 ^ -((u & 1) as i32)))
    } else if t == TypeId::of::<u32>() {
        take_varint(input, 5, 32).and_then(|u| cast(u as u32))
    } else {
        None
    }
}

impl<T: Element> ElementCoder<T> {
    /// Encodes `value` into `buf` when its encoding takes at most 16 bytes (any integer, and
    /// short strings and keys); returns the length, or `None` when it does not fit (or cannot
    /// be encoded: [`Coder::encode`] reports why).
    #[inline]
    pub fn encode_small(&self, value: &T, buf: &mut [u8; 16]) -> Option<usize> {
        match integer_varint(value) {
            Some(v) => Some(super::varint_into(v, buf)),
            None => postcard::to_slice(value, buf).ok().map(|b| b.len()),
        }
    }
}

impl<T: Element> Coder<T> for ElementCoder<T> {
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CoderError> {
        if let Some(v) = integer_varint(value) {
            super::write_varint(v, out);
            return Ok(());
        }
        super::postcard_into(value, out).map_err(|e| CoderError::new(format!("cannot encode {value:?}: {e}")))
    }

    fn encoded_len(&self, value: &T) -> Result<usize, CoderError> {
        if let Some(v) = integer_varint(value) {
            let mut buf = [0u8; 16];
            return Ok(super::varint_into(v, &mut buf));
        }
        // Counted as postcard writes it, without writing (a large value is not copied).
        postcard::experimental::serialized_size(value)
            .map_err(|e| CoderError::new(format!("cannot encode {value:?}: {e}")))
    }

    fn decode(&self, input: &mut &[u8]) -> Result<T, CoderError> {
        if let Some(v) = decode_integer::<T>(input) {
            return Ok(v);
        }
        let (v, rest) = postcard::take_from_bytes::<T>(input)
            .map_err(|e| CoderError::new(format!("cannot decode {}: {e}", std::any::type_name::<T>())))?;
        *input = rest;
        Ok(v)
    }

    fn verify_deterministic(&self) -> Result<(), String> {
        type_determinism::<T>()
    }

    fn name(&self) -> String {
        format!("ElementCoder<{}>", std::any::type_name::<T>())
    }
}

/// Reads `T`'s serde shape and says whether its encoding is deterministic: floating-point
/// numbers and maps are not (Beam's DoubleCoder and MapCoder are not either).
pub fn type_determinism<T: DeserializeOwned>() -> Result<(), String> {
    let mut tracer = Tracer::new(TracerConfig::default());
    let format = match tracer.trace_simple_type::<T>() {
        Ok((format, _)) => format,
        Err(e) => {
            return Err(format!(
                "cannot inspect the shape of {} to prove its encoding deterministic ({e}); \
                 set an explicit deterministic coder",
                std::any::type_name::<T>()
            ))
        }
    };
    let registry = tracer.registry().map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    check_format(&format, &registry, &mut seen)
        .map_err(|why| format!("{} is not deterministically encoded: {why}", std::any::type_name::<T>()))
}

fn check_format(f: &Format, reg: &Registry, seen: &mut Vec<String>) -> Result<(), String> {
    match f {
        Format::F32 | Format::F64 => Err("it contains a floating-point number".into()),
        Format::Map { .. } => Err("it contains a map".into()),
        Format::Option(inner) | Format::Seq(inner) => check_format(inner, reg, seen),
        Format::TupleArray { content, .. } => check_format(content, reg, seen),
        Format::Tuple(fs) => fs.iter().try_for_each(|f| check_format(f, reg, seen)),
        Format::TypeName(name) => {
            if seen.contains(name) {
                return Ok(());
            }
            seen.push(name.clone());
            match reg.get(name) {
                Some(c) => check_container(c, reg, seen),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

fn check_container(c: &ContainerFormat, reg: &Registry, seen: &mut Vec<String>) -> Result<(), String> {
    match c {
        ContainerFormat::UnitStruct => Ok(()),
        ContainerFormat::NewTypeStruct(f) => check_format(f, reg, seen),
        ContainerFormat::TupleStruct(fs) => fs.iter().try_for_each(|f| check_format(f, reg, seen)),
        ContainerFormat::Struct(fs) => fs.iter().try_for_each(|n| check_format(&n.value, reg, seen)),
        ContainerFormat::Enum(vs) => vs.values().try_for_each(|v| match &v.value {
            VariantFormat::NewType(f) => check_format(f, reg, seen),
            VariantFormat::Tuple(fs) => fs.iter().try_for_each(|f| check_format(f, reg, seen)),
            VariantFormat::Struct(fs) => fs.iter().try_for_each(|n| check_format(&n.value, reg, seen)),
            _ => Ok(()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn encoded_len_counts_what_encode_writes() {
        fn check<T: Element>(values: &[T]) {
            let coder = ElementCoder::<T>::new();
            for v in values {
                let mut out = Vec::new();
                coder.encode(v, &mut out).unwrap();
                assert_eq!(coder.encoded_len(v).unwrap(), out.len(), "{v:?}");
            }
        }
        check(&[0i64, -1, 300, i64::MIN, i64::MAX]);
        check(&[0u32, 127, 128, u32::MAX]);
        check(&["".to_string(), "x".repeat(200), "é".repeat(70_000)]);
        check(&[(1i64, "a".to_string(), vec![1.5f64, -2.0]), (i64::MAX, "b".repeat(130), vec![])]);
        check(&[Some(vec![Some(3u8), None]), None]);
    }

    #[test]
    fn integers_are_encoded_as_postcard_encodes_them() {
        fn check<T: Element + PartialEq>(values: &[T]) {
            let coder = ElementCoder::<T>::new();
            for v in values {
                let want = postcard::to_stdvec(v).unwrap();
                let mut got = Vec::new();
                coder.encode(v, &mut got).unwrap();
                assert_eq!(got, want, "{v:?}");
                let mut buf = [0u8; 16];
                let n = coder.encode_small(v, &mut buf).unwrap();
                assert_eq!(&buf[..n], &want[..], "{v:?}");
                assert_eq!(coder.decode(&mut &got[..]).unwrap(), *v);
            }
        }
        check(&[0i64, 1, -1, 63, -64, 64, -65, 1 << 20, -(1 << 40), i64::MAX, i64::MIN]);
        check(&[0u64, 1, 127, 128, 1 << 35, u64::MAX]);
        check(&[0i32, 1, -1, 1000, -1000, i32::MAX, i32::MIN]);
        check(&[0u32, 127, 128, u32::MAX]);
        // Malformed input is an error, as postcard reports it, and consumes nothing.
        for bad in
            [&[0x80u8][..], &[], &[0xFF; 11][..], &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02][..]]
        {
            let mut input = bad;
            assert!(ElementCoder::<i64>::new().decode(&mut input).is_err(), "{bad:?}");
            assert!(postcard::from_bytes::<i64>(bad).is_err(), "{bad:?}");
        }
        let mut input = &[0xFF, 0xFF, 0xFF, 0xFF, 0x10][..];
        assert!(ElementCoder::<u32>::new().decode(&mut input).is_err());
        // Decoding consumes exactly the value.
        let mut input = &[0x96, 0x01, 0x07][..];
        assert_eq!(ElementCoder::<u64>::new().decode(&mut input).unwrap(), 150);
        assert_eq!(input, &[0x07]);
        // Other types go through serde, into the slot when they fit.
        let coder = ElementCoder::<String>::new();
        let mut buf = [0u8; 16];
        assert_eq!(coder.encode_small(&"abc".to_string(), &mut buf), Some(4));
        assert_eq!(&buf[..4], &[3, b'a', b'b', b'c']);
        assert_eq!(coder.encode_small(&"x".repeat(16), &mut buf), None);
    }

    #[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
    struct Person {
        name: String,
        age: u32,
        tags: Vec<String>,
    }

    #[derive(Clone, Debug, Serialize, Deserialize)]
    struct Priced {
        price: f64,
    }

    #[derive(Clone, Debug, Serialize, Deserialize)]
    enum Shape {
        Dot,
        Circle { r: f32 },
    }

    #[test]
    fn determinism_follows_the_shape() {
        assert!(type_determinism::<i64>().is_ok());
        assert!(type_determinism::<(String, Vec<u8>, Option<i32>)>().is_ok());
        assert!(type_determinism::<Person>().is_ok());
        assert!(type_determinism::<f64>().unwrap_err().contains("floating-point"));
        assert!(type_determinism::<Priced>().is_err());
        assert!(type_determinism::<Shape>().is_err());
        assert!(type_determinism::<std::collections::BTreeMap<String, i64>>().unwrap_err().contains("map"));
    }

    #[test]
    fn element_coder_round_trips_nested() {
        let c = ElementCoder::<Person>::new();
        let p = Person { name: "ann".into(), age: 3, tags: vec!["x".into()] };
        let mut buf = Vec::new();
        c.encode(&p, &mut buf).unwrap();
        c.encode(&p, &mut buf).unwrap();
        let mut s = buf.as_slice();
        assert_eq!(c.decode(&mut s).unwrap(), p);
        assert_eq!(c.decode(&mut s).unwrap(), p);
        assert!(s.is_empty());
        assert!(c.decode(&mut s).is_err());
    }
}
