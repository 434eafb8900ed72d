//! How a row is updated from its gradient: [`RowRule`], with [`Sgd`],
//! [`Adagrad`] and [`Ftrl`] built in.
//!
//! A rule may keep state beside the rows: up to [`MAX_STATE_ARRAYS`] arrays,
//! each as long as the rows (Adagrad's sums; FTRL's `z` and `n`), named in
//! checkpoints by [`RowRule::state_names`]. Tables store them, shard them
//! with the rows, merge and checkpoint them; the rule only sees one row's
//! slice of each.

use crate::{Error, Result, SharedValues};
use std::fmt::Debug;

/// The most state arrays a [`RowRule`] may keep.
pub const MAX_STATE_ARRAYS: usize = 4;

/// How a row is updated from its gradient (coalesced: one gradient per row
/// and push). Implement it for an optimizer of one's own; [`Sgd`],
/// [`Adagrad`] and [`Ftrl`] are built in.
pub trait RowRule: Send + Sync + Debug {
    /// The names of the state arrays kept beside the rows, each as long as
    /// the rows and starting at zero (none by default).
    fn state_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// Updates `row` (and its slice of each state array, in the order of
    /// [`RowRule::state_names`]) by `grad` at learning rate `lr`.
    fn update(&self, row: &mut [f32], state: &mut [&mut [f32]], grad: &[f32], lr: f32);

    /// The learning rate to use when none is set (0.05, the best of a grid
    /// for Adagrad on the built-in data).
    fn default_lr(&self) -> f64 {
        0.05
    }
}

/// An error unless `rule`'s state arrays can be stored: at most
/// [`MAX_STATE_ARRAYS`], named apart from each other and from `weight`.
///
/// # Errors
///
/// More than [`MAX_STATE_ARRAYS`] arrays, two of one name, or one named `weight`
/// ([`Error::Layout`]).
pub fn check_rule(rule: &dyn RowRule) -> Result<()> {
    let names = rule.state_names();
    let clash = names
        .iter()
        .enumerate()
        .find(|&(i, name)| *name == "weight" || names[..i].contains(name));
    if names.len() > MAX_STATE_ARRAYS || clash.is_some() {
        return Err(Error::Layout(format!(
            "the row rule {rule:?} keeps the state arrays {names:?}: at most \
             {MAX_STATE_ARRAYS}, each named apart from the others and from \"weight\""
        )));
    }
    Ok(())
}

/// Rows whose memory is requested ahead of their update by [`update_rows`]:
/// a table's rows lie far apart, and each one's load would otherwise wait
/// for memory in turn.
const PREFETCH_AHEAD: usize = 8;

/// Applies `rule` to the rows `rows` (each `width` values) of `weight` and of
/// each of the rule's `state` arrays (every array as long as `weight`), the
/// i-th by the i-th `width` values of `grads`: each on private copies of the
/// row's values, stored back whole, so other threads may read and write the
/// rows meanwhile (Hogwild). Rows past the end of `weight` are skipped (the
/// callers check them first).
pub fn update_rows(
    rule: &dyn RowRule,
    (weight, state): (SharedValues<'_>, &[SharedValues<'_>]),
    width: usize,
    rows: &[usize],
    grads: &[f32],
    lr: f32,
) {
    let arrays = state.len().min(MAX_STATE_ARRAYS);
    let span_of = |row: usize| row * width..(row + 1) * width;
    let prefetch = |row: usize| {
        weight.slice(span_of(row)).prefetch();
        state
            .iter()
            .for_each(|array| array.slice(span_of(row)).prefetch());
    };
    rows.iter()
        .take(PREFETCH_AHEAD)
        .for_each(|&row| prefetch(row));
    let mut values = vec![0f32; width];
    let mut copies: [Vec<f32>; MAX_STATE_ARRAYS] = Default::default();
    copies
        .iter_mut()
        .take(arrays)
        .for_each(|c| c.resize(width, 0.0));
    for (i, (&row, grad)) in rows.iter().zip(grads.chunks_exact(width)).enumerate() {
        if let Some(&ahead) = rows.get(i + PREFETCH_AHEAD) {
            prefetch(ahead);
        }
        let span = span_of(row);
        weight.slice(span.clone()).read_into(&mut values);
        let mut row_state: [&mut [f32]; MAX_STATE_ARRAYS] = Default::default();
        for ((slot, copy), array) in row_state.iter_mut().zip(copies.iter_mut()).zip(state) {
            array.slice(span.clone()).read_into(copy);
            *slot = copy;
        }
        rule.update(&mut values, &mut row_state[..arrays], grad, lr);
        weight.slice(span.clone()).write_from(&values);
        for (copy, array) in copies.iter().zip(state).take(arrays) {
            array.slice(span.clone()).write_from(copy);
        }
    }
}

