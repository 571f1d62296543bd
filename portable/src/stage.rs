//! A fused stage as the harness runs it: its `ProcessBundleDescriptor`.
//!
//! The stage's transforms, with what they reference (PCollections, coders, windowing
//! strategies, environments), plus a data source transform for each PCollection the stage
//! reads from Weir and a data sink for each it hands back. Data crosses in the wire coder: the
//! PCollection's windowed value coder, its element coder made readable to Weir: a coder of
//! Beam's standard ones is kept, a KV or iterable keeps its shape with its parts made readable,
//! and anything else (an SDK's own coder) is length-prefixed. Weir can then find where each
//! value and each key ends ([`Wire`]) and carry any SDK's values as bytes.

use std::collections::BTreeSet;

use crate::plan::{Stage, StageKind};
use crate::proto::fn_execution::v1 as fapi;
use crate::proto::pipeline::v1 as rapi;
use prost::Message;

/// The data source and sink transforms' URNs.
pub const DATA_SOURCE: &str = "beam:runner:source:v1";
/// The data sink transform's URN.
pub const DATA_SINK: &str = "beam:runner:sink:v1";
/// Beam's windowed value coder.
const WINDOWED_VALUE: &str = "beam:coder:windowed_value:v1";
/// Beam's length prefix coder.
const LENGTH_PREFIX: &str = "beam:coder:length_prefix:v1";
/// Beam's KV coder.
const KV: &str = "beam:coder:kv:v1";
/// Beam's iterable coder.
const ITERABLE: &str = "beam:coder:iterable:v1";

/// Coders whose bytes Weir reads itself.
const STANDARD_CODERS: [&str; 8] = [
    "beam:coder:bytes:v1",
    "beam:coder:string_utf8:v1",
    KV,
    "beam:coder:varint:v1",
    "beam:coder:bool:v1",
    "beam:coder:double:v1",
    ITERABLE,
    LENGTH_PREFIX,
];

/// A stage's descriptor, and which of its transforms take and give the data.
#[derive(Debug, Clone)]
pub struct StageDescriptor {
    /// What the harness gets.
    pub descriptor: fapi::ProcessBundleDescriptor,
    /// Per PCollection the stage reads: (data source transform id, PCollection id).
    pub inputs: Vec<(String, String)>,
    /// Per PCollection the stage hands back: (data sink transform id, PCollection id, the
    /// PCollection whose coder it is written in: itself, or a Flatten's output).
    pub outputs: Vec<(String, String, String)>,
}

/// Why a stage cannot be described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    /// Not a stage the harness runs.
    #[error("stage of {0} is not run by an SDK harness")]
    NotSdk(String),
    /// The pipeline lacks something the stage names.
    #[error("the pipeline has no {0}")]
    Missing(String),
}

/// Copies into the descriptor what `id` (a PCollection) references, and returns its wire coder.
struct Builder<'a> {
    c: &'a rapi::Components,
    d: fapi::ProcessBundleDescriptor,
}

impl Builder<'_> {
    fn coder(&mut self, id: &str) -> Result<(), StageError> {
        if self.d.coders.contains_key(id) {
            return Ok(());
        }
        let coder = self.c.coders.get(id).ok_or_else(|| StageError::Missing(format!("coder '{id}'")))?;
        self.d.coders.insert(id.to_string(), coder.clone());
        for component in &coder.component_coder_ids {
            self.coder(component)?;
        }
        Ok(())
    }

    fn pcollection(&mut self, id: &str) -> Result<&rapi::PCollection, StageError> {
        let pc = self.c.pcollections.get(id).ok_or_else(|| StageError::Missing(format!("PCollection '{id}'")))?;
        self.coder(&pc.coder_id)?;
        let ws_id = &pc.windowing_strategy_id;
        let ws = self
            .c
            .windowing_strategies
            .get(ws_id)
            .ok_or_else(|| StageError::Missing(format!("windowing strategy '{ws_id}'")))?;
        self.coder(&ws.window_coder_id)?;
        self.d.windowing_strategies.insert(ws_id.clone(), ws.clone());
        self.d.pcollections.insert(id.to_string(), pc.clone());
        Ok(pc)
    }

    /// The wire coder of PCollection `id`: windowed values of its element coder, length-prefixed
    /// unless standard, in its window coder.
    fn wire_coder(&mut self, id: &str) -> Result<String, StageError> {
        let pc = self.pcollection(id)?.clone();
        let ws = &self.c.windowing_strategies[&pc.windowing_strategy_id];
        let value = self.readable(&pc.coder_id);
        let wire = format!("{id}_weir_wire");
        self.d.coders.insert(wire.clone(), coder(WINDOWED_VALUE, vec![value, ws.window_coder_id.clone()]));
        Ok(wire)
    }
}

