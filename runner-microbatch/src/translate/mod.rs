//! Translation into the physical plan: a registry of translators keyed by URN, one file per
//! translator, applied composite-first (DESIGN D3).

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
mod test_stream;
mod window_into;
mod write_json_lines;

use crate::plan::{NodeSpec, OpSpec, Plan};
use std::sync::Arc;
use weir_runner_core::translate::TranslatorRegistry;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::KeyPartitioner;
use weir_sdk::{urns, PipelineOptions, Result};

/// What translators add to.
pub(crate) struct Builder {
    pub nodes: Vec<NodeSpec>,
}

impl Builder {
    pub(crate) fn push(&mut self, node: &TransformNode, op: OpSpec, partitioner: Option<Arc<dyn KeyPartitioner>>) {
        let native = node.is_composite.then(|| node.urn.to_string());
        self.nodes.push(NodeSpec {
            node: node.id,
            name: node.full_name.clone(),
            op,
            inputs: node.inputs.clone(),
            side_inputs: node.side_inputs.clone(),
            outputs: node.outputs.clone(),
            partitioner,
            native,
        });
    }
}

pub(crate) fn internal(node: &TransformNode, what: &str) -> weir_sdk::Error {
    weir_sdk::Error::Internal {
        component: "micro-batch translation".into(),
        message: format!("{} ({}) carries no {what} payload", node.full_name, node.urn),
    }
}

fn registry() -> TranslatorRegistry<Builder> {
    let mut r = TranslatorRegistry::new(crate::NAME);
    r.register(urns::IMPULSE, impulse::ImpulseTranslator)
        .register(urns::READ, read::ReadTranslator)
        .register(urns::TEST_STREAM, test_stream::TestStreamTranslator)
        .register(urns::PAR_DO, par_do::ParDoTranslator)
        .register(urns::GROUP_BY_KEY, group_by_key::GroupByKeyTranslator)
        .register(urns::COMBINE_PER_KEY, combine_per_key::CombinePerKeyTranslator)
        .register(urns::DEDUPLICATE, deduplicate::DeduplicateTranslator)
        .register(urns::CO_GROUP_BY_KEY, co_group_by_key::CoGroupByKeyTranslator)
        .register(urns::FLATTEN, flatten::FlattenTranslator)
        .register(urns::WINDOW_INTO, window_into::WindowIntoTranslator)
        .register(urns::WRITE_JSON_LINES, write_json_lines::WriteJsonLinesTranslator)
        .register(urns::FOR_EACH_BATCH, for_each_batch::ForEachBatchTranslator)
        .register(urns::RESHUFFLE, reshuffle::ReshuffleTranslator);
    r
}

/// Translates `graph` into a physical plan.
pub(crate) fn translate(graph: &PipelineGraph, options: &PipelineOptions) -> Result<Plan> {
    let mut b = Builder { nodes: Vec::new() };
    registry().translate(graph, &mut b)?;
    Ok(Plan { nodes: b.nodes, partitions: options.get::<crate::MicroBatchOptions>().partitions() })
}
