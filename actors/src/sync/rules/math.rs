//! The averaging math of every synchronization algorithm, as pure functions of
//! flat `f32` buffers (docs/design.md §1).
//!
//! A sync round always has the same three steps:
//! 1. take a **snapshot** of the replica's dense parameters;
//! 2. combine it with the group (or the parameter server) into a **target**:
//!    * MA: `target = mean(group snapshots)`;
//!    * EASGD: `d = α (snapshot − c)`, `c += d` (on the server), `target = snapshot − d`;
//!    * BMUF: `avg = mean(group snapshots)`, `G = avg − w_g`,
//!      `Δ = η Δ + ζ (1 − η) G`, `w_g += Δ`, `target = w_g (+ η Δ with Nesterov)`;
//! 3. **write back** the target into the replica, which may have kept training
//!    since the snapshot: [`WriteBack::Overwrite`](crate::sync::WriteBack::Overwrite) (`w = target`, dropping the local
//!    steps taken meanwhile) or [`WriteBack::Delta`](crate::sync::WriteBack::Delta) (`w += target − snapshot`,
//!    keeping them).
//!
//! BMUF uses fairseq's form (bmuf.py), with the `(1 − η)` gain on the block
//! update: block momentum then filters the averaged updates without amplifying
//! them (a steady `G` moves `w_g` by `ζ G` per round). The plain form
//! (`Δ = η Δ + ζ G`, amplifying by `1/(1 − η)` = the group size with the rule of
//! thumb) needs long blocks: over shadow rounds of a few stale steps it
//! overshot (NE 0.78 against 0.74 for MA, 8 trainers, docs/results/runtime.md),
//! and so did `fr-bmuf:4`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `out = mean(inputs)`, all of one length (zeros for no input). One pass
/// over memory: block by block, the block of `out` stays in L1 while every
/// input's block is summed into it and scaled (summing whole inputs one after
/// another would stream `out` through memory once per input).
pub fn mean_into<'a>(out: &mut [f32], inputs: &[&'a [f32]]) {
    const BLOCK: usize = 2048;
    let Some((first, rest)) = inputs.split_first() else {
        return out.fill(0.0);
    };
    let scale = 1.0 / inputs.len() as f32;
    for (start, out) in (0..).step_by(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let span = start..start + out.len();
        let block = |input: &'a [f32]| input.get(span.clone()).unwrap_or_default();
        out.iter_mut().zip(block(first)).for_each(|(o, x)| *o = *x);
        for &input in rest {
            out.iter_mut().zip(block(input)).for_each(|(o, x)| *o += x);
        }
        out.iter_mut().for_each(|o| *o *= scale);
    }
}

/// EASGD's elastic step against the centre `center`: moves the centre by
/// `d = α (snapshot − c)` and returns the replica's target `snapshot − d`.
pub fn elastic(snapshot: &[f32], center: &mut [f32], alpha: f32) -> Vec<f32> {
    let step = |(&w, c)| elastic_value(w, c, alpha);
    snapshot.iter().zip(center.iter_mut()).map(step).collect()
}

/// [`elastic`] into `target` (as long as `snapshot`), not a new vector.
pub(crate) fn elastic_into(snapshot: &[f32], center: &mut [f32], alpha: f32, target: &mut [f32]) {
    for ((&w, c), t) in snapshot.iter().zip(center.iter_mut()).zip(target) {
        *t = elastic_value(w, c, alpha);
    }
}

/// [`elastic`] answering the replica's move `−d` (its target minus
/// `snapshot`), not its target: what a compressed step sends back, small
/// values that a codec keeps closely.
pub(crate) fn elastic_pull(snapshot: &[f32], center: &mut [f32], alpha: f32) -> Vec<f32> {
    let step = |(&w, c)| -centre_move(w, c, alpha);
    snapshot.iter().zip(center.iter_mut()).map(step).collect()
}

/// One value's elastic step: moves the centre `c` towards `w`, returns `w`'s target.
fn elastic_value(w: f32, c: &mut f32, alpha: f32) -> f32 {
    w - centre_move(w, c, alpha)
}

/// Moves the centre `c` by `d = α (w − c)` and returns `d`.
fn centre_move(w: f32, c: &mut f32, alpha: f32) -> f32 {
    let d = alpha * (w - *c);
    *c += d;
    d
}

