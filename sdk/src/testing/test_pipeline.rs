//! A pipeline for tests, configured from the environment.

use crate::error::Result;
use crate::options::PipelineOptions;
use crate::pipeline::Pipeline;
use crate::runner::PipelineState;
use std::ops::Deref;

/// A [`Pipeline`] for tests. Its options come from `WEIR_TEST_PIPELINE_OPTIONS` (flags, split on
/// whitespace) and its runner from `WEIR_RUNNER` when set, so one test runs on any runner.
pub struct TestPipeline {
    pipeline: Pipeline,
}

impl TestPipeline {
    /// Options from the environment, or the defaults.
    pub fn create() -> Result<Self> {
        let mut options = match std::env::var("WEIR_TEST_PIPELINE_OPTIONS") {
            Ok(flags) => PipelineOptions::from_args(flags.split_whitespace())?,
            Err(_) => PipelineOptions::default(),
        };
        if let Ok(runner) = std::env::var("WEIR_RUNNER") {
            options.runner = runner;
        }
        Ok(Self::from_options(options))
    }

    /// Explicit options.
    pub fn from_options(options: PipelineOptions) -> Self {
        TestPipeline { pipeline: Pipeline::new(options) }
    }

    /// Runs the pipeline to completion and returns its final state, or the error that stopped it
    /// (a failed assertion, a failing DoFn, an invalid pipeline).
    pub fn try_run(&self) -> Result<PipelineState> {
        let result = self.pipeline.run()?;
        result.wait_until_finish(None)
    }

    /// Runs the pipeline to completion; panics with the error if it fails, as a test should.
    pub fn run(&self) -> PipelineState {
        match self.try_run() {
            Ok(state) => state,
            Err(e) => panic!("pipeline failed: {e}"),
        }
    }
}

impl Deref for TestPipeline {
    type Target = Pipeline;
    fn deref(&self) -> &Pipeline {
        &self.pipeline
    }
}
