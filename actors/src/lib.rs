//! # shadowsync-actors — the generic background-synchronization runtime
//!
//! Nothing here knows about CTR models. The runtime trains anything that
//! implements [`Learner`]: one SGD step at a time on its own data, with all of its
//! dense parameters in one contiguous [`FlatParams`] buffer. That single buffer is
//! what synchronization reads and writes: a snapshot is one memcpy, an average one
//! vectorized pass.
//!
//! Where to start: [`ClusterBuilder`] (or [`Cluster::start`]) runs learners
//! under a [`ClusterConfig`] and hands back a [`Cluster`] handle; its
//! [`Cluster::wait`] returns the learners, a report and the trained model.
//! Where to extend it: a sync rule of one's own is a [`sync::SyncRule`]
//! registered by name in [`sync::Rules`]; a group schedule a
//! [`sync::GroupSchedule`]; a component that watches and steers a run a
//! [`monitor::Monitor`]; where trainers live (one process, MPI ranks) a
//! [`sync::Fabric`].
//!
//! ```no_run
//! use shadowsync_actors::{FlatParams, Result};
//! use tch::{nn, Device, Kind, Tensor};
//!
//! # fn main() -> Result<()> {
//! let vs = nn::VarStore::new(Device::Cpu);
//! let layer = nn::linear(vs.root() / "fc", 4, 2, Default::default());
//! let params = FlatParams::adopt(&vs)?; // weights now live in one buffer
//! let x = Tensor::ones([3, 4], (Kind::Float, Device::Cpu));
//! let loss = x.apply(&layer).sum(Kind::Float);
//! params.zero_grad()?;
//! loss.backward();
//! assert_eq!(params.grad().size(), vec![params.numel() as i64]);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod checkpoint;
pub mod cluster;
pub mod coordinator;
mod error;
pub mod evaluator;
pub mod events;
pub mod faults;
mod hogwild;
mod learner;
pub mod monitor;
mod params;
pub mod recovery;
pub mod shadow;
pub mod stats;
pub mod sync;
pub mod system;
pub mod trainer;

pub use checkpoint::{ClusterState, TrainerState};
pub use cluster::{Cluster, ClusterBuilder, ClusterConfig, ClusterOutcome, ClusterReport};
pub use error::{first_line, Error, Result};
pub use hogwild::ParamAlias;
pub use learner::{Learner, LearnerState, StepOutcome};
pub use params::FlatParams;
