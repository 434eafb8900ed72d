//! Synchronization, in three rooms: what a round computes ([`rules`]: the
//! algorithm, the sync rules and their math), who meets whom each round
//! (`schedule`: DS-Sync's group schedules, [`GroupSchedule`]), and how values
//! travel ([`transport`]: in one process, to the EASGD server, across MPI
//! ranks). Beside them, a trainer's side of a round (`peer`: [`SyncPeer`])
//! and sync-sgd's exchange of shared gradients (`shared`).

mod peer;
pub mod rules;
mod schedule;
mod shared;
pub mod transport;

pub(crate) use peer::SharedPeer;
pub use peer::{PeerState, SyncPeer};
pub use rules::{
    elastic, mean_into, Algorithm, BlockMomentum, BmufParams, BmufState, Elastic, Exchange,
    ModelAveraging, RuleContext, RuleFactory, RuleState, Rules, ShadowThreads, SyncConfig,
    SyncRule, WriteBack,
};
pub(crate) use rules::{elastic_into, resident_zeros, Combined, SharedSlice};
pub use schedule::{
    check_partitions, GroupPlan, GroupSchedule, Schedule, ScheduleContext, ScheduleFactory,
    Schedules,
};
#[cfg(feature = "mpi")]
pub use transport::mpi;
pub use transport::{
    launched_by_mpirun, mesh, Endpoint, Fabric, InProcess, LinkModel, RemoteShards, ServerClient,
    ServerShard, ServerShardActor,
};
#[cfg(feature = "mpi")]
pub(crate) use transport::{serve, ShardRequest};
pub(crate) use transport::{Payload, Reduce, ShardReply};
