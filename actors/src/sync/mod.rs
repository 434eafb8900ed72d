//! Synchronization: sync rules ([`SyncRule`]: MA, EASGD, BMUF, or one's own),
//! DS-Sync group schedules ([`GroupSchedule`]), the transport between
//! trainers (the fabric that places them in one process or many), and the
//! EASGD parameter server.

mod algorithm;
mod combined;
mod fabric;
mod math;
#[cfg(feature = "mpi")]
pub mod mpi;
mod peer;
mod rule;
mod schedule;
mod server;
mod shared;
mod transport;

pub use algorithm::{Algorithm, ShadowThreads, SyncConfig};
pub(crate) use combined::{Combined, SharedSlice};
pub use fabric::{launched_by_mpirun, Fabric, InProcess};
pub use math::{elastic, mean_into, BmufParams, BmufState, WriteBack};
pub(crate) use math::{elastic_into, resident_zeros};
pub(crate) use peer::SharedPeer;
pub use peer::{PeerState, SyncPeer};
pub use rule::{
    BlockMomentum, Elastic, Exchange, ModelAveraging, RuleContext, RuleFactory, RuleState, Rules,
    SyncRule,
};
pub use schedule::{
    check_partitions, GroupPlan, GroupSchedule, Schedule, ScheduleContext, ScheduleFactory,
    Schedules,
};
pub(crate) use server::ShardReply;
#[cfg(feature = "mpi")]
pub(crate) use server::{serve, ShardRequest};
pub use server::{RemoteShards, ServerClient, ServerShard, ServerShardActor};
pub use transport::{mesh, Endpoint, LinkModel};
pub(crate) use transport::{Payload, Reduce};
