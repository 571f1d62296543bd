//! A planned portable pipeline as a Weir pipeline, which any Weir runner then runs.
//!
//! Every PCollection of the submitted pipeline that crosses a stage boundary becomes a Weir
//! `PCollection<Vec<u8>>` of its values' wire bytes (see [`crate::preprocess::wire`]), with its
//! windowing strategy read from the proto ([`crate::preprocess::windowing`]). One file per
//! runner-side transform:
//! - Impulse is Weir's impulse, its one empty byte array in the wire form of Beam's bytes coder,
//!   and Flatten Weir's flatten (here);
//! - [`reshuffle`] repartitions KVs by their key's bytes (a key's elements keep their order),
//!   anything else evenly;
//! - [`sdk_windows`] asks a harness what only the SDK knows of windows: the merges of a window
//!   function of the user's own, and which side input window a main window reads;
//! - [`group_by_key`] splits each KV's bytes into the key's and the value's, groups on the key's
//!   bytes with Weir's own GroupByKey under the proto's windowing strategy, and writes each group
//!   back as the key's bytes and an iterable of the values' bytes;
//! - [`test_stream`] plays a TestStream's events with Weir's TestStreams, one per tagged output;
//! - [`stage`] makes a fused stage one operator ([`stage_fn::StageFn`]) whose bundles an SDK
//!   harness runs.

pub mod group_by_key;
pub mod reshuffle;
pub mod sdk_windows;
pub mod stage;
pub mod stage_fn;
pub mod test_stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use weir_sdk::coders::WindowCoderKind;
use weir_sdk::transforms::flatten::Flatten;
use weir_sdk::transforms::impulse::Impulse;
use weir_sdk::{Map, PCollection, PCollectionList, Pipeline};

use crate::preprocess::windowing;
use crate::preprocess::wire::{Wire, WireWindowCoder};
use crate::preprocess::{PortablePlan, Stage, StageKind};
use crate::proto::pipeline::v1 as rapi;
use crate::worker::FnServer;
use crate::Error;

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
    pub metrics: Arc<crate::worker::metrics::JobMetrics>,
}

/// Builds the Weir pipeline `plan` stages, into `pipeline`.
pub fn translate(plan: &PortablePlan, harnessed: &Harnessed, pipeline: &Pipeline) -> Result<(), Error> {
    let proto = &plan.pipeline;
    let c = proto.components.as_ref().ok_or_else(|| Error::Translate("no components".into()))?;
    let mut t = Translator {
        proto,
        c,
        h: harnessed,
        p: pipeline,
        pcs: HashMap::new(),
        mergers: Default::default(),
        mapped: Default::default(),
    };
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
    /// Per windowing strategy whose windows only the SDK can merge, the harnesses' merger.
    mergers: std::cell::RefCell<HashMap<String, Arc<dyn windowing::SdkMerger>>>,
    /// How many side input window mappings were made (for their descriptors' ids).
    mapped: std::cell::Cell<usize>,
}

fn err(what: impl Into<String>) -> Error {
    Error::Translate(what.into())
}

