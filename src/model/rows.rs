//! Where a learner's embedding rows live: one table in this process, shared
//! Hogwild-style by its trainers ([`EmbeddingTable`]), or a table sharded over
//! the processes of a job ([`ShardedTable`], on the runtime's
//! [`shadowsync_actors::embedding`]).
//!
//! A step goes the same way on either: [`Table::begin`] starts reading the
//! batch's rows (for a sharded table, one request per owning process, possibly
//! while the previous batch computes), [`Table::gather`] gives them as an
//! autograd leaf, and [`Table::apply`] turns the leaf's gradient into the
//! rows' update (pushed to their owners, not waited for).

use super::audit::{AuditReport, RowAudit};
use super::local_table::coalesce;
use super::{EmbeddingTable, RowInit};
use crate::config::TrainConfig;
use crate::data::TableLayout;
use crate::{Error, Result};
use shadowsync_actors::embedding::{
    Fetch, Pushes, RowClient, RowRule, RowServer, RowSharding, RowStats, RowStore,
};
use shadowsync_actors::sync::{Codec, Fabric};
use std::sync::Arc;
use std::time::Duration;
use tch::Tensor;

/// A learner's embedding rows.
#[derive(Debug)]
pub enum Table {
    /// One table in this process.
    Local(EmbeddingTable),
    /// A table sharded over the processes.
    Sharded(ShardedTable),
}

/// A batch's rows being read.
#[derive(Debug)]
pub enum Prefetch {
    /// From the local table, at [`Table::gather`]: the batch's `[B, F]` rows.
    Local(Tensor),
    /// From the shards: the unique rows asked for, and where each of the
    /// batch's `[B, F]` lookups finds its row among them.
    Sharded {
        /// The batch's distinct row ids, sorted.
        ids: Vec<u64>,
        /// For each lookup, its row's place in `ids`.
        inverse: Tensor,
        /// The batch's `[B, F]`.
        shape: [i64; 2],
        /// The rows' fetch under way.
        fetch: Fetch,
    },
}

/// Rows gathered for a step, waiting for their gradient.
#[derive(Debug)]
pub struct Pending {
    /// The autograd leaf holding the rows' gradient after `backward()`.
    pub leaf: Tensor,
    rows: PendingRows,
}

#[derive(Debug)]
enum PendingRows {
    Local(Tensor),
    Sharded(Vec<u64>),
}

impl Table {
    /// A table of this process's own ([`EmbeddingTable::new`]), for trainers
    /// to share.
    ///
    /// # Errors
    ///
    /// As [`EmbeddingTable::new`].
    pub fn local(
        layout: &TableLayout,
        width: i64,
        rule: Box<dyn RowRule>,
        lr: f64,
    ) -> Result<Self> {
        Ok(Self::Local(EmbeddingTable::new(layout, width, rule, lr)?))
    }

    /// Another handle on the same rows, for another trainer or an evaluator.
    pub fn share(&self) -> Self {
        match self {
            Self::Local(table) => Self::Local(table.share()),
            Self::Sharded(table) => Self::Sharded(table.share()),
        }
    }

