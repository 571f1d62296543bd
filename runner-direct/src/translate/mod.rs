//! Translation of the pipeline graph into the direct runner's plan: one step per primitive, and
//! one per natively translated composite (Combine.perKey runs on the combining engine).

mod combine_per_key;
mod flatten;
mod group_by_key;
mod impulse;
mod par_do;
mod read;
mod test_stream;
mod window_into;

use std::sync::Arc;
use weir_runner_core::translate::TranslatorRegistry;
use weir_sdk::graph::{NodeId, PCollectionId, ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{
    AssignKernel, CombineKernel, ErasedBoundedSource, ErasedUnboundedSource, GroupKernel, TestStreamEvent,
};
use weir_sdk::{urns, Result};

/// What a step does.
pub(crate) enum StepKind {
    Impulse,
    Read(Arc<dyn ErasedBoundedSource>),
    ReadUnbounded(Arc<dyn ErasedUnboundedSource>),
    TestStream(Arc<Vec<TestStreamEvent>>),
    ParDo(ParDoPayload),
    GroupByKey(Arc<dyn GroupKernel>),
    CombinePerKey(Arc<dyn CombineKernel>),
    Flatten,
    WindowInto(Arc<dyn AssignKernel>),
}

/// One executable step.
pub(crate) struct Step {
    pub node: NodeId,
    pub name: String,
    pub kind: StepKind,
    pub inputs: Vec<PCollectionId>,
    pub side_inputs: Vec<PCollectionId>,
    pub outputs: Vec<PCollectionId>,
}

/// The steps in topological order.
#[derive(Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    pub(crate) fn push(&mut self, node: &TransformNode, kind: StepKind) {
        self.steps.push(Step {
            node: node.id,
            name: node.full_name.clone(),
            kind,
            inputs: node.inputs.clone(),
            side_inputs: node.side_inputs.clone(),
            outputs: node.outputs.clone(),
        });
    }

    /// The plan as text: one line per step, in the order the runner schedules them.
    pub(crate) fn explain(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("== Direct runner plan: {} steps, run in rounds ==\n", self.steps.len());
        for (i, s) in self.steps.iter().enumerate() {
            let kind = match &s.kind {
                StepKind::Impulse => "Impulse".to_string(),
                StepKind::Read(_) => "Read[bounded]".to_string(),
                StepKind::ReadUnbounded(_) => "Read[unbounded]".to_string(),
                StepKind::TestStream(_) => "TestStream".to_string(),
                StepKind::ParDo(p) if p.stateful => format!("StatefulParDo[{}]", p.fn_name),
                StepKind::ParDo(p) => format!("ParDo[{}]", p.fn_name),
                StepKind::GroupByKey(_) => "GroupByKey".to_string(),
                StepKind::CombinePerKey(_) => "Combine.perKey (native)".to_string(),
                StepKind::Flatten => "Flatten".to_string(),
                StepKind::WindowInto(_) => "WindowInto".to_string(),
            };
            let sides = if s.side_inputs.is_empty() {
                String::new()
            } else {
                format!(" [{} side inputs]", s.side_inputs.len())
            };
            let _ = writeln!(out, "Step {i}: {kind} '{}'{sides}", s.name);
        }
        out
    }

    /// Whether the plan plays a TestStream, which switches processing time to a test clock.
    pub(crate) fn has_test_stream(&self) -> bool {
        self.steps.iter().any(|s| matches!(s.kind, StepKind::TestStream(_)))
    }
}

pub(crate) fn internal(node: &TransformNode, what: &str) -> weir_sdk::Error {
    weir_sdk::Error::Internal {
        component: "direct runner translation".into(),
        message: format!("{} ({}) carries no {what} payload", node.full_name, node.urn),
    }
}

fn registry() -> TranslatorRegistry<Plan> {
    let mut r = TranslatorRegistry::new(crate::NAME);
    r.register(urns::IMPULSE, impulse::ImpulseTranslator)
        .register(urns::READ, read::ReadTranslator)
        .register(urns::TEST_STREAM, test_stream::TestStreamTranslator)
        .register(urns::PAR_DO, par_do::ParDoTranslator)
        .register(urns::GROUP_BY_KEY, group_by_key::GroupByKeyTranslator)
        .register(urns::COMBINE_PER_KEY, combine_per_key::CombinePerKeyTranslator)
        .register(urns::FLATTEN, flatten::FlattenTranslator)
        .register(urns::WINDOW_INTO, window_into::WindowIntoTranslator);
    r
}

/// Translates `graph` into a plan.
pub(crate) fn translate(graph: &PipelineGraph) -> Result<Plan> {
    let mut plan = Plan::default();
    registry().translate(graph, &mut plan)?;
    Ok(plan)
}
