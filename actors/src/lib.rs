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
//! The public surface, all of it, each name at one path:
//!
//! | where | what a user needs it for |
//! |---|---|
//! | crate root | [`Learner`] and [`FlatParams`] (what is trained), [`Cluster`], [`ClusterBuilder`], [`ClusterConfig`] (running it), [`ClusterOutcome`], [`ClusterReport`] (what comes back), [`mean_replica`], [`consensus_distance`], [`spread_around`] (replicas compared), [`ClusterState`], [`TrainerState`] (a checkpoint to resume from), [`Error`], [`Result`], [`ParamAlias`], [`with_shared`] and [`SharedValues`] (a tensor's memory, shared with other threads, seen from Rust) |
//! | [`sync`] | the algorithm ([`sync::Algorithm`], [`sync::SyncConfig`]); rules ([`sync::SyncRule`], [`sync::Rules`], the built-in ones and their math); schedules ([`sync::GroupSchedule`], [`sync::Schedule`], [`sync::Schedules`], [`sync::GroupPlan`]); where trainers live ([`sync::Fabric`], [`sync::InProcess`], `sync::mpi` with feature `mpi`) |
//! | [`embedding`] | tables sharded over processes: their rows' rules ([`embedding::RowRule`]: SGD, Adagrad, FTRL), shards, server, clients, the push ledger |
//! | [`monitor`], [`events`], [`stats`], [`evaluator`] | watching and steering a run, live evaluation |
//! | [`faults`], [`stragglers`] | faults injected and trainers slowed on purpose |
//! | [`system`] | the actix system threads the runtime's actors run on |
//!
//! Open in name only: a [`sync::Fabric`] hands out endpoints that only the
//! runtime's transports make ([`sync::mesh`] in one process, MPI's across
//! processes), so a new placement of trainers is a transport of its own, in
//! this crate; the two fabrics cover one process and any number of hosts.
//!
//! Four trainers fitting `y = 3x − 1`, averaged in the background:
//!
//! ```
//! use shadowsync_actors::{Cluster, ClusterConfig, FlatParams, Learner, StepOutcome};
//! use tch::{nn, nn::Module, Device, Kind, TchError, Tensor};
//!
//! /// A line fitted by SGD, 300 batches of its own.
//! struct Line { _vars: nn::VarStore, fc: nn::Linear, params: FlatParams, lr: f64, left: u32 }
//!
//! impl Learner for Line {
//!     type Error = TchError;
//!     fn compute_gradients(&mut self) -> Result<Option<StepOutcome>, TchError> {
//!         if self.left == 0 { return Ok(None); }
//!         self.left -= 1;
//!         let x = Tensor::f_rand([32, 1], (Kind::Float, Device::Cpu))? * 2.0 - 1.0;
//!         let loss = (self.fc.forward(&x) - (&x * 3.0 - 1.0)).square().mean(Kind::Float);
//!         self.params.zero_grad().map_err(|e| TchError::Kind(e.to_string()))?;
//!         loss.f_backward()?;
//!         Ok(Some(StepOutcome { examples: 32, loss: loss.double_value(&[]) }))
//!     }
//!     fn apply_gradients(&mut self) -> Result<(), TchError> {
//!         let step = self.params.grad().f_mul_scalar(self.lr)?;
//!         tch::no_grad(|| self.params.values().shallow_clone().f_sub_(&step)).map(drop)
//!     }
//!     fn dense_params(&self) -> &FlatParams { &self.params }
//!     fn set_learning_rate(&mut self, lr: f64) { self.lr = lr; }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let line = || -> shadowsync_actors::Result<Line> {
//!     let vars = nn::VarStore::new(Device::Cpu);
//!     let fc = nn::linear(vars.root(), 1, 1, Default::default());
//!     let params = FlatParams::adopt(&vars)?; // every weight in one buffer: what is synced
//!     Ok(Line { _vars: vars, fc, params, lr: 0.5, left: 300 })
//! };
//! let mut config = ClusterConfig::default();
//! config.sync.algorithm = "shadow-ma".parse()?;
//! let learners = (0..4).map(|_| line()).collect::<Result<Vec<_>, _>>()?;
//! let outcome = Cluster::start(config, learners)?.wait()?;
//! let mut fitted = outcome.model()?; // the replicas' mean: a weight and a bias
//! fitted.sort_by(f32::total_cmp);
//! assert!((fitted[0] + 1.0).abs() < 0.05 && (fitted[1] - 3.0).abs() < 0.05);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![warn(unnameable_types)]
#![warn(clippy::too_many_lines)]
#![warn(clippy::missing_errors_doc)]

mod cluster;
pub mod embedding;
mod error;
pub mod evaluator;
pub mod events;
pub mod faults;
mod hogwild;
mod learner;
pub mod monitor;
mod named;
mod params;
mod recovery;
mod shadow;
pub mod stats;
pub mod stragglers;
pub mod sync;
pub mod system;
mod trainer;

pub use cluster::{
    consensus_distance, mean_replica, spread_around, Cluster, ClusterBuilder, ClusterConfig,
    ClusterOutcome, ClusterReport, ClusterState, ConsensusPoint, TrainerState,
};
pub use error::{first_line, with_causes, Error, Result, ShardFault};
pub use hogwild::{with_shared, ParamAlias, SharedValues};
pub use learner::{Learner, LearnerState, SharedGradients, StepOutcome};
pub use named::{Named, Sections};
pub use params::FlatParams;
