//! Wire coders: how Weir finds where a value (and a KV's key) ends in bytes an SDK wrote, without
//! decoding them. A stage's data ports use the PCollection's coder made readable: Beam's standard
//! coders kept, a KV or iterable keeping its shape with its parts made readable, and anything
//! else (an SDK's own coder) length-prefixed. Weir then carries any SDK's values as bytes.

use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use weir_sdk::urns::coders::{BOOL, BYTES, DOUBLE, ITERABLE, KV, LENGTH_PREFIX, STRING_UTF8, VARINT, WINDOWED_VALUE};

/// Coders whose bytes Weir reads itself.
const STANDARD_CODERS: [&str; 8] = [BYTES, STRING_UTF8, KV, VARINT, BOOL, DOUBLE, ITERABLE, LENGTH_PREFIX];

/// Whether coder `id` and all its components are standard coders Weir reads.
pub(crate) fn standard(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> bool {
    coders.get(id).is_some_and(|c| {
        c.spec.as_ref().is_some_and(|s| STANDARD_CODERS.contains(&s.urn.as_str()))
            && c.component_coder_ids.iter().all(|x| standard(coders, x))
    })
}

/// A window coder as harnesses write windows for Weir: what Weir reads of it, the id of the coder
/// the harnesses use, and the coders that define that id.
#[derive(Debug, Clone)]
pub struct WireWindowCoder {
    /// How Weir reads the windows.
    pub kind: weir_sdk::coders::WindowCoderKind,
    /// The coder harnesses write windows in.
    pub id: String,
    /// The coders that define it (the window coder itself first).
    pub coders: Vec<(String, rapi::Coder)>,
}

/// Window coder `id` as harnesses write windows for Weir: Beam's global and interval window
/// coders as they are; any other (an SDK's own) as `beam:coder:custom_window:v1` of it
/// length-prefixed, so that each window comes after its last instant and Weir finds where it ends
/// ([`weir_sdk::window::SdkWindow`]).
pub fn wire_window_coder(
    coders: &std::collections::HashMap<String, rapi::Coder>,
    id: &str,
) -> Result<WireWindowCoder, Error> {
    use weir_sdk::coders::WindowCoderKind;
    use weir_sdk::urns::coders::{CUSTOM_WINDOW, GLOBAL_WINDOW, INTERVAL_WINDOW};
    let coder = coders.get(id).ok_or_else(|| Error::Malformed(format!("no coder '{id}'")))?;
    let own = vec![(id.to_string(), coder.clone())];
    let kind = match coder.spec.as_ref().map_or("", |s| s.urn.as_str()) {
        GLOBAL_WINDOW => WindowCoderKind::Global,
        INTERVAL_WINDOW => WindowCoderKind::Interval,
        _ => {
            let prefixed = format!("{id}_weir_prefixed");
            let wire = format!("{id}_weir_window");
            let mut defined = own;
            defined.push((prefixed.clone(), plain_coder(LENGTH_PREFIX, vec![id.to_string()])));
            defined.push((wire.clone(), plain_coder(CUSTOM_WINDOW, vec![prefixed])));
            return Ok(WireWindowCoder { kind: WindowCoderKind::Sdk, id: wire, coders: defined });
        }
    };
    Ok(WireWindowCoder { kind, id: id.to_string(), coders: own })
}

/// A coder of `urn` with `components` and no payload.
pub(crate) fn plain_coder(urn: &str, components: Vec<String>) -> rapi::Coder {
    rapi::Coder {
        spec: Some(rapi::FunctionSpec { urn: urn.into(), payload: Vec::new() }),
        component_coder_ids: components,
    }
}

/// How Weir reads a value in its wire coder: enough to find where a value ends and, for a KV,
/// where its key ends (Weir groups on the key's bytes and never decodes an SDK's values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wire {
    /// A varint length, then that many bytes: bytes, UTF-8 strings, anything length-prefixed.
    Prefixed,
    /// A varint.
    Varint,
    /// One byte.
    Bool,
    /// Eight bytes.
    Double,
    /// A key, then a value.
    Kv(Box<Wire>, Box<Wire>),
    /// A 4-byte count and that many elements, or -1 and blocks of (varint count, elements) up to
    /// an empty one.
    Iterable(Box<Wire>),
}