impl Builder<'_> {
    /// Coder `id` as Weir can delimit it on the wire ([`Wire`]): itself if Weir reads all of it;
    /// a KV or iterable of parts made readable alike (so that a KV's key stands apart, and a
    /// grouping's output iterates the values as its input carried them); anything else in a
    /// length prefix.
    fn readable(&mut self, id: &str) -> String {
        if self.standard(id) {
            return id.to_string();
        }
        let Some(c) = self.c.coders.get(id) else { return id.to_string() };
        let parts = c.component_coder_ids.clone();
        let structural = match c.spec.as_ref().map(|s| s.urn.as_str()) {
            Some(KV) if parts.len() == 2 => Some(KV),
            Some(ITERABLE) if parts.len() == 1 => Some(ITERABLE),
            _ => None,
        };
        let (urn, parts) = match structural {
            Some(urn) => (urn, parts.iter().map(|p| self.readable(p)).collect()),
            None => (LENGTH_PREFIX, vec![id.to_string()]),
        };
        let wrapped = format!("{id}_weir_readable");
        self.d.coders.insert(wrapped.clone(), coder(urn, parts));
        wrapped
    }

    /// Transform `t` with each timer family's coder keyed in the readable form, if it sets
    /// timers.
    fn timers_readable(&mut self, mut t: rapi::PTransform) -> Result<Option<rapi::PTransform>, StageError> {
        let Some(spec) = t.spec.as_mut().filter(|s| s.urn == "beam:transform:pardo:v1") else { return Ok(None) };
        let mut p = rapi::ParDoPayload::decode(&spec.payload[..])
            .map_err(|e| StageError::Missing(format!("a ParDo payload that decodes ({e})")))?;
        if p.timer_family_specs.is_empty() {
            return Ok(None);
        }
        for family in p.timer_family_specs.values_mut() {
            let id = family.timer_family_coder_id.clone();
            let parts = self.c.coders.get(&id).map(|c| c.component_coder_ids.clone()).unwrap_or_default();
            let [key, window] = parts.as_slice() else {
                return Err(StageError::Missing(format!("the key and window coders of timer coder '{id}'")));
            };
            let key = self.readable(key);
            self.coder(window)?;
            let readable = format!("{id}_weir_readable");
            self.d.coders.insert(readable.clone(), coder("beam:coder:timer:v1", vec![key, window.clone()]));
            family.timer_family_coder_id = readable;
        }
        spec.payload = p.encode_to_vec();
        Ok(Some(t))
    }

    fn standard(&self, id: &str) -> bool {
        standard(&self.c.coders, id)
    }
}

