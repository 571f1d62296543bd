//! The SDK's error type.

use crate::coders::CoderError;

/// An error raised by user code (a DoFn, CombineFn, source or sink). Any error type converts into
/// it with `?` or `.into()`, and so does a `String` or `&str`.
pub type UserError = Box<dyn std::error::Error + Send + Sync>;

/// `Ok(())` or a [`UserError`]: what DoFn methods return.
pub type UserResult<T = ()> = std::result::Result<T, UserError>;

/// Everything that can go wrong building or running a pipeline.
///
/// Variants are named by who is at fault; each carries the step (full transform name) when there
/// is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline is malformed (reported at construction or validation).
    #[error("invalid pipeline at step '{step}': {message}")]
    Construction {
        /// The step at fault.
        step: String,
        /// What is wrong.
        message: String,
    },
    /// A bad option.
    #[error("invalid options: {0}")]
    Options(String),
    /// A bad argument to an SDK call (e.g. an empty metric name).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The runner does not support what was asked (e.g. committed metrics).
    #[error("{0}")]
    NotSupported(String),
    /// `--runner` names no registered runner.
    #[error("unknown runner '{name}'; valid runners: {valid}")]
    UnknownRunner {
        /// The name given.
        name: String,
        /// The registered names.
        valid: String,
    },
    /// A runner cannot translate a transform.
    #[error("transform '{step}' ({urn}) is not supported by the {runner} runner: {reason}")]
    Unsupported {
        /// The step.
        step: String,
        /// Its URN.
        urn: String,
        /// The runner.
        runner: String,
        /// Why.
        reason: String,
    },
    /// User code failed or panicked while running.
    #[error("step '{step}' failed: {message}")]
    Execution {
        /// The step.
        step: String,
        /// The failure, with the panic message when user code panicked.
        message: String,
    },
    /// An element could not be encoded or decoded.
    #[error("step '{step}': {source}")]
    Coder {
        /// The step.
        step: String,
        /// The coder failure.
        source: CoderError,
    },
    /// A file could not be read or written.
    #[error("I/O error on '{path}': {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// A checkpoint cannot be used: it belongs to another pipeline, is in use, or its logs are
    /// inconsistent.
    #[error("checkpoint '{path}': {message}")]
    Checkpoint {
        /// The checkpoint file or directory at fault.
        path: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// The pipeline was cancelled.
    #[error("pipeline cancelled")]
    Cancelled,
    /// An invariant of the runner was broken: a bug in Weir, not in the pipeline.
    #[error("internal error in {component}: {message}")]
    Internal {
        /// Where.
        component: String,
        /// What.
        message: String,
    },
}

/// The SDK's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A construction error at `step`.
    pub fn construction(step: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Construction { step: step.into(), message: message.into() }
    }

    /// An execution error at `step`.
    pub fn execution(step: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Execution { step: step.into(), message: message.into() }
    }
}

/// Adds the step name to an error on its way up (Arroyo's `with_operator`).
pub trait WithStep<T> {
    /// Wraps the error as an [`Error::Execution`] of `step`.
    fn with_step(self, step: &str) -> Result<T>;
}

impl<T> WithStep<T> for std::result::Result<T, UserError> {
    fn with_step(self, step: &str) -> Result<T> {
        self.map_err(|e| Error::execution(step, e.to_string()))
    }
}

impl<T> WithStep<T> for std::result::Result<T, CoderError> {
    fn with_step(self, step: &str) -> Result<T> {
        self.map_err(|source| Error::Coder { step: step.to_string(), source })
    }
}