/// `len` zeros in memory the OS has already handed over: each page is
/// written once now, at setup. `vec![0.0; len]` only maps pages, and a sync
/// buffer made that way was faulted in by its first round, on the sync
/// thread, while the trainers train (about 80 ms of the hub's time for 16
/// trainers' BMUF state and recovery copies on the E1 setting).
pub(crate) fn resident_zeros(len: usize) -> Vec<f32> {
    const PAGE: usize = 4096 / std::mem::size_of::<f32>();
    let mut zeros = vec![0f32; len];
    for page in zeros.chunks_mut(PAGE) {
        // Opaque to the optimizer, so the store of a zero over a zero stays.
        std::hint::black_box(page)[0] = 0.0;
    }
    zeros
}

/// BMUF's hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BmufParams {
    /// Block momentum η (rule of thumb `1 − 1/n`).
    pub eta: f32,
    /// Block learning rate ζ (rule of thumb 1).
    pub zeta: f32,
    /// Nesterov-style look-ahead: the replica restarts from `w_g + η Δ`.
    pub nesterov: bool,
}

impl BmufParams {
    /// The default block momentum over shadow rounds. Chosen on E11
    /// (docs/results/e11-bmuf-eta.md: N = 8 and 16, 3 seeds): over rounds
    /// every ~5–8 steps the rule of thumb 1 − 1/N was the worst η at both N
    /// (NE +0.026 and +0.052 against no sync), 0.75 was worse than no sync
    /// at N = 16, and 0.25 was best or tied at both; momentum this light
    /// leaves BMUF close to model averaging, which is what frequent rounds
    /// stand.
    pub const SHADOW_ETA: f32 = 0.25;

    /// docs/design.md §1: the rule of thumb for a group of `n`: ζ = 1, η = 1 − 1/n.
    pub fn for_group(n: usize) -> Self {
        Self {
            eta: 1.0 - 1.0 / n.max(1) as f32,
            zeta: 1.0,
            nesterov: false,
        }
    }
}

/// DiLoCo's outer optimizer (Douillard et al., 2023): Nesterov SGD on the
/// round's pseudo-gradient `G = w_g − avg`, the outer model minus the group's
/// mean (config section `[sync.diloco]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DilocoParams {
    /// The outer learning rate (the paper's 0.7).
    pub outer_lr: f64,
    /// The outer momentum μ (the paper's 0.9).
    pub momentum: f64,
    /// Nesterov's form of the momentum (the paper's), else heavy ball.
    pub nesterov: bool,
}

impl Default for DilocoParams {
    fn default() -> Self {
        Self {
            outer_lr: 0.7,
            momentum: 0.9,
            nesterov: true,
        }
    }
}

/// One replica's memory between rounds under an outer optimizer (BMUF's block
/// momentum, DiLoCo's Nesterov step): the outer model `w_g` and its momentum
/// (plain data, kept in checkpoints).
#[derive(Debug, Clone, PartialEq)]
pub struct OuterState {
    /// The outer (global) model `w_g`.
    pub global: Vec<f32>,
    /// Its momentum: BMUF's block momentum `Δ`, DiLoCo's outer momentum.
    pub momentum: Vec<f32>,
}

impl OuterState {
    /// Starts from the initial parameters `initial`, with no momentum.
    pub fn new(initial: &[f32]) -> Self {
        Self {
            global: initial.to_vec(),
            momentum: resident_zeros(initial.len()),
        }
    }

    /// BMUF: folds the group average of the parameters at `offset..offset +
    /// average.len()` into the state (`Δ = η Δ + ζ (1 − η) (avg − w_g)`,
    /// `w_g += Δ`) and writes the replica's target for them into `target`
    /// (`w_g`, or `w_g + η Δ` with Nesterov).
    pub fn bmuf(&mut self, params: BmufParams, offset: usize, average: &[f32], target: &mut [f32]) {
        let BmufParams {
            eta,
            zeta,
            nesterov,
        } = params;
        self.each(offset, average, target, |g, m, x| {
            *m = eta * *m + zeta * (1.0 - eta) * (x - *g);
            *g += *m;
            if nesterov {
                *g + eta * *m
            } else {
                *g
            }
        });
    }

    /// DiLoCo: an outer SGD step on the pseudo-gradient `G = w_g − avg` of
    /// the parameters at `offset..offset + average.len()` (`m = μ m + G`,
    /// `w_g −= lr (G + μ m)` with Nesterov, `w_g −= lr m` without), as
    /// PyTorch's SGD takes it, and writes `w_g` into `target`.
    pub fn diloco(
        &mut self,
        params: DilocoParams,
        offset: usize,
        average: &[f32],
        target: &mut [f32],
    ) {
        let (outer_lr, mu) = (params.outer_lr as f32, params.momentum as f32);
        let nesterov = params.nesterov;
        self.each(offset, average, target, |g, m, x| {
            let pseudo = *g - x;
            *m = mu * *m + pseudo;
            *g -= outer_lr * if nesterov { pseudo + mu * *m } else { *m };
            *g
        });
    }

