//! One rank's shard of a table: its rows, their optimizer state, and the rule
//! that turns a row's gradient into its update.

use super::rule::{check_rule, update_rows, RowRule};
use super::{PushCounts, RowSharding};
use crate::{Error, Result, SharedValues};

/// The rows of one shard, stored contiguously by local index, with their
/// rule's state arrays (one after another, each as long as the rows).
#[derive(Debug)]
pub struct RowStore {
    sharding: RowSharding,
    rank: usize,
    width: usize,
    weight: Vec<f32>,
    state: Vec<f32>,
    rule: Box<dyn RowRule>,
    /// The pushes applied, by the process that sent them.
    applied: PushCounts,
}

impl RowStore {
    /// The rows `sharding` gives `rank`, of `width` values each, `init(id,
    /// row)` filling each from its global id, updated by `rule`.
    ///
    /// # Errors
    ///
    /// A rank outside the sharding or rows of width 0 ([`Error::Layout`]), or a rule whose
    /// state cannot be stored ([`check_rule`](super::check_rule)).
    pub fn new(
        sharding: RowSharding,
        rank: usize,
        width: usize,
        rule: Box<dyn RowRule>,
        init: impl Fn(u64, &mut [f32]),
    ) -> Result<Self> {
        if rank >= sharding.ranks() || width == 0 {
            return Err(Error::Layout(format!(
                "an embedding shard for rank {rank} of {}, rows of width {width}",
                sharding.ranks()
            )));
        }
        check_rule(&*rule)?;
        let rows = sharding.rows_of(rank);
        let mut weight = vec![0f32; rows * width];
        for (local, row) in weight.chunks_mut(width).enumerate() {
            init(sharding.global(rank, local), row);
        }
        let state = vec![0f32; weight.len() * rule.state_names().len()];
        Ok(Self {
            sharding,
            rank,
            width,
            weight,
            state,
            rule,
            applied: PushCounts::default(),
        })
    }

