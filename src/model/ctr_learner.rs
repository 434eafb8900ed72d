//! A CTR model replica with its optimizers and its shard of the data.

use crate::config::{Config, ModelConfig, OptimConfig};
use crate::data::{Batch, Batches};
use crate::model::{CtrModel, DenseOptimizer, Models, Pending, Prefetch, Table};
use crate::{Error, Result};
use shadowsync_actors::{FlatParams, Learner, LearnerState, SharedGradients, StepOutcome};
use tch::{nn, Device, Kind, Reduction, Tensor};

/// Model, dense optimizer, embedding table with its sparse optimizer, and data.
#[derive(Debug)]
pub struct CtrLearner {
    model: Box<dyn CtrModel>,
    // Owns the dense variables the model's modules refer to.
    _vars: nn::VarStore,
    dense: FlatParams,
    dense_optimizer: DenseOptimizer,
    table: Table,
    data: Option<Batches>,
    /// The next batch, its rows being read while this one computes (sharded
    /// tables).
    next: Option<Result<(Batch, Prefetch)>>,
    /// Rows gathered by the last forward pass (their leaf holding the
    /// gradient), until [`CtrLearner::apply`].
    pending: Option<Pending>,
    /// Static dealing: chunks of its data shard consumed (the next batch's [`Batch::chunk`]
    /// is at least this).
    position: u64,
}

impl CtrLearner {
    /// One learner per data shard, all sharing `table` (updated
    /// Hogwild-style), each a model `models` builds from `config.model` with
    /// `config.optim`: the replicas of a multi-trainer run. With
    /// `train.workers > 1`, every that many consecutive shards make one
    /// trainer whose learners also share one dense replica (its Hogwild
    /// workers). Every trainer's dense parameters start at the same point,
    /// drawn from `train.seed`, in whichever
    /// process it runs (as data-parallel training starts from one model):
    /// replicas drawn apart are networks that averaging cannot merge and
    /// EASGD's weak pull never brings together.
    ///
    /// # Errors
    ///
    /// A model `models` cannot build from `config.model`, or libtorch's.
    pub fn replicas(
        models: &Models,
        config: &Config,
        table: &Table,
        shards: Vec<Batches>,
    ) -> Result<Vec<Self>> {
        let (model, optim) = (&config.model, &config.optim);
        let (workers, seed) = (config.train.workers.max(1), config.train.seed);
        let mut learners: Vec<Self> = Vec::with_capacity(shards.len());
        for (i, shard) in shards.into_iter().enumerate() {
            let owner = learners.get(i - i % workers).map(|owner| &owner.dense);
            if owner.is_none() {
                tch::manual_seed(seed.wrapping_mul(0x9E37_79B9) as i64);
            }
            let learner = Self::build(models, model, optim, table.share(), Some(shard), owner)?;
            learners.push(learner);
        }
        Ok(learners)
    }

    /// A fresh model that `models` builds from `model`, using `table` (for
    /// example one shared with other trainers); `data` is its shard (or
    /// `None` for evaluation only).
    ///
    /// # Errors
    ///
    /// As [`CtrLearner::replicas`].
    pub fn with_table(
        models: &Models,
        model: &ModelConfig,
        optim: &OptimConfig,
        table: Table,
        data: Option<Batches>,
    ) -> Result<Self> {
        Self::build(models, model, optim, table, data, None)
    }

    /// A fresh model using `table`, with its own dense parameters or, given an
    /// `owner`, stepping the owner's (a Hogwild worker).
    fn build(
        models: &Models,
        model: &ModelConfig,
        optim: &OptimConfig,
        table: Table,
        data: Option<Batches>,
        owner: Option<&FlatParams>,
    ) -> Result<Self> {
        let vars = nn::VarStore::new(Device::Cpu);
        let net = models.build(model, &vars.root())?;
        let dense = match owner {
            Some(owner) => FlatParams::adopt_shared(&vars, owner)?,
            None => FlatParams::adopt(&vars)?,
        };
        let dense_optimizer = DenseOptimizer::new(optim.dense, optim.dense_lr, &dense)?;
        Ok(Self {
            model: net,
            _vars: vars,
            dense,
            dense_optimizer,
            table,
            data,
            next: None,
            pending: None,
            position: 0,
        })
    }

    /// Forward and backward on `batch`; the gradients wait for
    /// [`CtrLearner::apply`]. Returns the batch's mean logloss.
    ///
    /// # Errors
    ///
    /// A tensor operation that fails, or rows that cannot be read (an owner that stopped,
    /// under sharded tables).
    pub fn backward_on(&mut self, batch: &Batch) -> Result<f64> {
        let prefetch = self.table.begin(&batch.sparse)?;
        self.backward_with(batch, prefetch)
    }