    /// Runs `step(w_g, momentum, avg)` on each value of the span, writing what
    /// it returns into `target`. A span past the state's end writes nothing
    /// (the runtime only hands over blocks of the replica's own length).
    fn each(
        &mut self,
        offset: usize,
        average: &[f32],
        target: &mut [f32],
        step: impl Fn(&mut f32, &mut f32, f32) -> f32,
    ) {
        let span = offset..offset.saturating_add(average.len());
        let global = self.global.get_mut(span.clone()).unwrap_or_default();
        let momentum = self.momentum.get_mut(span).unwrap_or_default();
        global
            .iter_mut()
            .zip(momentum)
            .zip(average)
            .zip(target)
            .for_each(|(((g, m), &x), t)| *t = step(g, m, x));
    }
}

/// An outer optimizer's step over a round's group mean: folds the mean at
/// `offset..offset + average.len()` into `state` and writes the replica's
/// target into `target` ([`Outer`](crate::sync::Outer)'s rounds).
pub trait OuterStep: Copy + Send + fmt::Debug {
    /// One round's step over one span.
    fn step(self, state: &mut OuterState, offset: usize, average: &[f32], target: &mut [f32]);
}

impl OuterStep for BmufParams {
    fn step(self, state: &mut OuterState, offset: usize, average: &[f32], target: &mut [f32]) {
        state.bmuf(self, offset, average, target);
    }
}

