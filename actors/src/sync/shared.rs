//! `sync-sgd`'s exchange of shared gradients (rows of an embedding table that
//! all trainers update, rather than replicated parameters).
//!
//! Each member of a group sends the others its coalesced row gradients;
//! every member sums each row's over the members that sent one and divides by
//! their number (the gradient of the group's whole batch), and applies the
//! rows whose id modulo the group size is its place in the group. So each row
//! is updated once per step, whatever the optimizer — Adagrad's accumulated
//! squares see the group's gradient, not each member's share of it — and the
//! work of applying is spread over the group.

use crate::{Error, Result, SharedGradients};
use std::collections::BTreeMap;

impl SharedGradients {
    /// As words for a payload: each id as two `f32` bit patterns (low, high),
    /// then the values.
    pub(crate) fn encode(&self) -> Vec<f32> {
        let mut words = Vec::with_capacity(2 * self.ids.len() + self.values.len());
        for &id in &self.ids {
            words.extend([f32::from_bits(id as u32), f32::from_bits((id >> 32) as u32)]);
        }
        words.extend_from_slice(&self.values);
        words
    }

    /// What [`SharedGradients::encode`] made of rows of `width`, sent by `from`.
    pub(crate) fn decode(words: &[f32], width: usize, from: usize) -> Result<Self> {
        let per_row = 2 + width;
        if words.len() % per_row != 0 {
            return Err(Error::Layout(format!(
                "trainer {from} sent {} words of shared gradients, not rows of {width}",
                words.len()
            )));
        }
        let rows = words.len() / per_row;
        let ids = words[..2 * rows]
            .chunks(2)
            .map(|w| u64::from(w[0].to_bits()) | (u64::from(w[1].to_bits()) << 32))
            .collect();
        Ok(Self {
            ids,
            width,
            values: words[2 * rows..].to_vec(),
        })
    }

    /// The rows the member at `place` of a group of `m` applies: those of
    /// `all` (every contributor's, this member's among them) whose id modulo
    /// `m` is `place`, each summed over the contributors and divided by their
    /// number; sorted by id.
    pub(crate) fn combine(all: &[SharedGradients], place: usize, m: usize) -> Self {
        let width = all.first().map_or(0, |g| g.width);
        let mut rows: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
        for gradients in all {
            let mine = gradients
                .ids
                .iter()
                .zip(gradients.values.chunks(width.max(1)));
            for (&id, grad) in mine.filter(|(&id, _)| id % m.max(1) as u64 == place as u64) {
                let row = rows.entry(id).or_insert_with(|| vec![0.0; width]);
                row.iter_mut().zip(grad).for_each(|(r, g)| *r += g);
            }
        }
        let scale = 1.0 / all.len().max(1) as f32;
        Self {
            ids: rows.keys().copied().collect(),
            width,
            values: rows.into_values().flatten().map(|v| v * scale).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradients(ids: &[u64], values: &[f32]) -> SharedGradients {
        SharedGradients {
            ids: ids.to_vec(),
            width: 2,
            values: values.to_vec(),
        }
    }

    #[test]
    fn gradients_cross_as_words_bit_for_bit() {
        let g = gradients(&[3, (7 << 32) + 5], &[1.5, -0.0, f32::MIN_POSITIVE, 2e30]);
        let back = SharedGradients::decode(&g.encode(), 2, 1).unwrap();
        assert_eq!(back, g);
        let e = SharedGradients::decode(&[1.0; 5], 2, 1).unwrap_err();
        assert!(e.to_string().contains("trainer 1 sent 5 words"), "{e}");
    }

    #[test]
    fn each_row_is_the_groups_mean_and_applied_by_one_member() {
        let a = gradients(&[1, 2, 4], &[1., 1., 2., 2., 4., 4.]);
        let b = gradients(&[2, 3, 4], &[6., 6., 3., 3., 0., 8.]);
        let all = [a, b];
        let first = SharedGradients::combine(&all, 0, 2);
        let second = SharedGradients::combine(&all, 1, 2);
        // Even ids at place 0, odd ones at place 1; each row's sum ÷ 2.
        assert_eq!(first, gradients(&[2, 4], &[4., 4., 2., 6.]));
        assert_eq!(second, gradients(&[1, 3], &[0.5, 0.5, 1.5, 1.5]));
    }
}