    /// Forward and backward on `batch`, whose rows `prefetch` is reading.
    fn backward_with(&mut self, batch: &Batch, prefetch: Prefetch) -> Result<f64> {
        let (embedded, pending) = self.table.gather(prefetch)?;
        let logits = self.model.forward(&batch.dense, &embedded)?;
        let loss = logits.f_binary_cross_entropy_with_logits::<Tensor>(
            &batch.labels,
            None,
            None,
            Reduction::Mean,
        )?;
        self.dense.zero_grad()?;
        loss.f_backward()?;
        self.pending = Some(pending);
        Ok(loss.f_double_value(&[])?)
    }

    /// Applies the gradients of the last [`CtrLearner::backward_on`]: a dense
    /// optimizer step and the sparse embedding update.
    ///
    /// # Errors
    ///
    /// Nothing computed to apply, a failed optimizer step, or rows that cannot be pushed to
    /// their owners.
    pub fn apply(&mut self) -> Result<()> {
        self.dense_optimizer.step(&self.dense)?;
        match self.pending.take() {
            Some(pending) => self.table.apply(pending),
            None => Ok(()),
        }
    }

    /// One whole step on `batch`. Returns the batch's mean logloss.
    ///
    /// # Errors
    ///
    /// As [`CtrLearner::backward_on`] and [`CtrLearner::apply`].
    pub fn train_on(&mut self, batch: &Batch) -> Result<f64> {
        let loss = self.backward_on(batch)?;
        self.apply()?;
        Ok(loss)
    }

    /// The next batch of the shard with its rows being read, and (if the
    /// table is sharded) the one after it, its rows read meanwhile. `None` at
    /// the end of the shard.
    fn next_batch(&mut self) -> Result<Option<(Batch, Prefetch)>> {
        let Some(data) = &self.data else {
            return Ok(None);
        };
        let current = match self.next.take() {
            Some(next) => next?,
            None => match data.recv() {
                Some(batch) => {
                    let batch = batch?;
                    let prefetch = self.table.begin(&batch.sparse)?;
                    (batch, prefetch)
                }
                None => return Ok(None),
            },
        };
        if self.table.prefetches() {
            if let Some(next) = data.try_recv() {
                self.next = Some(next.and_then(|batch| {
                    let prefetch = self.table.begin(&batch.sparse)?;
                    Ok((batch, prefetch))
                }));
            }
        }
        Ok(Some(current))
    }

    /// Click probabilities `[B]` for `batch` (no gradients).
    ///
    /// # Errors
    ///
    /// As [`CtrLearner::backward_on`].
    pub fn predict(&self, batch: &Batch) -> Result<Tensor> {
        tch::no_grad(|| {
            let embedded = self.table.lookup(&batch.sparse)?;
            Ok(self.model.forward(&batch.dense, &embedded)?.f_sigmoid()?)
        })
    }

    /// Predictions and labels over `batches`, as flat vectors.
    ///
    /// # Errors
    ///
    /// As [`CtrLearner::predict`].
    pub fn predict_all(&self, batches: &[Batch]) -> Result<(Vec<f32>, Vec<f32>)> {
        let mut predictions = Vec::new();
        let mut labels = Vec::new();
        for batch in batches {
            let p = self.predict(batch)?.f_to_kind(Kind::Float)?;
            predictions.extend(Vec::<f32>::try_from(&p)?);
            labels.extend(Vec::<f32>::try_from(&batch.labels)?);
        }
        Ok((predictions, labels))
    }

    /// The embedding table.
    pub fn table(&self) -> &Table {
        &self.table
    }
}

impl Learner for CtrLearner {
    type Error = Error;

    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>> {
        let Some((batch, prefetch)) = self.next_batch()? else {
            // The shard is done: its updates must be applied before anyone
            // evaluates.
            self.table.flush()?;
            return Ok(None);
        };
        self.position = batch.chunk + 1;
        let loss = self.backward_with(&batch, prefetch)?;
        if let Some(data) = &self.data {
            data.trained(&batch);
        }
        Ok(Some(StepOutcome {
            examples: batch.len(),
            loss,
        }))
    }

    fn apply_gradients(&mut self) -> Result<()> {
        self.apply()
    }

    fn dense_params(&self) -> &FlatParams {
        &self.dense
    }

    /// The pending embedding-row gradients (the shared table's), coalesced.
    fn take_shared_gradients(&mut self) -> Result<Option<SharedGradients>> {
        let Some(pending) = self.pending.take() else {
            return Ok(None);
        };
        let (ids, values) = self.table.coalesce(pending)?;
        Ok(Some(SharedGradients {
            ids,
            width: self.table.width() as usize,
            values,
        }))
    }

