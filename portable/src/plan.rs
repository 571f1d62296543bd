//! What the job server makes of a submitted pipeline before it runs anything: its leaf
//! transforms, each either run by Weir itself (Impulse, GroupByKey, Flatten, Reshuffle and
//! Redistribute) or by the SDK harness, and the harness's transforms fused greedily into
//! stages, each of which becomes one operator sending bundles to a harness.
//!
//! Everything a pipeline needs that Weir lacks is refused here, at Prepare, with the transform
//! and the URN named: an unknown transform URN, a ParDo feature (state, timers, splitting,
//! bundle finalization) or a pipeline requirement not supported, and a window function that
//! only the SDK knows.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::proto::pipeline::v1 as rapi;
use prost::Message;

/// Transform URNs (Beam's standard ones).
pub mod urns {
    /// The impulse: one empty byte array in the global window.
    pub const IMPULSE: &str = "beam:transform:impulse:v1";
    /// GroupByKey.
    pub const GROUP_BY_KEY: &str = "beam:transform:group_by_key:v1";
    /// Flatten.
    pub const FLATTEN: &str = "beam:transform:flatten:v1";
    /// Reshuffle (a composite the runner implements).
    pub const RESHUFFLE: &str = "beam:transform:reshuffle:v1";
    /// Redistribute, by key and arbitrarily.
    pub const REDISTRIBUTE_BY_KEY: &str = "beam:transform:redistribute_by_key:v1";
    /// Redistribute arbitrarily.
    pub const REDISTRIBUTE_ARBITRARILY: &str = "beam:transform:redistribute_arbitrarily:v1";
    /// ParDo.
    pub const PAR_DO: &str = "beam:transform:pardo:v1";
    /// Assigning windows.
    pub const WINDOW_INTO: &str = "beam:transform:window_into:v1";
    /// A lifted combine's parts, run by the harness.
    pub const COMBINE_PRECOMBINE: &str = "beam:transform:combine_per_key_precombine:v1";
    /// Merging accumulators after the grouping.
    pub const COMBINE_MERGE: &str = "beam:transform:combine_per_key_merge_accumulators:v1";
    /// Extracting outputs from merged accumulators.
    pub const COMBINE_EXTRACT: &str = "beam:transform:combine_per_key_extract_outputs:v1";
    /// Combining the grouped values of each key (an unlifted combine).
    pub const COMBINE_GROUPED_VALUES: &str = "beam:transform:combine_grouped_values:v1";
    /// A stream of elements and watermark and processing-time advances, for tests.
    pub const TEST_STREAM: &str = "beam:transform:teststream:v1";
    /// Mapping windows for side inputs.
    pub const MAP_WINDOWS: &str = "beam:transform:map_windows:v1";
    /// Merging windows in the SDK.
    pub const MERGE_WINDOWS: &str = "beam:transform:merge_windows:v1";
    /// Rendering elements as strings.
    pub const TO_STRING: &str = "beam:transform:to_string:v1";
}

/// The window functions Weir runs natively.
const WINDOW_FNS: [&str; 4] = [
    "beam:window_fn:global_windows:v1",
    "beam:window_fn:fixed_windows:v1",
    "beam:window_fn:sliding_windows:v1",
    "beam:window_fn:session_windows:v1",
];

/// Pipeline requirements Weir meets.
const REQUIREMENTS: [&str; 3] = [
    "beam:requirement:pardo:finalization:v1",
    "beam:requirement:pardo:splittable_dofn:v1",
    "beam:requirement:pardo:stateful:v1",
];

/// Transforms the harness runs.
const SDK_URNS: [&str; 13] = [
    urns::PAR_DO,
    crate::sdf::PAIR_WITH_RESTRICTION,
    crate::sdf::SPLIT_AND_SIZE,
    crate::sdf::PROCESS_SIZED,
    urns::WINDOW_INTO,
    urns::COMBINE_PRECOMBINE,
    urns::COMBINE_MERGE,
    urns::COMBINE_EXTRACT,
    urns::COMBINE_GROUPED_VALUES,
    urns::MAP_WINDOWS,
    urns::MERGE_WINDOWS,
    urns::TO_STRING,
    urns::FLATTEN,
];

