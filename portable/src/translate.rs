//! A planned portable pipeline as a Weir pipeline, which any Weir runner then runs.
//!
//! Every PCollection of the submitted pipeline that crosses a stage boundary becomes a Weir
//! `PCollection<Vec<u8>>` of its values' wire bytes (see [`crate::stage`]), with its windowing
//! strategy read from the proto ([`crate::windowing`]):
//! - Impulse is Weir's impulse, its one empty byte array in the wire form of Beam's bytes
//!   coder;
//! - GroupByKey splits each KV's bytes into the key's and the value's, groups on the key's bytes
//!   with Weir's own GroupByKey under the proto's windowing strategy, and writes each group back
//!   as the key's bytes and an iterable of the values' bytes;
//! - Flatten is Weir's flatten, and Reshuffle Weir's reshuffle;
//! - a fused stage is one operator ([`crate::operator::StageFn`]) whose bundles an SDK harness
//!   runs.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use weir_sdk::coders::CoderError;
use weir_sdk::coders::WindowCoderKind;
use weir_sdk::kernel::{Batch, ErasedDoFn, KeyPartitioner, SideInputSpec};
use weir_sdk::kv::KV;
use weir_sdk::testing::TestStream;
use weir_sdk::time::MAX_TIMESTAMP;
use weir_sdk::transforms::flatten::Flatten;
use weir_sdk::transforms::group_by_key::GroupByKey;
use weir_sdk::transforms::impulse::Impulse;
use weir_sdk::transforms::reshuffle::Reshuffle;
use weir_sdk::windowed_value::TimestampedValue;
use weir_sdk::{ErasedParDo, Map, PCollection, PCollectionList, Pipeline, TryMap};

use crate::fn_api::FnServer;
use crate::operator::{port_coder, SideViewKernel, StageFn, StageRuntime, StageSide};
use crate::plan::{PortablePlan, Stage, StageKind};
use crate::proto::pipeline::v1 as rapi;
use crate::stage::{carried_from_outer, describe, Wire};
use crate::user_state::{StageState, TimerCodec};
use crate::windowing;

/// Side input access patterns.
const ITERABLE_SIDE_INPUT: &str = "beam:side_input:iterable:v1";
/// A side input read by key.
const MULTIMAP_SIDE_INPUT: &str = "beam:side_input:multimap:v1";

/// Why a planned pipeline cannot become a Weir pipeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TranslateError(pub String);

/// Where the harnesses of each environment are: the Fn API services and their worker ids.
pub struct Harnessed {
    /// The services.
    pub server: Arc<FnServer>,
    /// Per environment id, its harnesses' worker ids.
    pub workers: HashMap<String, Vec<String>>,
    /// How many bytes of input make a bundle at most.
    pub bundle_bytes: usize,
    /// How long a bundle may take.
    pub timeout: Duration,
    /// Where bundles' metrics go.
    pub metrics: Arc<crate::metrics::JobMetrics>,
}

/// Builds the Weir pipeline `plan` stages, into `pipeline`.
pub fn translate(plan: &PortablePlan, harnessed: &Harnessed, pipeline: &Pipeline) -> Result<(), TranslateError> {
    let proto = &plan.pipeline;
    let c = proto.components.as_ref().ok_or_else(|| TranslateError("no components".into()))?;
    let mut t = Translator { proto, c, h: harnessed, p: pipeline, pcs: HashMap::new() };
    for (i, stage) in plan.stages.iter().enumerate() {
        t.stage(i, stage)?;
    }
    Ok(())
}

/// A PCollection as Weir carries it: its id, and the id of the PCollection whose coder its
/// values are in.
type Carried = (String, String);

/// A Weir PCollection of values' wire bytes.
type Bytes = PCollection<Vec<u8>>;

struct Translator<'a> {
    proto: &'a rapi::Pipeline,
    c: &'a rapi::Components,
    h: &'a Harnessed,
    p: &'a Pipeline,
    /// The Weir PCollection of each proto PCollection made so far, by the PCollection and the
    /// one whose coder its values are in (itself, or a Flatten's output it was written for).
    pcs: HashMap<Carried, PCollection<Vec<u8>>>,
}

fn err(what: impl Into<String>) -> TranslateError {
    TranslateError(what.into())
}

