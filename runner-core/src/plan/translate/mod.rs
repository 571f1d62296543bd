//! Translation into the physical plan: one translator per URN, in a registry keyed by URN,
//! applied composite-first ([`crate::translate`]). A runner chooses which composites it wants
//! translated natively (the rest run as their expansions) and whether combines are lifted; the
//! translators themselves are the same for every runner.

mod co_group_by_key;
mod combine_per_key;
mod deduplicate;
mod flatten;
mod for_each_batch;
mod group_by_key;
mod impulse;
mod par_do;
mod read;
mod reshuffle;
mod splittable;
mod test_stream;
mod window_into;
mod write_json_lines;

use super::{Exchange, PhysicalNode, PhysicalPlan, Role};
use crate::translate::{Translator, TranslatorRegistry};
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::{urns, Result};

/// Which composites a runner translates natively.
#[derive(Clone, Copy, Debug)]
pub enum Natives {
    /// Every composite the plan has a native translation of.
    All,
    /// Only these URNs; other composites run as their expansions.
    Only(&'static [&'static str]),
    /// Every composite but these, which run as their expansions.
    AllBut(&'static [&'static str]),
}

impl Natives {
    /// Every composite, with `Read` natively or as its splittable expansion, as `--read-via`
    /// asks (natively when not given): the choice of the runners with a native read.
    pub fn all_with_read(read_via: Option<weir_sdk::options::ReadVia>) -> Natives {
        match read_via {
            Some(weir_sdk::options::ReadVia::Splittable) => Natives::AllBut(&[urns::READ]),
            _ => Natives::All,
        }
    }
}

/// How a runner wants its pipeline translated.
#[derive(Clone, Debug)]
pub struct Translation {
    /// The runner's name, for errors.
    pub runner: &'static str,
    /// The composites translated natively.
    pub natives: Natives,
    /// Whether Combine.perKey combines its input partially before the exchange when that does
    /// not change its output.
    pub lift_combines: bool,
    /// Whether Combine.perKey runs as a hash aggregation per key and window
    /// ([`crate::window_aggregation`]) where that gives the same panes as the general engine
    /// (`--window-aggregation`).
    pub window_aggregation: bool,
    /// How many partitions each stateful node runs in (a window aggregation in one partition
    /// takes its input unlifted).
    pub partitions: usize,
    /// Where keyed state lives (`--state-backend`).
    pub state: crate::state_backend::StateBackend,
}

impl Translation {
    /// The translation a runner named `runner` makes of a pipeline with `options` in
    /// `partitions` partitions: `natives` native, combines lifted when `lift_combines`, window
    /// aggregations as the options say.
    pub fn of(
        runner: &'static str,
        natives: Natives,
        lift_combines: bool,
        partitions: usize,
        options: &weir_sdk::options::PipelineOptions,
    ) -> Self {
        let window_aggregation = options.window_aggregation == weir_sdk::options::WindowAggregation::Hash;
        let state = crate::state_backend::StateBackend::of(&options.state);
        Translation { runner, natives, lift_combines, window_aggregation, partitions, state }
    }
}

/// What translators add nodes to.
pub struct PlanBuilder {
    nodes: Vec<PhysicalNode>,
    lift_combines: bool,
    window_aggregation: bool,
    partitions: usize,
    state: crate::state_backend::StateBackend,
}

impl PlanBuilder {
    /// Adds `n` to the plan.
    pub fn push(&mut self, n: PhysicalNode) {
        self.nodes.push(n);
    }

    /// Whether combines may be lifted.
    pub fn lift_combines(&self) -> bool {
        self.lift_combines
    }

    /// How many partitions each stateful node runs in.
    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// Whether combines may run as window aggregations.
    pub fn window_aggregation(&self) -> bool {
        self.window_aggregation
    }

    /// Where keyed state lives.
    pub fn state(&self) -> &crate::state_backend::StateBackend {
        &self.state
    }
}