/// A pipeline Weir cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A transform needs something Weir lacks.
    #[error("transform '{transform}' ({urn}) cannot run on Weir: {why}")]
    Unsupported {
        /// The transform's unique name.
        transform: String,
        /// The URN it needs.
        urn: String,
        /// What is missing.
        why: String,
    },
    /// The pipeline needs a requirement Weir does not meet.
    #[error("the pipeline requires {urn}, which Weir does not support yet")]
    Requirement {
        /// The requirement's URN.
        urn: String,
    },
    /// The pipeline proto is not a well-formed pipeline.
    #[error("malformed pipeline: {0}")]
    Malformed(String),
}

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
    /// ([`crate::sdf`]). The stages' ids are its.
    pub pipeline: rapi::Pipeline,
    /// The stages.
    pub stages: Vec<Stage>,
}

/// A leaf transform of the pipeline, with what it reads.
struct Leaf<'a> {
    id: &'a str,
    t: &'a rapi::PTransform,
    /// Main inputs (PCollection ids).
    main: Vec<&'a str>,
    /// Side inputs: (local name, PCollection id).
    sides: Vec<(&'a str, &'a str)>,
}

fn urn(t: &rapi::PTransform) -> &str {
    t.spec.as_ref().map_or("", |s| s.urn.as_str())
}

fn unsupported(t: &rapi::PTransform, why: impl Into<String>) -> PlanError {
    PlanError::Unsupported { transform: t.unique_name.clone(), urn: urn(t).to_string(), why: why.into() }
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

/// The leaf transforms under `ids`, depth first in the pipeline's order: a composite the runner
/// implements (Reshuffle) counts as a leaf.
fn leaves<'a>(c: &'a rapi::Components, ids: &'a [String], out: &mut Vec<&'a str>) -> Result<(), PlanError> {
    for id in ids {
        let t = c.transforms.get(id).ok_or_else(|| PlanError::Malformed(format!("no transform '{id}'")))?;
        // Weir reshuffles values as they are: a Reshuffle whose output has another coder than
        // its input (Beam Python's, in windows other than the global one) runs as it expands.
        let native_composite = urn(t) == urns::RESHUFFLE && passes_values_unchanged(c, t);
        if t.subtransforms.is_empty() || native_composite {
            out.push(id);
        } else {
            leaves(c, &t.subtransforms, out)?;
        }
    }
    Ok(())
}

/// Whether TestStream `t` reads its events from a service rather than carrying them.
fn test_stream_endpoint(t: &rapi::PTransform) -> bool {
    let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
    rapi::TestStreamPayload::decode(payload).is_ok_and(|p| p.endpoint.as_ref().is_some_and(|e| !e.url.is_empty()))
}

