//! The audit of the embedding rows: an invariant that holds at any scale.
//!
//! Plain SGD on the rows commutes: whatever the order of the pushes and their
//! staleness, a row ends at its initial values minus the sum of every step
//! pushed to it (`lr × g`). With `train.audit_rows` on, every push is also
//! added to a [`RowAudit`] (per value, in `f64`), and at the end of the run
//! each process compares the rows it keeps (its shard, or its replica once
//! the merges are done) with `initial − Σ` over the whole job: a push
//! dropped, doubled or lost in a merge shows as a row that is off. The
//! bound, per value, is `1e-4 × (|initial| + Σ |lr × g|)`: what `f32`
//! rounding over that many additions cannot reach, while one lost step of a
//! row is a share `1/steps` of its movement.
//!
//! It costs two `f64` copies of the table per process and a lock per push
//! (a process's own table is then written one push or merge at a time: a
//! race of Hogwild's lock-free updates could lose one, harmless by design,
//! which the audit would count): it is for tests and small tables.

use super::RowInit;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::sync::Fabric;
use std::sync::Mutex;

/// How far a row may be from `initial − Σ`, relative to its movement.
const RELATIVE_BOUND: f64 = 1e-4;

/// Every step pushed to each value of a table, summed (shared by a
/// process's trainers).
#[derive(Debug)]
pub struct RowAudit {
    width: usize,
    /// Per value: Σ lr × g, then Σ |lr × g| (the second half).
    sums: Mutex<Vec<f64>>,
}

/// What the audit found.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AuditReport {
    /// Rows compared, over every process (each its shard, or its replica:
    /// a replicated table's rows once per process).
    pub rows: u64,
    /// Values outside the bound.
    pub off: u64,
    /// The largest distance from `initial − Σ`, over the bound's scale.
    pub max_relative_error: f64,
    /// The bound, relative to each value's movement (`1e-4`).
    pub bound: f64,
}

impl AuditReport {
    /// Whether every value is within the bound.
    pub fn holds(&self) -> bool {
        self.off == 0
    }

    /// This process's report combined with every other's (a collective): the
    /// rows and the values off summed, the largest error of all. Every
    /// process gets the job's report, so any process's mismatch fails the job.
    ///
    /// # Errors
    ///
    /// A fabric collective that fails.
    pub fn over_job(self, fabric: &dyn Fabric) -> Result<Self> {
        // The processes' errors, each in its own slot, as bits: a sum of
        // zeros and one value is that value.
        let mut counts = vec![0u64; 2 + fabric.processes()];
        counts[0] = self.rows;
        counts[1] = self.off;
        if let Some(slot) = counts.get_mut(2 + fabric.process()) {
            *slot = self.max_relative_error.to_bits();
        }
        fabric.sum(&mut counts)?;
        let errors = counts[2..].iter().map(|&bits| f64::from_bits(bits));
        Ok(Self {
            rows: counts[0],
            off: counts[1],
            max_relative_error: errors.fold(0.0, f64::max),
            bound: self.bound,
        })
    }
}

impl RowAudit {
    /// An audit of `rows` rows of `width` values.
    pub fn new(rows: usize, width: usize) -> Self {
        Self {
            width,
            sums: Mutex::new(vec![0.0; 2 * rows * width]),
        }
    }

    /// Adds a push: `grads` (a row of values per id of `ids`) at rate `lr`.
    ///
    /// # Errors
    ///
    /// A row outside the audited table ([`Error::Config`] naming `train.audit_rows`).
    pub fn record(&self, ids: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        self.record_while(ids, grads, lr, || Ok(()))
    }

    /// Runs `write` (a merge of other processes' changes) holding off every
    /// push recorded meanwhile.
    pub fn hold<T>(&self, write: impl FnOnce() -> T) -> T {
        let _sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        write()
    }

    /// [`RowAudit::record`], once `write` has applied the push, holding off
    /// every other push recorded meanwhile.
    ///
    /// # Errors
    ///
    /// As [`RowAudit::record`], and `write`'s own error.
    pub fn record_while(
        &self,
        ids: &[u64],
        grads: &[f32],
        lr: f32,
        write: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
        write()?;
        let values = sums.len() / 2;
        let (steps, movement) = sums.split_at_mut(values);
        for (&id, grad) in ids.iter().zip(grads.chunks_exact(self.width)) {
            let start = id as usize * self.width;
            if start + self.width > values {
                return Err(Error::config(
                    "train.audit_rows",
                    format!("row {id} is outside the audited table"),
                ));
            }
            for (j, &g) in grad.iter().enumerate() {
                let step = f64::from(lr) * f64::from(g);
                steps[start + j] += step;
                movement[start + j] += step.abs();
            }
        }
        Ok(())
    }

