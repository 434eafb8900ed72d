//! The library's error type: every variant says what failed and where.

use std::path::PathBuf;

/// Everything that can go wrong in shadowsync.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A malformed line in a data file.
    #[error("{}:{line}: field {field} ({name}): {reason}: {text:?}", path.display())]
    Parse {
        /// The data file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// 1-based field (column) number.
        field: usize,
        /// Field name: `label`, `I1`..`I13`, `C1`..`C26`.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
        /// The offending text (shortened).
        text: String,
    },
    /// A configuration value is missing, mistyped or out of range.
    #[error("config: {key}: {reason}")]
    Config {
        /// The config key (`section.key`) or CLI flag.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A libtorch operation failed.
    #[error("tensor operation failed: {0}")]
    Torch(#[from] tch::TchError),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] shadowsync_actors::Error),
    /// A worker thread of the data pipeline died.
    #[error("data pipeline: {0}")]
    Pipeline(String),
    /// A checkpoint cannot be written or used.
    #[error("checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The checkpoint (or checkpoint directory).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Scoring a model on the test data failed.
    #[error("evaluation: {0}")]
    Evaluation(String),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A config error on `key`.
    pub fn config(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
