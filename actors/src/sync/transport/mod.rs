//! How trainers' values travel: between the trainers of one process
//! (channels carrying shared buffers, over a simulated link if configured:
//! [`mesh`], [`Endpoint`]), to EASGD's parameter server ([`ServerClient`] and
//! its shard actors), and across processes and hosts through MPI (`mpi`,
//! feature `mpi`). A [`Fabric`] says where a job's trainers live and hands
//! out their endpoints.

mod fabric;
mod in_process;
#[cfg(feature = "mpi")]
pub mod mpi;
mod server;

pub use fabric::{launched_by_mpirun, Fabric, InProcess};
pub use in_process::{mesh, Endpoint, LinkModel};
#[cfg(feature = "mpi")]
pub(crate) use in_process::{mesh_part, Message, Outgoing};
pub(crate) use in_process::{sleep_until, Payload, Phase, Reduce};
pub(crate) use server::ShardReply;
#[cfg(feature = "mpi")]
pub(crate) use server::{serve, ShardRequest};
pub use server::{RemoteShards, ServerClient, ServerShard, ServerShardActor};
