//! What the runtime trains: anything that can take one SGD step on its own data.

use crate::FlatParams;

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepOutcome {
    /// Training examples consumed by the step.
    pub examples: usize,
    /// Mean training loss of the step's batch.
    pub loss: f64,
}

/// A model replica with its optimizer and its shard of the data.
///
/// The runtime calls [`Learner::step`] in a loop and reads or writes the dense
/// parameters through [`Learner::dense_params`]; everything else (sparse
/// embeddings, data reading) stays inside the learner.
pub trait Learner: Send {
    /// Error of a step (bad data, failed tensor operation, ...).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Takes one step on the next batch; `Ok(None)` once the data is exhausted.
    fn step(&mut self) -> Result<Option<StepOutcome>, Self::Error>;

    /// The dense parameters, in one contiguous buffer.
    fn dense_params(&self) -> &FlatParams;
}
