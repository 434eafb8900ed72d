//! Synchronization, in rooms from the bottom up: what a round computes
//! ([`rules`]: the algorithm, the sync rules and their math) and who meets
//! whom each round (`schedule`: DS-Sync's group schedules, [`GroupSchedule`]);
//! how values travel ([`transport`]: in one process, to the EASGD server,
//! across MPI ranks); the coordinator that hands out each round's groups
//! (`coordinator`); on top, a trainer's side of a round (`peer`:
//! `SyncPeer`), sync-sgd's exchange of shared gradients (`shared`), and the
//! settings of it all (`config`: [`SyncConfig`]). A room uses only those
//! below it (actors/tests/layers.rs checks it).

mod config;
pub(crate) mod coordinator;
mod peer;
pub mod rules;
mod schedule;
mod shared;
pub mod transport;

pub use config::{BmufSettings, EasgdSettings, ShadowThreads, SyncConfig};
pub use peer::PeerState;
pub(crate) use peer::SharedPeer;
pub(crate) use peer::SyncPeer;
pub use rules::{
    elastic, mean_into, Algorithm, BlockMomentum, BmufParams, Combined, Diloco, DilocoParams,
    Elastic, Exchange, ModelAveraging, Outer, OuterState, OuterStep, RuleContext, RuleFactory,
    RuleState, Rules, SyncRule, WriteBack,
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
