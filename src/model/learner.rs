//! A CTR model replica with its optimizers and its shard of the data.

use crate::config::{ModelConfig, OptimConfig};
use crate::data::{Batch, TableLayout};
use crate::model::{build, CtrModel, DenseOptimizer, EmbeddingTable};
use crate::{Error, Result};
use crossbeam_channel::Receiver;
use shadowsync_actors::{FlatParams, Learner, StepOutcome};
use tch::{nn, Device, Kind, Reduction, Tensor};

/// Model, dense optimizer, embedding table with its sparse optimizer, and data.
#[derive(Debug)]
pub struct CtrLearner {
    model: Box<dyn CtrModel>,
    // Owns the dense variables the model's modules refer to.
    _vars: nn::VarStore,
    dense: FlatParams,
    dense_optimizer: DenseOptimizer,
    table: EmbeddingTable,
    data: Option<Receiver<Result<Batch>>>,
    /// Rows looked up by the last forward pass and their leaf (holding the
    /// gradient), until [`CtrLearner::apply`].
    pending: Option<(Tensor, Tensor)>,
}

impl CtrLearner {
    /// A fresh model with its own embedding table; `data` is its shard (or `None`
    /// for evaluation only).
    pub fn new(
        model: &ModelConfig,
        optim: &OptimConfig,
        layout: &TableLayout,
        data: Option<Receiver<Result<Batch>>>,
    ) -> Result<Self> {
        let table = Self::new_table(model, optim, layout)?;
        Self::with_table(model, optim, table, data)
    }

    /// A fresh embedding table of the width `model` needs, for trainers to share.
    pub fn new_table(
        model: &ModelConfig,
        optim: &OptimConfig,
        layout: &TableLayout,
    ) -> Result<EmbeddingTable> {
        let vars = nn::VarStore::new(Device::Cpu);
        let width = build(model, &vars.root())?.embedding_width();
        EmbeddingTable::new(layout, width, optim.sparse, optim.sparse_lr)
    }

    /// One learner per data shard, all sharing one fresh embedding table
    /// (updated Hogwild-style): the replicas of a multi-trainer run.
    pub fn replicas(
        model: &ModelConfig,
        optim: &OptimConfig,
        layout: &TableLayout,
        shards: Vec<Receiver<Result<Batch>>>,
    ) -> Result<Vec<Self>> {
        let table = Self::new_table(model, optim, layout)?;
        shards
            .into_iter()
            .map(|shard| Self::with_table(model, optim, table.share(), Some(shard)))
            .collect()
    }

    /// A fresh model using `table` (for example one shared with other trainers).
    pub fn with_table(
        model: &ModelConfig,
        optim: &OptimConfig,
        table: EmbeddingTable,
        data: Option<Receiver<Result<Batch>>>,
    ) -> Result<Self> {
        let vars = nn::VarStore::new(Device::Cpu);
        let net = build(model, &vars.root())?;
        let dense = FlatParams::adopt(&vars)?;
        let dense_optimizer = DenseOptimizer::new(optim.dense, optim.dense_lr, &dense)?;
        Ok(Self {
            model: net,
            _vars: vars,
            dense,
            dense_optimizer,
            table,
            data,
            pending: None,
        })
    }

    /// Forward and backward on `batch`; the gradients wait for
    /// [`CtrLearner::apply`]. Returns the batch's mean logloss.
    pub fn backward_on(&mut self, batch: &Batch) -> Result<f64> {
        let embedded = self
            .table
            .lookup(&batch.sparse)?
            .f_set_requires_grad(true)?;
        let logits = self.model.forward(&batch.dense, &embedded)?;
        let loss = logits.f_binary_cross_entropy_with_logits::<Tensor>(
            &batch.labels,
            None,
            None,
            Reduction::Mean,
        )?;
        self.dense.zero_grad()?;
        loss.f_backward()?;
        self.pending = Some((batch.sparse.shallow_clone(), embedded));
        Ok(loss.f_double_value(&[])?)
    }

    /// Applies the gradients of the last [`CtrLearner::backward_on`]: a dense
    /// optimizer step and the sparse embedding update.
    pub fn apply(&mut self) -> Result<()> {
        self.dense_optimizer.step(&self.dense)?;
        if let Some((rows, embedded)) = self.pending.take() {
            tch::no_grad(|| self.table.apply(&rows, &embedded.grad()))?;
        }
        Ok(())
    }

    /// One whole step on `batch`. Returns the batch's mean logloss.
    pub fn train_on(&mut self, batch: &Batch) -> Result<f64> {
        let loss = self.backward_on(batch)?;
        self.apply()?;
        Ok(loss)
    }

    /// Click probabilities `[B]` for `batch` (no gradients).
    pub fn predict(&self, batch: &Batch) -> Result<Tensor> {
        tch::no_grad(|| {
            let embedded = self.table.lookup(&batch.sparse)?;
            Ok(self.model.forward(&batch.dense, &embedded)?.f_sigmoid()?)
        })
    }

    /// Predictions and labels over `batches`, as flat vectors.
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
    pub fn table(&self) -> &EmbeddingTable {
        &self.table
    }
}

impl Learner for CtrLearner {
    type Error = Error;

    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>> {
        let Some(data) = &self.data else {
            return Ok(None);
        };
        let Ok(batch) = data.recv() else {
            return Ok(None);
        };
        let batch = batch?;
        let loss = self.backward_on(&batch)?;
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

    /// Sets the dense learning rate to `lr`, scaling the embeddings' by the same
    /// factor.
    fn set_learning_rate(&mut self, lr: f64) {
        let factor = lr / self.dense_optimizer.lr();
        self.dense_optimizer.set_lr(lr);
        self.table.set_lr(self.table.lr() * factor);
    }
}
