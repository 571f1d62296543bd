//! # weir-runner-microbatch: the native micro-batch engine
//!
//! A pipeline runs as a series of small batch jobs, as in Spark Structured Streaming's
//! micro-batch execution: each batch reads a bounded slice of every source, runs the physical
//! plan over it, then advances watermarks operator by operator in topological order and fires
//! what they release, so a window closes in the batch whose data closed it. The one difference
//! from Spark that everything else follows: **a watermark per operator** (see ARCHITECTURE.md).
//! A grouping operator holds its output watermark at what it still buffers, so chained stateful
//! aggregations, joins after aggregations and aggregations after joins stay correct in streaming.
//!
//! This crate is a scheduler. The plan, its translators, its operators, the node runtime that
//! drives them and the execution pieces (sources, exchanges, sinks, fused chains, workers) are
//! runner-core's; what is decided here is where partitions run (one worker thread takes one
//! partition through the whole plan each batch, pushing what a node outputs straight into its
//! consumers' partitions, so no node's output returns to the engine thread), when work runs, and
//! what survives a crash: batches driven by a trigger
//! (`--trigger available-now|once|processing-time`), each one pass through Spark's phases, a file
//! each in `engine/` (latest offset, WAL commit, get batch, add batch, commit, progress); the
//! offset and commit logs and versioned state stores of a checkpoint directory, for exactly-once
//! restarts; batch retries from the last commit; and Spark-style progress reports.
//!
//! Bounded pipelines run through the same loop: bounded sources keep their watermark at the
//! beginning of time until they are exhausted, then jump to the end; batch size is bounded by
//! `--max-batch-size` (records per batch across a source's splits), so memory is bounded by
//! state, not by input. Every node runs as `--partitions` partitions (by default eight per
//! worker thread when there are several), which a pool of `--parallelism` long-lived worker
//! threads (at most one per core) takes up one at a time. A source whose reader knows how many elements it has left
//! (GenerateSequence, Create) and that feeds a fused chain is read lazily, as Spark's `getBatch`
//! is: the batch's counts are planned and logged first, and the chain reads the elements in
//! cache-sized pieces.
//! The runner asks for every native translation runner-core has (Combine.perKey with combiner
//! lifting, CoGroupByKey, Reshuffle, Deduplicate, the exactly-once JSON-lines and ForEachBatch
//! sinks).
//!
//! Select it with `--runner microbatch` (the default) after `weir::register()`.

#![deny(missing_docs)]

mod checkpoint;
mod engine;
pub mod options;
mod progress;

pub use options::MicroBatchOptions;

pub use engine::{QueryStatus, StreamingQuery};
pub use progress::{
    DurationMs, EventTimeStats, SinkProgress, SourceProgress, StateOperatorProgress, StreamingQueryProgress,
};

use std::sync::Arc;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::runner::{PipelineResult, Runner};
use weir_sdk::{PipelineOptions, Result};

/// The name `--runner` selects the micro-batch runner by.
pub const NAME: &str = "microbatch";

/// The micro-batch runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct MicroBatchRunner;

impl MicroBatchRunner {
    /// Translates and starts `graph`, returning the streaming query handle.
    pub fn start(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<StreamingQuery> {
        let plan = translate(&graph, options)?;
        StreamingQuery::start(graph, plan, options.clone())
    }

    /// The physical plan `graph` would run with, as text: stages, exchanges, stateful operators
    /// and natively translated composites.
    pub fn explain(&self, graph: &PipelineGraph, options: &PipelineOptions) -> Result<String> {
        Ok(translate(graph, options)?.explain(options.get::<MicroBatchOptions>().partitions()))
    }
}

impl Runner for MicroBatchRunner {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<Box<dyn PipelineResult>> {
        Ok(Box::new(self.start(graph, options)?))
    }

    fn explain(&self, graph: &PipelineGraph, options: &PipelineOptions) -> Result<String> {
        MicroBatchRunner::explain(self, graph, options)
    }
}

/// The micro-batch runner's translation: every native composite (Read as `--read-via` asks),
/// combines lifted.
fn translate(graph: &PipelineGraph, options: &PipelineOptions) -> Result<weir_runner_core::plan::PhysicalPlan> {
    use weir_runner_core::plan::translate::{translate, Natives, Translation};
    let natives = Natives::all_with_read(options.read_via);
    translate(graph, &Translation::of(NAME, natives, true, options.get::<MicroBatchOptions>().partitions(), options))
}

/// Registers the micro-batch runner under the name `microbatch`.
pub fn register() {
    weir_sdk::options::register_runner_option_group::<MicroBatchOptions>(&[NAME]);
    weir_runner_core::streaming::register_for(NAME);
    weir_sdk::runner::register_runner(Arc::new(MicroBatchRunner));
}