impl Translator<'_> {
    fn pcollection(&self, id: &str) -> Result<&rapi::PCollection, TranslateError> {
        self.c.pcollections.get(id).ok_or_else(|| err(format!("no PCollection '{id}'")))
    }

    fn strategy_proto(&self, pc: &str) -> Result<&rapi::WindowingStrategy, TranslateError> {
        let ws = &self.pcollection(pc)?.windowing_strategy_id;
        self.c.windowing_strategies.get(ws).ok_or_else(|| err(format!("no windowing strategy '{ws}'")))
    }

    /// The Weir windowing strategy of PCollection `pc`.
    fn strategy(&self, pc: &str) -> Result<weir_sdk::window_fn::WindowingStrategy, TranslateError> {
        windowing::strategy(self.strategy_proto(pc)?)
            .map_err(|e| err(format!("PCollection {}: {e}", crate::plan::pc_name(self.c, pc))))
    }

    /// The window coder of PCollection `pc`.
    fn window_coder(&self, pc: &str) -> Result<WindowCoderKind, TranslateError> {
        let id = &self.strategy_proto(pc)?.window_coder_id;
        match self.c.coders.get(id).and_then(|c| c.spec.as_ref()).map(|s| s.urn.as_str()) {
            Some("beam:coder:global_window:v1") => Ok(WindowCoderKind::Global),
            Some("beam:coder:interval_window:v1") => Ok(WindowCoderKind::Interval),
            other => Err(err(format!(
                "PCollection {} has windows Weir cannot encode (coder {other:?})",
                crate::plan::pc_name(self.c, pc)
            ))),
        }
    }

    /// The wire form of PCollection `pc`'s values.
    fn wire(&self, pc: &str) -> Result<Wire, TranslateError> {
        Wire::readable(&self.c.coders, &self.pcollection(pc)?.coder_id).map_err(|e| err(e.to_string()))
    }

    fn input(&self, pc: &str) -> Result<PCollection<Vec<u8>>, TranslateError> {
        self.input_as(pc, pc)
    }

    /// PCollection `pc` with its values in the coder of `as_pc`.
    fn input_as(&self, pc: &str, as_pc: &str) -> Result<PCollection<Vec<u8>>, TranslateError> {
        // The plan has the harness write a second copy only where the coders differ.
        let made = self
            .pcs
            .get(&(pc.to_string(), as_pc.to_string()))
            .or_else(|| self.pcs.get(&(pc.to_string(), pc.to_string())));
        made.cloned()
            .ok_or_else(|| err(format!("PCollection {} is read before it is made", crate::plan::pc_name(self.c, pc))))
    }

    fn name(&self, stage: &Stage) -> String {
        let first = stage.transforms.first().map(String::as_str).unwrap_or("stage");
        self.c.transforms.get(first).map_or(first, |t| t.unique_name.as_str()).to_string()
    }

    fn stage(&mut self, i: usize, stage: &Stage) -> Result<(), TranslateError> {
        let name = self.name(stage);
        let out = match &stage.kind {
            StageKind::Impulse => {
                // Beam's bytes coder writes the empty array as its length, 0.
                let impulse = self.p.apply(&name, Impulse);
                vec![impulse.apply(&format!("{name}/wire"), Map::new(|_: Vec<u8>| vec![0u8]))]
            }
            StageKind::Flatten => {
                let out = stage.outputs.first().ok_or_else(|| err(format!("Flatten '{name}' has no output")))?;
                // Its output again in the coder of a later Flatten's output, from its inputs
                // written so.
                for (pc, as_pc) in &stage.transcoded {
                    let made = self.flatten(stage, as_pc, &format!("{name}/as {as_pc}"))?;
                    self.pcs.insert((pc.clone(), as_pc.clone()), made);
                }
                vec![self.flatten(stage, out, &name)?]
            }
            StageKind::Reshuffle => vec![self.one_input(stage)?.apply(&name, Reshuffle::via_random_key())],
            StageKind::TestStream => self.test_stream(stage, &name)?,
            StageKind::GroupByKey { .. } => vec![self.group_by_key(stage, &name)?],
            StageKind::Sdk { environment } => {
                for (key, weir) in self.sdk(i, stage, &name, environment)? {
                    self.pcs.insert(key, weir);
                }
                return Ok(());
            }
        };
        if out.len() != stage.outputs.len() {
            return Err(err(format!("stage '{name}' makes {} outputs, not {}", out.len(), stage.outputs.len())));
        }
        for (pc, weir) in stage.outputs.iter().zip(out) {
            self.pcs.insert((pc.clone(), pc.clone()), weir);
        }
        Ok(())
    }

    /// Flatten `stage`'s inputs, each in the coder of `as_pc`.
    fn flatten(&self, stage: &Stage, as_pc: &str, name: &str) -> Result<Bytes, TranslateError> {
        let inputs = stage.inputs.iter().map(|pc| self.input_as(pc, as_pc)).collect::<Result<Vec<_>, _>>()?;
        // Beam lets a Flatten's inputs differ in windowing (Python warns): each element keeps
        // its window, and the output is in the windowing the proto gives it.
        Ok(PCollectionList::of(self.p, inputs).apply(name, Flatten::into_windowing(self.strategy(as_pc)?)))
    }

    fn one_input(&self, stage: &Stage) -> Result<PCollection<Vec<u8>>, TranslateError> {
        match stage.inputs.as_slice() {
            [pc] => self.input(pc),
            other => Err(err(format!("stage '{}' reads {} inputs, not one", self.name(stage), other.len()))),
        }
    }

    /// A TestStream's events played by Weir's TestStreams, one per output (tag), its elements
    /// in the form Weir carries them; the outputs in the order of `stage.outputs`.
    ///
    /// Beam's TestStream keeps a watermark per tag. Each tag's stream here has one event for
    /// every event of the proto's, its own or a no-op (its watermark again), so all of them
    /// play in step: the runner plays one event of each per step. The test clock moves in the
    /// first only.
    fn test_stream(&self, stage: &Stage, name: &str) -> Result<Vec<Bytes>, TranslateError> {
        use rapi::test_stream_payload::event::Event;
        let id = stage.transforms.first().ok_or_else(|| err(format!("TestStream '{name}' has no transform")))?;
        let t = self.c.transforms.get(id).ok_or_else(|| err(format!("no transform '{id}'")))?;
        let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
        let p = rapi::TestStreamPayload::decode(payload).map_err(|e| err(format!("TestStream '{name}': {e}")))?;
        let mut tags = Vec::with_capacity(stage.outputs.len());
        for out in &stage.outputs {
            let tag = t.outputs.iter().find(|(_, pc)| *pc == out).map(|(tag, _)| tag.clone());
            let tag = tag.ok_or_else(|| err(format!("TestStream '{name}' does not make {out}")))?;
            let coder = &self.pcollection(out)?.coder_id;
            if !crate::plan::same_coder(self.c, &p.coder_id, coder) {
                return Err(err(format!(
                    "TestStream '{name}' encodes its elements with coder '{}', and its output '{tag}' ({out}) has \
                     coder '{coder}'",
                    p.coder_id
                )));
            }
            tags.push(tag);
        }
        // Which output an event is for: its tag's, or the one output there is.
        let output_of = |tag: &str| -> Result<usize, TranslateError> {
            match tags.iter().position(|t| t == tag) {
                Some(i) => Ok(i),
                None if tags.len() == 1 => Ok(0),
                None => Err(err(format!(
                    "TestStream '{name}' has an event for tag '{tag}', which is none of its outputs {tags:?}"
                ))),
            }
        };
        let mut streams: Vec<TestStream<Vec<u8>>> = tags.iter().map(|_| TestStream::create()).collect();
        let mut watermarks = vec![weir_sdk::time::MIN_TIMESTAMP; tags.len()];
        for e in p.events.iter().filter_map(|e| e.event.as_ref()) {
            let (target, event) = match e {
                Event::ElementEvent(add) => {
                    let i = output_of(&add.tag)?;
                    let coder = &self.pcollection(&stage.outputs[i])?.coder_id;
                    let mut values = Vec::with_capacity(add.elements.len());
                    for el in &add.elements {
                        let bytes = carried_from_outer(&self.c.coders, coder, &el.encoded_element)
                            .map_err(|e| err(format!("TestStream '{name}': {e}")))?;
                        values.push(TimestampedValue::new(bytes, el.timestamp));
                    }
                    (Some(i), Played::Elements(values))
                }
                Event::WatermarkEvent(w) => {
                    // As given: a watermark that moves backwards is refused by the TestStream.
                    let i = output_of(&w.tag)?;
                    watermarks[i] = w.new_watermark.min(MAX_TIMESTAMP);
                    (Some(i), Played::Watermark(watermarks[i]))
                }
                Event::ProcessingTimeEvent(d) => {
                    (None, Played::Clock(Duration::from_millis(d.advance_duration.max(0) as u64)))
                }
            };
            // The event goes to its tag's stream (the clock's to the first); the others play
            // their watermark again.
            let mut event = Some(event);
            for (i, stream) in streams.iter_mut().enumerate() {
                let mine = target.unwrap_or(0) == i;
                let played = event.take_if(|_| mine).unwrap_or(Played::Watermark(watermarks[i]));
                *stream = played.onto(std::mem::replace(stream, TestStream::create()));
            }
        }
        let mut outputs = Vec::with_capacity(tags.len());
        for ((stream, tag), out) in streams.into_iter().zip(&tags).zip(&stage.outputs) {
            let step = if tags.len() == 1 { name.to_string() } else { format!("{name}/{tag}") };
            let played = self.p.apply(&step, stream);
            played.set_windowing_strategy_internal(self.strategy(out)?);
            outputs.push(played);
        }
        Ok(outputs)
    }

    fn group_by_key(&self, stage: &Stage, name: &str) -> Result<PCollection<Vec<u8>>, TranslateError> {
        let [input_pc] = stage.inputs.as_slice() else {
            return Err(err(format!("GroupByKey '{name}' reads {} inputs", stage.inputs.len())));
        };
        let input = self.input(input_pc)?;
        let wire = self.wire(input_pc)?;
        if !matches!(wire, Wire::Kv(..)) {
            return Err(err(format!("GroupByKey '{name}' reads PCollection '{input_pc}', whose coder is not a KV")));
        }
        let split = move |bytes: Vec<u8>| -> weir_sdk::error::UserResult<KV<Vec<u8>, Vec<u8>>> {
            let (k, v) = wire.split_kv(&bytes).ok_or("a KV whose bytes end early")?;
            Ok(KV::new(k.to_vec(), v.to_vec()))
        };
        let keyed = input.apply(&format!("{name}/split"), TryMap::new(split));
        keyed.set_windowing_strategy_internal(self.strategy(input_pc)?);
        let grouped = keyed.apply(name, GroupByKey::<Vec<u8>, Vec<u8>>::as_submitted());
        Ok(grouped.apply(&format!("{name}/join"), Map::new(join_group)))
    }

    fn sdk(
        &mut self,
        i: usize,
        stage: &Stage,
        name: &str,
        environment: &str,
    ) -> Result<Vec<(Carried, Bytes)>, TranslateError> {
        let input_pc = match stage.inputs.as_slice() {
            [pc] => pc.clone(),
            other => return Err(err(format!("stage '{name}' reads {} main inputs, not one", other.len()))),
        };
        let input = self.input(&input_pc)?;
        let described = describe(self.proto, stage, &format!("stage-{i}"), self.h.server.address())
            .map_err(|e| err(format!("stage '{name}': {e}")))?;
        let workers = self
            .h
            .workers
            .get(environment)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| err(format!("no SDK harness for environment '{environment}'")))?;
        let mut outputs = Vec::new();
        let mut declared = Vec::new();
        let mut made = Vec::new();
        for (sink, pc, as_pc) in &described.outputs {
            outputs.push((sink.clone(), port_coder(self.wire(as_pc)?, self.window_coder(pc)?)));
            declared.push((sink.clone(), self.strategy(pc)?));
            made.push((pc.clone(), as_pc.clone()));
        }
        let (sides, specs) = self.sides(stage)?;
        let state = self.stage_state(stage, &input_pc)?;
        // A splittable DoFn's stage also runs as a drain runs it, its restrictions truncated.
        let drain = match state.as_ref().filter(|s| s.defers) {
            Some(_) => {
                let (pipeline, truncating) =
                    crate::sdf::truncating(self.proto, stage).map_err(|e| err(e.to_string()))?;
                let d = describe(&pipeline, &truncating, &format!("stage-{i}-drain"), self.h.server.address())
                    .map_err(|e| err(format!("stage '{name}', drained: {e}")))?;
                Some(d.descriptor)
            }
            None => None,
        };
        let partitioner: Option<Arc<dyn KeyPartitioner>> = match &state {
            Some(s) if s.defers => Some(Arc::new(WireKeys(None))),
            Some(_) => Some(Arc::new(WireKeys(Some(self.wire(&input_pc)?)))),
            None => None,
        };
        let rt = Arc::new(StageRuntime {
            server: self.h.server.clone(),
            workers: workers.clone(),
            input: (described.inputs[0].0.clone(), self.window_coder(&input_pc)?),
            descriptor: described.descriptor,
            outputs,
            sides,
            bundle_bytes: self.h.bundle_bytes,
            timeout: self.h.timeout,
            next: AtomicUsize::new(0),
            metrics: self.h.metrics.clone(),
            state,
            drain,
        });
        let factory: weir_sdk::kernel::DoFnFactory =
            Arc::new(move || Box::new(StageFn::new(rt.clone())) as Box<dyn ErasedDoFn>);
        let mut par_do = ErasedParDo::<Vec<u8>, Vec<u8>>::new("weir_portable::StageFn", factory, declared)
            .describing(self.describe_transforms(stage));
        if let Some(keys) = partitioner {
            par_do = par_do.stateful(keys);
        }
        if self.requests_finalization(stage) {
            par_do = par_do.finalizes_after_commit();
        }
        let list = input.apply(name, par_do.with_side_inputs(specs));
        Ok(made.into_iter().zip(list.all().iter().cloned()).collect())
    }

    /// What a stage runs, as a checkpoint's fingerprint records it: each transform's name and
    /// URN, in order.
    fn describe_transforms(&self, stage: &Stage) -> String {
        let named = stage.transforms.iter().map(|id| match self.c.transforms.get(id) {
            Some(t) => format!("'{}' ({})", t.unique_name, t.spec.as_ref().map_or("", |s| s.urn.as_str())),
            None => format!("'{id}'"),
        });
        named.collect::<Vec<_>>().join(", ")
    }

    /// Whether a transform of `stage` asks for its bundles to be finalized.
    fn requests_finalization(&self, stage: &Stage) -> bool {
        stage.transforms.iter().filter_map(|id| self.c.transforms.get(id)).any(|t| {
            t.spec.as_ref().is_some_and(|s| {
                crate::plan::runs_do_fn(t)
                    && rapi::ParDoPayload::decode(&s.payload[..]).is_ok_and(|p| p.requests_finalization)
            })
        })
    }

    /// A stateful stage's state and timers: those of its first transform, a stateful ParDo
    /// reading `input_pc`.
    fn stage_state(&self, stage: &Stage, input_pc: &str) -> Result<Option<StageState>, TranslateError> {
        let Some(id) = stage.transforms.first() else { return Ok(None) };
        let t = self.c.transforms.get(id).ok_or_else(|| err(format!("no transform '{id}'")))?;
        let window = self.window_coder(input_pc)?;
        if t.spec.as_ref().is_some_and(|s| s.urn == crate::sdf::PROCESS_SIZED) {
            // Keyed by the whole sized restriction: its residuals wait in its state.
            let codec = TimerCodec { key: self.wire(input_pc)?, window };
            return Ok(Some(StageState { transform: id.clone(), timer_families: Vec::new(), codec, defers: true }));
        }
        if !crate::plan::is_stateful(t) {
            return Ok(None);
        }
        let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
        let pardo = rapi::ParDoPayload::decode(payload).map_err(|e| err(format!("transform '{id}': {e}")))?;
        let mut timer_families = Vec::new();
        for (family, spec) in &pardo.timer_family_specs {
            let domain = crate::user_state::time_domain(spec.time_domain)
                .ok_or_else(|| err(format!("timer family '{family}' of '{}': an unknown clock", t.unique_name)))?;
            timer_families.push((family.clone(), domain));
        }
        timer_families.sort_by(|a, b| a.0.cmp(&b.0));
        let Wire::Kv(key, _) = self.wire(input_pc)? else {
            return Err(err(format!("stateful ParDo '{}' reads {input_pc}, which is not of KVs", t.unique_name)));
        };
        let codec = TimerCodec { key: *key, window };
        Ok(Some(StageState { transform: id.clone(), timer_families, codec, defers: false }))
    }

    /// A stage's side inputs: as the operator serves them, and as Weir materializes them.
    fn sides(&self, stage: &Stage) -> Result<(Vec<StageSide>, Vec<SideInputSpec>), TranslateError> {
        let (mut sides, mut specs) = (Vec::new(), Vec::new());
        for (transform, local, pc) in &stage.side_inputs {
            let t = self.c.transforms.get(transform).ok_or_else(|| err(format!("no transform '{transform}'")))?;
            let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
            let pardo =
                rapi::ParDoPayload::decode(payload).map_err(|e| err(format!("transform '{transform}': {e}")))?;
            let side = pardo
                .side_inputs
                .get(local)
                .ok_or_else(|| err(format!("transform '{}' has no side input '{local}'", t.unique_name)))?;
            let kv = match side.access_pattern.as_ref().map_or("", |a| a.urn.as_str()) {
                ITERABLE_SIDE_INPUT => None,
                MULTIMAP_SIDE_INPUT => Some(self.wire(pc)?),
                other => {
                    return Err(err(format!("side input '{local}' of '{}': access pattern {other}", t.unique_name)))
                }
            };
            // A main window maps to the side input's window that holds its end. SDKs send the
            // mapping as their own code (Beam Python pickles it), but every mapping an SDK
            // offers is that of the side input's window function, which Weir knows.
            let window_fn = self.strategy(pc)?.window_fn;
            let view_id = format!("{transform}/{local}");
            specs.push(SideInputSpec {
                view_id: view_id.clone(),
                pcollection: self.input(pc)?.id(),
                kernel: Arc::new(SideViewKernel { kv }),
                window_fn: window_fn.clone(),
                ready_after_ms: 0,
            });
            sides.push(StageSide { transform: transform.clone(), local: local.clone(), view_id, window_fn });
        }
        Ok((sides, specs))
    }
}