/// `w −= lr·g`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sgd;

impl RowRule for Sgd {
    fn update(&self, row: &mut [f32], _state: &mut [&mut [f32]], grad: &[f32], lr: f32) {
        for (w, g) in row.iter_mut().zip(grad) {
            *w -= lr * g;
        }
    }
}

/// Element-wise Adagrad, as PyTorch's: `s += g²; w −= lr·g / (√s + ε)`.
#[derive(Debug, Clone, Copy)]
pub struct Adagrad {
    /// ε (PyTorch's default is 1e-10).
    pub eps: f32,
}

impl Default for Adagrad {
    fn default() -> Self {
        Self { eps: 1e-10 }
    }
}

impl RowRule for Adagrad {
    fn state_names(&self) -> &'static [&'static str] {
        &["sum"]
    }

    fn update(&self, row: &mut [f32], state: &mut [&mut [f32]], grad: &[f32], lr: f32) {
        let [sum] = state else { return };
        for ((w, s), g) in row.iter_mut().zip(sum.iter_mut()).zip(grad) {
            *s += g * g;
            *w -= lr * g / (s.sqrt() + self.eps);
        }
    }
}

/// FTRL-Proximal, per coordinate (McMahan et al., "Ad Click Prediction: a
/// View from the Trenches", KDD 2013, Algorithm 1), with α the learning
/// rate:
///
/// ```text
/// σ = (√(n + g²) − √n) / α;   z += g − σ·w;   n += g²
/// w = 0                                        if |z| ≤ λ₁
/// w = −(z − sign(z)·λ₁) / ((β + √n)/α + λ₂)    otherwise
/// ```
///
/// The paper starts every weight at 0. A row here starts at its initial
/// values `w₀` (embeddings must, to tell rows apart), so the proximal term
/// of the first step, `(β + √n₁)/α`, is centred at `w₀` as the paper's
/// objective prescribes: before a coordinate's first update `z` is set to
/// `−β·w₀/α`. With `λ₁ > 0`, a coordinate whose `z` (its gradients' sum,
/// less the proximal terms' pull) stays within `λ₁` is exactly 0, FTRL's
/// sparsity; a row started away from 0 is held near its start by `β/α`, so
/// that `λ₁` must outweigh `β·|w₀|/α` to zero it.
///
/// β, λ₁ and λ₂ are in the units of the gradients the rule is given. The
/// paper's are per example (its `n` grows by up to 1 an example); a batch's
/// mean gradient is 1/B of that, so that its β = 1 is β = 1/B here.
/// [`Ftrl::per_example`] converts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ftrl {
    /// β, the learning rate's smoothing.
    pub beta: f32,
    /// λ₁, the L1 strength.
    pub l1: f32,
    /// λ₂, the L2 strength.
    pub l2: f32,
}

impl Ftrl {
    /// The rule for gradients that are the mean over batches of `batch`
    /// examples, from β, λ₁ and λ₂ in per-example units, as the paper gives
    /// them: each divided by `batch`. Scaling every gradient by `B` scales
    /// `z`, `√n` and the denominator alike, so this is the paper's rule on
    /// the per-example gradients' sum.
    pub fn per_example(beta: f32, l1: f32, l2: f32, batch: usize) -> Self {
        let b = batch.max(1) as f32;
        Self {
            beta: beta / b,
            l1: l1 / b,
            l2: l2 / b,
        }
    }
}

impl Default for Ftrl {
    /// β = 1 and no regularization: the paper's setting before λ₁ and λ₂
    /// are tuned, for gradients of one example each (for batch means, see
    /// [`Ftrl::per_example`]).
    fn default() -> Self {
        Self {
            beta: 1.0,
            l1: 0.0,
            l2: 0.0,
        }
    }
}

