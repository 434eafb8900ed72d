//! Synchronization: the averaging rules, DS-Sync group schedules, the transport
//! between trainers (the fabric that places them in one process or many), and
//! the EASGD parameter server.

mod algorithm;
mod fabric;
#[cfg(feature = "mpi")]
pub mod mpi;
mod peer;
mod rules;
mod schedule;
mod server;
mod transport;

pub use algorithm::{Algorithm, Rule, SyncConfig};
pub use fabric::{launched_by_mpirun, Fabric, InProcess};
pub use peer::{PeerState, SharedPeerState, SyncPeer};
pub use rules::{elastic, mean_into, BmufParams, BmufState, WriteBack};
pub use schedule::{GroupPlan, Schedule};
pub use server::{
    serve, shard_process, shard_ranges, RemoteShards, ServerClient, ServerShard, ServerShardActor,
    ShardReply, ShardRequest,
};
pub use transport::{mesh, Endpoint, GroupMean, LinkModel, Payload};
