//! A fused stage an SDK harness runs, as one Weir operator ([`StageFn`]): its bundle descriptor,
//! its side inputs read as Weir's side inputs, its user state and timers kept in Weir's keyed
//! state (its input routed by the key's bytes first), and a splittable DoFn's residuals deferred
//! in that state.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use prost::Message;
use weir_sdk::coders::CoderError;
use weir_sdk::kernel::{Batch, ErasedDoFn, KeyPartitioner, SideInputSpec};
use weir_sdk::urns::side_inputs;
use weir_sdk::window_fn::WindowFn;
use weir_sdk::ErasedParDo;

use super::stage_fn::port_coder;
use super::stage_fn::{SideViewKernel, StageFn, StageRuntime, StageSide};
use super::{err, Bytes, Carried, Translator};
use crate::preprocess::descriptor::describe;
use crate::preprocess::wire::Wire;
use crate::preprocess::Stage;
use crate::proto::pipeline::v1 as rapi;
use crate::worker::user_state::{StageState, TimerCodec};
use crate::Error;
use weir_sdk::state::TimeDomain;

impl Translator<'_> {
    pub(super) fn sdk(
        &mut self,
        i: usize,
        stage: &Stage,
        name: &str,
        environment: &str,
    ) -> Result<Vec<(Carried, Bytes)>, Error> {
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
                let (pipeline, truncating) = crate::preprocess::sdf::truncating(self.proto, stage)?;
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
                crate::preprocess::checks::runs_do_fn(t)
                    && rapi::ParDoPayload::decode(&s.payload[..]).is_ok_and(|p| p.requests_finalization)
            })
        })
    }

    /// A stateful stage's state and timers: those of its first transform, a stateful ParDo
    /// reading `input_pc`.
    fn stage_state(&self, stage: &Stage, input_pc: &str) -> Result<Option<StageState>, Error> {
        let Some(id) = stage.transforms.first() else { return Ok(None) };
        let t = self.c.transforms.get(id).ok_or_else(|| err(format!("no transform '{id}'")))?;
        let window = self.window_coder(input_pc)?;
        if t.spec.as_ref().is_some_and(|s| s.urn == weir_sdk::urns::SPLITTABLE_PROCESS) {
            // Keyed by the whole sized restriction: its residuals wait in its state.
            let codec = TimerCodec { key: self.wire(input_pc)?, window };
            return Ok(Some(StageState {
                transform: id.clone(),
                timer_families: Vec::new(),
                codec,
                defers: true,
                expiration: None,
                sorted: None,
            }));
        }
        if !crate::preprocess::checks::is_stateful(t) {
            return Ok(None);
        }
        let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
        let pardo = rapi::ParDoPayload::decode(payload).map_err(|e| err(format!("transform '{id}': {e}")))?;
        let mut timer_families = Vec::new();
        for (family, spec) in &pardo.timer_family_specs {
            let domain = crate::preprocess::checks::time_domain(spec.time_domain)
                .ok_or_else(|| err(format!("timer family '{family}' of '{}': an unknown clock", t.unique_name)))?;
            timer_families.push((family.clone(), domain));
        }
        // The expiration callback's family is an event-time family of its own.
        let expiration = Some(pardo.on_window_expiration_timer_family_spec.clone()).filter(|f| !f.is_empty());
        if let Some(f) = expiration.as_ref().filter(|f| !pardo.timer_family_specs.contains_key(*f)) {
            timer_families.push((f.clone(), TimeDomain::EventTime));
        }
        timer_families.sort_by(|a, b| a.0.cmp(&b.0));
        let Wire::Kv(key, _) = self.wire(input_pc)? else {
            return Err(err(format!("stateful ParDo '{}' reads {input_pc}, which is not of KVs", t.unique_name)));
        };
        let codec = TimerCodec { key: *key, window };
        let sorted = match pardo.requires_time_sorted_input {
            true => Some(self.strategy_proto(input_pc)?.allowed_lateness.max(0)),
            false => None,
        };
        Ok(Some(StageState { transform: id.clone(), timer_families, codec, defers: false, expiration, sorted }))
    }

    /// A stage's side inputs: as the operator serves them, and as Weir materializes them.
    fn sides(&self, stage: &Stage) -> Result<(Vec<StageSide>, Vec<SideInputSpec>), Error> {
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
                side_inputs::ITERABLE => None,
                side_inputs::MULTIMAP => Some(self.wire(pc)?),
                other => {
                    return Err(err(format!("side input '{local}' of '{}': access pattern {other}", t.unique_name)))
                }
            };
            // Which side window a main window reads is the SDK's own code (the side input's
            // mapping function): the harness asks for that window, so Weir asks the harness
            // too (once per main window). A global side input needs no asking.
            let window_fn = self.side_window_fn(t, &stage.inputs, pc, side)?;
            let view_id = format!("{transform}/{local}");
            specs.push(SideInputSpec {
                view_id: view_id.clone(),
                pcollection: self.input(pc)?.id(),
                kernel: Arc::new(SideViewKernel { kv }),
                window_fn: window_fn.clone(),
                ready_after_ms: 0,
                portable_semantics: true,
            });
            sides.push(StageSide { transform: transform.clone(), local: local.clone(), view_id, window_fn });
        }
        Ok((sides, specs))
    }
}

impl Translator<'_> {
    /// The window function of side input `pc` of transform `t` (reading main input `inputs`),
    /// its side windows mapped from main windows as the SDK maps them.
    fn side_window_fn(
        &self,
        t: &rapi::PTransform,
        inputs: &[String],
        pc: &str,
        side: &rapi::SideInput,
    ) -> Result<Arc<dyn WindowFn>, Error> {
        let strategy = self.strategy(pc)?;
        let (Some(mapping), Some(main_pc), false) =
            (side.window_mapping_fn.as_ref(), inputs.first(), strategy.is_global())
        else {
            return Ok(strategy.window_fn);
        };
        let window_fn = strategy.window_fn;
        let side_coder = self.window_coder_of(self.strategy_proto(pc)?)?;
        let main_ws = self.strategy_proto(main_pc)?;
        let n = self.mapped.get();
        self.mapped.set(n + 1);
        Ok(Arc::new(crate::translate::sdk_windows::MappedBySdk::new(
            self.h,
            self.harnesses_of(&t.environment_id)?,
            window_fn,
            mapping,
            (self.window_coder_of(main_ws)?, side_coder),
            format!("map-windows-{n}"),
        )))
    }
}

/// Routes KVs in their wire bytes by their key's bytes, as a stateful stage's state is keyed;
/// with no KV form, routes values by all their bytes.
pub(crate) struct WireKeys(pub(crate) Option<Wire>);

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
