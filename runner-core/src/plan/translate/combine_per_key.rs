//! Combine.perKey, translated natively: the combining GroupAlsoByWindow engine keeps one
//! accumulator per key and window. When that cannot change the output (see
//! [`crate::operator::can_lift_combine`]) and the runner asks for it, the input is combined per
//! key before the exchange and only partial accumulators are sent (combiner lifting). Where
//! every window fires once, at its end, it runs as a hash aggregation per key and window
//! instead ([`crate::window_aggregation`]), unless `--window-aggregation general` asks for the
//! general engine.

use super::PlanBuilder;
use crate::group_also_by_window::Values;
use crate::operator::{can_lift_combine, GroupOperator, Operator};
use crate::plan::{Exchange, PhysicalNode, Role};
use crate::translate::{composite_payload, Translator};
use crate::window_aggregation::WindowAggregation;
use std::sync::Arc;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::kernel::CombinePerKeyPayload;
use weir_sdk::Result;

pub(crate) struct CombinePerKeyTranslator;

impl Translator<PlanBuilder> for CombinePerKeyTranslator {
    fn can_translate(&self, node: &TransformNode, _: &PipelineGraph) -> bool {
        composite_payload::<CombinePerKeyPayload>(node).is_some() && node.inputs.len() == 1
    }
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Some(p) = composite_payload::<CombinePerKeyPayload>(node) else { return Ok(()) };
        let input = graph.pcollection(node.inputs[0]);
        let lifted = b.lift_combines() && can_lift_combine(&input.windowing);
        let (id, kernel) = (node.id, p.kernel.clone());
        if b.window_aggregation() && crate::window_aggregation::applies(&input.windowing) {
            // Lifting pays only where rows move between partitions: in one partition the
            // table takes the typed input as it is, with no partial accumulators to encode and
            // merge (the state is the same either way, so a checkpoint resumes at any number).
            let lifted = lifted && b.partitions() > 1;
            let state = b.state().clone();
            let factory = Arc::new(move |g: &PipelineGraph| {
                Box::new(WindowAggregation::new(g.node(id), g, kernel.clone()).with_state(&state)) as Box<dyn Operator>
            });
            let exchange = if lifted {
                Exchange::partial_combine(&node.full_name, p.kernel.clone())
            } else {
                Exchange::by_key(&node.full_name, p.partitioner.clone())
            };
            let how = if lifted { ", combined before the exchange" } else { "" };
            let description = format!("WindowAggregation[hash aggregation per key and window{how}]");
            b.push(
                PhysicalNode::of(node, Role::Transform(factory), "window-aggregation", description)
                    .with_exchange(exchange)
                    .stateful(),
            );
            return Ok(());
        }
        let state = b.state().clone();
        let factory = Arc::new(move |g: &PipelineGraph| {
            let op = GroupOperator::new(g.node(id), g, Values::Combine(kernel.clone())).with_state(&state);
            Box::new(if lifted { op.lifted() } else { op }) as Box<dyn Operator>
        });
        let (exchange, description) = if lifted {
            (
                Exchange::partial_combine(&node.full_name, p.kernel.clone()),
                "GroupAlsoByWindow[combining partial accumulators, combined before the exchange]",
            )
        } else {
            (Exchange::by_key(&node.full_name, p.partitioner.clone()), "GroupAlsoByWindow[combining]")
        };
        b.push(
            PhysicalNode::of(node, Role::Transform(factory), "combine-per-key", description)
                .with_exchange(exchange)
                .stateful(),
        );
        Ok(())
    }
}
