//! GroupByKey over bounded input: group by encoded window and key bytes, emit one on-time pane
//! per key and window.
//!
//! Keys and windows are compared by their encoded bytes, never by `Eq` of decoded values
//! (spec §1.6, §11.3). Values are appended, encoded, to one buffer per group, so grouping
//! allocates per group, not per element.

use hashbrown::HashMap;
use weir_sdk::kernel::{Batch, EncodedGroup, EncodedKvBatch, GroupKernel};
use weir_sdk::pane::PaneInfo;
use weir_sdk::window::Window;
use weir_sdk::{Result, WithStepExt};

/// Accumulates the groups of a bounded GroupByKey.
pub struct BatchGrouper {
    step: String,
    index: HashMap<(Window, Vec<u8>), usize>,
    groups: Vec<EncodedGroup>,
    scratch: EncodedKvBatch,
}

impl BatchGrouper {
    /// A grouper for the step `step`.
    pub fn new(step: &str) -> Self {
        BatchGrouper {
            step: step.to_string(),
            index: HashMap::new(),
            groups: Vec::new(),
            scratch: EncodedKvBatch::default(),
        }
    }

    /// Adds a batch of `KV<K, V>`.
    pub fn add(&mut self, kernel: &dyn GroupKernel, batch: Batch) -> Result<()> {
        self.scratch.data.clear();
        self.scratch.rows.clear();
        kernel.encode(batch, &mut self.scratch).with_step(&self.step)?;
        for i in 0..self.scratch.rows.len() {
            let window = self.scratch.rows[i].window;
            let key = self.scratch.key(i);
            let g = match self.index.get(&(window, key.to_vec())) {
                Some(&g) => g,
                None => {
                    let g = self.groups.len();
                    self.groups.push(EncodedGroup {
                        key: key.to_vec(),
                        values: Vec::new(),
                        count: 0,
                        // In batch the watermark jumps from -inf to +inf: one on-time pane per key
                        // and window, at the end of the window (TimestampCombiner END_OF_WINDOW).
                        timestamp: window.max_timestamp(),
                        window,
                        pane: PaneInfo::ON_TIME_AND_ONLY_FIRING,
                    });
                    self.index.insert((window, key.to_vec()), g);
                    g
                }
            };
            let value = self.scratch.value(i);
            let group = &mut self.groups[g];
            group.values.extend_from_slice(value);
            group.count += 1;
        }
        Ok(())
    }

    /// The groups as a batch of `KV<K, Vec<V>>`.
    pub fn finish(self, kernel: &dyn GroupKernel) -> Result<Batch> {
        kernel.decode_groups(self.groups).with_step(&self.step)
    }
}
