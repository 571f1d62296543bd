//! Walking the pipeline graph (Beam's `PipelineVisitor`).

use crate::graph::{Boundedness, NodeId, PCollectionNode, PipelineGraph, TransformNode};

/// Whether to descend into a composite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompositeBehavior {
    /// Visit its parts.
    Enter,
    /// Treat it as one unit: its parts are not visited, its outputs are.
    DoNotEnter,
}

/// Callbacks of a topological walk. Every method has a no-op default.
pub trait PipelineVisitor {
    /// A composite is about to be visited.
    fn enter_composite(&mut self, _node: &TransformNode, _graph: &PipelineGraph) -> CompositeBehavior {
        CompositeBehavior::Enter
    }
    /// A composite's parts have been visited.
    fn leave_composite(&mut self, _node: &TransformNode, _graph: &PipelineGraph) {}
    /// A primitive transform.
    fn visit_primitive(&mut self, _node: &TransformNode, _graph: &PipelineGraph) {}
    /// A PCollection, right after its producer.
    fn visit_value(&mut self, _value: &PCollectionNode, _producer: &TransformNode, _graph: &PipelineGraph) {}
}

impl PipelineGraph {
    /// Walks the graph in application order, which is topological: a transform can only be
    /// applied to PCollections that already exist.
    pub fn traverse(&self, visitor: &mut dyn PipelineVisitor) {
        for &c in &self.node(self.root()).children {
            self.visit_node(c, visitor);
        }
    }

    fn visit_node(&self, id: NodeId, visitor: &mut dyn PipelineVisitor) {
        let node = self.node(id);
        if node.is_composite {
            if visitor.enter_composite(node, self) == CompositeBehavior::Enter {
                for &c in &node.children {
                    self.visit_node(c, visitor);
                }
            } else {
                self.visit_outputs(node, visitor);
            }
            visitor.leave_composite(node, self);
        } else {
            visitor.visit_primitive(node, self);
            self.visit_outputs(node, visitor);
        }
    }

    fn visit_outputs(&self, node: &TransformNode, visitor: &mut dyn PipelineVisitor) {
        for &o in &node.outputs {
            visitor.visit_value(self.pcollection(o), node, self);
        }
    }

    /// Whether any PCollection is unbounded, i.e. the pipeline must run in streaming mode
    /// (Beam's `StreamingModeDetector`).
    pub fn is_streaming(&self) -> bool {
        struct Detector(bool);
        impl PipelineVisitor for Detector {
            fn enter_composite(&mut self, _: &TransformNode, _: &PipelineGraph) -> CompositeBehavior {
                if self.0 {
                    CompositeBehavior::DoNotEnter
                } else {
                    CompositeBehavior::Enter
                }
            }
            fn visit_value(&mut self, v: &PCollectionNode, _: &TransformNode, _: &PipelineGraph) {
                self.0 |= v.boundedness == Boundedness::Unbounded;
            }
        }
        let mut d = Detector(false);
        self.traverse(&mut d);
        d.0
    }
}
