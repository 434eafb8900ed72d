//! Optimizers of the dense parameters, each one pass of plain Rust over the
//! flat parameter and gradient buffers of [`FlatParams`] (vectorized by the
//! compiler for the baseline x86-64 instruction set, so it runs on any CPU).
//! The parameters are shared with the sync threads and Hogwild workers, so
//! the pass goes chunk by chunk through [`SharedValues`]; the optimizer's
//! own state is its own memory.

use crate::config::OptimizerKind;
use crate::{Error, Result};
use shadowsync_actors::embedding::{Adagrad, RowRule, Sgd};
use shadowsync_actors::{with_shared, FlatParams, SharedValues};

/// Dense optimizer state.
#[derive(Debug)]
pub enum DenseOptimizer {
    /// `w −= lr·g`.
    Sgd {
        /// Learning rate.
        lr: f64,
    },
    /// `s += g²; w −= lr·g/(√s + ε)`.
    Adagrad {
        /// Learning rate.
        lr: f64,
        /// Accumulated squared gradients.
        sum: Vec<f32>,
    },
    /// Adam with bias correction (β₁ = 0.9, β₂ = 0.999, ε = 1e-8).
    Adam {
        /// Learning rate.
        lr: f64,
        /// First moment.
        m: Vec<f32>,
        /// Second moment.
        v: Vec<f32>,
        /// Steps taken.
        t: i32,
    },
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPS: f64 = 1e-8;

impl DenseOptimizer {
    /// A fresh optimizer for `params`.
    ///
    /// # Errors
    ///
    /// None today; kept for optimizers whose state may fail to build.
    pub fn new(kind: OptimizerKind, lr: f64, params: &FlatParams) -> Result<Self> {
        let zeros = || vec![0f32; params.numel()];
        Ok(match kind {
            OptimizerKind::Sgd => Self::Sgd { lr },
            OptimizerKind::Adagrad => Self::Adagrad { lr, sum: zeros() },
            OptimizerKind::Adam => Self::Adam {
                lr,
                m: zeros(),
                v: zeros(),
                t: 0,
            },
        })
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, new_lr: f64) {
        match self {
            Self::Sgd { lr } | Self::Adagrad { lr, .. } | Self::Adam { lr, .. } => *lr = new_lr,
        }
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Self::Sgd { lr } | Self::Adagrad { lr, .. } | Self::Adam { lr, .. } => *lr,
        }
    }

    /// Forgets the accumulated state (Adagrad's sums, Adam's moments and step
    /// count), as if freshly built; the learning rate stays.
    ///
    /// # Errors
    ///
    /// A tensor operation that fails.
    pub fn reset(&mut self) -> Result<()> {
        match self {
            Self::Sgd { .. } => {}
            Self::Adagrad { sum, .. } => sum.fill(0.0),
            Self::Adam { m, v, t, .. } => {
                m.fill(0.0);
                v.fill(0.0);
                *t = 0;
            }
        }
        Ok(())
    }

    /// The accumulated state as named arrays (none for SGD).
    ///
    /// # Errors
    ///
    /// A state buffer that cannot be read.
    pub fn state(&self) -> Result<Vec<(String, Vec<f32>)>> {
        let array = |name: &str, values: &[f32]| (name.to_string(), values.to_vec());
        Ok(match self {
            Self::Sgd { .. } => Vec::new(),
            Self::Adagrad { sum, .. } => vec![array("sum", sum)],
            Self::Adam { m, v, t, .. } => vec![
                array("m", m),
                array("v", v),
                ("t".to_string(), vec![*t as f32]),
            ],
        })
    }

    /// Takes back a state from [`DenseOptimizer::state`]; an error naming the
    /// array that is missing or of the wrong size.
    ///
    /// # Errors
    ///
    /// An array that is missing or of the wrong size, named ([`Error::Config`] naming
    /// `resume`).
    pub fn load_state(&mut self, arrays: &[(String, Vec<f32>)]) -> Result<()> {
        let find = |name: &str, len: i64| -> Result<&Vec<f32>> {
            match arrays.iter().find(|(n, _)| n == name) {
                Some((_, values)) if values.len() as i64 == len => Ok(values),
                Some((_, values)) => Err(Error::config(
                    "resume",
                    format!(
                        "the dense optimizer's {name:?} has {} values in the checkpoint, {len} in the model",
                        values.len()
                    ),
                )),
                None => Err(Error::config(
                    "resume",
                    format!("the checkpoint has no dense optimizer state {name:?} (another optimizer?)"),
                )),
            }
        };
        let load = |target: &mut Vec<f32>, name: &str| -> Result<()> {
            let values = find(name, target.len() as i64)?;
            target.copy_from_slice(values);
            Ok(())
        };
        match self {
            Self::Sgd { .. } => {}
            Self::Adagrad { sum, .. } => load(sum, "sum")?,
            Self::Adam { m, v, t, .. } => {
                load(m, "m")?;
                load(v, "v")?;
                *t = find("t", 1)?[0] as i32;
            }
        }
        Ok(())
    }

