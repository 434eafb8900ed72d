//! The whole system, started from a config; a cloneable [`Cluster`] handle is
//! the public API.
//!
//! [`Cluster::start`] takes one learner per trainer and builds:
//! * a `TrainerActor` per trainer, each on its own arbiter thread — or, with
//!   `workers = W`, W of them per trainer stepping one dense replica Hogwild-style;
//! * for `shadow-*`, one `ShadowHubActor` running every trainer's rounds on one
//!   thread (a job of one process, a rule that averages a group), or else a
//!   `ShadowActor` beside each trainer, on its own thread
//!   (`sync.shadow.threads`);
//! * for `*-easgd`, the parameter server: one actor per shard of the centre
//!   ([`ServerClient`](crate::sync::ServerClient); across processes, each serves its share of the shards);
//! * the `GroupCoordinator` that every sync peer asks for its group each round
//!   (following the [`GroupPlan`](crate::sync::GroupPlan) of the configured DS-Sync schedule);
//! * the transport between trainers, with the simulated link: a [`mesh`](crate::sync::mesh) in
//!   this process, or across the processes of a job through a [`Fabric`](crate::sync::Fabric)
//!   ([`ClusterBuilder::fabric`](crate::ClusterBuilder::fabric); the trainers of this process are then numbered
//!   across the job, groups span processes, and syncing ends when every
//!   process agrees it does);
//! * a monitor thread sampling the consensus distance of the replicas.
//!
//! An elastic cluster (`elastic_capacity`) takes trainers while it runs and
//! lets them go ([`Cluster::add_trainer`], [`Cluster::remove_trainer`]; see
//! `elastic.rs`); the roster (`roster.rs`) is who has started and who left.
//!
//! Shutdown: syncing ends when [`Cluster::stop`] is called or the trainers run
//! out of data — for the foreground algorithms when the first trainer does (they
//! move in lockstep, and a finished trainer can no longer take part in a round);
//! for the shadow ones when the last trainer does: the shadow loop of a finished
//! trainer keeps averaging its final parameters, so the trainers still running
//! never train unsynchronized. Pending collectives then return at once, so
//! nothing can hang, and [`Cluster::wait`] hands back the learners with a
//! [`ClusterReport`].

mod actors;
mod builder;
mod checkpoint;
mod config;
mod elastic;
mod handle;
mod report;
mod roster;
mod wiring;

pub use builder::ClusterBuilder;
pub use checkpoint::{ClusterState, TrainerState};
pub use config::ClusterConfig;
pub use handle::Cluster;
pub use report::{
    consensus_distance, mean_replica, spread_around, ClusterOutcome, ClusterReport, ConsensusPoint,
};
