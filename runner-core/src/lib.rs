//! # weir-runner-core: the semantics every runner shares
//!
//! A runner decides *where data lives and when work runs*; everything about *what the model
//! means* lives here, once (ARCHITECTURE.md, "Semantics live once"): the translation framework that walks a pipeline
//! composite-first ([`translate`]), the DoFn runner that drives the lifecycle and turns panics
//! into errors naming the step ([`do_fn_runner`]), the GroupAlsoByWindow engine with triggers, panes and holds
//! ([`group_also_by_window`]), the operators runners execute ([`operator`]), and the job handle behind every [`weir_sdk::PipelineResult`] ([`job`]).
//! Runners built on these cannot disagree about the model; the conformance suite checks that
//! they also agree in practice.

#![deny(missing_docs)]

pub mod checkpoint;
pub mod dedup;
pub mod do_fn_runner;
pub mod exec;
pub mod fingerprint;
pub mod group_also_by_window;
pub mod job;
pub mod logging;
pub mod metrics;
pub mod operator;
pub mod plan;
pub mod pusher;
pub mod side_inputs;
pub mod stateful;
pub mod system_metrics;
pub mod translate;
pub mod trigger;
pub mod watermark;

pub use weir_sdk::error::{Error, Result};