/// Whether coder `id` and all its components are standard coders Weir reads.
fn standard(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> bool {
    coders.get(id).is_some_and(|c| {
        c.spec.as_ref().is_some_and(|s| STANDARD_CODERS.contains(&s.urn.as_str()))
            && c.component_coder_ids.iter().all(|x| standard(coders, x))
    })
}

fn coder(urn: &str, components: Vec<String>) -> rapi::Coder {
    rapi::Coder {
        spec: Some(rapi::FunctionSpec { urn: urn.into(), payload: Vec::new() }),
        component_coder_ids: components,
    }
}

/// A data source or sink transform on the data stream at `address`, in `wire_coder`.
fn port(urn: &str, address: &str, wire_coder: String, pc: &str, reads: bool) -> rapi::PTransform {
    let grpc = fapi::RemoteGrpcPort {
        api_service_descriptor: Some(rapi::ApiServiceDescriptor { url: address.into(), authentication: None }),
        coder_id: wire_coder,
    };
    let mut t = rapi::PTransform {
        unique_name: format!("{urn}/{pc}"),
        spec: Some(rapi::FunctionSpec { urn: urn.into(), payload: grpc.encode_to_vec() }),
        ..Default::default()
    };
    let side = if reads { &mut t.inputs } else { &mut t.outputs };
    side.insert(if reads { "in" } else { "out" }.into(), pc.into());
    t
}

/// The descriptor `id` of `stage` (an SDK stage of `pipeline`'s plan), its data on the data
/// stream at `data_address`.
pub fn describe(
    pipeline: &rapi::Pipeline,
    stage: &Stage,
    id: &str,
    data_address: &str,
) -> Result<StageDescriptor, StageError> {
    let StageKind::Sdk { environment } = &stage.kind else {
        return Err(StageError::NotSdk(stage.transforms.join(", ")));
    };
    let c = pipeline.components.as_ref().ok_or_else(|| StageError::Missing("components".into()))?;
    let mut b = Builder { c, d: fapi::ProcessBundleDescriptor { id: id.to_string(), ..Default::default() } };
    // Side inputs are read through the State API, on the same services.
    b.d.state_api_service_descriptor =
        Some(rapi::ApiServiceDescriptor { url: data_address.into(), authentication: None });
    let env =
        c.environments.get(environment).ok_or_else(|| StageError::Missing(format!("environment '{environment}'")))?;
    b.d.environments.insert(environment.clone(), env.clone());
    let mut referenced = BTreeSet::new();
    for t_id in &stage.transforms {
        let t = c.transforms.get(t_id).ok_or_else(|| StageError::Missing(format!("transform '{t_id}'")))?;
        referenced.extend(t.inputs.values().chain(t.outputs.values()).cloned());
        b.d.transforms.insert(t_id.clone(), t.clone());
    }
    for pc in &referenced {
        b.pcollection(pc)?;
    }
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    for pc in &stage.inputs {
        let wire = b.wire_coder(pc)?;
        let t = format!("weir_source_{pc}");
        b.d.transforms.insert(t.clone(), port(DATA_SOURCE, data_address, wire, pc, false));
        inputs.push((t, pc.clone()));
    }
    let written = stage.outputs.iter().map(|pc| (pc, pc)).chain(stage.transcoded.iter().map(|(pc, a)| (pc, a)));
    for (pc, as_pc) in written {
        let wire = b.wire_coder(as_pc)?;
        let t = if pc == as_pc { format!("weir_sink_{pc}") } else { format!("weir_sink_{pc}_as_{as_pc}") };
        b.d.transforms.insert(t.clone(), port(DATA_SINK, data_address, wire, pc, true));
        outputs.push((t, pc.clone(), as_pc.clone()));
    }
    // Timers cross the data stream, their keys in the readable form Weir routes and keeps
    // state by (so the key of a timer is the key of the state it touches).
    for t_id in &stage.transforms {
        if let Some(t) = b.d.transforms.get(t_id).cloned() {
            if let Some(t) = b.timers_readable(t)? {
                b.d.timer_api_service_descriptor =
                    Some(rapi::ApiServiceDescriptor { url: data_address.into(), authentication: None });
                b.d.transforms.insert(t_id.clone(), t);
            }
        }
    }
    // A side input reaches the harness as Weir carries it: in its readable coder. So does a
    // main input: the harness encodes a residual of a splittable DoFn in its input's coder,
    // and Weir runs it again as input.
    let carried = stage.side_inputs.iter().map(|(_, _, pc)| pc).chain(&stage.inputs);
    for pc in carried {
        let coder = b.pcollection(pc)?.coder_id.clone();
        let readable = b.readable(&coder);
        if let Some(p) = b.d.pcollections.get_mut(pc) {
            p.coder_id = readable;
        }
    }
    Ok(StageDescriptor { descriptor: b.d, inputs, outputs })
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
    pub fn of(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> Result<Wire, StageError> {
        let c = coders.get(id).ok_or_else(|| StageError::Missing(format!("coder '{id}'")))?;
        let part = |k: usize| {
            let sub = c
                .component_coder_ids
                .get(k)
                .ok_or_else(|| StageError::Missing(format!("component {k} of coder '{id}'")))?;
            Wire::of(coders, sub).map(Box::new)
        };
        Ok(match c.spec.as_ref().map_or("", |s| s.urn.as_str()) {
            "beam:coder:bytes:v1" | "beam:coder:string_utf8:v1" | LENGTH_PREFIX => Wire::Prefixed,
            "beam:coder:varint:v1" => Wire::Varint,
            "beam:coder:bool:v1" => Wire::Bool,
            "beam:coder:double:v1" => Wire::Double,
            KV => Wire::Kv(part(0)?, part(1)?),
            ITERABLE => Wire::Iterable(part(0)?),
            WINDOWED_VALUE => return Wire::of(coders, c.component_coder_ids.first().map_or("", String::as_str)),
            other => return Err(StageError::Missing(format!("wire form of coder '{id}' ({other})"))),
        })
    }

    /// The wire form of coder `id` made readable as a stage's data ports carry it: standard
    /// coders as they are, a KV or iterable by its parts, anything else length-prefixed.
    pub fn readable(coders: &std::collections::HashMap<String, rapi::Coder>, id: &str) -> Result<Wire, StageError> {
        if standard(coders, id) {
            return Wire::of(coders, id);
        }
        let c = coders.get(id).ok_or_else(|| StageError::Missing(format!("coder '{id}'")))?;
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
) -> Result<Vec<u8>, StageError> {
    let c = coders.get(id).ok_or_else(|| StageError::Missing(format!("coder '{id}'")))?;
    let prefixed = |bytes: &[u8]| {
        let mut out = Vec::with_capacity(bytes.len() + 5);
        weir_sdk::coders::write_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    };
    let urn = c.spec.as_ref().map_or("", |s| s.urn.as_str());
    match urn {
        "beam:coder:bytes:v1" | "beam:coder:string_utf8:v1" => Ok(prefixed(bytes)),
        LENGTH_PREFIX | "beam:coder:varint:v1" | "beam:coder:bool:v1" | "beam:coder:double:v1" => Ok(bytes.to_vec()),
        ITERABLE if standard(coders, id) => Ok(bytes.to_vec()),
        KV if c.component_coder_ids.len() == 2 && standard(coders, &c.component_coder_ids[0]) => {
            let key = Wire::of(coders, &c.component_coder_ids[0])?
                .skip(bytes)
                .ok_or_else(|| StageError::Missing(format!("a whole key in a value of coder '{id}'")))?;
            let mut out = bytes[..key].to_vec();
            out.extend(carried_from_outer(coders, &c.component_coder_ids[1], &bytes[key..])?);
            Ok(out)
        }
        KV | ITERABLE => Err(StageError::Missing(format!(
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

    fn coders(list: &[(&str, &str, &[&str])]) -> std::collections::HashMap<String, rapi::Coder> {
        list.iter()
            .map(|(id, urn, parts)| (id.to_string(), coder(urn, parts.iter().map(|p| p.to_string()).collect())))
            .collect()
    }

    #[test]
    fn keys_and_values_are_found_in_their_wire_bytes() {
        let c = coders(&[
            ("kv", KV, &["s", "it"]),
            ("s", "beam:coder:string_utf8:v1", &[]),
            ("it", "beam:coder:iterable:v1", &["lp"]),
            ("lp", LENGTH_PREFIX, &["pickled"]),
            ("pickled", "beam:coder:pickled_python:v1", &[]),
            ("n", "beam:coder:varint:v1", &[]),
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