impl PhysicalNode {
    /// A node for `node` with `role`; its main inputs are forwarded until [`PhysicalNode::with_exchanges`].
    pub fn of(node: &TransformNode, role: Role, kind: &'static str, description: impl Into<String>) -> Self {
        PhysicalNode {
            node: node.id,
            name: node.full_name.clone(),
            inputs: node.inputs.clone(),
            side_inputs: node.side_inputs.clone(),
            outputs: node.outputs.clone(),
            role,
            exchanges: node.inputs.iter().map(|_| Exchange::Forward).collect(),
            kind,
            description: description.into(),
            native: node.is_composite.then(|| node.urn.to_string()),
            element_wise: false,
            stateful: false,
            after_commit: false,
        }
    }

    /// Every main input through `exchange`.
    pub fn with_exchange(mut self, exchange: Exchange) -> Self {
        self.exchanges = self.inputs.iter().map(|_| exchange.clone()).collect();
        self
    }

    /// One exchange per main input.
    pub fn with_exchanges(mut self, exchanges: Vec<Exchange>) -> Self {
        self.exchanges = exchanges;
        self
    }

    /// Marks the node element-wise (it may run fused).
    pub fn element_wise(mut self) -> Self {
        self.element_wise = true;
        self
    }

    /// Marks the node as keeping state per key.
    pub fn stateful(mut self) -> Self {
        self.stateful = true;
        self
    }

    /// Marks the node as having work to run after the runner commits its output.
    pub fn after_commit(mut self, yes: bool) -> Self {
        self.after_commit = yes;
        self
    }
}

/// The error of a node whose payload is not what its URN promises (a bug in the SDK).
pub(crate) fn internal(node: &TransformNode, what: &str) -> weir_sdk::Error {
    weir_sdk::Error::Internal {
        component: "translation".into(),
        message: format!("{} ({}) carries no {what} payload", node.full_name, node.urn),
    }
}

fn registry(t: &Translation) -> TranslatorRegistry<PlanBuilder> {
    let mut r = TranslatorRegistry::new(t.runner);
    r.register(urns::IMPULSE, impulse::ImpulseTranslator)
        .register(urns::TEST_STREAM, test_stream::TestStreamTranslator)
        .register(urns::PAR_DO, par_do::ParDoTranslator)
        .register(urns::GROUP_BY_KEY, group_by_key::GroupByKeyTranslator)
        .register(urns::FLATTEN, flatten::FlattenTranslator)
        .register(urns::WINDOW_INTO, window_into::WindowIntoTranslator)
        .register(urns::SPLITTABLE_PROCESS, splittable::SplittableTranslator);
    let composites: [(&'static str, Box<dyn Translator<PlanBuilder>>); 9] = [
        (urns::READ, Box::new(read::ReadTranslator)),
        (urns::COMBINE_PER_KEY, Box::new(combine_per_key::CombinePerKeyTranslator)),
        (urns::DEDUPLICATE, Box::new(deduplicate::DeduplicateTranslator)),
        (urns::CO_GROUP_BY_KEY, Box::new(co_group_by_key::CoGroupByKeyTranslator)),
        (urns::WRITE_JSON_LINES, Box::new(write_json_lines::WriteJsonLinesTranslator)),
        (urns::FILE_SINK, Box::new(write_json_lines::WriteJsonLinesTranslator)),
        (urns::FOR_EACH_BATCH, Box::new(for_each_batch::ForEachBatchTranslator)),
        (urns::COMMIT_SINK, Box::new(for_each_batch::CommitSinkTranslator)),
        (urns::RESHUFFLE, Box::new(reshuffle::ReshuffleTranslator)),
    ];
    for (urn, translator) in composites {
        let wanted = match t.natives {
            Natives::All => true,
            Natives::Only(urns) => urns.contains(&urn),
            Natives::AllBut(urns) => !urns.contains(&urn),
        };
        if wanted {
            r.register_boxed(urn, translator);
        }
    }
    r
}

/// Translates `graph` into the physical plan, as `translation` asks.
pub fn translate(graph: &PipelineGraph, translation: &Translation) -> Result<PhysicalPlan> {
    let mut b = PlanBuilder {
        nodes: Vec::new(),
        lift_combines: translation.lift_combines,
        window_aggregation: translation.window_aggregation,
        partitions: translation.partitions,
        state: translation.state.clone(),
    };
    registry(translation).translate(graph, &mut b)?;
    Ok(PhysicalPlan { nodes: b.nodes })
}
