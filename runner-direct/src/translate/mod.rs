//! Translation of the pipeline graph into the direct runner's plan: one step per primitive.

mod flatten;
mod group_by_key;
mod impulse;
mod par_do;
mod read;
mod window_into;

use std::sync::Arc;
use weir_runner_core::translate::TranslatorRegistry;
use weir_sdk::graph::{NodeId, ParDoPayload, PipelineGraph, TransformNode};
use weir_sdk::kernel::{AssignKernel, ErasedBoundedSource, GroupKernel};
use weir_sdk::{urns, Result};

/// What a step does.
pub(crate) enum StepKind {
    Impulse,
    Read(Arc<dyn ErasedBoundedSource>),
    ParDo(ParDoPayload),
    GroupByKey(Arc<dyn GroupKernel>),
    Flatten,
    WindowInto(Arc<dyn AssignKernel>),
}

/// One executable step: a primitive transform.
pub(crate) struct Step {
    pub node: NodeId,
    pub name: String,
    pub kind: StepKind,
}

/// The steps in topological order.
#[derive(Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    pub(crate) fn push(&mut self, node: &TransformNode, kind: StepKind) {
        self.steps.push(Step { node: node.id, name: node.full_name.clone(), kind });
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
        .register(urns::PAR_DO, par_do::ParDoTranslator)
        .register(urns::GROUP_BY_KEY, group_by_key::GroupByKeyTranslator)
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
