//! Data: the Criteo format, synthetic data with a known oracle, and the pipeline
//! that feeds trainers.
//!
//! * [`criteo`] parses lines (DLRM's conventions) and reports malformed ones by
//!   file, line and field; [`CriteoReader`] streams a file (plain or gzip).
//! * [`TableLayout`] hashes categorical values into one fused embedding table.
//! * [`Batch`] holds a batch as tensors.
//! * [`Pipeline`] reads on background threads and deals batches to N consumers.
//! * [`synthetic`] writes Criteo-format data labelled by a planted model.

mod batch;
pub mod criteo;
mod layout;
mod pipeline;
pub mod synthetic;

pub use batch::Batch;
pub use criteo::{
    parse_line, BadLinePolicy, CriteoReader, Example, ReadStats, NUM_DENSE, NUM_FIELDS, NUM_SPARSE,
};
pub use layout::TableLayout;
pub use pipeline::{Batches, Pipeline, PipelineConfig, PipelineHalt};
pub use synthetic::{Oracle, Profile, SyntheticData, SyntheticSpec};