    /// Width of a row.
    pub fn width(&self) -> i64 {
        match self {
            Self::Local(table) => table.width(),
            Self::Sharded(table) => table.width,
        }
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Self::Local(table) => table.lr(),
            Self::Sharded(table) => table.lr,
        }
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, lr: f64) {
        match self {
            Self::Local(table) => table.set_lr(lr),
            Self::Sharded(table) => table.lr = lr,
        }
    }

    /// Whether the next batch's rows are worth reading while one computes.
    pub fn prefetches(&self) -> bool {
        matches!(self, Self::Sharded(table) if table.client.max_in_flight() > 1)
    }

    /// Starts reading the rows of a batch's `[B, F]` ids, to be trained on.
    ///
    /// # Errors
    ///
    /// Ids of another shape than `[B, F]`, or rows that cannot be fetched from their
    /// owners.
    pub fn begin(&mut self, sparse: &Tensor) -> Result<Prefetch> {
        match self {
            Self::Local(_) => Ok(Prefetch::Local(sparse.shallow_clone())),
            Self::Sharded(table) => {
                let (ids, inverse, shape) = unique(sparse)?;
                let fetch = table.client.begin(&ids)?;
                Ok(Prefetch::Sharded {
                    ids,
                    inverse,
                    shape,
                    fetch,
                })
            }
        }
    }

    /// The rows of `prefetch` as `[B, F, width]`, computed from a leaf that
    /// will hold their gradient.
    ///
    /// # Errors
    ///
    /// Rows that cannot be read (an owner that failed or stopped), or a tensor operation
    /// that fails.
    pub fn gather(&self, prefetch: Prefetch) -> Result<(Tensor, Pending)> {
        match (self, prefetch) {
            (Self::Local(table), Prefetch::Local(rows)) => {
                let leaf = table.lookup(&rows)?.f_set_requires_grad(true)?;
                let pending = Pending {
                    leaf: leaf.shallow_clone(),
                    rows: PendingRows::Local(rows),
                };
                Ok((leaf, pending))
            }
            (
                Self::Sharded(table),
                Prefetch::Sharded {
                    ids,
                    inverse,
                    shape,
                    fetch,
                },
            ) => {
                let rows = table.client.finish(fetch)?;
                let leaf = table
                    .rows_tensor(&rows, ids.len())?
                    .f_set_requires_grad(true)?;
                let embedded = expand(&leaf, &inverse, shape, table.width)?;
                let pending = Pending {
                    leaf,
                    rows: PendingRows::Sharded(ids),
                };
                Ok((embedded, pending))
            }
            _ => Err(mismatch()),
        }
    }

    /// Applies the gradient in `pending`'s leaf to its rows.
    ///
    /// # Errors
    ///
    /// As [`Table::apply_rows`]; a leaf without a gradient.
    pub fn apply(&mut self, pending: Pending) -> Result<()> {
        let grad = pending.leaf.grad();
        match (self, pending.rows) {
            (Self::Local(table), PendingRows::Local(rows)) => {
                tch::no_grad(|| table.apply(&rows, &grad))
            }
            (Self::Sharded(table), PendingRows::Sharded(ids)) => {
                let grad = Vec::<f32>::try_from(grad.f_contiguous()?.f_view(-1)?)?;
                table.push(&ids, &grad)
            }
            _ => Err(mismatch()),
        }
    }

    /// Loses `pending`'s update after the row audit recorded it, as a
    /// transport bug would (an injected `lose-push` fault): a sharded table
    /// still applies the rows this process keeps and loses those bound for
    /// the others; a table kept whole loses all of it.
    ///
    /// # Errors
    ///
    /// As [`Table::apply`].
    pub fn lose(&mut self, pending: Pending) -> Result<()> {
        let (ids, grads) = self.coalesce(pending)?;
        match self {
            Self::Local(table) => table.lose_rows(&ids, &grads),
            Self::Sharded(table) => table.push_losing_others(&ids, &grads),
        }
    }

    /// The gradient in `pending`'s leaf, coalesced: each row once, with the
    /// sum of its lookups' gradients (rows sorted by id).
    ///
    /// # Errors
    ///
    /// A leaf without a gradient, or a tensor operation that fails.
    pub fn coalesce(&self, pending: Pending) -> Result<(Vec<u64>, Vec<f32>)> {
        let grad = pending.leaf.grad().f_contiguous()?;
        match pending.rows {
            PendingRows::Local(rows) => {
                let ids = Vec::<i64>::try_from(rows.f_reshape(-1)?)?;
                let width = self.width() as usize;
                coalesce(&ids, &Vec::<f32>::try_from(grad.f_view(-1)?)?, width)
            }
            PendingRows::Sharded(ids) => Ok((ids, Vec::<f32>::try_from(grad.f_view(-1)?)?)),
        }
    }

    /// Applies `grads` (a row of values per id, each id once) to the rows
    /// `ids` with the table's optimizer: here, or pushed to their owners.
    ///
    /// # Errors
    ///
    /// Gradients that are not a row per id, an id outside the table, or an owner that
    /// stopped.
    pub fn apply_rows(&mut self, ids: &[u64], grads: &[f32]) -> Result<()> {
        match self {
            Self::Local(table) => table.apply_rows(ids, grads),
            Self::Sharded(table) => table.push(ids, grads),
        }
    }

    /// Waits until every update this handle sent is applied.
    ///
    /// # Errors
    ///
    /// A push that failed at its owner, or an owner that stopped or did not answer in time.
    pub fn flush(&mut self) -> Result<()> {
        match self {
            Self::Local(_) => Ok(()),
            Self::Sharded(table) => Ok(table.client.flush()?),
        }
    }

    /// Rows for `[B, F]` indices, as `[B, F, width]` (no gradient tracking).
    ///
    /// # Errors
    ///
    /// As [`Table::begin`] and [`Table::gather`].
    pub fn lookup(&self, sparse: &Tensor) -> Result<Tensor> {
        match self {
            Self::Local(table) => table.lookup(sparse),
            Self::Sharded(table) => {
                let (ids, inverse, shape) = unique(sparse)?;
                let rows = table.client.fetch(&ids)?;
                expand(
                    &table.rows_tensor(&rows, ids.len())?,
                    &inverse,
                    shape,
                    table.width,
                )
            }
        }
    }

    /// Bytes of the rows this process keeps and of their optimizer state: the
    /// whole table, or this process's shard.
    pub fn bytes(&self) -> u64 {
        match self {
            Self::Local(table) => table.bytes(),
            Self::Sharded(table) => table.server.with_store(|store| store.bytes()),
        }
    }

    /// The rows this process keeps and their optimizer state, by name: the
    /// whole table, or this process's shard.
    ///
    /// # Errors
    ///
    /// A state that cannot be read.
    pub fn arrays(&self) -> Result<Vec<(String, Vec<f32>)>> {
        match self {
            Self::Local(table) => table
                .state()?
                .into_iter()
                .map(|(name, t)| Ok((name.to_string(), Vec::<f32>::try_from(t.f_flatten(0, -1)?)?)))
                .collect(),
            Self::Sharded(table) => Ok(table.server.with_store(|store| {
                store
                    .arrays()
                    .into_iter()
                    .map(|(name, values)| (name.to_string(), values.to_vec()))
                    .collect()
            })),
        }
    }

    /// Audits every later update of the rows through any handle (see
    /// [`RowAudit`]).
    pub fn audit_with(&mut self, audit: Arc<RowAudit>) {
        match self {
            Self::Local(table) => table.audit_with(audit),
            Self::Sharded(table) => table.audit = Some(audit),
        }
    }

    /// Compares the rows this process keeps with their initial values minus
    /// every update of the job's, once every update is applied (a
    /// collective); `None` unless audited.
    ///
    /// # Errors
    ///
    /// As [`Table::flush`]; a fabric collective that fails.
    pub fn audit(&self, fabric: &dyn Fabric) -> Result<Option<AuditReport>> {
        match self {
            Self::Local(table) => table.audit(fabric),
            Self::Sharded(table) => table.audit(fabric),
        }
    }

    /// The pushes this process sent and its shard applied (none for a table
    /// of its own): a checkpoint keeps them beside [`Table::arrays`].
    pub fn pushes(&self) -> Pushes {
        match self {
            Self::Local(_) => Pushes::default(),
            Self::Sharded(table) => table.client.pushes(),
        }
    }

    /// Goes on counting pushes from a checkpoint's [`Table::pushes`].
    pub fn resume_pushes(&self, pushes: Pushes) {
        if let Self::Sharded(table) = self {
            table.client.resume_pushes(pushes);
        }
    }

    /// Overwrites what [`Table::arrays`] gives with `values(name)`.
    ///
    /// # Errors
    ///
    /// A name `values` does not know, or values of another length ([`Error::Checkpoint`]).
    pub fn load_arrays(&self, values: impl Fn(&str) -> Result<Vec<f32>>) -> Result<()> {
        match self {
            Self::Local(table) => table.load_state(values),
            Self::Sharded(table) => {
                let names: Vec<&'static str> = table
                    .server
                    .with_store(|store| store.arrays().into_iter().map(|(n, _)| n).collect());
                for name in names {
                    let values = values(name)?;
                    table.server.with_store(|store| store.load(name, &values))?;
                }
                Ok(())
            }
        }
    }
}

