//! Synchronization: every public name of it lives here, one path each.
//!
//! | concern | names |
//! |---|---|
//! | what a round computes | [`Algorithm`], [`SyncRule`] registered by name in [`Rules`] ([`ModelAveraging`], [`Elastic`], [`BlockMomentum`], [`Diloco`], [`Outer`]), their math as plain functions ([`mean_into`], [`elastic`], [`OuterStep`]), the [`Combined`] vector a round writes back from |
//! | who meets whom | DS-Sync's [`GroupSchedule`]s, registered in [`Schedules`], and the [`GroupPlan`] each round follows |
//! | how values travel | a [`Fabric`] ([`InProcess`]; `mpi`, feature `mpi`) and its [`Endpoint`]s, the [`mesh`] of one process, the simulated [`LinkModel`], EASGD's parameter server ([`ServerClient`], [`ServerShard`]), the [`Codec`]s that compress a round ([`Fp16`], [`Int8`], [`TopK`]) |
//! | the settings | [`SyncConfig`], whose [`Algorithm`] holds the settings only it reads: the background loops' section ([`ShadowSettings`], [`ShadowThreads`]) and the rule's ([`Rule`]: [`EasgdSettings`], [`BmufSettings`], [`DilocoParams`]); the file's flat form [`SyncFile`] |
//!
//! Inside, in rooms from the bottom up: `rules` (the algorithm, the rules
//! and their math) and `schedule`; `transport` (in one process, to the
//! EASGD server, across MPI ranks); the `coordinator` that hands out each
//! round's groups; on top, a trainer's side of a round (`peer`), sync-sgd's
//! exchange of shared gradients (`shared`), and `config`. A room uses only
//! those below it (actors/tests/layers.rs checks it).
mod config;
pub(crate) mod coordinator;
mod peer;
pub(crate) mod rules;
mod schedule;
mod shared;
pub(crate) mod transport;

pub use config::{SyncConfig, SyncFile};
pub use peer::PeerState;
pub(crate) use peer::SharedPeer;
pub(crate) use peer::SyncPeer;
pub use rules::{
    elastic, mean_into, Algorithm, BlockMomentum, BmufParams, BmufSettings, Combined, Diloco,
    DilocoParams, EasgdSettings, Elastic, Exchange, ModelAveraging, Outer, OuterState, OuterStep,
    Rule, RuleContext, RuleFactory, RuleState, Rules, ShadowSettings, ShadowThreads, SyncRule,
    WriteBack,
};
pub(crate) use rules::{elastic_into, elastic_pull, resident_zeros, SharedSlice};
pub use schedule::{
    check_partitions, GroupPlan, GroupSchedule, Schedule, ScheduleContext, ScheduleFactory,
    Schedules,
};
#[cfg(feature = "mpi")]
pub use transport::mpi;
pub(crate) use transport::Reduce;
pub use transport::{
    launched_by_mpirun, mesh, unaccounted_in_job, CentreCodec, Codec, CodecContext, CodecFactory,
    Codecs, Endpoint, Fabric, Fp16, InProcess, Int8, LinkModel, RemoteShards, ServerClient,
    ServerShard, ServerShardActor, TopK,
};
pub use transport::{packed, unpacked};
#[cfg(feature = "mpi")]
pub(crate) use transport::{serve, ShardRequest};
pub use transport::{GroupMean, GroupReduced, Payload};