/// Whether transform `t` has one input and one output, in coders that write values alike.
fn passes_values_unchanged(c: &rapi::Components, t: &rapi::PTransform) -> bool {
    let coder = |m: &HashMap<String, String>| match m.values().collect::<Vec<_>>()[..] {
        [pc] => c.pcollections.get(pc).map(|p| p.coder_id.as_str()),
        _ => None,
    };
    matches!((coder(&t.inputs), coder(&t.outputs)), (Some(a), Some(b)) if same_coder(c, a, b))
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

/// Whether `t` runs a DoFn (a ParDo, or a part of an expanded splittable one).
pub fn runs_do_fn(t: &rapi::PTransform) -> bool {
    matches!(
        urn(t),
        urns::PAR_DO | crate::sdf::PAIR_WITH_RESTRICTION | crate::sdf::SPLIT_AND_SIZE | crate::sdf::PROCESS_SIZED
    )
}

/// Checks what a ParDo asks of the runner.
fn check_par_do(t: &rapi::PTransform) -> Result<rapi::ParDoPayload, PlanError> {
    let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
    let p = rapi::ParDoPayload::decode(payload)
        .map_err(|e| unsupported(t, format!("a ParDo payload that does not decode: {e}")))?;
    let lacking = [
        // Expanded before planning ([`crate::sdf`]): only its parts are left.
        (!p.restriction_coder_id.is_empty() && urn(t) == urns::PAR_DO, "splittable DoFns"),
        (p.requires_time_sorted_input, "time-sorted input"),
        (p.requires_stable_input, "stable input"),
        (!p.on_window_expiration_timer_family_spec.is_empty(), "window expiration callbacks"),
    ];
    if let Some((_, what)) = lacking.iter().find(|(needed, _)| *needed) {
        return Err(unsupported(
            t,
            format!("{what} are not supported by Weir's portable runner yet: run this step on another runner"),
        ));
    }
    for (id, spec) in sorted_map(&p.state_specs) {
        let protocol = spec.protocol.as_ref().map_or("", |f| f.urn.as_str());
        if !USER_STATE.contains(&protocol) {
            return Err(unsupported(
                t,
                format!("user state '{id}' is kept by protocol '{protocol}', which Weir lacks"),
            ));
        }
    }
    for (id, spec) in sorted_map(&p.timer_family_specs) {
        if crate::user_state::time_domain(spec.time_domain).is_none() {
            return Err(unsupported(
                t,
                format!("timer family '{id}' follows a clock Weir lacks ({})", spec.time_domain),
            ));
        }
    }
    Ok(p)
}

/// The State API protocols of user state Weir keeps.
const USER_STATE: [&str; 3] =
    ["beam:user_state:bag:v1", "beam:user_state:multimap:v1", "beam:user_state:ordered_list:v1"];

/// Whether ParDo `t` keeps state or sets timers: its input is keyed, and it runs after Weir
/// routes each key to one place.
pub fn is_stateful(t: &rapi::PTransform) -> bool {
    urn(t) == urns::PAR_DO
        && t.spec
            .as_ref()
            .and_then(|s| rapi::ParDoPayload::decode(&s.payload[..]).ok())
            .is_some_and(|p| !p.state_specs.is_empty() || !p.timer_family_specs.is_empty())
}

/// A map's entries in key order.
fn sorted_map<V>(m: &HashMap<String, V>) -> Vec<(&String, &V)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// Checks that Weir runs the windowing of PCollection `pc` (read or written by `t`): its window
/// function, trigger and the rest.
fn check_windowing(c: &rapi::Components, t: &rapi::PTransform, pc: &str) -> Result<String, PlanError> {
    let p = c.pcollections.get(pc).ok_or_else(|| PlanError::Malformed(format!("no PCollection '{pc}'")))?;
    let ws = c
        .windowing_strategies
        .get(&p.windowing_strategy_id)
        .ok_or_else(|| PlanError::Malformed(format!("no windowing strategy '{}'", p.windowing_strategy_id)))?;
    let window_fn = ws.window_fn.as_ref().map_or("", |f| f.urn.as_str());
    if !WINDOW_FNS.contains(&window_fn) {
        return Err(unsupported(
            t,
            format!(
                "PCollection {} is windowed by {window_fn}, a window function known only to the SDK; Weir runs \
                 GlobalWindows, FixedWindows, SlidingWindows and Sessions: window it into one of those",
                pc_name(c, pc)
            ),
        ));
    }
    crate::windowing::strategy(ws).map_err(|e| unsupported(t, format!("the windowing of {}: {e}", pc_name(c, pc))))?;
    Ok(p.windowing_strategy_id.clone())
}

/// Plans `pipeline`: lifts its combiners ([`crate::lift`]), expands its splittable DoFns, checks that Weir can run everything in it,
/// and fuses the harness's transforms into stages.
pub fn plan(pipeline: &rapi::Pipeline) -> Result<PortablePlan, PlanError> {
    let expanded = transcode_test_streams(crate::sdf::expand(&crate::lift::lift(pipeline)?)?)?;
    let stages = stages_of(&expanded)?;
    Ok(PortablePlan { pipeline: expanded, stages })
}

/// `pipeline` with each TestStream output whose elements are encoded in a coder other than the
/// output's (Beam Python encodes them with the stream's own coder) written as a PCollection in
/// that coder instead, which the harness turns into the output (the SDK decodes and encodes:
/// Weir never does), assigning the windows the output has: those of the stream. A stream of
/// several tagged outputs has each of them so.
fn transcode_test_streams(mut p: rapi::Pipeline) -> Result<rapi::Pipeline, PlanError> {
    let c = p.components.as_mut().ok_or_else(|| PlanError::Malformed("no components".into()))?;
    let mut ids: Vec<String> =
        c.transforms.iter().filter(|(_, t)| urn(t) == urns::TEST_STREAM).map(|(i, _)| i.clone()).collect();
    ids.sort();
    for id in ids {
        let t = c.transforms[&id].clone();
        let payload = rapi::TestStreamPayload::decode(t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]))
            .map_err(|e| unsupported(&t, format!("a TestStream payload that does not decode: {e}")))?;
        let mut encodes = Vec::new();
        for (tag, out) in sorted(&t.outputs) {
            if c.pcollections.get(out).is_none_or(|pc| same_coder(c, &pc.coder_id, &payload.coder_id)) {
                continue;
            }
            // The SDK's environment: that of a transform reading the stream, or any.
            let readers = c.transforms.values().filter(|x| x.inputs.values().any(|i| i == out));
            let env = readers.chain(c.transforms.values()).map(|x| x.environment_id.clone()).find(|e| !e.is_empty());
            let Some(env) = env else {
                return Err(unsupported(
                    &t,
                    "elements in a coder other than its output's, and no SDK to re-encode them",
                ));
            };
            let encoded = crate::sdf::pcollection_like(c, out, "_encoded", &payload.coder_id)?;
            // The payload is the windowing strategy, whose first field is the window function as
            // a `WindowIntoPayload`'s is (Beam Python reads a strategy, other SDKs the payload).
            let ws = c.pcollections.get(out).and_then(|pc| c.windowing_strategies.get(&pc.windowing_strategy_id));
            let assign = ws.cloned().unwrap_or_default();
            let encode_id = crate::sdf::fresh(&c.transforms, &format!("{id}/Encode/{tag}"));
            let encode = rapi::PTransform {
                unique_name: format!("{}/Encode/{tag}", t.unique_name),
                spec: Some(rapi::FunctionSpec { urn: urns::WINDOW_INTO.into(), payload: assign.encode_to_vec() }),
                inputs: HashMap::from([("in".to_string(), encoded.clone())]),
                outputs: HashMap::from([("out".to_string(), out.clone())]),
                environment_id: env,
                ..Default::default()
            };
            c.transforms.insert(encode_id.clone(), encode);
            encodes.push((tag.clone(), encoded, encode_id));
        }
        if encodes.is_empty() {
            continue;
        }
        let list = match c.transforms.values_mut().find(|x| x.subtransforms.contains(&id)) {
            Some(parent) => &mut parent.subtransforms,
            None => &mut p.root_transform_ids,
        };
        let at = list.iter().position(|x| x == &id).map_or(list.len(), |at| at + 1);
        for (k, (_, _, encode_id)) in encodes.iter().enumerate() {
            list.insert(at + k, encode_id.clone());
        }
        if let Some(x) = c.transforms.get_mut(&id) {
            for (tag, encoded, _) in encodes {
                x.outputs.insert(tag, encoded);
            }
        }
    }
    Ok(p)
}