/// Rows read from one kind of table, handed to another: a bug.
fn mismatch() -> Error {
    Error::Runtime(shadowsync_actors::Error::Internal(
        "rows read from one kind of embedding table handed to another",
    ))
}

/// The unique ids of `[B, F]` `sparse` (sorted), where each lookup finds its
/// row among them, and the batch's shape.
fn unique(sparse: &Tensor) -> Result<(Vec<u64>, Tensor, [i64; 2])> {
    let size = sparse.size();
    let [b, f] = size[..] else {
        return Err(Error::Runtime(shadowsync_actors::Error::Layout(format!(
            "sparse ids of shape {size:?}, not [B, F]"
        ))));
    };
    let (ids, inverse, _) = sparse.f_view(-1)?.f_internal_unique2(true, true, false)?;
    let ids = Vec::<i64>::try_from(&ids)?
        .into_iter()
        .map(|id| id as u64)
        .collect();
    Ok((ids, inverse, [b, f]))
}

/// `[B, F, width]` rows from the unique `rows` and where each lookup finds its row.
fn expand(rows: &Tensor, inverse: &Tensor, [b, f]: [i64; 2], width: i64) -> Result<Tensor> {
    Ok(rows.f_index_select(0, inverse)?.f_view([b, f, width])?)
}

