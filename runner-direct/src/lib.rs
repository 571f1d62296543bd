//! # weir-runner-direct: the strict reference runner
//!
//! Simple, strict and slow by choice. It schedules runner-core's physical plan in rounds (every
//! node in topological order reads, processes its pending bundles, then moves its watermark),
//! and checks what the model promises users rather than what happens to work: it shuffles the order of bundles and of the elements inside them (seeded,
//! `--direct-shuffle`, `--direct-seed`), so a pipeline that depends on order shows up, and it
//! round-trips every element through its coder (`--direct-check-encodability`), so an element
//! that cannot be encoded fails here rather than on a distributed runner. Other runners are
//! checked against its results by the conformance suite. It translates only Combine.perKey
//! natively (unlifted); every other composite runs as its expansion, so the expansions are
//! checked too.
//!
//! Select it with `--runner direct` after calling [`register`] (or `weir::register()`).

#![deny(missing_docs)]

mod executor;
pub mod options;

pub use options::DirectOptions;

use std::sync::Arc;
use weir_runner_core::job::Job;
use weir_runner_core::metrics::JobMetrics;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::runner::{PipelineResult, Runner};
use weir_sdk::{PipelineOptions, Result};

/// The direct runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct DirectRunner;

/// The name `--runner` selects the direct runner by.
pub const NAME: &str = "direct";

impl Runner for DirectRunner {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(&self, graph: Arc<PipelineGraph>, options: &PipelineOptions) -> Result<Box<dyn PipelineResult>> {
        let plan = translate(&graph, options)?;
        let direct = options.get::<DirectOptions>().into_owned();
        let metrics = JobMetrics::with_committed();
        let m = metrics.clone();
        Job::spawn("weir-direct", metrics, options, move |job| executor::execute(&graph, &plan, &direct, &job, &m))
    }

    fn explain(&self, graph: &PipelineGraph, options: &PipelineOptions) -> Result<String> {
        Ok(translate(graph, options)?.explain(1))
    }
}

/// The direct runner's translation: primitives, plus Combine.perKey on the combining engine
/// (not lifted: the reference runner combines every value where it is grouped). Other composites
/// run as their expansions, so the reference checks them: a Read runs through its splittable
/// DoFn, split at random claims.
fn translate(graph: &PipelineGraph, options: &PipelineOptions) -> Result<weir_runner_core::plan::PhysicalPlan> {
    use weir_runner_core::plan::translate::{translate, Natives, Translation};
    if options.read_via == Some(weir_sdk::options::ReadVia::Native) {
        return Err(weir_sdk::Error::Options(
            "--read-via native: the direct runner has no native read; it reads every source through \
             splittable DoFns (--read-via splittable)"
                .into(),
        ));
    }
    if let Some(port) = options.ui.port {
        return Err(weir_sdk::Error::Options(format!(
            "--ui-port {port}: the direct runner serves no live page; the micro-batch and timely \
             runners do (--runner microbatch or --runner timely)"
        )));
    }
    let natives = Natives::Only(&[weir_sdk::urns::COMBINE_PER_KEY]);
    translate(graph, &Translation::of(NAME, natives, false, 1, options))
}

/// Registers the direct runner under the name `direct`.
pub fn register() {
    weir_sdk::options::register_runner_option_group::<DirectOptions>(&[NAME]);
    weir_sdk::runner::register_runner(Arc::new(DirectRunner));
}