/// The stages of `pipeline`, whose splittable DoFns are expanded.
fn stages_of(pipeline: &rapi::Pipeline) -> Result<Vec<Stage>, PlanError> {
    let c = pipeline.components.as_ref().ok_or_else(|| PlanError::Malformed("no components".into()))?;
    let mut ids = Vec::new();
    leaves(c, &pipeline.root_transform_ids, &mut ids)?;
    let mut all = Vec::with_capacity(ids.len());
    for id in ids {
        let t = &c.transforms[id];
        let sides: BTreeSet<String> = match runs_do_fn(t) {
            true => check_par_do(t)?.side_inputs.into_keys().collect(),
            false => BTreeSet::new(),
        };
        for side in &sides {
            // A side input is mapped to windows by its own window function.
            let pc =
                t.inputs.get(side).ok_or_else(|| unsupported(t, format!("side input '{side}' is not an input")))?;
            check_windowing(c, t, pc)?;
        }
        // In the order of their local names: every process of a cluster plans alike.
        let inputs = sorted(&t.inputs);
        let main = inputs.iter().filter(|(k, _)| !sides.contains(*k)).map(|(_, v)| v.as_str()).collect();
        let sides = inputs.iter().filter(|(k, _)| sides.contains(*k)).map(|(k, v)| (k.as_str(), v.as_str()));
        all.push(Leaf { id, t, main, sides: sides.collect() });
    }
    // After the transforms: a transform that needs what a requirement names is named itself.
    if let Some(r) = pipeline.requirements.iter().find(|r| !REQUIREMENTS.contains(&r.as_str())) {
        return Err(PlanError::Requirement { urn: r.clone() });
    }
    let producer = producers(&all);
    let order = topological(&all, &producer)?;
    let planned = Fusion::new(c, &all, producer.clone()).run(&order)?;
    // Weir carries every PCollection that leaves a stage in its windowing.
    for pc in planned.iter().flat_map(|s| &s.outputs) {
        if let Some(&p) = producer.get(pc.as_str()) {
            check_windowing(c, all[p].t, pc)?;
        }
    }
    Ok(planned)
}

