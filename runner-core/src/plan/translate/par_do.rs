//! ParDo: the DoFn runner over each bundle; a stateful DoFn after an exchange by key, with its
//! state and timers per key and window.

use super::{internal, PlanBuilder};
use crate::operator::ParDoOperator;
use crate::plan::{short_type_name, Exchange, PhysicalNode, Role};
use crate::stateful::StatefulParDoOperator;
use crate::translate::Translator;
use std::sync::Arc;
use weir_sdk::graph::{Payload, PipelineGraph, TransformNode};
use weir_sdk::Result;

pub(crate) struct ParDoTranslator;

impl Translator<PlanBuilder> for ParDoTranslator {
    fn translate(&self, node: &TransformNode, _: &PipelineGraph, b: &mut PlanBuilder) -> Result<()> {
        let Payload::ParDo(p) = &node.payload else { return Err(internal(node, "DoFn")) };
        let id = node.id;
        let payload = p.clone();
        let n = if p.stateful {
            let state = b.state().clone();
            let factory = Arc::new(move |g: &PipelineGraph| {
                let op = StatefulParDoOperator::new(g.node(id), &payload, g).with_state(&state);
                Box::new(op) as Box<dyn crate::operator::Operator>
            });
            let description = format!("StatefulParDo[{}]", short_type_name(p.fn_name));
            let n = PhysicalNode::of(node, Role::Transform(factory), "stateful-pardo", description).stateful();
            match &p.key_partitioner {
                Some(k) => n.with_exchange(Exchange::by_key(&node.full_name, k.clone())),
                None => n,
            }
        } else {
            // Elements waiting for side inputs go to disk past a cap on the disk backend.
            let state = b.state().clone();
            let factory = Arc::new(move |g: &PipelineGraph| {
                let op = ParDoOperator::new(g.node(id), &payload, g).with_state(&state);
                Box::new(op) as Box<dyn crate::operator::Operator>
            });
            let description = format!("ParDo[{}]", short_type_name(p.fn_name));
            PhysicalNode::of(node, Role::Transform(factory), "pardo", description).element_wise()
        };
        b.push(n.after_commit(p.after_commit));
        Ok(())
    }
}