impl Wire {
    /// The wire form of coder `id` among `coders`; a coder Weir cannot delimit is an error.
    pub fn of(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> Result<Wire, Error> {
        let c = coders.get(id).ok_or_else(|| Error::Malformed(format!("no coder '{id}'")))?;
        let part = |k: usize| {
            let sub = c
                .component_coder_ids
                .get(k)
                .ok_or_else(|| Error::Malformed(format!("component {k} of coder '{id}'")))?;
            Wire::of(coders, sub).map(Box::new)
        };
        Ok(match c.spec.as_ref().map_or("", |s| s.urn.as_str()) {
            BYTES | STRING_UTF8 | LENGTH_PREFIX => Wire::Prefixed,
            VARINT => Wire::Varint,
            BOOL => Wire::Bool,
            DOUBLE => Wire::Double,
            KV => Wire::Kv(part(0)?, part(1)?),
            ITERABLE => Wire::Iterable(part(0)?),
            WINDOWED_VALUE => return Wire::of(coders, c.component_coder_ids.first().map_or("", String::as_str)),
            other => return Err(Error::Malformed(format!("wire form of coder '{id}' ({other})"))),
        })
    }

    /// The wire form of coder `id` made readable as a stage's data ports carry it: standard
    /// coders as they are, a KV or iterable by its parts, anything else length-prefixed.
    pub fn readable(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> Result<Wire, Error> {
        if standard(coders, id) {
            return Wire::of(coders, id);
        }
        let c = coders.get(id).ok_or_else(|| Error::Malformed(format!("no coder '{id}'")))?;
        let parts = &c.component_coder_ids;
        Ok(match c.spec.as_ref().map(|s| s.urn.as_str()) {
            Some(KV) if parts.len() == 2 => {
                Wire::Kv(Box::new(Wire::readable(coders, &parts[0])?), Box::new(Wire::readable(coders, &parts[1])?))
            }
            Some(ITERABLE) if parts.len() == 1 => Wire::Iterable(Box::new(Wire::readable(coders, &parts[0])?)),
            _ => Wire::Prefixed,
        })
    }

    /// The length of the value at the start of `bytes`; `None` if they end first.
    pub fn skip(&self, bytes: &[u8]) -> Option<usize> {
        match self {
            Wire::Prefixed => {
                let (n, used) = varint(bytes)?;
                let end = used.checked_add(usize::try_from(n).ok()?)?;
                (end <= bytes.len()).then_some(end)
            }
            Wire::Varint => varint(bytes).map(|(_, used)| used),
            Wire::Bool => (!bytes.is_empty()).then_some(1),
            Wire::Double => (bytes.len() >= 8).then_some(8),
            Wire::Kv(k, v) => {
                let key = k.skip(bytes)?;
                Some(key + v.skip(&bytes[key..])?)
            }
            Wire::Iterable(e) => {
                let count = i32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
                let mut at = 4;
                let elements = |n: u64, at: &mut usize| -> Option<()> {
                    for _ in 0..n {
                        *at += e.skip(bytes.get(*at..)?)?;
                    }
                    Some(())
                };
                if count >= 0 {
                    elements(count as u64, &mut at)?;
                } else {
                    loop {
                        let (n, used) = varint(bytes.get(at..)?)?;
                        at += used;
                        if n == 0 {
                            break;
                        }
                        elements(n, &mut at)?;
                    }
                }
                Some(at)
            }
        }
    }

    /// A KV value's key and value bytes; `None` if this is not a KV or the bytes end first.
    pub fn split_kv<'a>(&self, bytes: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        let Wire::Kv(k, v) = self else { return None };
        let key = k.skip(bytes)?;
        let value = v.skip(&bytes[key..])?;
        Some((&bytes[..key], &bytes[key..key + value]))
    }
}

/// A value of coder `id` encoded on its own (Beam's outer context, as a TestStream's elements
/// are) in the form Weir carries it: nested, in the readable coder ([`Wire::readable`]). Bytes
/// and strings gain their length, a KV's value is nested in turn, and an SDK's own coder is
/// length-prefixed (as Beam's length prefix coder writes its value's outer encoding).
pub fn carried_from_outer(
    coders: &std::collections::HashMap<String, rapi::Coder>,
    id: &str,
    bytes: &[u8],
) -> Result<Vec<u8>, Error> {
    let c = coders.get(id).ok_or_else(|| Error::Malformed(format!("no coder '{id}'")))?;
    let prefixed = |bytes: &[u8]| {
        let mut out = Vec::with_capacity(bytes.len() + 5);
        weir_sdk::coders::write_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    };
    let urn = c.spec.as_ref().map_or("", |s| s.urn.as_str());
    match urn {
        BYTES | STRING_UTF8 => Ok(prefixed(bytes)),
        LENGTH_PREFIX | VARINT | BOOL | DOUBLE => Ok(bytes.to_vec()),
        ITERABLE if standard(coders, id) => Ok(bytes.to_vec()),
        KV if c.component_coder_ids.len() == 2 && standard(coders, &c.component_coder_ids[0]) => {
            let key = Wire::of(coders, &c.component_coder_ids[0])?
                .skip(bytes)
                .ok_or_else(|| Error::Malformed(format!("a whole key in a value of coder '{id}'")))?;
            let mut out = bytes[..key].to_vec();
            out.extend(carried_from_outer(coders, &c.component_coder_ids[1], &bytes[key..])?);
            Ok(out)
        }
        KV | ITERABLE => Err(Error::Malformed(format!(
            "a way to carry values of coder '{id}' ({urn}) whose parts only the SDK can delimit"
        ))),
        _ => Ok(prefixed(bytes)),
    }
}

/// A varint at the start of `bytes`, and how many bytes it took.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::urns::coders::PICKLED_PYTHON;