/// Checks that Weir can start every environment a stage of `plan` runs in (LOOPBACK, EXTERNAL
/// or PROCESS): a job server refuses any other at Prepare, naming a transform that needs it,
/// rather than when the job runs.
pub fn check_environments(plan: &PortablePlan) -> Result<(), PlanError> {
    let c = plan.pipeline.components.as_ref().ok_or_else(|| PlanError::Malformed("no components".into()))?;
    for stage in &plan.stages {
        let StageKind::Sdk { environment } = &stage.kind else { continue };
        let t = stage.transforms.first().and_then(|t| c.transforms.get(t));
        let Some(t) = t else { return Err(PlanError::Malformed(format!("a stage without transforms: {stage:?}"))) };
        let env = c.environments.get(environment).ok_or_else(|| {
            PlanError::Malformed(format!(
                "transform '{}' runs in environment '{environment}', which the pipeline lacks",
                t.unique_name
            ))
        })?;
        if let Err(why) = crate::harness::Launch::of(env, "python3") {
            return Err(unsupported(t, format!("it runs in environment '{environment}': {why}")));
        }
    }
    Ok(())
}

/// A map's entries by key: a plan is the same in every process that makes it (a cluster's
/// processes each plan the job, and must agree), whatever order the map keeps.
fn sorted(m: &HashMap<String, String>) -> Vec<(&String, &String)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort();
    v
}

/// Per PCollection, the leaf that produces it. A leaf whose output is its own input (the no-op
/// Beam's `Create` ends in, in streaming) produces nothing: the PCollection is its producer's.
fn producers<'a>(all: &[Leaf<'a>]) -> HashMap<&'a str, usize> {
    all.iter()
        .enumerate()
        .flat_map(|(i, l)| {
            l.t.outputs.values().filter(|pc| !l.main.contains(&pc.as_str())).map(move |pc| (pc.as_str(), i))
        })
        .collect()
}

/// The leaves in an order where each comes after the producers of what it reads.
fn topological(all: &[Leaf<'_>], producer: &HashMap<&str, usize>) -> Result<Vec<usize>, PlanError> {
    let mut state = vec![0u8; all.len()];
    let mut order = Vec::with_capacity(all.len());
    fn visit(
        i: usize,
        all: &[Leaf<'_>],
        producer: &HashMap<&str, usize>,
        state: &mut [u8],
        order: &mut Vec<usize>,
    ) -> Result<(), PlanError> {
        match state[i] {
            2 => return Ok(()),
            1 => return Err(PlanError::Malformed(format!("a cycle through transform '{}'", all[i].t.unique_name))),
            _ => {}
        }
        state[i] = 1;
        let reads = all[i].main.iter().copied().chain(all[i].sides.iter().map(|s| s.1));
        for pc in reads {
            // A transform reading its own output (Beam's no-op composites) is no edge.
            if let Some(&p) = producer.get(pc).filter(|&&p| p != i) {
                visit(p, all, producer, state, order)?;
            }
        }
        state[i] = 2;
        order.push(i);
        Ok(())
    }
    for i in 0..all.len() {
        visit(i, all, producer, &mut state, &mut order)?;
    }
    Ok(order)
}

/// Greedy fusion: each harness transform joins the stage of the producer of its one main input
/// when that producer runs in the same environment, none of its side inputs comes from that
/// stage, and no other input it reads depends on that stage (which would make a cycle).
struct Fusion<'a> {
    c: &'a rapi::Components,
    all: &'a [Leaf<'a>],
    producer: HashMap<&'a str, usize>,
    /// Each leaf's stage.
    stage_of: Vec<Option<usize>>,
    stages: Vec<Stage>,
    /// Per stage, the stages it reads from (directly).
    reads: Vec<BTreeSet<usize>>,
}