impl Translator<'_> {
    fn pcollection(&self, id: &str) -> Result<&rapi::PCollection, Error> {
        self.c.pcollections.get(id).ok_or_else(|| err(format!("no PCollection '{id}'")))
    }

    fn strategy_proto(&self, pc: &str) -> Result<&rapi::WindowingStrategy, Error> {
        let ws = &self.pcollection(pc)?.windowing_strategy_id;
        self.c.windowing_strategies.get(ws).ok_or_else(|| err(format!("no windowing strategy '{ws}'")))
    }

    /// The Weir windowing strategy of PCollection `pc`.
    fn strategy(&self, pc: &str) -> Result<weir_sdk::window_fn::WindowingStrategy, Error> {
        let proto = self.strategy_proto(pc)?;
        let mut s = windowing::strategy(proto, &self.c.coders)
            .map_err(|e| err(format!("PCollection {}: {e}", crate::preprocess::pc_name(self.c, pc))))?;
        let sdk = s.window_fn.as_any().downcast_ref::<windowing::SdkWindows>().filter(|w| w.merging).cloned();
        if let Some(sdk) = sdk {
            let merger = self.merger(&self.pcollection(pc)?.windowing_strategy_id, proto)?;
            s.window_fn = Arc::new(windowing::SdkWindows { merger: Some(merger), ..sdk });
        }
        Ok(s)
    }

    /// The harnesses' merger of strategy `ws` (id `id`), whose windows only the SDK can merge:
    /// on the harnesses of the strategy's environment (or else of any).
    fn merger(&self, id: &str, ws: &rapi::WindowingStrategy) -> Result<Arc<dyn windowing::SdkMerger>, Error> {
        if let Some(m) = self.mergers.borrow().get(id) {
            return Ok(m.clone());
        }
        let (env, workers) = self.harnesses_of(&ws.environment_id)?;
        let spec = ws.window_fn.as_ref().ok_or_else(|| err("a windowing strategy without a window function"))?;
        let merger: Arc<dyn windowing::SdkMerger> = Arc::new(sdk_windows::HarnessMerger::new(
            self.h,
            env,
            workers,
            spec,
            self.window_coder_of(ws)?,
            format!("merge-windows-{}", self.mergers.borrow().len()),
        ));
        self.mergers.borrow_mut().insert(id.to_string(), merger.clone());
        Ok(merger)
    }

    /// The window coder of strategy `ws`, as the harnesses write windows for Weir.
    fn window_coder_of(&self, ws: &rapi::WindowingStrategy) -> Result<WireWindowCoder, Error> {
        crate::preprocess::wire::wire_window_coder(&self.c.coders, &ws.window_coder_id)
    }

    /// The harnesses of environment `id` (or, if it has none, of any), with the environment.
    fn harnesses_of(&self, id: &str) -> Result<((&str, &rapi::Environment), Vec<String>), Error> {
        let mut envs: Vec<&String> = self.h.workers.keys().collect();
        envs.sort();
        let env_id = envs.iter().find(|e| **e == id).or(envs.first()).ok_or_else(|| err("no SDK harness to ask"))?;
        let env = self.c.environments.get(*env_id).ok_or_else(|| err(format!("no environment '{env_id}'")))?;
        Ok(((env_id.as_str(), env), self.h.workers[*env_id].clone()))
    }

    /// How Weir reads the windows of PCollection `pc`.
    fn window_coder(&self, pc: &str) -> Result<WindowCoderKind, Error> {
        Ok(self.window_coder_of(self.strategy_proto(pc)?)?.kind)
    }

    /// The wire form of PCollection `pc`'s values.
    fn wire(&self, pc: &str) -> Result<Wire, Error> {
        Wire::readable(&self.c.coders, &self.pcollection(pc)?.coder_id)
    }

    fn input(&self, pc: &str) -> Result<PCollection<Vec<u8>>, Error> {
        self.input_as(pc, pc)
    }

    /// PCollection `pc` with its values in the coder of `as_pc`.
    fn input_as(&self, pc: &str, as_pc: &str) -> Result<PCollection<Vec<u8>>, Error> {
        // The plan has the harness write a second copy only where the coders differ.
        let made = self
            .pcs
            .get(&(pc.to_string(), as_pc.to_string()))
            .or_else(|| self.pcs.get(&(pc.to_string(), pc.to_string())));
        made.cloned().ok_or_else(|| {
            err(format!("PCollection {} is read before it is made", crate::preprocess::pc_name(self.c, pc)))
        })
    }

    fn name(&self, stage: &Stage) -> String {
        if let (None, Some((pc, as_pc))) = (stage.transforms.first(), stage.transcoded.first()) {
            return format!("{pc} re-encoded as {as_pc}");
        }
        let first = stage.transforms.first().map(String::as_str).unwrap_or("stage");
        self.c.transforms.get(first).map_or(first, |t| t.unique_name.as_str()).to_string()
    }

    fn stage(&mut self, i: usize, stage: &Stage) -> Result<(), Error> {
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
            StageKind::Reshuffle => {
                let input = self.one_input(stage)?;
                let out = stage.outputs.first().ok_or_else(|| err(format!("Reshuffle '{name}' has no output")))?;
                let urn = stage.transforms.first().and_then(|t| self.c.transforms.get(t)).and_then(|t| t.spec.as_ref());
                let arbitrary = urn.is_some_and(|s| s.urn == weir_sdk::urns::REDISTRIBUTE_ARBITRARILY);
                let kv = match self.wire(&stage.inputs[0])? {
                    kv @ Wire::Kv(..) if !arbitrary => Some(kv),
                    _ => None,
                };
                vec![reshuffle::reshuffle(input, &name, kv, self.strategy(out)?)]
            }
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
    fn flatten(&self, stage: &Stage, as_pc: &str, name: &str) -> Result<Bytes, Error> {
        let inputs = stage.inputs.iter().map(|pc| self.input_as(pc, as_pc)).collect::<Result<Vec<_>, _>>()?;
        // Beam lets a Flatten's inputs differ in windowing (Python warns): each element keeps
        // its window, and the output is in the windowing the proto gives it.
        Ok(PCollectionList::of(self.p, inputs).apply(name, Flatten::into_windowing(self.strategy(as_pc)?)))
    }

    fn one_input(&self, stage: &Stage) -> Result<PCollection<Vec<u8>>, Error> {
        match stage.inputs.as_slice() {
            [pc] => self.input(pc),
            other => Err(err(format!("stage '{}' reads {} inputs, not one", self.name(stage), other.len()))),
        }
    }
}
