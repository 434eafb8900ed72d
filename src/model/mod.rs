//! CTR models on tch: logistic regression, DLRM and DeepFM, and one's own.
//!
//! A model is split the way the runtime needs it:
//! * its **dense part** ([`CtrModel`]) is ordinary tch modules whose variables are
//!   moved into one flat buffer ([`shadowsync_actors::FlatParams`]) for fast
//!   optimizer steps and synchronization;
//! * its **embeddings** are one fused table ([`EmbeddingTable`]) updated with
//!   row-sparse gradients, outside autograd; across processes the table may
//!   be sharded over them instead ([`ShardedTable`]), either behind one
//!   [`Table`].
//!
//! [`CtrLearner`] puts both together with their optimizers and a data shard.
//! Which model and which row optimizer a run uses are names (`model.kind`,
//! `optim.sparse`) looked up in [`Models`] and [`RowRules`], where one's own
//! register beside the built-in ones.

mod audit;
mod ctr;
mod ctr_learner;
mod local_table;
mod optim;
mod registry;
mod rows;

pub use audit::{AuditReport, JobSums, RowAudit};
pub use ctr::{CtrModel, DeepFm, Dlrm, LogisticRegression};
pub use ctr_learner::CtrLearner;
pub use local_table::{EmbeddingTable, RowInit};
pub use optim::DenseOptimizer;
pub use registry::{ModelFactory, Models, RowRuleFactory, RowRules};
pub use rows::{Pending, Prefetch, ShardedTable, Table};
