//! Weir as a Beam portable runner.
//!
//! Beam's portability framework lets a runner run pipelines written with any Beam SDK: the SDK
//! submits the pipeline as a Runner API proto through the Job API, the runner executes the
//! grouping, windowing and state itself, and the user's code runs in an SDK harness that the
//! runner feeds over the Fn API. This crate holds, so far:
//! - [`proto`]: Beam's protos, compiled from the descriptors of an `apache-beam` wheel (see
//!   `proto/generate.py`);
//! - [`plan`]: what Weir makes of a submitted pipeline: what Weir runs itself, what the harness
//!   runs, fused into stages, and what cannot run, refused with the transform and URN named;
//! - [`stage`]: a stage as the harness runs it, its `ProcessBundleDescriptor`, with data ports
//!   whose wire coders let Weir carry any SDK's values as bytes;
//! - [`fn_api`]: the Fn API's services (control, data, state for side inputs, logging), and
//!   bundles run on a harness connected to them;
//! - [`harness`]: harnesses started as a pipeline's environment says.
//!
//! The job service that takes submissions, and the stages' place in Weir's plans, come next.

pub mod fn_api;
pub mod harness;
pub mod job;
pub mod job_service;
pub mod lift;
pub mod metrics;
pub mod operator;
pub mod plan;
pub mod proto;
pub mod sdf;
pub mod stage;
pub mod translate;
pub mod windowing;
