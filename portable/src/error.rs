//! The one error of the portable runner: what it says when a submitted pipeline cannot run, or a
//! harness fails it. Each variant names what went wrong and where (the transform and its URN, the
//! harness's worker id), since the person reading it wrote a pipeline in another language and
//! knows Weir only by what it says here.

/// What went wrong, from Prepare to the last bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A transform needs something Weir lacks.
    #[error("transform '{transform}' ({urn}) cannot run on Weir: {why}")]
    Unsupported {
        /// The transform's unique name.
        transform: String,
        /// The URN it needs.
        urn: String,
        /// What is missing.
        why: String,
    },
    /// The pipeline needs a requirement Weir does not meet.
    #[error("the pipeline requires {urn}, which Weir does not support yet")]
    Requirement {
        /// The requirement's URN.
        urn: String,
    },
    /// The pipeline proto is not a well-formed pipeline: what it lacks or has wrong.
    #[error("malformed pipeline: {0}")]
    Malformed(String),
    /// A stage that no SDK harness runs was asked for its bundle descriptor.
    #[error("stage of {0} is not run by an SDK harness")]
    NotSdk(String),
    /// A planned pipeline cannot become a Weir pipeline (what says why).
    #[error("{0}")]
    Translate(String),
    /// The Fn API services could not start.
    #[error("the Fn API services cannot start: {0}")]
    Start(String),
    /// A harness could not be started (what says why names it).
    #[error("{0}")]
    Launch(String),
    /// A harness did not connect, or did not answer, in time.
    #[error("SDK harness '{worker}' {what} within {secs} s")]
    Timeout {
        /// The harness's worker id.
        worker: String,
        /// What it did not do.
        what: &'static str,
        /// The time allowed.
        secs: u64,
    },
    /// The harness's control stream ended: it exited (`why` says how, when known) or lost its
    /// connection.
    #[error("SDK harness '{worker}' is gone: {why}")]
    Gone {
        /// The harness's worker id.
        worker: String,
        /// How: its exit status, or that its control stream ended.
        why: String,
    },
    /// The harness failed the bundle: the error it sent (a Python traceback, say).
    #[error("SDK harness '{worker}' failed the bundle: {error}")]
    Bundle {
        /// The harness's worker id.
        worker: String,
        /// Its error.
        error: String,
    },
}
