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
//! are Weir's per key and window ([`worker::user_state`]), a splittable DoFn's deferred rest waits in
//! Weir's state under a timer, so an unbounded source streams, and all of it is in the
//! runner's checkpoints, so a killed job resumes where it stopped and a drain cuts the sources
//! short and fires every window.
//!
//! The crate is laid out as Beam's portable runners are (Prism, in Beam's Go SDK, most
//! plainly), one folder per step a job takes, each opening with an essay:
//!
//! ```text
//! jobservices/  the Job API, and a job's life ........... Prepare, Run, state, metrics
//!     | Prepare
//! preprocess/   the submitted pipeline made runnable ..... combiners lifted, SDFs expanded,
//!     |                                                    checks, fusion into stages, each
//!     |                                                    stage's ProcessBundleDescriptor
//! translate/    the plan as a Weir pipeline .............. Weir's GroupByKey, Flatten,
//!     |                                                    Impulse, TestStream, Reshuffle;
//!     |                                                    each fused stage one operator
//! worker/       the SDK harnesses and the Fn API ......... control, data, state, logging,
//!                                                          provision; one bundle's life
//! ```
//!
//! One bundle, from the operator that gathers it to the harness and back: a fused stage's
//! operator ([`translate::stage`]) gathers elements into a bundle and hands it to the Fn API
//! server ([`worker`]), which sends the harness a ProcessBundle instruction on its control
//! stream, the elements on its data stream, serves its state requests (side inputs, and user
//! state from Weir's keyed state, [`worker::user_state`]), and collects its outputs until the
//! instruction's answer comes back with the bundle's metrics ([`worker::metrics`]) and any
//! residuals; the operator then emits the outputs into the Weir pipeline.
//!
//! Arrows point down only: `jobservices` uses the three below it, `translate` uses `worker` and
//! `preprocess`, `worker` uses `preprocess` (the stage descriptors and their wire coders), and
//! `preprocess` uses none of them. [`proto`] (Beam's protos, compiled from the descriptors of an
//! `apache-beam` wheel; see `proto/generate.py`) and [`Error`] are beneath all four.

mod error;
pub mod jobservices;
pub mod preprocess;
pub mod proto;
pub mod translate;
pub mod worker;

pub use error::Error;