impl<'a> Fusion<'a> {
    fn new(c: &'a rapi::Components, all: &'a [Leaf<'a>], producer: HashMap<&'a str, usize>) -> Self {
        Fusion { c, all, producer, stage_of: vec![None; all.len()], stages: Vec::new(), reads: Vec::new() }
    }

    /// Whether stage `s` is `target` or reads from it, directly or not.
    fn depends_on(&self, s: usize, target: usize) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![s];
        while let Some(x) = todo.pop() {
            if x == target {
                return true;
            }
            if seen.insert(x) {
                todo.extend(self.reads[x].iter().copied());
            }
        }
        false
    }

    fn producer_stage(&self, pc: &str, me: usize) -> Option<usize> {
        self.producer.get(pc).filter(|&&p| p != me).and_then(|&p| self.stage_of[p])
    }

    fn kind(&self, l: &Leaf<'_>) -> Result<StageKind, PlanError> {
        Ok(match urn(l.t) {
            urns::IMPULSE => StageKind::Impulse,
            urns::GROUP_BY_KEY => {
                let input = l.main.first().ok_or_else(|| unsupported(l.t, "a GroupByKey without input"))?;
                StageKind::GroupByKey { windowing_strategy: check_windowing(self.c, l.t, input)? }
            }
            urns::FLATTEN => StageKind::Flatten,
            urns::TEST_STREAM if test_stream_endpoint(l.t) => {
                return Err(unsupported(
                    l.t,
                    "a TestStream whose events come from a TestStream service: give the TestStream its events \
                     in the pipeline",
                ))
            }
            urns::TEST_STREAM => StageKind::TestStream,
            urns::RESHUFFLE | urns::REDISTRIBUTE_ARBITRARILY | urns::REDISTRIBUTE_BY_KEY => StageKind::Reshuffle,
            u if SDK_URNS.contains(&u) && !l.t.environment_id.is_empty() => {
                if is_stateful(l.t) {
                    self.check_keyed(l)?;
                }
                StageKind::Sdk { environment: l.t.environment_id.clone() }
            }
            u if l.t.inputs.is_empty() && l.t.outputs.is_empty() => {
                return Err(PlanError::Malformed(format!(
                    "transform '{}' ({u}) reads and writes nothing",
                    l.t.unique_name
                )))
            }
            "" => return Err(unsupported(l.t, "a leaf transform without a URN")),
            _ => return Err(unsupported(l.t, "Weir does not know this transform")),
        })
    }

    /// Checks that a stateful ParDo's input is keyed, in windows that never merge (state is
    /// kept per key and window).
    fn check_keyed(&self, l: &Leaf<'_>) -> Result<(), PlanError> {
        let [input] = l.main.as_slice() else {
            return Err(unsupported(l.t, format!("a stateful ParDo reads {} main inputs, not one", l.main.len())));
        };
        let ws = check_windowing(self.c, l.t, input)?;
        let merging = self.c.windowing_strategies.get(&ws).and_then(|w| w.window_fn.as_ref()).map(|f| f.urn.as_str())
            == Some("beam:window_fn:session_windows:v1");
        if merging {
            return Err(unsupported(
                l.t,
                format!(
                    "state and timers in merging windows (those of PCollection {}): window its input into \
                     windows that do not merge, or keep the state in a GroupByKey's output instead",
                    pc_name(self.c, input)
                ),
            ));
        }
        let coder = self.coder_of(input);
        let urn = self.c.coders.get(coder).and_then(|c| c.spec.as_ref()).map_or("", |s| s.urn.as_str());
        if urn != "beam:coder:kv:v1" {
            return Err(unsupported(
                l.t,
                format!(
                    "a stateful ParDo's input, PCollection {}, has coder {urn}, not a KV: state is kept per key, \
                     so key the input first (a (key, value) pair)",
                    pc_name(self.c, input)
                ),
            ));
        }
        Ok(())
    }

