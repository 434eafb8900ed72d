//! The fused embedding table of one process and its row optimizer (a table
//! sharded over processes is the runtime's `embedding` module's, behind
//! [`ShardedTable`](super::ShardedTable)).
//!
//! All 26 per-field tables live in one `[rows, width]` tensor (see
//! [`TableLayout`]), looked up once per batch. The table is not part of autograd:
//! the looked-up rows are a fresh leaf tensor, and after `backward()` its gradient
//! is the *row-sparse* gradient of the table (one row of values per looked-up
//! index), which [`EmbeddingTable::apply`] coalesces (one gradient per row) and
//! applies in one pass with the row rule of the sharded tables (SGD or
//! Adagrad). Rows no example touched are never read or written, which is what
//! lets many trainers share one table Hogwild-style.

use super::audit::{AuditReport, RowAudit};
use crate::data::TableLayout;
use crate::{Error, Result};
use shadowsync_actors::embedding::{check_rule, update_rows, RowRule};
use shadowsync_actors::sync::Fabric;
use shadowsync_actors::Error::Layout;
use shadowsync_actors::{with_shared, SharedValues};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tch::{Device, Kind, Tensor};

/// One fused embedding table with its optimizer.
#[derive(Debug)]
pub struct EmbeddingTable {
    weight: Tensor,
    width: i64,
    lr: f64,
    written: Arc<WrittenRows>,
    rule: Arc<dyn RowRule>,
    /// The rule's state arrays beside the weights (`[arrays, rows, width]`:
    /// Adagrad's sums; FTRL's z and n), if it keeps any.
    state: Option<Tensor>,
    /// The rows' initial values.
    init: RowInit,
    /// Every update's sum, once audited.
    audit: Option<Arc<RowAudit>>,
}

/// Which rows of a table were written since they were last taken: one bit per
/// row, set by every handle's updates once tracking is on (a replicated
/// table's merge across processes reads only these rows).
#[derive(Debug)]
pub(crate) struct WrittenRows {
    on: AtomicBool,
    words: Vec<AtomicU64>,
}