impl RowRule for Ftrl {
    fn state_names(&self) -> &'static [&'static str] {
        &["ftrl_z", "ftrl_n"]
    }

    /// α = 0.1: with β = 1 per example, the best test NE of α ∈ {0.05, 0.1,
    /// 0.2} for logistic regression and DLRM on the built-in data.
    fn default_lr(&self) -> f64 {
        0.1
    }

    fn update(&self, row: &mut [f32], state: &mut [&mut [f32]], grad: &[f32], lr: f32) {
        let [z, n] = state else { return };
        let coordinates = row.iter_mut().zip(z.iter_mut()).zip(n.iter_mut()).zip(grad);
        for (((w, z), n), &g) in coordinates {
            if *n == 0.0 {
                *z = -self.beta * *w / lr;
            }
            let sigma = ((*n + g * g).sqrt() - n.sqrt()) / lr;
            *z += g - sigma * *w;
            *n += g * g;
            let denominator = (self.beta + n.sqrt()) / lr + self.l2;
            if z.abs() <= self.l1 {
                *w = 0.0;
            } else if denominator > 0.0 {
                *w = -(*z - z.signum() * self.l1) / denominator;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One coordinate's FTRL-Proximal iterate computed from the paper's
    /// objective itself (its Eq. 2 with λ₂, per coordinate), not from the
    /// incremental form: after gradients `g₁..g_t` at the iterates
    /// `w₁..w_t`, `w_{t+1}` minimizes
    /// `g₁:ₜ·w + ½·Σ σ_s (w − w_s)² + λ₁|w| + ½λ₂w²`, with `σ₁:ₛ = (β + √n_s)/α`,
    /// found by bisection on its subgradient.
    fn paper_iterate(f: Ftrl, alpha: f32, iterates: &[f64], grads: &[f64]) -> f64 {
        let (beta, l1, l2, alpha) = (f.beta as f64, f.l1 as f64, f.l2 as f64, alpha as f64);
        let mut sigmas = Vec::new();
        let mut previous = 0.0; // σ₁:₀ = 0: β lies in σ₁
        let mut n = 0.0;
        for g in grads {
            n += g * g;
            let total = (beta + f64::sqrt(n)) / alpha;
            sigmas.push(total - previous);
            previous = total;
        }
        let g_sum: f64 = grads.iter().sum();
        // The smooth part's derivative; 0 lies in [d − λ₁, d + λ₁] at w = 0.
        let smooth = |w: f64| {
            g_sum
                + sigmas
                    .iter()
                    .zip(iterates)
                    .map(|(s, ws)| s * (w - ws))
                    .sum::<f64>()
                + l2 * w
        };
        if smooth(0.0).abs() <= l1 {
            return 0.0;
        }
        let target = if smooth(0.0) > 0.0 { -l1 } else { l1 };
        // w < 0 when the slope at 0 exceeds λ₁ (then the root of smooth − λ₁),
        // w > 0 when it is below −λ₁ (the root of smooth + λ₁).
        let (mut lo, mut hi) = if smooth(0.0) > 0.0 {
            (-1e3, 0.0)
        } else {
            (0.0, 1e3)
        };
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if smooth(mid) + target > 0.0 {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        0.5 * (lo + hi)
    }

    #[test]
    fn ftrl_follows_the_papers_objective_from_any_start() {
        let grads = [0.8, -0.3, 0.05, 1.2, -0.9, 0.0, 0.4, -0.02, 0.6, -1.1];
        let settings = [
            Ftrl::default(),
            Ftrl {
                beta: 0.5,
                l1: 0.3,
                l2: 0.0,
            },
            Ftrl {
                beta: 1.0,
                l1: 0.05,
                l2: 2.0,
            },
            Ftrl {
                beta: 0.0,
                l1: 0.0,
                l2: 0.1,
            },
        ];
        for f in settings {
            for (alpha, start) in [(0.1f32, 0.0f32), (0.05, 0.37), (0.5, -1.5)] {
                let (mut w, mut z, mut n) = ([start], [0f32], [0f32]);
                let mut iterates = vec![start as f64];
                for t in 0..grads.len() {
                    f.update(&mut w, &mut [&mut z, &mut n], &[grads[t] as f32], alpha);
                    let expected = paper_iterate(f, alpha, &iterates, &grads[..=t]);
                    let error = (w[0] as f64 - expected).abs();
                    assert!(
                        error < 1e-4 * (1.0 + expected.abs()),
                        "{f:?} α {alpha} from {start}, step {t}: {} against the paper's {expected}",
                        w[0]
                    );
                    iterates.push(w[0] as f64);
                }
            }
        }
    }

    #[test]
    fn l1_keeps_coordinates_whose_gradients_disagree_exactly_zero() {
        let f = Ftrl {
            l1: 1.0,
            ..Ftrl::default()
        };
        let (mut w, mut z, mut n) = ([0f32, 0.0], [0f32; 2], [0f32; 2]);
        // The first coordinate's gradients keep agreeing, the second's cancel.
        for g in [[0.5, 0.5], [0.5, -0.5], [0.5, 0.5], [0.5, -0.5]] {
            f.update(&mut w, &mut [&mut z, &mut n], &g, 0.1);
        }
        assert!(w[0] < 0.0, "{w:?}");
        assert_eq!(w[1], 0.0);
    }

    #[test]
    fn rules_with_too_many_or_clashing_state_arrays_are_refused() {
        #[derive(Debug)]
        struct Clash;
        impl RowRule for Clash {
            fn state_names(&self) -> &'static [&'static str] {
                &["weight"]
            }
            fn update(&self, _: &mut [f32], _: &mut [&mut [f32]], _: &[f32], _: f32) {}
        }
        assert!(check_rule(&Clash).is_err());
        assert!(check_rule(&Ftrl::default()).is_ok());
        assert!(check_rule(&Sgd).is_ok());
    }
}
