//! The runtime's error type.

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libtorch operation failed (shown by its first line: libtorch appends
    /// a C++ stack trace that says nothing to a user).
    #[error("tensor operation failed: {}", first_line(.0))]
    Torch(#[from] tch::TchError),
    /// A setting is out of its allowed range.
    #[error("config: {key}: {reason}")]
    Config {
        /// The config key (`section.key`) or CLI flag.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A learner's step failed.
    #[error("{0}")]
    Learner(Box<dyn std::error::Error + Send + Sync>),
    /// The actor system could not be started or answered no more.
    #[error("actor system: {0}")]
    System(String),
    /// No member of a sync group had finite values to contribute.
    #[error("no finite values in group {group:?}: every member's parameters are NaN or infinite")]
    NonFinite {
        /// The group of trainers.
        group: Vec<usize>,
    },
    /// A trainer kept failing and was given up.
    #[error("trainer {trainer} failed {faults} steps in a row; last: {last}")]
    Faulty {
        /// The trainer.
        trainer: usize,
        /// Consecutive failed steps.
        faults: u32,
        /// The last failure.
        last: String,
    },
    /// Parameters do not have the layout an operation needs.
    #[error("parameter layout: {0}")]
    Layout(String),
}

impl Error {
    /// Wraps a learner's error.
    pub fn learner(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Learner(Box::new(e))
    }
}

/// The first line of `error`'s message (libtorch's errors go on with a C++
/// stack trace).
pub fn first_line(error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

/// Result alias of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;
