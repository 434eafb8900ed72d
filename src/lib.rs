//! # shadowsync — train CTR models on many trainers, synchronizing in the background
//!
//! This crate is the CTR application on top of the generic runtime
//! [`shadowsync_actors`] (re-exported as [`runtime`]):
//!
//! * [`data`] — the Criteo format (streaming, plain or gzip, errors naming file,
//!   line and field), a synthetic generator with a known oracle, and the pipeline
//!   that shards batches across trainers;
//! * [`model`] — logistic regression, DLRM and DeepFM, with dense parameters in
//!   one flat buffer and one fused, sparsely updated embedding table;
//! * [`Registry`] — the sync rules, schedules, models and row optimizers a
//!   run may name: the built-in ones and one's own;
//! * [`metrics`] — NE, exact AUC, logloss, calibration;
//! * [`config`] — the TOML run configuration;
//! * [`train`] — a training run ([`train::Run`]) from a configuration to a
//!   [`train::TrainReport`], in this process or spread over processes
//!   ([`distributed`], through MPI);
//! * [`experiment`] — a grid of runs, each one's results kept, resumable;
//! * [`report`] — an experiment's results as Markdown tables and SVG plots
//!   (feature `report`);
//! * [`cli`] — the `shadowsync` command line, to run with a registry of
//!   one's own ([`cli::main`]; feature `cli`).
//!
//! Both features are on by default. An embedder of the runtime or of the CTR
//! API turns them off (`default-features = false`) and compiles neither clap,
//! indicatif and signal-hook nor plotters and statrs.
//!
//! ```no_run
//! use shadowsync::{config::Config, train};
//!
//! # fn main() -> shadowsync::Result<()> {
//! let mut config = Config::default();           // DLRM on built-in synthetic data
//! config.data.synthetic.train_rows = 100_000;
//! let report = train::Run::new().train(&config)?;
//! println!("test NE {:.4}", report.final_metrics.ne);
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![warn(unnameable_types)]
#![warn(clippy::too_many_lines)]
#![warn(clippy::missing_errors_doc)]

pub mod checkpoint;
#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
pub mod config;
pub mod data;
pub mod distributed;
mod error;
pub mod experiment;
pub mod metrics;
pub mod model;
pub mod output;
mod registry;
#[cfg(feature = "report")]
#[cfg_attr(docsrs, doc(cfg(feature = "report")))]
pub mod report;
pub mod train;

pub use error::{Error, Result};
pub use registry::Registry;

/// The book's chapters (docs/book), compiled as doc comments so that every Rust
/// block in them is a doctest run by `cargo test --doc`.
#[cfg(doctest)]
pub mod book {
    #[doc = include_str!("../docs/book/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../docs/book/many-trainers.md")]
    pub struct ManyTrainers;
    #[doc = include_str!("../docs/book/faults-and-checkpoints.md")]
    pub struct FaultsAndCheckpoints;
    #[doc = include_str!("../docs/book/models-and-data.md")]
    pub struct ModelsAndData;
    #[doc = include_str!("../docs/book/mpi.md")]
    pub struct Mpi;
    #[doc = include_str!("../docs/book/experiments.md")]
    pub struct Experiments;
    #[doc = include_str!("../docs/book/library.md")]
    pub struct Library;
    #[doc = include_str!("../docs/book/architecture.md")]
    pub struct Architecture;
    #[doc = include_str!("../README.md")]
    pub struct Readme;
}
pub use shadowsync_actors as runtime;