/// Routes KVs in their wire bytes by their key's bytes, as a stateful stage's state is keyed;
/// with no KV form, routes values by all their bytes.
struct WireKeys(Option<Wire>);

impl KeyPartitioner for WireKeys {
    fn partition(&self, input: Batch, n: usize) -> Result<Vec<Batch>, CoderError> {
        if n <= 1 {
            return Ok(vec![input]);
        }
        let mut parts: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
        for wv in weir_sdk::kernel::downcast_batch::<Vec<u8>>(input)? {
            let key = match &self.0 {
                Some(kv) => kv.split_kv(&wv.value).ok_or_else(|| CoderError::new("a KV whose bytes end early"))?.0,
                None => &wv.value[..],
            };
            parts[weir_sdk::kernel::partition_of(key, n)].push(wv);
        }
        Ok(parts.into_iter().map(Batch::new).collect())
    }
}

/// A group as Beam's `KV<K, Iterable<V>>` encodes it: the key's bytes, the count as a 4-byte
/// big-endian integer, then each value's bytes.
fn join_group(kv: KV<Vec<u8>, Vec<Vec<u8>>>) -> Vec<u8> {
    let size = kv.key.len() + 4 + kv.value.iter().map(Vec::len).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&kv.key);
    out.extend_from_slice(&(kv.value.len() as i32).to_be_bytes());
    for v in &kv.value {
        out.extend_from_slice(v);
    }
    out
}

/// One event of a TestStream as one tag's Weir TestStream plays it.
enum Played {
    /// Elements of this tag.
    Elements(Vec<TimestampedValue<Vec<u8>>>),
    /// The tag's watermark (again, for another tag's event).
    Watermark(weir_sdk::time::Timestamp),
    /// A move of the test clock.
    Clock(Duration),
}

impl Played {
    fn onto(self, stream: TestStream<Vec<u8>>) -> TestStream<Vec<u8>> {
        match self {
            Played::Elements(values) => stream.add_elements(values),
            Played::Watermark(w) if w >= MAX_TIMESTAMP => stream.advance_watermark_to_infinity(),
            Played::Watermark(w) => stream.advance_watermark_to(w),
            Played::Clock(d) => stream.advance_processing_time(d),
        }
    }
}