impl WrittenRows {
    fn new(rows: usize) -> Self {
        Self {
            on: AtomicBool::new(false),
            words: (0..rows.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Starts recording the rows written.
    pub(crate) fn track(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    fn mark(&self, rows: &[u64]) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        for &row in rows {
            if let Some(word) = self.words.get(row as usize / 64) {
                // Release: whoever takes the mark sees the write before it.
                word.fetch_or(1 << (row % 64), Ordering::Release);
            }
        }
    }

    /// The rows written since the last call, in order; their marks cleared.
    pub(crate) fn take(&self) -> Vec<usize> {
        let mut rows = Vec::new();
        for (w, word) in self.words.iter().enumerate() {
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                rows.push(w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
        rows
    }
}

/// The initial rows of a table: row `id` of a field of `n` rows drawn from
/// U(−√(1/n), √(1/n)) (as DLRM does), from a seed and the row's id alone, so
/// that a table sharded over any number of processes starts from the same
/// rows as one table.
#[derive(Debug, Clone)]
pub struct RowInit {
    seed: u64,
    /// Each field's end (exclusive, in fused row ids) and its rows' bound.
    fields: Vec<(u64, f32)>,
}

impl RowInit {
    /// The rows of `layout`, from a seed drawn from libtorch's generator.
    ///
    /// # Errors
    ///
    /// A table too large for libtorch to allocate.
    pub fn new(layout: &TableLayout) -> Result<Self> {
        let seed = Tensor::f_randint(i64::MAX, [1], (Kind::Int64, Device::Cpu))?
            .f_int64_value(&[0])? as u64;
        let mut end = 0u64;
        let fields = layout
            .sizes()
            .iter()
            .map(|&size| {
                end += u64::from(size);
                (end, (1.0 / f64::from(size)).sqrt() as f32)
            })
            .collect();
        Ok(Self { seed, fields })
    }

    /// Fills `row` with row `id`'s initial values.
    pub fn fill(&self, id: u64, row: &mut [f32]) {
        let bound = self
            .fields
            .iter()
            .find(|(end, _)| id < *end)
            .map_or(0.0, |&(_, bound)| bound);
        for (j, x) in row.iter_mut().enumerate() {
            *x = (uniform(self.seed, id, j as u64) * 2.0 - 1.0) * bound;
        }
    }
}

/// A uniform draw in [0, 1) from `seed`, a row id and a column (SplitMix64).
fn uniform(seed: u64, id: u64, column: u64) -> f32 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(id.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(column.wrapping_mul(0x94D0_49BB_1331_11EB))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 24) as f32
}

impl EmbeddingTable {
    /// A table of `layout.total_rows()` rows of `width`, initialized by
    /// [`RowInit`] from a seed drawn from libtorch's generator (so a run's
    /// `train.seed` fixes it, and a sharded table starts from the same rows),
    /// updated by `rule` at learning rate `lr`.
    ///
    /// # Errors
    ///
    /// A layout or width libtorch cannot allocate, or a rule whose state
    /// cannot be stored ([`check_rule`]).
    pub fn new(layout: &TableLayout, width: i64, rule: Box<dyn RowRule>, lr: f64) -> Result<Self> {
        check_rule(&*rule)?;
        let init = RowInit::new(layout)?;
        let rows = layout.total_rows();
        let weight = Tensor::f_empty([rows, width], (Kind::Float, Device::Cpu))?;
        // Filled a block of rows at a time: no second copy of the table.
        const BLOCK: i64 = 1 << 16;
        for start in (0..rows).step_by(BLOCK as usize) {
            let count = BLOCK.min(rows - start);
            let mut values = vec![0f32; (count * width) as usize];
            for (i, row) in values.chunks_mut(width as usize).enumerate() {
                init.fill(start as u64 + i as u64, row);
            }
            let block = Tensor::f_from_slice(&values)?.f_view([count, width])?;
            weight.f_narrow(0, start, count)?.f_copy_(&block)?;
        }
        let written = Arc::new(WrittenRows::new(layout.total_rows() as usize));
        let rule: Arc<dyn RowRule> = Arc::from(rule);
        let state = match rule.state_names().len() as i64 {
            0 => None,
            arrays => Some(Tensor::f_zeros(
                [arrays, rows, width],
                (Kind::Float, Device::Cpu),
            )?),
        };
        Ok(Self {
            weight,
            width,
            lr,
            written,
            rule,
            state,
            init,
            audit: None,
        })
    }

    /// Adds every later update through any handle to `audit`.
    pub fn audit_with(&mut self, audit: Arc<RowAudit>) {
        self.audit = Some(audit);
    }

    /// Runs `write` (a merge writing the table) alone, when audited (see
    /// [`EmbeddingTable::apply_rows`]); otherwise beside the trainers' updates.
    pub fn exclusive<T>(&self, write: impl FnOnce() -> T) -> T {
        match &self.audit {
            Some(audit) => audit.hold(write),
            None => write(),
        }
    }

    /// Compares the table with its initial rows minus every update of the
    /// job's (see [`RowAudit`]); `None` unless audited.
    ///
    /// # Errors
    ///
    /// A fabric collective that fails (as [`RowAudit::job_sums`]).
    pub fn audit(&self, fabric: &dyn Fabric) -> Result<Option<AuditReport>> {
        let Some(audit) = &self.audit else {
            return Ok(None);
        };
        let values = Vec::<f32>::try_from(self.weight.f_flatten(0, -1)?)?;
        let rows = values.chunks(self.width as usize);
        let rows = rows.enumerate().map(|(id, row)| (id as u64, row));
        Ok(Some(audit.job_sums(fabric)?.check(&self.init, rows)))
    }

    /// Another handle on the same table and optimizer state, for another
    /// trainer: updates through either land in the one table (Hogwild: lock-free,
    /// concurrent sparse updates). Nothing is copied.
    pub fn share(&self) -> Self {
        Self {
            weight: self.weight.shallow_clone(),
            width: self.width,
            lr: self.lr,
            written: Arc::clone(&self.written),
            rule: Arc::clone(&self.rule),
            state: self.state.as_ref().map(Tensor::shallow_clone),
            init: self.init.clone(),
            audit: self.audit.clone(),
        }
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// Width of a row.
    pub fn width(&self) -> i64 {
        self.width
    }

    /// The rows written through any handle, once tracked.
    pub(crate) fn written(&self) -> &Arc<WrittenRows> {
        &self.written
    }

    /// The table itself (`[rows, width]`).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Bytes of the table and its optimizer's state.
    pub fn bytes(&self) -> u64 {
        let values = self.weight.numel() + self.state.as_ref().map_or(0, Tensor::numel);
        (values * std::mem::size_of::<f32>()) as u64
    }

    /// The table and its optimizer's state arrays, by name (`weight`,
    /// Adagrad's `sum`, ...), each `[rows, width]` (views: writing them
    /// writes the table).
    ///
    /// # Errors
    ///
    /// A state tensor libtorch cannot view.
    pub fn state(&self) -> Result<Vec<(&'static str, Tensor)>> {
        let mut state = vec![("weight", self.weight.shallow_clone())];
        if let Some(arrays) = &self.state {
            for (i, &name) in self.rule.state_names().iter().enumerate() {
                state.push((name, arrays.f_select(0, i as i64)?));
            }
        }
        Ok(state)
    }

    /// Overwrites the table and its optimizer state with `values` of the names
    /// [`EmbeddingTable::state`] gives (every handle sees them).
    ///
    /// # Errors
    ///
    /// `values`' own error, or values of another length than the table's array
    /// ([`Error::Config`] naming `resume`).
    pub fn load_state(&self, values: impl Fn(&str) -> Result<Vec<f32>>) -> Result<()> {
        for (name, tensor) in self.state()? {
            let values = values(name)?;
            if values.len() as i64 != tensor.numel() as i64 {
                return Err(Error::config(
                    "resume",
                    format!(
                        "the embedding table's {name:?} has {} values in the checkpoint, {} in the model (another table size or width?)",
                        values.len(),
                        tensor.numel()
                    ),
                ));
            }
            let source = Tensor::f_from_slice(&values)?.f_view_as(&tensor)?;
            let mut target = tensor.shallow_clone();
            tch::no_grad(|| target.f_copy_(&source))?;
        }
        Ok(())
    }

    /// Rows for `[B, F]` indices, as `[B, F, width]` (no gradient tracking).
    ///
    /// # Errors
    ///
    /// Indices out of the table, or a tensor operation that fails.
    pub fn lookup(&self, rows: &Tensor) -> Result<Tensor> {
        let size = rows.size();
        let flat = self.weight.f_index_select(0, &rows.f_view(-1)?)?;
        Ok(flat.f_view([size[0], size[1], self.width])?)
    }

    /// Applies the gradient `grad` (`[B, F, width]`) of the rows `rows` (`[B, F]`):
    /// each row once, with the sum of its lookups' gradients (Adagrad is not
    /// linear in the gradient), in one pass over the batch's unique rows.
    ///
    /// # Errors
    ///
    /// Indices out of the table or a gradient of another shape.
    pub fn apply(&mut self, rows: &Tensor, grad: &Tensor) -> Result<()> {
        let ids = Vec::<i64>::try_from(rows.f_reshape(-1)?)?;
        let grad = Vec::<f32>::try_from(grad.f_reshape(-1)?)?;
        let (ids, summed) = coalesce(&ids, &grad, self.width as usize)?;
        self.apply_rows(&ids, &summed)
    }

    /// Applies coalesced gradients (a row of values per id, each id once) to
    /// the rows `ids` with the table's rule.
    ///
    /// # Errors
    ///
    /// Gradients that are not a row per id, or an id outside the table.
    pub fn apply_rows(&mut self, ids: &[u64], grads: &[f32]) -> Result<()> {
        match &self.audit {
            // Audited, the process's updates take turns: a race of Hogwild's
            // lock-free updates, harmless by design, could lose one, which
            // the audit would count.
            Some(audit) => {
                audit.record_while(ids, grads, self.lr as f32, || self.write_rows(ids, grads))
            }
            None => self.write_rows(ids, grads),
        }
    }

    /// Records coalesced gradients in the audit and writes nothing (see
    /// [`Table::lose`](super::Table::lose)).
    ///
    /// # Errors
    ///
    /// Gradients that are not a row per id.
    pub fn lose_rows(&self, ids: &[u64], grads: &[f32]) -> Result<()> {
        match &self.audit {
            Some(audit) => audit.record(ids, grads, self.lr as f32),
            None => Ok(()),
        }
    }

    fn write_rows(&self, ids: &[u64], grads: &[f32]) -> Result<()> {
        let (width, lr, rule) = (self.width as usize, self.lr as f32, &*self.rule);
        if grads.len() != ids.len() * width {
            return Err(Layout(format!(
                "{} gradient values for {} rows of width {width}",
                grads.len(),
                ids.len()
            ))
            .into());
        }
        // Other threads (Hogwild workers, the merge) read and write the rows
        // meanwhile: each row is updated on a copy and stored back.
        let update = |weight: SharedValues<'_>, state: &[SharedValues<'_>]| -> Result<()> {
            let table_rows = weight.len() / width;
            let rows = (ids.iter())
                .map(|&id| match usize::try_from(id) {
                    Ok(row) if row < table_rows => Ok(row),
                    _ => Err(Layout(format!(
                        "embedding row {id} is outside the table's {table_rows} rows"
                    ))),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            update_rows(rule, (weight, state), width, &rows, grads, lr);
            Ok(())
        };
        let written = with_shared(&self.weight, |weight| match &self.state {
            Some(state) => with_shared(state, |state| {
                let arrays: Vec<_> = state.chunks(weight.len()).collect();
                update(weight, &arrays)
            })?,
            None => update(weight, &[]),
        });
        // Marked once written, never before: a merge that takes the marks in
        // between would read the rows unchanged and clear their marks, and
        // the update would never cross to the other ranks.
        self.written.mark(ids);
        written?
    }
}

/// `grad` (a row of `width` values per id of `ids`) coalesced: each id once,
/// in increasing order, with the sum of its rows in the order they come.
pub(super) fn coalesce(ids: &[i64], grad: &[f32], width: usize) -> Result<(Vec<u64>, Vec<f32>)> {
    if grad.len() != ids.len() * width {
        return Err(Layout(format!(
            "{} gradient values for {} rows of width {width}",
            grad.len(),
            ids.len()
        ))
        .into());
    }
    let mut order: Vec<(i64, usize)> = ids.iter().copied().zip(0..).collect();
    order.sort_unstable();
    let (mut unique, mut summed) = (Vec::new(), Vec::new());
    for run in order.chunk_by(|a, b| a.0 == b.0) {
        let id = run[0].0;
        let id = u64::try_from(id).map_err(|_| Layout(format!("embedding row {id}")))?;
        unique.push(id);
        let at = summed.len();
        summed.resize(at + width, 0f32);
        for &(_, position) in run {
            let row = &grad[position * width..(position + 1) * width];
            summed[at..].iter_mut().zip(row).for_each(|(s, g)| *s += g);
        }
    }
    Ok((unique, summed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shadowsync_actors::embedding::{Adagrad, Sgd};

    fn table(rule: impl RowRule + 'static) -> EmbeddingTable {
        let layout = TableLayout::uniform(4).unwrap();
        let t = EmbeddingTable::new(&layout, 2, Box::new(rule), 0.5).unwrap();
        let _ = t.weight.shallow_clone().zero_();
        t
    }

    fn row(t: &EmbeddingTable, r: i64) -> Vec<f32> {
        Vec::<f32>::try_from(t.weight.get(r)).unwrap()
    }

    #[test]
    fn sgd_adds_every_occurrence() {
        let mut t = table(Sgd);
        let rows = Tensor::from_slice(&[3i64, 3, 7]).view([1, 3]);
        let grad = Tensor::from_slice(&[1f32, 2., 3., 4., 5., 6.]).view([1, 3, 2]);
        t.apply(&rows, &grad).unwrap();
        assert_eq!(row(&t, 3), vec![-0.5 * 4.0, -0.5 * 6.0]);
        assert_eq!(row(&t, 7), vec![-2.5, -3.0]);
        assert_eq!(row(&t, 0), vec![0.0, 0.0]);
    }

    #[test]
    fn adagrad_coalesces_then_scales_by_accumulated_squares() {
        let mut t = table(Adagrad::default());
        let rows = Tensor::from_slice(&[3i64, 3]).view([1, 2]);
        let grad = Tensor::from_slice(&[1f32, 2., 3., -4.]).view([1, 2, 2]);
        t.apply(&rows, &grad).unwrap();
        // Coalesced gradient (4, -2); sum = (16, 4); step = -lr * g / sqrt(sum).
        let r = row(&t, 3);
        assert!(
            (r[0] + 0.5).abs() < 1e-6 && (r[1] - 0.5).abs() < 1e-6,
            "{r:?}"
        );
        t.apply(&rows, &grad).unwrap();
        // sum = (32, 8): second step -0.5 * 4/√32, +0.5 * 2/√8.
        let r = row(&t, 3);
        let expected = [
            -0.5 - 0.5 * 4.0 / 32f32.sqrt(),
            0.5 + 0.5 * 2.0 / 8f32.sqrt(),
        ];
        assert!((r[0] - expected[0]).abs() < 1e-6 && (r[1] - expected[1]).abs() < 1e-6);
    }

    #[test]
    fn written_rows_are_recorded_once_tracked_and_taken_once() {
        let mut a = table(Sgd);
        let mut b = a.share();
        let grad = Tensor::from_slice(&[1f32, -1.]).view([1, 1, 2]);
        a.apply(&Tensor::from_slice(&[5i64]).view([1, 1]), &grad)
            .unwrap();
        assert!(a.written().take().is_empty(), "not tracked yet");
        a.written().track();
        a.apply(&Tensor::from_slice(&[70i64]).view([1, 1]), &grad)
            .unwrap();
        b.apply(&Tensor::from_slice(&[3i64]).view([1, 1]), &grad)
            .unwrap();
        b.apply(&Tensor::from_slice(&[70i64]).view([1, 1]), &grad)
            .unwrap();
        assert_eq!(b.written().take(), vec![3, 70]);
        assert!(a.written().take().is_empty());
    }

    /// SGD that stops inside its update until told to go on, so that a test
    /// can act while a row is being written.
    #[derive(Debug)]
    struct PausedSgd {
        inside: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
        go_on: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl RowRule for PausedSgd {
        fn update(&self, row: &mut [f32], state: &mut [&mut [f32]], grad: &[f32], lr: f32) {
            self.inside.lock().unwrap().send(()).unwrap();
            self.go_on.lock().unwrap().recv().unwrap();
            Sgd.update(row, state, grad, lr);
        }
    }

    /// The replicated merge takes the marks and reads the marked rows. Forced
    /// to take them while a row is being written, it must not get that row
    /// (it would read it unchanged and clear its mark, and the update would
    /// never cross to the other ranks): the row is marked once written, and
    /// the next take gets it with its new values.
    #[test]
    fn a_merge_taking_marks_during_a_write_gets_the_row_at_its_next_take() {
        let (inside, entered) = std::sync::mpsc::channel();
        let (go_on, paused) = std::sync::mpsc::channel();
        let mut writer = table(Sgd);
        writer.rule = Arc::new(PausedSgd {
            inside: inside.into(),
            go_on: paused.into(),
        });
        let merge = writer.share();
        merge.written().track();
        let write = std::thread::spawn(move || writer.apply_rows(&[9], &[1.0, -1.0]));
        entered.recv().unwrap();
        assert!(
            merge.written().take().is_empty(),
            "the row was marked before it was written"
        );
        go_on.send(()).unwrap();
        write.join().unwrap().unwrap();
        assert_eq!(merge.written().take(), vec![9]);
        assert_eq!(row(&merge, 9), vec![-0.5, 0.5]);
    }

    #[test]
    fn shared_handles_update_one_table() {
        let mut a = table(Sgd);
        let mut b = a.share();
        let rows = Tensor::from_slice(&[5i64]).view([1, 1]);
        let grad = Tensor::from_slice(&[1f32, -1.]).view([1, 1, 2]);
        a.apply(&rows, &grad).unwrap();
        b.apply(&rows, &grad).unwrap();
        assert_eq!(row(&a, 5), vec![-1.0, 1.0]);
        assert_eq!(row(&b, 5), vec![-1.0, 1.0]);
    }

    #[test]
    fn every_state_array_is_a_named_view_of_the_table() {
        let mut t = table(shadowsync_actors::embedding::Ftrl::default());
        t.apply_rows(&[3], &[1.0, -2.0]).unwrap();
        let state = t.state().unwrap();
        let names: Vec<&str> = state.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["weight", "ftrl_z", "ftrl_n"]);
        assert_eq!(Vec::<f32>::try_from(state[2].1.get(3)).unwrap(), [1.0, 4.0]);
        t.load_state(|name| Ok(vec![if name == "ftrl_n" { 9.0 } else { 0.0 }; 208]))
            .unwrap();
        assert_eq!(
            Vec::<f32>::try_from(t.state().unwrap()[2].1.get(0)).unwrap(),
            [9.0, 9.0]
        );
    }

    #[test]
    fn draws_are_uniform_in_the_unit_interval_and_differ_by_row_and_column() {
        let draws: Vec<f32> = (0..10_000).map(|i| uniform(7, i / 8, i % 8)).collect();
        assert!(draws.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = draws.iter().sum::<f32>() / draws.len() as f32;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        assert_ne!(uniform(7, 1, 0), uniform(7, 2, 0));
        assert_ne!(uniform(7, 1, 0), uniform(7, 1, 1));
        assert_ne!(uniform(7, 1, 0), uniform(8, 1, 0));
    }

    #[test]
    fn init_bound_follows_field_size() {
        let layout = TableLayout::uniform(100).unwrap();
        let t = EmbeddingTable::new(&layout, 3, Box::new(Sgd), 0.1).unwrap();
        let max = t.weight.abs().max().double_value(&[]);
        assert!(max <= 0.1 && max > 0.05, "{max}");
    }
}
