//! A fused stage as the harness runs it: its `ProcessBundleDescriptor`.
//!
//! The stage's transforms, with what they reference (PCollections, coders, windowing
//! strategies, environments), plus a data source transform for each PCollection the stage
//! reads from Weir and a data sink for each it hands back. Data crosses in the wire coder: the
//! PCollection's windowed value coder, its element coder wrapped in a length prefix unless it
//! is one of Beam's standard coders, so that Weir carries any SDK's values as bytes.

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

/// Coders whose bytes Weir reads itself.
const STANDARD_CODERS: [&str; 8] = [
    "beam:coder:bytes:v1",
    "beam:coder:string_utf8:v1",
    KV,
    "beam:coder:varint:v1",
    "beam:coder:bool:v1",
    "beam:coder:double:v1",
    "beam:coder:iterable:v1",
    LENGTH_PREFIX,
];

/// A stage's descriptor, and which of its transforms take and give the data.
#[derive(Debug, Clone)]
pub struct StageDescriptor {
    /// What the harness gets.
    pub descriptor: fapi::ProcessBundleDescriptor,
    /// Per PCollection the stage reads: (data source transform id, PCollection id).
    pub inputs: Vec<(String, String)>,
    /// Per PCollection the stage hands back: (data sink transform id, PCollection id).
    pub outputs: Vec<(String, String)>,
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
        // A KV's key and value each on their own, so that Weir can group on the key's bytes.
        let element = &self.c.coders[&pc.coder_id];
        let value = match element.spec.as_ref().map(|s| s.urn.as_str()) {
            Some(KV) if element.component_coder_ids.len() == 2 => {
                let (k, v) = (element.component_coder_ids[0].clone(), element.component_coder_ids[1].clone());
                let kv = format!("{}_weir_wire", pc.coder_id);
                let parts = vec![self.readable(&k), self.readable(&v)];
                self.d.coders.insert(kv.clone(), coder(KV, parts));
                kv
            }
            _ => self.readable(&pc.coder_id),
        };
        let wire = format!("{id}_weir_wire");
        self.d.coders.insert(wire.clone(), coder(WINDOWED_VALUE, vec![value, ws.window_coder_id.clone()]));
        Ok(wire)
    }
}

impl Builder<'_> {
    /// Coder `id` itself if Weir reads all of it, else `id` in a length prefix.
    fn readable(&mut self, id: &str) -> String {
        if self.standard(id) {
            return id.to_string();
        }
        let wrapped = format!("{id}_weir_length_prefixed");
        self.d.coders.insert(wrapped.clone(), coder(LENGTH_PREFIX, vec![id.to_string()]));
        wrapped
    }

    /// Whether coder `id` and all its components are standard coders Weir reads.
    fn standard(&self, id: &str) -> bool {
        self.c.coders.get(id).is_some_and(|c| {
            c.spec.as_ref().is_some_and(|s| STANDARD_CODERS.contains(&s.urn.as_str()))
                && c.component_coder_ids.iter().all(|x| self.standard(x))
        })
    }
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
    for pc in &stage.outputs {
        let wire = b.wire_coder(pc)?;
        let t = format!("weir_sink_{pc}");
        b.d.transforms.insert(t.clone(), port(DATA_SINK, data_address, wire, pc, true));
        outputs.push((t, pc.clone()));
    }
    Ok(StageDescriptor { descriptor: b.d, inputs, outputs })
}