    fn apply_shared_gradients(&mut self, gradients: &SharedGradients) -> Result<()> {
        self.table.apply_rows(&gradients.ids, &gradients.values)
    }

    /// Loses the step's embedding update (see [`Table::lose`]).
    fn lose_shared_update(&mut self) -> Result<()> {
        match self.pending.take() {
            Some(pending) => self.table.lose(pending),
            None => Ok(()),
        }
    }

    /// Resets the dense optimizer; the shared table's state is everyone's and
    /// stays.
    fn reset_optimizer(&mut self) -> Result<()> {
        self.pending = None;
        self.dense_optimizer.reset()
    }

    /// Waits until its pushes to other processes' rows are applied.
    fn settle(&mut self) -> Result<()> {
        self.table.flush()
    }

    /// The dense optimizer's state and the chunks of the shard consumed.
    fn save_state(&self) -> Result<LearnerState> {
        Ok(LearnerState {
            arrays: self.dense_optimizer.state()?,
            position: self.position,
        })
    }

    fn restore_state(&mut self, state: &LearnerState) -> Result<()> {
        self.dense_optimizer.load_state(&state.arrays)?;
        self.position = state.position;
        Ok(())
    }

    /// Bad or unreadable data, or a shard of the embeddings that does not
    /// answer (another process gone or stuck: retrying would only wait out
    /// the timeout again), ends the trainer; anything else is retried.
    fn is_recoverable(error: &Error) -> bool {
        !matches!(
            error,
            Error::Parse { .. }
                | Error::Data { .. }
                | Error::Io { .. }
                | Error::Pipeline(_)
                | Error::Runtime(shadowsync_actors::Error::EmbeddingShard { .. })
        )
    }

    /// Sets the dense learning rate to `lr`, scaling the embeddings' by the same
    /// factor.
    fn set_learning_rate(&mut self, lr: f64) {
        let factor = lr / self.dense_optimizer.lr();
        self.dense_optimizer.set_lr(lr);
        self.table.set_lr(self.table.lr() * factor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OptimPreset;
    use crate::data::{Example, TableLayout};
    use crate::model::RowRules;

    #[test]
    fn an_embedding_shard_that_does_not_answer_ends_the_trainer() {
        let silent = Error::Runtime(shadowsync_actors::Error::EmbeddingShard {
            rank: 1,
            reason: "no answer for rows within 30s".into(),
        });
        assert!(!CtrLearner::is_recoverable(&silent));
        let other = Error::Runtime(shadowsync_actors::Error::Internal("a glitch"));
        assert!(CtrLearner::is_recoverable(&other));
    }

    #[test]
    fn taken_shared_gradients_update_the_table_as_the_learner_would() {
        let model = ModelConfig {
            kind: "lr".into(),
            ..ModelConfig::default()
        };
        let models = Models::default();
        let optim = OptimConfig::from(OptimPreset::DlrmReference); // plain SGD
        let layout = TableLayout::uniform(50).unwrap();
        let example = Example {
            label: 1.0,
            dense: [0.5; 13],
            sparse: std::array::from_fn(|i| (i % 3) as u32),
        };
        let batch = Batch::from_examples(&[example, example], &layout).unwrap();
        let config = crate::config::Config {
            optim: optim.clone(),
            ..Default::default()
        };
        let rule = RowRules::default().build(&config).unwrap();
        let lr = config.row_lr(&*rule);
        let table = Table::local(&layout, 1, rule, lr).unwrap();
        let learner = || CtrLearner::with_table(&models, &model, &optim, table.share(), None);
        let (mut own, mut taken) = (learner().unwrap(), learner().unwrap());
        let mut dense = vec![0f32; own.dense.numel()];
        own.dense.copy_to(&mut dense).unwrap();
        taken.dense.load_from(&dense).unwrap();
        // Same parameters, same batch: same gradients.
        own.backward_on(&batch).unwrap();
        taken.backward_on(&batch).unwrap();
        let rows = || table.arrays().unwrap().remove(0).1;
        let before = rows();
        own.apply().unwrap();
        let between = rows();
        let shared = taken.take_shared_gradients().unwrap().unwrap();
        // One row per field, each once (both examples look the same rows up).
        assert_eq!(shared.ids.len(), 26);
        assert!(shared.ids.windows(2).all(|w| w[0] < w[1]));
        taken.apply().unwrap();
        assert_eq!(rows(), between, "the taken gradients are not applied again");
        taken.apply_shared_gradients(&shared).unwrap();
        let after = rows();
        for ((b, m), a) in before.iter().zip(&between).zip(&after) {
            assert!(((a - m) - (m - b)).abs() < 1e-6, "{b} {m} {a}");
        }
    }
}
