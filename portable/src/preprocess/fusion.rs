//! Fusion: the pipeline's leaf transforms in an order where each comes after what it reads, each
//! run by Weir itself or by an SDK harness, and the harness's transforms fused greedily into
//! stages: a transform joins the stage of its one main input's producer when both run in the
//! same environment and nothing it reads would make a cycle.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::preprocess::checks::{
    check_par_do, check_windowing, is_stateful, runs_do_fn, test_stream_endpoint, REQUIREMENTS, SDK_URNS,
};
use crate::preprocess::{pc_name, same_coder, sorted, unsupported, urn, Stage, StageKind};
use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use weir_sdk::urns;

/// A leaf transform of the pipeline, with what it reads.
struct Leaf<'a> {
    id: &'a str,
    t: &'a rapi::PTransform,
    /// Main inputs (PCollection ids).
    main: Vec<&'a str>,
    /// Side inputs: (local name, PCollection id).
    sides: Vec<(&'a str, &'a str)>,
}

/// The leaf transforms under `ids`, depth first in the pipeline's order: a composite the runner
/// implements (Reshuffle) counts as a leaf.
fn leaves<'a>(c: &'a rapi::Components, ids: &'a [String], out: &mut Vec<&'a str>) -> Result<(), Error> {
    for id in ids {
        let t = c.transforms.get(id).ok_or_else(|| Error::Malformed(format!("no transform '{id}'")))?;
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

/// Whether transform `t` has one input and one output, in coders that write values alike.
fn passes_values_unchanged(c: &rapi::Components, t: &rapi::PTransform) -> bool {
    let coder = |m: &HashMap<String, String>| match m.values().collect::<Vec<_>>()[..] {
        [pc] => c.pcollections.get(pc).map(|p| p.coder_id.as_str()),
        _ => None,
    };
    matches!((coder(&t.inputs), coder(&t.outputs)), (Some(a), Some(b)) if same_coder(c, a, b))
}

/// The stages of `pipeline`, whose splittable DoFns are expanded.
pub(crate) fn stages_of(pipeline: &rapi::Pipeline) -> Result<Vec<Stage>, Error> {
    let c = pipeline.components.as_ref().ok_or_else(|| Error::Malformed("no components".into()))?;
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
            // A window function known only to the SDK maps main windows to its side windows in
            // a harness (`MappedBySdk`).
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
        return Err(Error::Requirement { urn: r.clone() });
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
fn topological(all: &[Leaf<'_>], producer: &HashMap<&str, usize>) -> Result<Vec<usize>, Error> {
    let mut state = vec![0u8; all.len()];
    let mut order = Vec::with_capacity(all.len());
    fn visit(
        i: usize,
        all: &[Leaf<'_>],
        producer: &HashMap<&str, usize>,
        state: &mut [u8],
        order: &mut Vec<usize>,
    ) -> Result<(), Error> {
        match state[i] {
            2 => return Ok(()),
            1 => return Err(Error::Malformed(format!("a cycle through transform '{}'", all[i].t.unique_name))),
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

    fn kind(&self, l: &Leaf<'_>) -> Result<StageKind, Error> {
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
                return Err(Error::Malformed(format!("transform '{}' ({u}) reads and writes nothing", l.t.unique_name)))
            }
            "" => return Err(unsupported(l.t, "a leaf transform without a URN")),
            _ => return Err(unsupported(l.t, "Weir does not know this transform")),
        })
    }

    /// Checks that a stateful ParDo's input is keyed, in windows that never merge (state is
    /// kept per key and window).
    fn check_keyed(&self, l: &Leaf<'_>) -> Result<(), Error> {
        let [input] = l.main.as_slice() else {
            return Err(unsupported(l.t, format!("a stateful ParDo reads {} main inputs, not one", l.main.len())));
        };
        let ws = check_windowing(self.c, l.t, input)?;
        let merging = self.c.windowing_strategies.get(&ws).and_then(|w| w.window_fn.as_ref()).map(|f| f.urn.as_str())
            == Some(urns::window_fns::SESSIONS);
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
        if urn != urns::coders::KV {
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

    fn run(mut self, order: &[usize]) -> Result<Vec<Stage>, Error> {
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
    /// in the output's coder too: the stage making it, the inputs of a Flatten making it, or,
    /// for one Weir makes itself, a stage of its own that only re-encodes.
    fn transcode(&mut self) -> Result<(), Error> {
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
    fn carry_as(&mut self, pc: &str, as_pc: &str, f: usize) -> Result<(), Error> {
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
            Some(p) => match self.environment_for(as_pc) {
                // Weir made `pc` (a GroupByKey's output, say): a stage of no transforms, but a
                // data source in `pc`'s coder and a sink in `as_pc`'s, has a harness re-encode it.
                Some(environment) => {
                    self.stages.push(Stage {
                        kind: StageKind::Sdk { environment },
                        transforms: Vec::new(),
                        inputs: vec![pc.to_string()],
                        side_inputs: Vec::new(),
                        outputs: Vec::new(),
                        transcoded: vec![pair],
                    });
                    self.reads.push(BTreeSet::from([p]));
                    self.reads[f].insert(self.stages.len() - 1);
                    Ok(())
                }
                None => self.cannot_transcode(pc, as_pc, f),
            },
            None => self.cannot_transcode(pc, as_pc, f),
        }
    }

    /// The environment to re-encode values of `as_pc` in: that of a stage reading it, or else
    /// of any harness stage.
    fn environment_for(&self, as_pc: &str) -> Option<String> {
        let env = |s: &Stage| match &s.kind {
            StageKind::Sdk { environment } => Some(environment.clone()),
            _ => None,
        };
        let readers = self.stages.iter().filter(|s| s.inputs.iter().any(|i| i == as_pc));
        readers.filter_map(env).next().or_else(|| self.stages.iter().filter_map(env).next())
    }

    /// Why the coder of Flatten `f`'s input `pc` cannot become its output `as_pc`'s.
    fn cannot_transcode(&self, pc: &str, as_pc: &str, f: usize) -> Result<(), Error> {
        let t = &self.c.transforms[&self.stages[f].transforms[0]];
        let why = format!(
            "its input, PCollection {}, has coder {} and its output {} coder {}: re-encoding takes an SDK \
             harness, and the pipeline runs none",
            pc_name(self.c, pc),
            self.coder_of(pc),
            pc_name(self.c, as_pc),
            self.coder_of(as_pc)
        );
        Err(unsupported(t, why))
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
