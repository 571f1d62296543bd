//! Weir as a Beam portable runner.
//!
//! Beam's portability framework lets a runner run pipelines written with any Beam SDK: the SDK
//! submits the pipeline as a Runner API proto through the Job API, the runner executes the
//! grouping, windowing and state itself, and the user's code runs in an SDK harness that the
//! runner feeds over the Fn API. This crate holds Beam's protos, compiled from the descriptors
//! of an `apache-beam` wheel (see `proto/generate.py`), and the [`plan`] the job server makes of
//! a submitted pipeline: what Weir runs itself, what the harness runs, fused into stages, and
//! what cannot run, refused with the transform and URN named.

pub mod fn_api;
pub mod plan;
pub mod proto;
pub mod stage;
