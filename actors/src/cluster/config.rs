//! [`ClusterConfig`]: the runtime's settings besides the sync algorithm.

use crate::events::EventBus;
use crate::faults::Fault;
use crate::stragglers::Straggler;
use crate::sync::{Algorithm, Codecs, Rules, Schedules, SyncConfig};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Runtime settings besides the sync algorithm.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ClusterConfig {
    /// Synchronization.
    pub sync: SyncConfig,
    /// Training time between two looks at a trainer's mailbox, in milliseconds.
    pub chunk_ms: u64,
    /// Milliseconds between two consensus-distance samples (0 = none).
    pub consensus_every_ms: u64,
    /// libtorch intra-op threads of each trainer.
    pub intra_op_threads: usize,
    /// Hogwild worker threads per trainer, stepping one dense replica (with
    /// `none` and `shadow-*` only).
    pub workers: usize,
    /// Faults to inject, for testing that they are contained (none normally).
    pub faults: Vec<Fault>,
    /// Trainers slowed on purpose, for experiments (none normally).
    pub stragglers: Vec<Straggler>,
    /// Trainer steps between two points where every trainer parks so that
    /// [`Cluster::checkpoint`](crate::Cluster::checkpoint) can save the whole state (0 = never); rounded
    /// up to a multiple of a foreground algorithm's sync period.
    pub checkpoint_every: u64,
    /// An elastic cluster's seats: the most trainers it may ever have,
    /// those it starts with and those added while it runs
    /// ([`Cluster::add_trainer`](crate::Cluster::add_trainer)); 0 (the
    /// default) for a fixed cluster. Trainers of an elastic cluster may also
    /// leave ([`Cluster::remove_trainer`](crate::Cluster::remove_trainer)).
    /// One process, one worker per trainer, under `none` or a `shadow-*`
    /// rule that averages groups (not EASGD), without checkpoints; shadow
    /// rounds run on a thread per trainer.
    pub elastic_capacity: usize,
    /// Where the cluster publishes its [`Event`](crate::events::Event)s. Subscribe to it before
    /// starting to receive every event from the first step on
    /// ([`Cluster::subscribe`](crate::Cluster::subscribe) receives those published after it is called).
    #[serde(skip)]
    pub events: EventBus,
    /// The sync rules `sync.algorithm` may name: the built-in ones, and
    /// those of one's own added with [`Rules::with`].
    #[serde(skip)]
    pub rules: Rules,
    /// The group schedules of one's own `sync.schedule` may name, added with
    /// [`Schedules::with`] (the built-in ones need no registering).
    #[serde(skip)]
    pub schedules: Schedules,
    /// The codecs `sync.compression` may name: the built-in ones, and those
    /// of one's own added with [`Codecs::with`].
    #[serde(skip)]
    pub codecs: Codecs,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            sync: SyncConfig::default(),
            chunk_ms: 20,
            consensus_every_ms: 500,
            intra_op_threads: 1,
            workers: 1,
            faults: Vec::new(),
            stragglers: Vec::new(),
            checkpoint_every: 0,
            elastic_capacity: 0,
            events: EventBus::default(),
            rules: Rules::default(),
            schedules: Schedules::default(),
            codecs: Codecs::default(),
        }
    }
}

impl ClusterConfig {
    /// The seats of a cluster starting `trainers`: its elastic
    /// capacity, or `trainers` for a fixed one; an error naming
    /// `elastic_capacity` for what an elastic cluster does not allow.
    pub(super) fn elastic_seats(
        &self,
        processes: usize,
        trainers: usize,
        resumed: bool,
    ) -> Result<usize> {
        let capacity = self.elastic_capacity;
        if capacity == 0 {
            return Ok(trainers);
        }
        let refuse = |reason: String| {
            Err(Error::Config {
                key: "elastic_capacity".into(),
                reason,
            })
        };
        let algorithm = &self.sync.algorithm;
        if capacity < trainers {
            refuse(format!(
                "{capacity} seats for the {trainers} trainers it starts with"
            ))
        } else if processes > 1 {
            refuse(format!(
                "trainers join and leave a job of one process (this one has {processes})"
            ))
        } else if self.workers > 1 {
            refuse("a trainer that joins or leaves is one worker (workers = 1)".into())
        } else if matches!(algorithm, Algorithm::SyncSgd | Algorithm::Foreground { .. }) {
            refuse(format!(
                "{algorithm} syncs in the foreground, in lockstep: a trainer that joins or leaves would break a round; use none or shadow-*"
            ))
        } else if self.checkpoint_every > 0 || resumed {
            refuse("a checkpoint holds a fixed set of trainers: elastic runs take none".into())
        } else {
            Ok(capacity)
        }
    }

    /// An error naming `elastic_capacity` if the cluster is elastic and its rule
    /// meets a `centre` (EASGD's, whose pull is sized for the trainers it
    /// starts with) rather than groups.
    pub(super) fn check_elastic_rule(&self, centre: bool) -> Result<()> {
        if self.elastic_capacity == 0 || !centre {
            return Ok(());
        }
        Err(Error::Config {
            key: "elastic_capacity".into(),
            reason: format!(
                "{} meets a centre sized for the trainers it starts with; use a rule that averages groups",
                self.sync.algorithm
            ),
        })
    }
}