    fn coder(urn: &str, components: Vec<String>) -> rapi::Coder {
        rapi::Coder {
            spec: Some(rapi::FunctionSpec { urn: urn.into(), payload: Vec::new() }),
            component_coder_ids: components,
        }
    }

    fn coders(list: &[(&str, &str, &[&str])]) -> std::collections::HashMap<String, rapi::Coder> {
        list.iter()
            .map(|(id, urn, parts)| (id.to_string(), coder(urn, parts.iter().map(|p| p.to_string()).collect())))
            .collect()
    }

    #[test]
    fn keys_and_values_are_found_in_their_wire_bytes() {
        let c = coders(&[
            ("kv", KV, &["s", "it"]),
            ("s", STRING_UTF8, &[]),
            ("it", ITERABLE, &["lp"]),
            ("lp", LENGTH_PREFIX, &["pickled"]),
            ("pickled", PICKLED_PYTHON, &[]),
            ("n", VARINT, &[]),
        ]);
        let w = Wire::of(&c, "kv").unwrap();
        // "ab", then two length-prefixed values: a 4-byte count, and a -1-count block form.
        let mut bytes = vec![2, b'a', b'b', 0, 0, 0, 2, 1, 7, 2, 8, 9];
        let (k, v) = w.split_kv(&bytes).unwrap();
        assert_eq!((k, v), (&[2, b'a', b'b'][..], &[0, 0, 0, 2, 1, 7, 2, 8, 9][..]));
        bytes.truncate(3);
        bytes.extend([0xff, 0xff, 0xff, 0xff, 2, 1, 7, 2, 8, 9, 0]);
        assert_eq!(w.skip(&bytes), Some(bytes.len()));
        // Cut short: no length, never a panic.
        for n in 0..bytes.len() {
            assert_eq!(w.skip(&bytes[..n]), None, "{n}");
        }
        assert_eq!(Wire::of(&c, "n").unwrap().skip(&[0x80, 0x01, 5]), Some(2));
        // An SDK's own coder cannot be delimited unless it is length-prefixed.
        assert!(Wire::of(&c, "pickled").is_err());
    }
}
