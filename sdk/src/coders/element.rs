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

impl<T: Element> Coder<T> for ElementCoder<T> {
    fn encode(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CoderError> {
        let taken = std::mem::take(out);
        match postcard::to_extend(value, taken) {
            Ok(v) => {
                *out = v;
                Ok(())
            }
            Err(e) => Err(CoderError::new(format!("cannot encode {value:?}: {e}"))),
        }
    }

    fn decode(&self, input: &mut &[u8]) -> Result<T, CoderError> {
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