/// An embedding table sharded over the processes of a job: this process's
/// shard served by its [`RowServer`], the others' reached through the fabric.
#[derive(Debug)]
pub struct ShardedTable {
    server: Arc<RowServer>,
    client: RowClient,
    /// Which process keeps which row.
    sharding: RowSharding,
    width: i64,
    lr: f64,
    /// The rows' initial values.
    init: RowInit,
    /// Every push's sum, once audited.
    audit: Option<Arc<RowAudit>>,
}

impl ShardedTable {
    /// Starts serving this process's shard of a table of `layout`'s rows of
    /// `width` over `fabric`'s processes; its rows start as
    /// [`EmbeddingTable::new`]'s would ([`RowInit`]), whatever the number of
    /// processes. With a `codec`, the rows fetched and the gradients pushed
    /// cross between processes encoded.
    ///
    /// # Errors
    ///
    /// A rule whose state cannot be stored, or a fabric that cannot serve
    /// the rows.
    pub fn start(
        layout: &TableLayout,
        width: i64,
        (rule, lr): (Box<dyn RowRule>, f64),
        train: &TrainConfig,
        (fabric, codec): (&dyn Fabric, Option<Box<dyn Codec>>),
    ) -> Result<Self> {
        let sharding = RowSharding::new(layout.total_rows() as u64, fabric.processes())?;
        let init = RowInit::new(layout)?;
        let fill = |id: u64, row: &mut [f32]| init.fill(id, row);
        let store = RowStore::new(sharding, fabric.process(), width as usize, rule, fill)?;
        let server = Arc::new(RowServer::start(fabric.process(), store)?);
        let remote = fabric.serve_rows(server.addr(), codec)?;
        let client = RowClient::new(
            sharding,
            &server,
            remote,
            train.embedding_staleness,
            Duration::from_millis(train.embedding_timeout_ms),
            Arc::new(RowStats::default()),
        )?;
        Ok(Self {
            server,
            client,
            sharding,
            width,
            lr,
            init,
            audit: None,
        })
    }

    /// Another client of the same table (nothing in flight).
    fn share(&self) -> Self {
        Self {
            server: Arc::clone(&self.server),
            client: self.client.share(),
            sharding: self.sharding,
            width: self.width,
            lr: self.lr,
            init: self.init.clone(),
            audit: self.audit.clone(),
        }
    }

