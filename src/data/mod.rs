//! Data: the Criteo format, synthetic data with a known oracle, and the pipeline
//! that feeds trainers.
//!
//! * [`criteo`] parses lines (DLRM's conventions) and reports malformed ones by
//!   file, line and field; [`CriteoReader`] streams a file (plain or gzip).
//! * [`TableLayout`] hashes categorical values into one fused embedding table.
//! * [`Batch`] holds a batch as tensors.
//! * [`Pipeline`] reads on background threads and deals batches to N consumers,
//!   to whoever asks first or in fixed shares ([`Dealing`]).
//! * [`synthetic`] writes Criteo-format data labelled by a planted model.

mod batch;
pub mod criteo;
mod dealing;
mod layout;
mod pipeline;
pub mod synthetic;

pub use batch::{split_rows, Batch};
pub use criteo::{
    parse_line, BadLinePolicy, CriteoReader, Example, ReadStats, NUM_DENSE, NUM_FIELDS, NUM_SPARSE,
};
pub use dealing::{ChunkLedger, ChunkSet, Dealing};
pub use layout::TableLayout;
pub use pipeline::{Batches, Pipeline, PipelineConfig, PipelineHalt, Resume};
pub use synthetic::{Oracle, Profile, SyntheticData, SyntheticSpec};
