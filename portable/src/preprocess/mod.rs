//! Preprocessing: what the job server makes of a submitted pipeline at Prepare, before anything
//! runs. In order:
//!
//! 1. [`lift`]: each combine-per-key lifted into its three parts (precombine before the
//!    grouping, merge and extract after), as Beam's runners do;
//! 2. [`sdf`]: each splittable DoFn expanded into its pair, split-and-size and process steps;
//! 3. [`test_stream`]: TestStream outputs in another coder than the stream's re-encoded by the
//!    harness;
//! 4. [`checks`]: everything the pipeline needs that Weir lacks refused, naming the transform,
//!    its URN and the way out: an unknown URN, a ParDo feature, a requirement, a window
//!    function only the SDK knows;
//! 5. [`fusion`]: the leaf transforms ordered, each run by Weir itself (Impulse, GroupByKey,
//!    Flatten, TestStream, Reshuffle and Redistribute) or by an SDK harness, and the harness's
//!    transforms fused greedily into [`Stage`]s.
//!
//! Each harness stage is then described for the harness ([`descriptor`]): its
//! `ProcessBundleDescriptor`, with data ports whose wire coders ([`wire`]) let Weir carry any
//! SDK's values as bytes. [`windowing`] reads a proto's windowing strategy as Weir's.

pub mod checks;
pub mod descriptor;
pub mod fusion;
pub mod lift;
pub mod sdf;
pub mod test_stream;
pub mod windowing;
pub mod wire;

use std::collections::HashMap;

use crate::proto::pipeline::v1 as rapi;
use crate::Error;

/// What runs a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageKind {
    /// Weir's impulse.
    Impulse,
    /// Weir's GroupByKey, with the windowing strategy of its input.
    GroupByKey {
        /// The input's windowing strategy id.
        windowing_strategy: String,
    },
    /// Weir's flatten.
    Flatten,
    /// Weir's TestStream, playing the transform's events.
    TestStream,
    /// Weir's reshuffle (or redistribute): a repartition by key or at random.
    Reshuffle,
    /// Transforms the harness of `environment` runs, fused: one bundle goes through all of them.
    Sdk {
        /// The environment id.
        environment: String,
    },
}

/// One stage: a runner transform, or fused harness transforms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// What runs it.
    pub kind: StageKind,
    /// Its transforms' ids, in topological order.
    pub transforms: Vec<String>,
    /// PCollections it reads from other stages as main input.
    pub inputs: Vec<String>,
    /// PCollections it reads as side inputs: (transform id, local name, PCollection id).
    pub side_inputs: Vec<(String, String, String)>,
    /// PCollections it produces that other stages read (or no one does: a leaf's outputs).
    pub outputs: Vec<String>,
    /// Outputs it also writes in another PCollection's coder: `(pc, as_pc)`, for a Flatten
    /// whose output (`as_pc`) has a coder other than its input's (`pc`). Beam lets a
    /// Flatten's inputs differ in coder; Weir carries values as bytes, so the SDK encodes them
    /// in the output's coder instead.
    pub transcoded: Vec<(String, String)>,
}

/// A pipeline as stages, in an order where every stage comes after those it reads.
#[derive(Debug, Clone)]
pub struct PortablePlan {
    /// The pipeline as planned: as submitted, with its splittable DoFns expanded
    /// ([`crate::preprocess::sdf`]). The stages' ids are its.
    pub pipeline: rapi::Pipeline,
    /// The stages.
    pub stages: Vec<Stage>,
}

pub(crate) fn urn(t: &rapi::PTransform) -> &str {
    t.spec.as_ref().map_or("", |s| s.urn.as_str())
}

pub(crate) fn unsupported(t: &rapi::PTransform, why: impl Into<String>) -> Error {
    Error::Unsupported { transform: t.unique_name.clone(), urn: urn(t).to_string(), why: why.into() }
}

/// PCollection `pc` as its user knows it: its name and the step that makes it (`'Win.None'
/// (the output of 'Win/WindowInto(WindowIntoFn)')`), not the proto's id.
pub fn pc_name(c: &rapi::Components, pc: &str) -> String {
    let name = c.pcollections.get(pc).map(|p| p.unique_name.as_str()).filter(|n| !n.is_empty()).unwrap_or(pc);
    // The innermost step that outputs it: a leaf, or else any composite.
    let makers = c.transforms.values().filter(|t| t.outputs.values().any(|o| o == pc));
    let maker = makers.min_by_key(|t| (!t.subtransforms.is_empty(), std::cmp::Reverse(t.unique_name.len())));
    match maker {
        Some(t) => format!("'{name}' (the output of '{}')", t.unique_name),
        None => format!("'{name}'"),
    }
}

/// Whether coders `a` and `b` write values alike: the same coder, or the same URNs, payloads
/// and components all the way down.
pub(crate) fn same_coder(c: &rapi::Components, a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (Some(x), Some(y)) = (c.coders.get(a), c.coders.get(b)) else { return false };
    x.spec == y.spec
        && x.component_coder_ids.len() == y.component_coder_ids.len()
        && x.component_coder_ids.iter().zip(&y.component_coder_ids).all(|(p, q)| same_coder(c, p, q))
}

/// Plans `pipeline`: lifts its combiners ([`crate::preprocess::lift`]), expands its splittable DoFns, checks that Weir can run everything in it,
/// and fuses the harness's transforms into stages.
pub fn plan(pipeline: &rapi::Pipeline) -> Result<PortablePlan, Error> {
    let expanded = test_stream::transcode(sdf::expand(&lift::lift(pipeline)?)?)?;
    let stages = fusion::stages_of(&expanded)?;
    Ok(PortablePlan { pipeline: expanded, stages })
}

/// A map's entries by key: a plan is the same in every process that makes it (a cluster's
/// processes each plan the job, and must agree), whatever order the map keeps.
pub(crate) fn sorted<V>(m: &HashMap<String, V>) -> Vec<(&String, &V)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}
