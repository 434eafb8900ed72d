//! How trainers' values travel: between the trainers of one process
//! (channels carrying shared buffers, over a simulated link if configured:
//! [`mesh`], [`Endpoint`]), to EASGD's parameter server ([`ServerClient`] and
//! its shard actors), and across processes and hosts through MPI (`mpi`,
//! feature `mpi`). A [`Fabric`] says where a job's trainers live and hands
//! out their endpoints. A [`Codec`] compresses the values of group rounds
//! (`sync.compression`).

mod codec;
mod fabric;
mod in_process;
mod link;
mod message;
#[cfg(feature = "mpi")]
pub mod mpi;
mod server;

pub use codec::{packed, unpacked, Codec, CodecContext, CodecFactory, Codecs, Fp16, Int8, TopK};
pub use fabric::{launched_by_mpirun, unaccounted_in_job, Fabric, InProcess};
#[cfg(feature = "mpi")]
pub(crate) use in_process::mesh_part;
pub use in_process::{mesh, Endpoint, GroupMean, GroupReduced};
pub(crate) use link::sleep_until;
pub use link::LinkModel;
pub use message::Payload;
#[cfg(feature = "mpi")]
pub(crate) use message::{Body, Message, Outgoing};
pub(crate) use message::{Phase, Reduce};
#[cfg(feature = "mpi")]
pub(crate) use server::{serve, ShardRequest};
pub use server::{CentreCodec, RemoteShards, ServerClient, ServerShard, ServerShardActor};
