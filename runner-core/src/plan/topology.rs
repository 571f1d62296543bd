//! Who feeds whom in a physical plan, and the input watermarks that follow from it: a node's
//! input watermark is the minimum output watermark of the producers of its main inputs (a
//! watermark per operator, so chained aggregations stay correct).

use crate::plan::PhysicalPlan;
use std::collections::HashMap;
use weir_sdk::graph::PCollectionId;
use weir_sdk::time::{Timestamp, MAX_TIMESTAMP};

/// Where a collection goes into a consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Main input `port` (through the consumer's exchange for that port).
    Main(usize),
    /// Side input `index` (broadcast to every partition).
    Side(usize),
}

/// Producers and consumers of every collection of a plan.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    producer: HashMap<PCollectionId, usize>,
    consumers: HashMap<PCollectionId, Vec<(usize, Slot)>>,
    main_inputs: Vec<Vec<PCollectionId>>,
    side_inputs: Vec<Vec<PCollectionId>>,
    leaf: Vec<bool>,
}

impl Topology {
    /// The topology of `plan`.
    pub fn of(plan: &PhysicalPlan) -> Self {
        let mut t = Topology::default();
        for (i, n) in plan.nodes.iter().enumerate() {
            for &o in &n.outputs {
                t.producer.insert(o, i);
            }
            for (port, &pc) in n.inputs.iter().enumerate() {
                t.consumers.entry(pc).or_default().push((i, Slot::Main(port)));
            }
            for (k, &pc) in n.side_inputs.iter().enumerate() {
                t.consumers.entry(pc).or_default().push((i, Slot::Side(k)));
            }
            t.main_inputs.push(n.inputs.clone());
            t.side_inputs.push(n.side_inputs.clone());
        }
        t.leaf = plan.nodes.iter().map(|n| n.outputs.iter().all(|o| !t.consumers.contains_key(o))).collect();
        t
    }

    /// The node producing `pc`.
    pub fn producer(&self, pc: PCollectionId) -> usize {
        self.producer[&pc]
    }

    /// The consumers of `pc`, once per input slot.
    pub fn consumers(&self, pc: PCollectionId) -> &[(usize, Slot)] {
        self.consumers.get(&pc).map_or(&[], Vec::as_slice)
    }

    /// Whether nothing consumes node `i`'s outputs (a sink, or a leaf whose output is dropped).
    pub fn is_leaf(&self, i: usize) -> bool {
        self.leaf[i]
    }

    /// Node `i`'s input watermark, given every node's output watermark: the minimum over the
    /// producers of its main inputs (the end of time for a node without inputs).
    pub fn upstream_watermark(&self, i: usize, output: impl Fn(usize) -> Timestamp) -> Timestamp {
        self.main_inputs[i].iter().map(|pc| output(self.producer(*pc))).min().unwrap_or(MAX_TIMESTAMP)
    }

    /// The watermarks of node `i`'s side inputs, in order.
    pub fn side_watermarks(&self, i: usize, output: impl Fn(usize) -> Timestamp) -> Vec<Timestamp> {
        self.side_inputs[i].iter().map(|pc| output(self.producer(*pc))).collect()
    }
}
