//! The runtime's error type.
//!
//! One convention, thiserror's first: each message says everything, its
//! cause included (in plain words: libtorch's first line, not its C++ stack
//! trace), and `source()` returns nothing, so that a chain printed
//! ([`with_causes`], anyhow's `{:#}`) says each thing once. A cause a caller
//! may want to inspect is kept as a typed field.

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libtorch operation failed (shown by its first line: libtorch appends
    /// a C++ stack trace that says nothing to a user).
    #[error("tensor operation failed: {}", first_line(.0))]
    Torch(tch::TchError),
    /// A setting is out of its allowed range.
    #[error("config: {key}: {reason}")]
    Config {
        /// The config key (`section.key`) or CLI flag.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A learner's step failed (its message with its causes).
    #[error("{}", with_causes(.0.as_ref()))]
    Learner(Box<dyn std::error::Error + Send + Sync>),
    /// A thread could not be started (the runtime's, or the CTR data pipeline's).
    #[error("cannot start the {thread} thread: {error}")]
    Thread {
        /// What the thread runs.
        thread: &'static str,
        /// Why the OS refused.
        error: std::io::Error,
    },
    /// A part of the runtime (an actor, a thread) ended before it answered.
    #[error("the {0} has stopped")]
    Stopped(&'static str),
    /// A part of the runtime panicked; what it held is not trusted.
    #[error("the {0} panicked")]
    Panicked(&'static str),
    /// [`Cluster::wait`](crate::Cluster::wait) was called twice.
    #[error("the cluster was already waited for")]
    AlreadyWaited,
    /// A trainer ended without handing its learner over (to a checkpoint or
    /// at the end).
    #[error("a trainer ended without handing over its learner")]
    LearnerLost,
    /// A checkpoint was asked for while some trainer was not parked.
    #[error("a checkpoint needs every trainer parked")]
    NotParked,
    /// A trainer failed (across processes this ends the job).
    #[error("trainer {trainer}: {error}")]
    TrainerFailed {
        /// The trainer, numbered over the job.
        trainer: usize,
        /// Its error (shared with the [`Event::TrainerFailed`](crate::events::Event::TrainerFailed)
        /// that told of it).
        error: std::sync::Arc<Error>,
    },
    /// The group coordinator kept failing on a request.
    #[error("the group coordinator failed {attempts} times on trainer {trainer}'s request for round {round}")]
    CoordinatorFailed {
        /// The asking trainer.
        trainer: usize,
        /// The round it asked about.
        round: u64,
        /// How many times it was tried.
        attempts: usize,
    },
    /// An EASGD centre shard could not serve a request.
    #[error("server shard {shard}: {fault}")]
    ShardFailed {
        /// The shard.
        shard: usize,
        /// What went wrong.
        fault: ShardFault,
    },
    /// A shard of a sharded embedding table could not serve a request, or
    /// gave no answer in time.
    #[error("embedding shard on process {rank}: {reason}")]
    EmbeddingShard {
        /// The process (MPI rank) owning the shard.
        rank: usize,
        /// What went wrong.
        reason: String,
    },
    /// Another process answered with an error, or with something malformed.
    #[error("process {process}: {reason}")]
    Remote {
        /// The process (MPI rank).
        process: usize,
        /// Its error, or what was wrong with its answer.
        reason: String,
    },
    /// MPI could not be initialized.
    #[error("MPI could not be initialized (it already was in this process)")]
    MpiInit,
    /// An invariant of the runtime does not hold: a bug, please report it.
    #[error("internal error: {0}")]
    Internal(&'static str),
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
    /// A trainer held back by `sync.shadow.max_staleness` waited too long for an
    /// average.
    #[error(
        "trainer {trainer} waited {:.0} s for an average under sync.shadow.max_staleness = {bound} \
         and none landed (its group's rounds are held up: see sync.shadow.delay_ms, \
         sync.peer_timeout_ms and sync.link)",
        waited.as_secs_f64()
    )]
    StalenessWait {
        /// The trainer.
        trainer: usize,
        /// The bound.
        bound: u64,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// Parameters do not have the layout an operation needs.
    #[error("parameter layout: {0}")]
    Layout(String),
    /// A step of a sync round panicked (the panic's message).
    #[error("the round panicked: {0}")]
    RoundPanicked(String),
    /// A trainer's shadow rounds failed too often in a row: syncing ends.
    #[error("{rounds} rounds failed in a row; the last: {last}")]
    SyncFailing {
        /// Failed rounds in a row.
        rounds: u32,
        /// The last one's error.
        last: Box<Error>,
    },
}

/// Why an EASGD centre shard could not serve ([`Error::ShardFailed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardFault {
    /// No process of the job serves the shard.
    #[error("no process serves it")]
    Unserved,
    /// A request reached a process that does not host the shard.
    #[error("not served by rank {rank}")]
    NotHostedOn {
        /// The process asked.
        rank: usize,
    },
    /// Serving a round panicked; the centre stays as the step left it.
    #[error("serving trainer {trainer}'s round {round}: {message}")]
    Panicked {
        /// The trainer served.
        trainer: usize,
        /// Its round.
        round: u64,
        /// The panic's message.
        message: String,
    },
}

impl From<tch::TchError> for Error {
    fn from(error: tch::TchError) -> Self {
        Error::Torch(error)
    }
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

/// `error` with each of its causes after it, `: `-separated: what a report
/// keeps of an error that ended a thread. (This crate's errors say their
/// causes themselves; a learner's own error may have a chain.)
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// Result alias of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;
