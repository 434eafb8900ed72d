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

/// Gradients of parameters that trainers share rather than replicate (rows
/// of an embedding table), coalesced: each row once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedGradients {
    /// The rows, each once.
    pub ids: Vec<u64>,
    /// Values per row.
    pub width: usize,
    /// Each row's gradient, one after another (`ids.len() × width` values).
    pub values: Vec<f32>,
}

/// What a learner needs, besides its dense parameters, to continue exactly
/// where it stopped (what a checkpoint keeps of it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LearnerState {
    /// Named arrays: optimizer state, for instance.
    pub arrays: Vec<(String, Vec<f32>)>,
    /// How far into its data the learner is, in units it chooses (consumed
    /// batches, for instance); it starts from there when restored.
    pub position: u64,
}

/// A model replica with its optimizer and its shard of the data.
///
/// A step is split in two so that synchronous SGD can all-reduce the gradients in
/// between: [`Learner::compute_gradients`] fills [`FlatParams::grad`] from the
/// next batch, [`Learner::apply_gradients`] updates the parameters from it. The
/// runtime reads and writes the dense parameters through
/// [`Learner::dense_params`]; everything else (sparse embeddings, data reading)
/// stays inside the learner.
pub trait Learner: Send + Unpin + 'static {
    /// Error of a step (bad data, failed tensor operation, ...).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Forward and backward on the next batch; `Ok(None)` once the data is exhausted.
    ///
    /// # Errors
    ///
    /// Bad data or a failed tensor operation (its own error type;
    /// [`Learner::is_recoverable`] says whether the trainer goes on).
    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>, Self::Error>;

    /// Applies the gradients of the last [`Learner::compute_gradients`].
    ///
    /// # Errors
    ///
    /// A failed optimizer step (its own error type).
    fn apply_gradients(&mut self) -> Result<(), Self::Error>;

    /// The dense parameters, in one contiguous buffer.
    fn dense_params(&self) -> &FlatParams;

    /// Changes the learning rate from the next step on.
    fn set_learning_rate(&mut self, lr: f64);

    /// Takes the gradients of the last [`Learner::compute_gradients`] that go
    /// to parameters shared with other trainers rather than replicated (a CTR
    /// model's embedding rows), coalesced: [`Learner::apply_gradients`] then
    /// applies only the rest. Under `sync-sgd` the runtime combines a
    /// group's and has each row applied once, by one member
    /// ([`Learner::apply_shared_gradients`]), as one trainer with the group's
    /// whole batch would under any optimizer. Nothing shared: `None` (the
    /// default).
    ///
    /// # Errors
    ///
    /// Whatever the learner cannot collect (its own error type).
    fn take_shared_gradients(&mut self) -> Result<Option<SharedGradients>, Self::Error> {
        Ok(None)
    }

    /// Applies `gradients` to the shared parameters, through their optimizer
    /// (under `sync-sgd`, the group's combined gradients of the rows this
    /// trainer applies).
    ///
    /// # Errors
    ///
    /// Gradients that do not fit the shared parameters, or a failed step (its own error
    /// type).
    fn apply_shared_gradients(&mut self, _gradients: &SharedGradients) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Loses the update of the shared parameters of the step just computed,
    /// as a transport bug would lose it after the accounting saw it (an
    /// injected [`FaultKind::LosePush`](crate::faults::FaultKind::LosePush),
    /// for tests of that accounting). Nothing shared: nothing to lose (the
    /// default).
    ///
    /// # Errors
    ///
    /// Whatever the learner cannot account (its own error type).
    fn lose_shared_update(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Forgets the optimizer state of the dense parameters, after the runtime
    /// reloaded them from a recovery point (state built on a diverged replica
    /// would throw it off again). Nothing kept: nothing to do (the default).
    ///
    /// # Errors
    ///
    /// Whatever the learner cannot reset (its own error type).
    fn reset_optimizer(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Whether a step that failed with `error` can be retried after reloading
    /// the replica (the default); bad input data, for instance, cannot.
    fn is_recoverable(_error: &Self::Error) -> bool {
        true
    }

    /// Waits until what its steps sent elsewhere has landed (pushes to the
    /// rows of a table another process keeps), so that a checkpoint reading
    /// the shared state after it holds every update its steps made. Called
    /// before the trainer parks for a checkpoint and when it is stopped.
    /// Nothing in flight: nothing to do (the default).
    ///
    /// # Errors
    ///
    /// Updates in flight that could not be completed (its own error type).
    fn settle(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Its state besides the dense parameters (nothing, by default).
    ///
    /// # Errors
    ///
    /// Whatever the learner cannot save (its own error type).
    fn save_state(&self) -> Result<LearnerState, Self::Error> {
        Ok(LearnerState::default())
    }

    /// Takes back a state [`Learner::save_state`] gave (nothing to do, by
    /// default).
    ///
    /// # Errors
    ///
    /// A state that does not fit this learner (its own error type).
    fn restore_state(&mut self, _state: &LearnerState) -> Result<(), Self::Error> {
        Ok(())
    }

    /// One whole step; `Ok(None)` once the data is exhausted.
    ///
    /// # Errors
    ///
    /// As [`Learner::compute_gradients`] and [`Learner::apply_gradients`].
    fn step(&mut self) -> Result<Option<StepOutcome>, Self::Error> {
        let outcome = self.compute_gradients()?;
        if outcome.is_some() {
            self.apply_gradients()?;
        }
        Ok(outcome)
    }
}