    /// Applies the gradient in `params.grad()` to `params.values()`, in one
    /// pass over the buffers (no intermediate tensors). SGD and Adagrad are
    /// the embeddings' element-wise rules, over the whole buffer as one row.
    ///
    /// # Errors
    ///
    /// Buffers that are not contiguous CPU `f32` tensors.
    pub fn step(&mut self, params: &FlatParams) -> Result<()> {
        if let Self::Adam { t, .. } = self {
            *t += 1;
        }
        let adam = match self {
            Self::Adam { lr, t, .. } => Some(AdamStep::new(*lr, *t)),
            _ => None,
        };
        with_shared(params.grad(), |grads: SharedValues<'_>| {
            with_shared(params.values(), |w: SharedValues<'_>| {
                let mut grad = [0f32; SharedValues::CHUNK];
                w.update_chunks(|span, w| {
                    let g = &mut grad[..w.len()];
                    grads.slice(span.clone()).read_into(g);
                    match &mut *self {
                        Self::Sgd { lr } => Sgd.update(w, &mut [], g, *lr as f32),
                        Self::Adagrad { lr, sum } => {
                            Adagrad::default().update(w, &mut [&mut sum[span]], g, *lr as f32)
                        }
                        Self::Adam { m, v, .. } => {
                            if let Some(adam) = &adam {
                                adam.update(w, &mut m[span.clone()], &mut v[span], g);
                            }
                        }
                    }
                });
            })
        })??;
        Ok(())
    }
}

/// One Adam step's constants: `m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g²;
/// w −= lr·m̂ / (√v̂ + ε)` with the bias-corrected moments m̂ and v̂.
struct AdamStep {
    /// `lr / (1 − β₁ᵗ)`.
    scale: f32,
    /// `1 / (1 − β₂ᵗ)`.
    v_correction: f32,
}

impl AdamStep {
    fn new(lr: f64, t: i32) -> Self {
        Self {
            scale: (lr / (1.0 - BETA1.powi(t))) as f32,
            v_correction: (1.0 / (1.0 - BETA2.powi(t))) as f32,
        }
    }

    fn update(&self, w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32]) {
        let (b1, b2, eps) = (BETA1 as f32, BETA2 as f32, ADAM_EPS as f32);
        for (((w, m), v), g) in w.iter_mut().zip(m).zip(v).zip(g) {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *w -= self.scale * *m / ((*v * self.v_correction).sqrt() + eps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, Device, Kind, Tensor};

    /// A one-variable model `w` (3 values) with loss Σ c·w, so the gradient is `c`.
    fn setup() -> (nn::VarStore, Tensor, FlatParams) {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs
            .root()
            .var_copy("w", &Tensor::from_slice(&[1f32, -2.0, 0.5]));
        let params = FlatParams::adopt(&vs).unwrap();
        (vs, w, params)
    }

    fn run(kind: OptimizerKind, steps: usize) -> Vec<f32> {
        let (_vs, w, params) = setup();
        let c = Tensor::from_slice(&[0.5f32, -1.0, 2.0]);
        let mut opt = DenseOptimizer::new(kind, 0.1, &params).unwrap();
        for _ in 0..steps {
            params.zero_grad().unwrap();
            (&w * &c).sum(Kind::Float).backward();
            opt.step(&params).unwrap();
        }
        Vec::<f32>::try_from(params.values()).unwrap()
    }

    /// Independent scalar implementations of the three update rules.
    fn reference(kind: OptimizerKind, steps: usize) -> Vec<f32> {
        let (w0, c) = ([1f64, -2.0, 0.5], [0.5f64, -1.0, 2.0]);
        (0..3)
            .map(|i| {
                let (mut w, g, lr) = (w0[i], c[i], 0.1);
                let (mut s, mut m, mut v) = (0.0, 0.0, 0.0);
                for t in 1..=steps as i32 {
                    match kind {
                        OptimizerKind::Sgd => w -= lr * g,
                        OptimizerKind::Adagrad => {
                            s += g * g;
                            w -= lr * g / (s.sqrt() + 1e-10);
                        }
                        OptimizerKind::Adam => {
                            m = 0.9 * m + 0.1 * g;
                            v = 0.999 * v + 0.001 * g * g;
                            let mh = m / (1.0 - 0.9f64.powi(t));
                            let vh = v / (1.0 - 0.999f64.powi(t));
                            w -= lr * mh / (vh.sqrt() + 1e-8);
                        }
                    }
                }
                w as f32
            })
            .collect()
    }

    #[test]
    fn a_reset_optimizer_steps_as_a_fresh_one() {
        for kind in [OptimizerKind::Adagrad, OptimizerKind::Adam] {
            let (_vs, w, params) = setup();
            let c = Tensor::from_slice(&[0.5f32, -1.0, 2.0]);
            // Loss Σ c·w²: the gradient changes as w moves.
            let step = |opt: &mut DenseOptimizer, from: &[f32]| {
                params.load_from(from).unwrap();
                params.zero_grad().unwrap();
                (&w * &w * &c).sum(Kind::Float).backward();
                opt.step(&params).unwrap();
                Vec::<f32>::try_from(params.values()).unwrap()
            };
            let mut used = DenseOptimizer::new(kind, 0.1, &params).unwrap();
            let start = Vec::<f32>::try_from(params.values()).unwrap();
            let mut w1 = step(&mut used, &start);
            for _ in 0..3 {
                w1 = step(&mut used, &w1);
            }
            let mut fresh = DenseOptimizer::new(kind, 0.1, &params).unwrap();
            let from_fresh = step(&mut fresh, &w1);
            let mut kept = DenseOptimizer::new(kind, 0.1, &params).unwrap();
            let mut w2 = step(&mut kept, &start);
            for _ in 0..3 {
                w2 = step(&mut kept, &w2);
            }
            let with_state = step(&mut kept, &w1);
            assert_ne!(with_state, from_fresh, "{kind:?} keeps no state");
            used.reset().unwrap();
            let after_reset = step(&mut used, &w1);
            assert_eq!(after_reset, from_fresh, "{kind:?}");
        }
    }

    #[test]
    fn updates_match_scalar_reference() {
        for kind in [
            OptimizerKind::Sgd,
            OptimizerKind::Adagrad,
            OptimizerKind::Adam,
        ] {
            let got = run(kind, 3);
            let want = reference(kind, 3);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "{kind:?}: {got:?} vs {want:?}");
            }
        }
    }
}