    /// Pushes `grads` (a row per id, each id once) to the rows' owners.
    fn push(&mut self, ids: &[u64], grads: &[f32]) -> Result<()> {
        let lr = self.lr as f32;
        if let Some(audit) = &self.audit {
            audit.record(ids, grads, lr)?;
        }
        Ok(self.client.push(ids, grads, lr)?)
    }

    /// Records a push in the audit and loses its rows that other processes
    /// keep (see [`Table::lose`]).
    fn push_losing_others(&mut self, ids: &[u64], grads: &[f32]) -> Result<()> {
        let lr = self.lr as f32;
        if let Some(audit) = &self.audit {
            audit.record(ids, grads, lr)?;
        }
        let w = self.width as usize;
        let process = self.server.rank();
        let (mut kept, mut kept_grads) = (Vec::new(), Vec::new());
        for (&id, row) in ids.iter().zip(grads.chunks(w)) {
            if self.sharding.owner(id) == process {
                kept.push(id);
                kept_grads.extend_from_slice(row);
            }
        }
        Ok(self.client.push(&kept, &kept_grads, lr)?)
    }

    /// Compares this process's shard with its initial rows minus every push
    /// of the job's (see [`RowAudit`]); `None` unless audited.
    fn audit(&self, fabric: &dyn Fabric) -> Result<Option<AuditReport>> {
        let Some(audit) = &self.audit else {
            return Ok(None);
        };
        // Summed before the shard is locked: a collective must not wait
        // with the rows that other processes may still read.
        let sums = audit.job_sums(fabric)?;
        Ok(Some(self.server.with_store(|store| {
            sums.check(&self.init, store.rows_by_id())
        })))
    }

    /// What this process's clients have moved and waited, and what its
    /// shard applied.
    pub fn traffic(&self) -> shadowsync_actors::embedding::RowTraffic {
        self.client.traffic()
    }

    fn rows_tensor(&self, rows: &[f32], count: usize) -> Result<Tensor> {
        Ok(Tensor::f_from_slice(rows)?.f_view([count as i64, self.width])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::model::RowRules;
    use shadowsync_actors::sync::InProcess;

    fn sharded(config: &Config) -> Table {
        let layout = config.table_layout().unwrap();
        let rule = RowRules::default().build(config).unwrap();
        let lr = config.row_lr(&*rule);
        let rule = (rule, lr);
        let table = ShardedTable::start(&layout, 4, rule, &config.train, (&InProcess, None));
        Table::Sharded(table.unwrap())
    }

    #[test]
    fn a_sharded_table_saves_and_restores_its_rows_and_every_state_array_exactly() {
        for (rule, arrays) in [("adagrad", 2), ("ftrl", 3)] {
            let mut config = Config::default();
            config.data.table_size = 50;
            config.optim.sparse = rule.into();
            let mut table = sharded(&config);
            // One step on a few rows, so that rows and state are not initial.
            let sparse = Tensor::from_slice(&[3i64, 3, 70, 1299]).view([2, 2]);
            let prefetch = table.begin(&sparse).unwrap();
            let (embedded, pending) = table.gather(prefetch).unwrap();
            embedded.sum(tch::Kind::Float).backward();
            table.apply(pending).unwrap();
            table.flush().unwrap();
            let saved = table.arrays().unwrap();
            assert_eq!(saved.len(), arrays, "{rule}: the rows and each state array");
            let restored = sharded(&config);
            assert_ne!(
                restored.arrays().unwrap(),
                saved,
                "{rule}: a fresh table differs"
            );
            restored
                .load_arrays(|name| Ok(saved.iter().find(|(n, _)| n == name).unwrap().1.clone()))
                .unwrap();
            assert_eq!(restored.arrays().unwrap(), saved, "{rule}");
            let e = restored.load_arrays(|_| Ok(vec![0.0; 3])).unwrap_err();
            assert!(e.to_string().contains("has 3 values to load"), "{e}");
        }
    }
}
