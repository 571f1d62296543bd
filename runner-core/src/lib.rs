//! # weir-runner-core: what every runner shares
//!
//! A runner decides *where data lives and when work runs*; everything about *what the model
//! means*, and everything about *how a plan executes* that does not depend on those decisions,
//! lives here, once (see ARCHITECTURE.md):
//!
//! - the semantics: the DoFn runner that drives the lifecycle and turns panics into errors
//!   naming the step ([`do_fn_runner`]), the GroupAlsoByWindow engine with triggers, panes,
//!   holds, merging and timers ([`group_also_by_window`]), stateful ParDo ([`stateful`]), side
//!   inputs, watermarks, metrics, the operators ([`operator`]);
//! - the physical plan ([`plan`]: nodes, exchanges, topology) and its translators, one file per
//!   URN, applied composite-first ([`translate`]);
//! - the execution layer ([`exec`]): the node runtime that drives every node on every runner
//!   ([`exec::node`]), sources, commit-aware sinks, exchanges, fused chains, the workers, the
//!   clock;
//! - checkpoints ([`checkpoint`]): one protocol for opening, checking and retiring them, on a
//!   local directory or an object store, and the state files; the streaming options
//!   ([`streaming`]) and the live page ([`ui`]) the batch and epoch runners share;
//! - what jobs share: the job handle behind every [`weir_sdk::PipelineResult`] ([`job`]), the
//!   MetricsPusher ([`pusher`]), checkpoint fingerprints ([`fingerprint`]), logging.
//!
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
pub mod progress;
pub mod pusher;
pub mod side_inputs;
pub mod splittable;
pub mod state_backend;
pub mod stateful;
pub mod streaming;
pub mod system_metrics;
pub mod translate;
pub mod trigger;
pub mod ui;
pub mod watermark;
pub mod window_aggregation;

pub use weir_sdk::error::{Error, Result};
