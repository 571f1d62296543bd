//! The job services: what a Beam SDK's `PortableRunner` talks to, and a job's life.
//!
//! - [`service`]: Beam's Job API over gRPC (Prepare, Run, state and message streams, Cancel,
//!   GetJobMetrics, GetJobs, GetPipeline), and the finished jobs it remembers;
//! - [`job`]: one job, from Prepare (the pipeline preprocessed, refused with the transform named
//!   when Weir cannot run it) through Run (on a thread, or a process group of its own when the
//!   runner has several processes) to its end, with its messages and metrics;
//! - [`options`]: a job's Weir flags, the server's with those its pipeline options give;
//! - [`artifacts`]: artifact staging and retrieval over a store content-addressed by sha256.

pub mod artifacts;
pub mod job;
pub mod options;
pub mod service;