impl OuterStep for DilocoParams {
    fn step(self, state: &mut OuterState, offset: usize, average: &[f32], target: &mut [f32]) {
        state.diloco(self, offset, average, target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hogwild::WriteBack;

    // Golden numbers worked by hand for two replicas of two parameters:
    // snapshots a = (1, 2), b = (3, -2); the replica a has since moved to (1.5, 2).

    #[test]
    fn model_averaging_overwrite_and_delta() {
        let (a, b) = ([1.0f32, 2.0], [3.0f32, -2.0]);
        let mut avg = [0.0; 2];
        mean_into(&mut avg, &[&a, &b]);
        assert_eq!(avg, [2.0, 0.0]);
        let mut replica = [1.5f32, 2.0];
        WriteBack::Overwrite.apply(crate::SharedValues::of(&mut replica), &avg, &a);
        assert_eq!(replica, [2.0, 0.0]);
        let mut replica = [1.5f32, 2.0];
        WriteBack::Delta.apply(crate::SharedValues::of(&mut replica), &avg, &a);
        assert_eq!(replica, [2.5, 0.0]); // keeps its +0.5 local step
    }

    #[test]
    fn the_blocked_mean_is_the_plain_one_over_block_edges() {
        let len = 5000; // two whole blocks and a partial one
        let inputs: Vec<Vec<f32>> = (0..3)
            .map(|k| (0..len).map(|i| ((i * 7 + k * 13) as f32).sin()).collect())
            .collect();
        let views: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f32::NAN; len];
        mean_into(&mut out, &views);
        for (i, o) in out.iter().enumerate() {
            let plain = (inputs[0][i] + inputs[1][i] + inputs[2][i]) * (1.0 / 3.0);
            assert_eq!(o.to_bits(), plain.to_bits(), "at {i}");
        }
        mean_into(&mut out, &[]);
        assert!(out.iter().all(|&o| o == 0.0));
    }

    #[test]
    fn easgd_moves_replica_and_centre_towards_each_other() {
        let mut center = [0.0f32, 4.0];
        let target = elastic(&[1.0, 2.0], &mut center, 0.25);
        // d = 0.25 * ((1,2) - (0,4)) = (0.25, -0.5)
        assert_eq!(center, [0.25, 3.5]);
        assert_eq!(target, [0.75, 2.5]);
        let (mut again, mut into) = ([0.0f32, 4.0], [f32::NAN; 2]);
        elastic_into(&[1.0, 2.0], &mut again, 0.25, &mut into);
        assert_eq!((again, into), (center, [0.75, 2.5]));
        // The pull is the replica's move, target − snapshot.
        let mut pulled = [0.0f32, 4.0];
        let pull = elastic_pull(&[1.0, 2.0], &mut pulled, 0.25);
        assert_eq!((pulled, pull), (center, vec![-0.25, 0.5]));
        let mut replica = [1.5f32, 2.0];
        WriteBack::Delta.apply(crate::SharedValues::of(&mut replica), &target, &[1.0, 2.0]);
        assert_eq!(replica, [1.25, 2.5]);
    }

    #[test]
    fn bmuf_block_momentum_over_two_rounds() {
        let params = BmufParams {
            eta: 0.5,
            zeta: 1.0,
            nesterov: false,
        };
        let mut state = OuterState::new(&[0.0, 1.0]);
        // Round 1: G = (2,0)-(0,1) = (2,-1); Δ = 0.5*(2,-1) = (1,-0.5); w_g = (1,0.5).
        let mut x = [0.0; 2];
        state.bmuf(params, 0, &[2.0, 0.0], &mut x);
        assert_eq!(x, [1.0, 0.5]);
        // Round 2: avg (3,0): G = (2,-0.5); Δ = 0.5*(1,-0.5) + 0.5*(2,-0.5) = (1.5,-0.5);
        // w_g = (2.5,0).
        // Block by block, as a round calls it: the same numbers.
        state.bmuf(params, 1, &[0.0], &mut x[1..]);
        state.bmuf(params, 0, &[3.0], &mut x[..1]);
        assert_eq!(x, [2.5, 0.0]);
        assert_eq!(state.momentum, [1.5, -0.5]);
        let mut nesterov = OuterState::new(&[0.0, 1.0]);
        let look_ahead = BmufParams {
            nesterov: true,
            ..params
        };
        // w_g = (1,0.5) after round 1, plus η Δ = (0.5,-0.25).
        nesterov.bmuf(look_ahead, 0, &[2.0, 0.0], &mut x);
        assert_eq!(x, [1.5, 0.25]);
        assert_eq!(nesterov.global, [1.0, 0.5]);
        // A steady G moves w_g by ζ G per round once the momentum has built up.
        let mut steady = OuterState::new(&[0.0]);
        let mut avg = 0.0f32;
        for _ in 0..60 {
            avg = steady.global[0] + 1.0;
            steady.bmuf(params, 0, &[avg], &mut [0.0]);
        }
        assert!(
            (steady.global[0] - avg).abs() < 1e-3,
            "{:?} vs {avg}",
            steady.global
        );
    }

    #[test]
    fn diloco_takes_pytorchs_nesterov_step_on_the_pseudo_gradient() {
        let params = DilocoParams::default();
        let mut state = OuterState::new(&[1.0]);
        let mut x = [0.0f32];
        // Round 1: G = 1 − 0.5 = 0.5; m = 0.5; w_g = 1 − 0.7 (0.5 + 0.9·0.5) = 0.335.
        state.diloco(params, 0, &[0.5], &mut x);
        assert!((x[0] - 0.335).abs() < 1e-6, "{x:?}");
        // Round 2: G = 0.335 − 0.2 = 0.135; m = 0.9·0.5 + 0.135 = 0.585;
        // w_g = 0.335 − 0.7 (0.135 + 0.9·0.585) = −0.12805.
        state.diloco(params, 0, &[0.2], &mut x);
        assert!((x[0] + 0.12805).abs() < 1e-6, "{x:?}");
        assert!((state.momentum[0] - 0.585).abs() < 1e-6);
        // Heavy ball: w_g −= lr m.
        let heavy = DilocoParams {
            nesterov: false,
            ..params
        };
        let mut plain = OuterState::new(&[1.0]);
        plain.diloco(heavy, 0, &[0.5], &mut x);
        assert!((x[0] - 0.65).abs() < 1e-6, "{x:?}");
    }

    #[test]
    fn diloco_with_unit_rate_and_no_momentum_is_model_averaging() {
        let params = DilocoParams {
            outer_lr: 1.0,
            momentum: 0.0,
            nesterov: true,
        };
        let mut state = OuterState::new(&[3.0, -1.0, 0.5]);
        let mut target = [0.0f32; 3];
        for average in [[1.0, 2.0, 3.0], [-4.0, 0.25, 8.0]] {
            state.diloco(params, 0, &average, &mut target);
            assert_eq!(target, average);
        }
    }

    #[test]
    fn bmuf_rule_of_thumb() {
        let p = BmufParams::for_group(4);
        assert_eq!((p.eta, p.zeta, p.nesterov), (0.75, 1.0, false));
    }
}