    fn run(mut self, order: &[usize]) -> Result<Vec<Stage>, PlanError> {
        for &i in order {
            let l = &self.all[i];
            // A no-op (its input is its output) joins nothing and runs nowhere.
            if !l.t.outputs.is_empty() && l.t.outputs.values().all(|o| l.main.contains(&o.as_str())) {
                continue;
            }
            let kind = self.kind(l)?;
            let fuse_into = match &kind {
                // A stateful transform starts a stage: Weir routes its input by key first.
                StageKind::Sdk { .. } if is_stateful(l.t) => None,
                StageKind::Sdk { environment } if l.main.len() == 1 => {
                    self.producer_stage(l.main[0], i).filter(|&s| self.can_fuse(s, environment, l, i))
                }
                _ => None,
            };
            let s = match fuse_into {
                Some(s) => s,
                None => {
                    self.stages.push(Stage {
                        kind,
                        transforms: Vec::new(),
                        inputs: Vec::new(),
                        side_inputs: Vec::new(),
                        outputs: Vec::new(),
                        transcoded: Vec::new(),
                    });
                    self.reads.push(BTreeSet::new());
                    self.stages.len() - 1
                }
            };
            self.stage_of[i] = Some(s);
            self.stages[s].transforms.push(l.id.to_string());
            for pc in l.main.iter().copied().chain(l.sides.iter().map(|x| x.1)) {
                if let Some(p) = self.producer_stage(pc, i).filter(|&p| p != s) {
                    self.reads[s].insert(p);
                }
            }
        }
        self.connect();
        self.transcode()?;
        let order = self.stage_order();
        let mut stages: Vec<Option<Stage>> = self.stages.into_iter().map(Some).collect();
        Ok(order.into_iter().filter_map(|s| stages[s].take()).collect())
    }

    /// The stages in an order where each comes after the stages it reads (a stage made early
    /// may have taken in, later, a transform reading a later stage's output).
    fn stage_order(&self) -> Vec<usize> {
        let mut done = vec![false; self.stages.len()];
        let mut order = Vec::with_capacity(self.stages.len());
        fn visit(s: usize, reads: &[BTreeSet<usize>], done: &mut [bool], order: &mut Vec<usize>) {
            if done[s] {
                return;
            }
            // Fusion never makes a cycle (see `can_fuse`), so this terminates.
            done[s] = true;
            for &r in &reads[s] {
                visit(r, reads, done, order);
            }
            order.push(s);
        }
        for s in 0..self.stages.len() {
            visit(s, &self.reads, &mut done, &mut order);
        }
        order
    }

    /// Whether `l` (leaf `i`) may join stage `s`.
    fn can_fuse(&self, s: usize, environment: &str, l: &Leaf<'_>, i: usize) -> bool {
        let same_env = matches!(&self.stages[s].kind, StageKind::Sdk { environment: e } if e == environment);
        // Its side inputs must be complete before the stage runs: not from the stage, nor from
        // anything that reads it.
        let sides_ok = l.sides.iter().all(|(_, pc)| self.producer_stage(pc, i).is_none_or(|p| !self.depends_on(p, s)));
        // Weir reads a bundle's side inputs for the windows of the stage's input: a transform
        // with side inputs joins a stage only where its elements are still in those windows
        // (not after a WindowInto in the stage).
        let windows_ok = l.sides.is_empty() || {
            let first = self.stages[s].transforms.first().and_then(|t| self.all.iter().find(|x| x.id == t.as_str()));
            let stage_input = first.and_then(|f| f.main.first().copied());
            let input_fn = stage_input.and_then(|pc| self.window_fn_of(pc));
            l.main.first().and_then(|pc| self.window_fn_of(pc)) == input_fn
        };
        same_env && sides_ok && windows_ok
    }

