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
//! * [`metrics`] — NE, exact AUC, logloss, calibration;
//! * [`config`] — the TOML run configuration;
//! * [`train`] — a training run from a configuration to a [`train::TrainReport`],
//!   in this process or spread over processes ([`distributed`], through MPI);
//! * [`experiment`] — a grid of runs, each one's results kept, resumable;
//! * [`report`] — an experiment's results as Markdown tables and SVG plots.
//!
//! ```no_run
//! use shadowsync::{config::Config, train};
//!
//! # fn main() -> shadowsync::Result<()> {
//! let mut config = Config::default();           // DLRM on built-in synthetic data
//! config.data.synthetic.train_rows = 100_000;
//! let report = train::train(&config, &mut ())?;
//! println!("test NE {:.4}", report.final_metrics.ne);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod distributed;
mod error;
pub mod experiment;
pub mod metrics;
pub mod model;
pub mod output;
pub mod report;
pub mod train;

pub use error::{Error, Result};
pub use shadowsync_actors as runtime;
