//! A fused stage as the harness runs it: its `ProcessBundleDescriptor`.
//!
//! The stage's transforms, with what they reference (PCollections, coders, windowing
//! strategies, environments), plus a data source transform for each PCollection the stage
//! reads from Weir and a data sink for each it hands back. Data crosses in the wire coder: the
//! PCollection's windowed value coder, its element coder made readable to Weir: a coder of
//! Beam's standard ones is kept, a KV or iterable keeps its shape with its parts made readable,
//! and anything else (an SDK's own coder) is length-prefixed. Weir can then find where each
//! value and each key ends ([`Wire`](super::wire::Wire)) and carry any SDK's values as bytes.

use std::collections::BTreeSet;

use crate::preprocess::wire::{plain_coder as coder, standard, wire_window_coder};
use crate::preprocess::{Stage, StageKind};
use crate::proto::fn_execution::v1 as fapi;
use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use prost::Message;
use weir_sdk::urns::coders::{ITERABLE, KV, LENGTH_PREFIX, TIMER, WINDOWED_VALUE};
use weir_sdk::urns::runner::{DATA_SINK, DATA_SOURCE};
use weir_sdk::urns::PAR_DO;

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

/// Copies into the descriptor what `id` (a PCollection) references, and returns its wire coder.
struct Builder<'a> {
    c: &'a rapi::Components,
    d: fapi::ProcessBundleDescriptor,
}

impl Builder<'_> {
    fn coder(&mut self, id: &str) -> Result<(), Error> {
        if self.d.coders.contains_key(id) {
            return Ok(());
        }
        let coder = self.c.coders.get(id).ok_or_else(|| Error::Malformed(format!("no coder '{id}'")))?;
        self.d.coders.insert(id.to_string(), coder.clone());
        for component in &coder.component_coder_ids {
            self.coder(component)?;
        }
        Ok(())
    }

    fn pcollection(&mut self, id: &str) -> Result<&rapi::PCollection, Error> {
        let pc = self.c.pcollections.get(id).ok_or_else(|| Error::Malformed(format!("no PCollection '{id}'")))?;
        self.coder(&pc.coder_id)?;
        let ws_id = &pc.windowing_strategy_id;
        let ws = self
            .c
            .windowing_strategies
            .get(ws_id)
            .ok_or_else(|| Error::Malformed(format!("no windowing strategy '{ws_id}'")))?;
        self.coder(&ws.window_coder_id)?;
        self.d.windowing_strategies.insert(ws_id.clone(), ws.clone());
        self.d.pcollections.insert(id.to_string(), pc.clone());
        Ok(pc)
    }

    /// The wire coder of PCollection `id`: windowed values of its element coder, length-prefixed
    /// unless standard, in its window coder.
    fn wire_coder(&mut self, id: &str) -> Result<String, Error> {
        let pc = self.pcollection(id)?.clone();
        let ws = &self.c.windowing_strategies[&pc.windowing_strategy_id];
        let value = self.readable(&pc.coder_id);
        let window = self.window_coder(&ws.window_coder_id)?;
        let wire = format!("{id}_weir_wire");
        self.d.coders.insert(wire.clone(), coder(WINDOWED_VALUE, vec![value, window]));
        Ok(wire)
    }

    /// Window coder `id` as the harness writes windows for Weir ([`wire_window_coder`]).
    fn window_coder(&mut self, id: &str) -> Result<String, Error> {
        self.coder(id)?;
        let wire = wire_window_coder(&self.c.coders, id)?;
        self.d.coders.extend(wire.coders);
        Ok(wire.id)
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
    fn timers_readable(&mut self, mut t: rapi::PTransform) -> Result<Option<rapi::PTransform>, Error> {
        let Some(spec) = t.spec.as_mut().filter(|s| s.urn == PAR_DO) else { return Ok(None) };
        let mut p = rapi::ParDoPayload::decode(&spec.payload[..])
            .map_err(|e| Error::Malformed(format!("a ParDo payload that does not decode ({e})")))?;
        if p.timer_family_specs.is_empty() {
            return Ok(None);
        }
        for family in p.timer_family_specs.values_mut() {
            let id = family.timer_family_coder_id.clone();
            let parts = self.c.coders.get(&id).map(|c| c.component_coder_ids.clone()).unwrap_or_default();
            let [key, window] = parts.as_slice() else {
                return Err(Error::Malformed(format!("no key and window coders in timer coder '{id}'")));
            };
            let key = self.readable(key);
            let window = self.window_coder(window)?;
            let readable = format!("{id}_weir_readable");
            self.d.coders.insert(readable.clone(), coder(TIMER, vec![key, window]));
            family.timer_family_coder_id = readable;
        }
        spec.payload = p.encode_to_vec();
        Ok(Some(t))
    }

    fn standard(&self, id: &str) -> bool {
        standard(&self.c.coders, id)
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
) -> Result<StageDescriptor, Error> {
    let StageKind::Sdk { environment } = &stage.kind else {
        return Err(Error::NotSdk(stage.transforms.join(", ")));
    };
    let c = pipeline.components.as_ref().ok_or_else(|| Error::Malformed("components".into()))?;
    let mut b = Builder { c, d: fapi::ProcessBundleDescriptor { id: id.to_string(), ..Default::default() } };
    // Side inputs are read through the State API, on the same services.
    b.d.state_api_service_descriptor =
        Some(rapi::ApiServiceDescriptor { url: data_address.into(), authentication: None });
    let env =
        c.environments.get(environment).ok_or_else(|| Error::Malformed(format!("environment '{environment}'")))?;
    b.d.environments.insert(environment.clone(), env.clone());
    let mut referenced = BTreeSet::new();
    for t_id in &stage.transforms {
        let t = c.transforms.get(t_id).ok_or_else(|| Error::Malformed(format!("transform '{t_id}'")))?;
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