    /// The window function of PCollection `pc`'s windowing.
    fn window_fn_of(&self, pc: &str) -> Option<&rapi::FunctionSpec> {
        let ws = self.c.pcollections.get(pc).map(|p| p.windowing_strategy_id.as_str())?;
        self.c.windowing_strategies.get(ws).and_then(|w| w.window_fn.as_ref())
    }

    fn coder_of(&self, pc: &str) -> &str {
        self.c.pcollections.get(pc).map_or("", |p| p.coder_id.as_str())
    }

    /// Has the harness write each Flatten input whose coder differs from the Flatten's output's
    /// in the output's coder too; a Flatten input that Weir makes itself cannot be, and is
    /// refused, unless it is another Flatten's output, whose inputs are then written so.
    fn transcode(&mut self) -> Result<(), PlanError> {
        for f in 0..self.stages.len() {
            if self.stages[f].kind != StageKind::Flatten {
                continue;
            }
            let Some(out) = self.stages[f].outputs.first().cloned() else { continue };
            for pc in self.stages[f].inputs.clone() {
                if !same_coder(self.c, self.coder_of(&pc), self.coder_of(&out)) {
                    self.carry_as(&pc, &out, f)?;
                }
            }
        }
        Ok(())
    }

    /// Has the stage making `pc` also make it in the coder of `as_pc`, for Flatten stage `f`.
    fn carry_as(&mut self, pc: &str, as_pc: &str, f: usize) -> Result<(), PlanError> {
        let producer = self.producer.get(pc).and_then(|&p| self.stage_of[p]);
        let pair = (pc.to_string(), as_pc.to_string());
        match producer {
            Some(p) if self.stages[p].transcoded.contains(&pair) => Ok(()),
            Some(p) if matches!(self.stages[p].kind, StageKind::Sdk { .. }) => {
                self.stages[p].transcoded.push(pair);
                Ok(())
            }
            Some(p) if self.stages[p].kind == StageKind::Flatten => {
                for input in self.stages[p].inputs.clone() {
                    self.carry_as(&input, as_pc, f)?;
                }
                self.stages[p].transcoded.push(pair);
                Ok(())
            }
            _ => {
                let t = &self.c.transforms[&self.stages[f].transforms[0]];
                Err(unsupported(
                    t,
                    format!(
                        "its input, PCollection {}, has coder {} and its output {} coder {}, and Weir cannot \
                         re-encode values it did not get from an SDK harness: give the inputs one coder (a Map \
                         with an output type hint before the Flatten)",
                        pc_name(self.c, pc),
                        self.coder_of(pc),
                        pc_name(self.c, as_pc),
                        self.coder_of(as_pc)
                    ),
                ))
            }
        }
    }

    /// Fills each stage's inputs, side inputs and outputs from its transforms.
    fn connect(&mut self) {
        let mut consumers: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
        for (i, l) in self.all.iter().enumerate() {
            if let Some(s) = self.stage_of[i] {
                for pc in l.main.iter().copied().chain(l.sides.iter().map(|x| x.1)) {
                    consumers.entry(pc).or_default().insert(s);
                }
            }
        }
        for (i, l) in self.all.iter().enumerate() {
            let Some(s) = self.stage_of[i] else { continue };
            // A Flatten may read one PCollection more than once, and gives it as often.
            let repeats = self.stages[s].kind == StageKind::Flatten;
            for pc in &l.main {
                let read = self.stages[s].inputs.iter().any(|x| x == pc);
                if self.producer_stage(pc, i) != Some(s) && (repeats || !read) {
                    self.stages[s].inputs.push(pc.to_string());
                }
            }
            for (name, pc) in &l.sides {
                self.stages[s].side_inputs.push((l.id.to_string(), name.to_string(), pc.to_string()));
            }
            for (_, pc) in sorted(&l.t.outputs) {
                let elsewhere = consumers.get(pc.as_str()).is_none_or(|c| c.iter().any(|&x| x != s));
                if elsewhere {
                    self.stages[s].outputs.push(pc.clone());
                }
            }
        }
    }
}
