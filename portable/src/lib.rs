//! Weir as a Beam portable runner.
//!
//! Beam's portability framework lets a runner run pipelines written with any Beam SDK: the SDK
//! submits the pipeline as a Runner API proto through the Job API, the runner executes the
//! grouping, windowing and state itself, and the user's code runs in an SDK harness that the
//! runner feeds over the Fn API. `weir-job-server` is that runner for Weir: any Weir runner
//! executes the submitted pipeline, Weir doing the grouping, windowing, state, timers and data
//! movement, and the harnesses the user's code.
//!
//! Everything a Weir pipeline has, a submitted one has too: a stateful DoFn's state and timers
//! are Weir's per key and window ([`user_state`]), a splittable DoFn's deferred rest waits in
//! Weir's state under a timer, so an unbounded source streams, and all of it is in the
//! runner's checkpoints, so a killed job resumes where it stopped and a drain cuts the sources
//! short and fires every window.
//!
//! The way through the crate, in the order a job takes:
//! - [`job_service`] and [`job`]: the Job API, and a job's life (Prepare plans it, Run runs it
//!   on a thread, or in a process group of its own when the runner has several processes);
//! - [`plan`]: what Weir makes of a submitted pipeline: combiners lifted ([`lift`]),
//!   splittable DoFns expanded ([`sdf`]), Weir's own transforms, the harness's fused greedily
//!   into stages, and what Weir lacks refused, naming the transform and URN;
//! - [`stage`]: a stage as the harness runs it, its `ProcessBundleDescriptor`, with data ports
//!   whose wire coders let Weir carry any SDK's values as bytes;
//! - [`translate`] and [`windowing`]: the plan as a Weir pipeline, each PCollection a
//!   `PCollection<Vec<u8>>` in its proto's windowing, and each fused stage one operator
//!   ([`operator`]);
//! - [`user_state`]: a stateful stage's user state and timers, kept in Weir's state and served
//!   to the harness through the State API and the data stream's timers;
//! - [`fn_api`], [`harness`] and [`metrics`]: the Fn API's services (control, data, state for
//!   side inputs, logging), the harnesses started as a pipeline's environment says, and their
//!   metrics;
//! - [`proto`]: Beam's protos, compiled from the descriptors of an `apache-beam` wheel (see
//!   `proto/generate.py`).

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
pub mod user_state;
pub mod windowing;