    /// Width of a row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.weight.len() / self.width
    }

    /// Bytes of the rows and their rule's state held.
    pub fn bytes(&self) -> u64 {
        ((self.weight.len() + self.state.len()) * std::mem::size_of::<f32>()) as u64
    }

    /// The local index of `id`, if this shard owns it.
    fn local(&self, id: u64) -> Result<usize> {
        if id >= self.sharding.rows() || self.sharding.owner(id) != self.rank {
            return Err(Error::EmbeddingShard {
                rank: self.rank,
                reason: format!(
                    "row {id} is not in this shard (rows {} over {} ranks)",
                    self.sharding.rows(),
                    self.sharding.ranks()
                ),
            });
        }
        Ok(self.sharding.local(id))
    }

    /// Copies the rows `ids` (owned here) into `out`, one after another.
    ///
    /// # Errors
    ///
    /// An id this shard does not own ([`Error::EmbeddingShard`]), or an `out` of another
    /// length ([`Error::Layout`]).
    pub fn read(&self, ids: &[u64], out: &mut [f32]) -> Result<()> {
        let w = self.width;
        if out.len() != ids.len() * w {
            return Err(Error::Layout(format!(
                "{} values for {} rows of {w}",
                out.len(),
                ids.len()
            )));
        }
        for (&id, row) in ids.iter().zip(out.chunks_mut(w)) {
            let at = self.local(id)? * w;
            row.copy_from_slice(&self.weight[at..at + w]);
        }
        Ok(())
    }

    /// Applies `grads` (one row of values per id, in order) to the rows
    /// `ids`: one push of process `from`, counted in [`RowStore::applied`].
    ///
    /// # Errors
    ///
    /// An id this shard does not own ([`Error::EmbeddingShard`]), or gradients that are not
    /// a row per id ([`Error::Layout`]).
    pub fn apply(&mut self, from: usize, ids: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let w = self.width;
        if grads.len() != ids.len() * w {
            return Err(Error::Layout(format!(
                "{} gradient values for {} rows of {w}",
                grads.len(),
                ids.len()
            )));
        }
        // Every id checked before any row is written: a push applies whole or not at all.
        let locals = ids
            .iter()
            .map(|&id| self.local(id))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.weight.len();
        let weight = SharedValues::of(&mut self.weight);
        let state: Vec<_> = SharedValues::of(&mut self.state).chunks(rows).collect();
        update_rows(&*self.rule, (weight, &state), w, &locals, grads, lr);
        self.applied.record(from, ids.len());
        Ok(())
    }

    /// This shard's rows, each with its global id.
    pub fn rows_by_id(&self) -> impl Iterator<Item = (u64, &[f32])> + '_ {
        let (sharding, rank) = (self.sharding, self.rank);
        (self.weight.chunks(self.width).enumerate())
            .map(move |(local, row)| (sharding.global(rank, local), row))
    }

    /// The pushes applied so far, by sender.
    pub fn applied(&self) -> &PushCounts {
        &self.applied
    }

    /// Goes on counting the pushes applied from `applied` (a resumed run's).
    pub fn resume_applied(&mut self, applied: PushCounts) {
        self.applied = applied;
    }

    /// The rows (`weight`) and the rule's state arrays, by name.
    pub fn arrays(&self) -> Vec<(&'static str, &[f32])> {
        let mut arrays = vec![("weight", &self.weight[..])];
        let len = self.weight.len();
        let names = self.rule.state_names().iter().enumerate();
        arrays.extend(names.map(|(i, &name)| (name, &self.state[i * len..(i + 1) * len])));
        arrays
    }

    /// Overwrites the array `name` of [`RowStore::arrays`] with `values`.
    ///
    /// # Errors
    ///
    /// An unknown array name, or values of another length ([`Error::EmbeddingShard`]).
    pub fn load(&mut self, name: &str, values: &[f32]) -> Result<()> {
        let len = self.weight.len();
        let state = self.rule.state_names().iter().position(|n| *n == name);
        let target = match (name, state) {
            ("weight", _) => &mut self.weight[..],
            (_, Some(array)) => &mut self.state[array * len..(array + 1) * len],
            _ => {
                return Err(Error::EmbeddingShard {
                    rank: self.rank,
                    reason: format!("no array {name:?} to load"),
                })
            }
        };
        if values.len() != target.len() {
            return Err(Error::EmbeddingShard {
                rank: self.rank,
                reason: format!(
                    "{name:?} has {} values to load, the shard {}",
                    values.len(),
                    target.len()
                ),
            });
        }
        target.copy_from_slice(values);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedding::{Adagrad, Ftrl, Sgd};

    fn store(rule: Box<dyn RowRule>, rank: usize) -> RowStore {
        let sharding = RowSharding::new(10, 3).unwrap();
        RowStore::new(sharding, rank, 2, rule, |id, row| row.fill(id as f32)).unwrap()
    }

    #[test]
    fn a_shard_holds_the_rows_it_owns_initialized_from_their_ids() {
        let s = store(Box::new(Sgd), 1);
        assert_eq!(s.rows(), 3); // ids 1, 4, 7
        let mut out = vec![0.0; 4];
        s.read(&[7, 1], &mut out).unwrap();
        assert_eq!(out, [7.0, 7.0, 1.0, 1.0]);
        let e = s.read(&[2], &mut [0.0; 2]).unwrap_err().to_string();
        assert!(e.contains("row 2 is not in this shard"), "{e}");
        assert!(s.read(&[10], &mut [0.0; 2]).is_err());
    }

    #[test]
    fn sgd_and_adagrad_update_as_pytorch_does() {
        let mut s = store(Box::new(Sgd), 0);
        s.apply(0, &[3], &[1.0, -2.0], 0.5).unwrap();
        let mut out = vec![0.0; 2];
        s.read(&[3], &mut out).unwrap();
        assert_eq!(out, [2.5, 4.0]);

        let mut a = store(Box::new(Adagrad::default()), 0);
        a.apply(2, &[3], &[2.0, -4.0], 0.5).unwrap();
        a.apply(1, &[3, 0], &[2.0, 0.0, 1.0, 1.0], 0.5).unwrap();
        // Each push counted once, by its sender, with its rows.
        assert_eq!(a.applied().of(2), (1, 1));
        assert_eq!(a.applied().of(1), (1, 2));
        assert_eq!(a.applied().of(0), (0, 0));
        a.read(&[3], &mut out).unwrap();
        // s = (4, 16): −0.5·2/2, +0.5·4/4; then s = (8, 16): −0.5·2/√8, 0.
        let expected = [3.0 - 0.5 - 1.0 / 8f32.sqrt(), 3.0 + 0.5];
        assert!((out[0] - expected[0]).abs() < 1e-6 && (out[1] - expected[1]).abs() < 1e-6);
        assert_eq!(
            a.arrays()[1],
            ("sum", &[1.0, 1.0, 8.0, 16.0, 0.0, 0.0, 0.0, 0.0][..])
        );
    }

    #[test]
    fn every_state_array_of_a_rule_is_kept_named_and_loaded_apart() {
        let mut f = store(Box::new(Ftrl::default()), 1); // ids 1, 4, 7
        f.apply(0, &[4], &[1.0, -1.0], 0.1).unwrap();
        let arrays = f.arrays();
        let names: Vec<&str> = arrays.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["weight", "ftrl_z", "ftrl_n"]);
        // Only row 4 (local 1) moved; n holds g².
        assert_eq!(arrays[2].1, &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        f.load("ftrl_n", &[2.0; 6]).unwrap();
        assert_eq!(f.arrays()[2].1, &[2.0; 6]);
        assert_eq!(f.arrays()[1].1[..2], [0.0, 0.0]);
    }

    #[test]
    fn arrays_load_back_and_wrong_sizes_are_named() {
        let mut a = store(Box::new(Adagrad::default()), 2);
        a.load("sum", &[1.0; 6]).unwrap();
        assert_eq!(a.arrays()[1].1, &[1.0; 6]);
        let e = a.load("weight", &[0.0; 5]).unwrap_err().to_string();
        assert!(
            e.contains("\"weight\" has 5 values to load, the shard 6"),
            "{e}"
        );
        assert!(a
            .load("m", &[])
            .unwrap_err()
            .to_string()
            .contains("no array \"m\""));
    }
}
