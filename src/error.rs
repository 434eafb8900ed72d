//! The library's error type: every variant says what failed and where.
//!
//! The runtime's convention: each message says everything, its cause included
//! (in plain words), and `source()` returns nothing, so that a chain printed
//! says each thing once. A cause a caller may inspect is a typed field.

use std::path::PathBuf;

/// Everything that can go wrong in shadowsync.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{}: {}", path.display(), plain(error))]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
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
    /// A data file that cannot be used as it is (beyond a malformed field):
    /// a line without end, no examples at all.
    #[error("{}: {reason}", path.display())]
    Data {
        /// The data file.
        path: PathBuf,
        /// What is wrong, and where in the file.
        reason: String,
    },
    /// A configuration value is missing, mistyped or out of range.
    #[error("config: {key}: {reason}")]
    Config {
        /// The config key (`section.key`) or CLI flag.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A libtorch operation failed (shown by its first line: libtorch appends
    /// a C++ stack trace that says nothing to a user).
    #[error("tensor operation failed: {}", shadowsync_actors::first_line(.0))]
    Torch(tch::TchError),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] shadowsync_actors::Error),
    /// A worker thread of the data pipeline died.
    #[error("data pipeline: {0}")]
    Pipeline(&'static str),
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
    Evaluation(Box<Error>),
}

impl From<tch::TchError> for Error {
    fn from(error: tch::TchError) -> Self {
        Error::Torch(error)
    }
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            error,
        }
    }

    /// An unusable data file.
    pub fn data(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Data {
            path: path.into(),
            reason: reason.into(),
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

/// What the OS said, in plain words: without the `(os error N)` a user has
/// no use for, and lower-case as it follows a path.
fn plain(error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use shadowsync_actors::with_causes;

    #[test]
    fn an_error_says_its_cause_once_in_plain_words() {
        let io = Error::io("/x/y", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(std::error::Error::source(&io).is_none());
        assert_eq!(with_causes(&io), "/x/y: entity not found");
        let trace = "bad shape\nException raised from check at aten.cpp:42 (frames…)";
        let torch = Error::from(tch::TchError::Torch(trace.into()));
        let said = with_causes(&torch);
        assert!(
            said.contains("bad shape") && !said.contains("aten.cpp"),
            "{said}"
        );
        let runtime = Error::from(shadowsync_actors::Error::from(tch::TchError::Torch(
            trace.into(),
        )));
        assert_eq!(with_causes(&runtime).matches("bad shape").count(), 1);
    }
}