    /// The sums over every process's pushes (a collective).
    ///
    /// # Errors
    ///
    /// As [`Fabric::average`](shadowsync_actors::sync::Fabric::average) and
    /// [`Fabric::sum`](shadowsync_actors::sync::Fabric::sum).
    pub fn job_sums(&self, fabric: &dyn Fabric) -> Result<JobSums> {
        let mut job: Vec<f32> = {
            let sums = self.sums.lock().unwrap_or_else(|p| p.into_inner());
            sums.iter().map(|&s| s as f32).collect()
        };
        fabric.average(&mut job)?;
        Ok(JobSums {
            width: self.width,
            mean: job,
            processes: fabric.processes() as f64,
        })
    }
}

/// [`RowAudit`]'s sums over a job, to compare rows with.
#[derive(Debug)]
pub struct JobSums {
    width: usize,
    /// The processes' mean of the sums.
    mean: Vec<f32>,
    processes: f64,
}

impl JobSums {
    /// Compares `rows` (each row's global id and values: the rows this
    /// process keeps) with `initial − Σ`.
    pub fn check<'a>(
        &self,
        init: &RowInit,
        rows: impl Iterator<Item = (u64, &'a [f32])>,
    ) -> AuditReport {
        let (job, processes) = (&self.mean, self.processes);
        let values = job.len() / 2;
        let mut report = AuditReport {
            bound: RELATIVE_BOUND,
            ..AuditReport::default()
        };
        let mut initial = vec![0f32; self.width];
        for (id, row) in rows {
            init.fill(id, &mut initial);
            let start = id as usize * self.width;
            for (j, (&now, &was)) in row.iter().zip(&initial).enumerate() {
                let (step, movement) = match (job.get(start + j), job.get(values + start + j)) {
                    (Some(&s), Some(&m)) => (f64::from(s) * processes, f64::from(m) * processes),
                    _ => (0.0, 0.0),
                };
                let scale = f64::from(was).abs() + movement;
                let error = (f64::from(now) - (f64::from(was) - step)).abs() / scale.max(1e-12);
                report.max_relative_error = report.max_relative_error.max(error);
                report.off += u64::from(error > RELATIVE_BOUND);
            }
            report.rows += 1;
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::TableLayout;
    use shadowsync_actors::sync::InProcess;

    #[test]
    fn rows_at_initial_minus_every_step_hold_and_a_lost_or_doubled_step_shows() {
        let layout = TableLayout::uniform(10).unwrap();
        let init = RowInit::new(&layout).unwrap();
        let audit = RowAudit::new(layout.total_rows() as usize, 2);
        let mut table: Vec<Vec<f32>> = (0..layout.total_rows() as u64)
            .map(|id| {
                let mut row = vec![0f32; 2];
                init.fill(id, &mut row);
                row
            })
            .collect();
        // Row 7 is hot: many small steps; row 3 gets one.
        let push = |ids: &[u64], grads: &[f32], lr: f32, table: &mut Vec<Vec<f32>>| {
            audit.record(ids, grads, lr).unwrap();
            for (&id, g) in ids.iter().zip(grads.chunks(2)) {
                for (w, g) in table[id as usize].iter_mut().zip(g) {
                    *w -= lr * g;
                }
            }
        };
        for k in 0..2000 {
            push(&[7], &[0.01 * (k % 7) as f32, -0.02], 0.1, &mut table);
        }
        push(&[3, 7], &[0.5, -0.25, 0.125, 1.0], 0.2, &mut table);
        let sums = audit.job_sums(&InProcess).unwrap();
        let check = |table: &Vec<Vec<f32>>| {
            let rows = table.iter().enumerate().map(|(id, r)| (id as u64, &r[..]));
            sums.check(&init, rows)
        };
        let report = check(&table);
        assert!(report.holds(), "{report:?}");
        assert_eq!(report.rows, layout.total_rows() as u64);
        // A step of row 3 lost, then one of row 7 applied twice.
        table[3][0] += 0.2 * 0.5;
        assert_eq!(check(&table).off, 1);
        table[3][0] -= 0.2 * 0.5;
        table[7][1] -= 0.1 * -0.02;
        let doubled = check(&table);
        assert_eq!(doubled.off, 1, "{doubled:?}");
    }
}
