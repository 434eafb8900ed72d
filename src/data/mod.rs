//! Data: the Criteo format, synthetic data with a known oracle, and the pipeline
//! that feeds trainers.
//!
//! * [`parse_line`] parses a Criteo line (DLRM's conventions) and names what is
//!   malformed ([`LineError`]); [`CriteoReader`] streams a file (plain or gzip)
//!   and reports bad lines by file, line and field.
//! * [`TableLayout`] hashes categorical values into one fused embedding table.
//! * [`Batch`] holds a batch as tensors.
//! * [`Pipeline`] reads on background threads and deals batches to N consumers,
//!   to whoever asks first or in fixed shares ([`Dealing`]).
//! * [`SyntheticData`] writes Criteo-format data labelled by a planted model
//!   whose [`Oracle`] scores the test rows.

mod batch;
pub(crate) mod criteo;
mod dealing;
mod layout;
mod pipeline;
mod synthetic;

pub use batch::{split_rows, Batch};
pub use criteo::{
    parse_line, BadLinePolicy, CriteoReader, Example, LineError, ReadStats, NUM_DENSE, NUM_FIELDS,
    NUM_SPARSE,
};
pub use dealing::{ChunkDealer, ChunkLedger, ChunkSet, Dealing};
pub use layout::TableLayout;
pub use pipeline::{Batches, Pipeline, PipelineConfig, PipelineHalt, Resume};
pub use synthetic::{Oracle, Profile, SyntheticData, SyntheticSpec};
