//! The three built-in architectures (registered by name in
//! [`Models`](super::Models)). Each maps dense features `[B, 13]` and its looked-up
//! embedding rows `[B, 26, width]` to click logits `[B]`.
//!
//! Linear layers are initialized as PyTorch's `nn.Linear` (weights and biases from
//! U(±1/√fan_in)), so a PyTorch model built the same way starts from the same
//! distribution.

use crate::config::ModelConfig;
use crate::data::{NUM_DENSE, NUM_SPARSE};
use crate::Result;
use tch::nn;
use tch::{Kind, Tensor};

/// The dense part of a CTR model: implement it for a model of one's own and
/// register it by name with [`Models::with`](super::Models::with). Its
/// variables live under the `nn::Path` it is built with; the runtime moves
/// them into one flat buffer, which is what is trained and synchronized.
pub trait CtrModel: Send + std::fmt::Debug {
    /// Width of an embedding row this model expects.
    fn embedding_width(&self) -> i64;
    /// Click logits `[B]`.
    ///
    /// # Errors
    ///
    /// A tensor operation that fails (a shape the model does not take).
    fn forward(&self, dense: &Tensor, embedded: &Tensor) -> Result<Tensor>;
}

/// A fully connected layer `x·Wᵀ + b` (one fused `addmm`), initialized as
/// PyTorch's `nn.Linear`.
#[derive(Debug)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(path: nn::Path, fan_in: i64, fan_out: i64) -> Self {
        let bound = 1.0 / (fan_in as f64).sqrt();
        let init = nn::Init::Uniform {
            lo: -bound,
            up: bound,
        };
        Self {
            weight: path.var("weight", &[fan_out, fan_in], init),
            bias: path.var("bias", &[fan_out], init),
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_linear(&self.weight, Some(&self.bias))?)
    }
}

/// A stack of linear layers with ReLU between them (and after the last one if
/// `relu_last`).
#[derive(Debug)]
struct Mlp {
    layers: Vec<Linear>,
    relu_last: bool,
}

impl Mlp {
    fn new(path: &nn::Path, input: i64, widths: &[i64], relu_last: bool) -> Self {
        let mut fan_in = input;
        let layers = widths
            .iter()
            .enumerate()
            .map(|(i, &width)| {
                let layer = Linear::new(path / format!("layer{i}"), fan_in, width);
                fan_in = width;
                layer
            })
            .collect();
        Self { layers, relu_last }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.shallow_clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x)?;
            if self.relu_last || i + 1 < self.layers.len() {
                // In place: addmm's backward does not need its output.
                x = x.f_relu_()?;
            }
        }
        Ok(x)
    }
}

/// Logistic regression: a weight per dense feature and per hashed token.
#[derive(Debug)]
pub struct LogisticRegression {
    dense: Linear,
}

impl LogisticRegression {
    /// A model with its dense weights under `root`.
    pub fn new(root: &nn::Path) -> Self {
        Self {
            dense: Linear::new(root / "dense", NUM_DENSE as i64, 1),
        }
    }
}

impl CtrModel for LogisticRegression {
    fn embedding_width(&self) -> i64 {
        1
    }

    fn forward(&self, dense: &Tensor, embedded: &Tensor) -> Result<Tensor> {
        let tokens = embedded.f_sum_dim_intlist([1, 2].as_slice(), false, Kind::Float)?;
        Ok(self.dense.forward(dense)?.f_view(-1)?.f_add(&tokens)?)
    }
}

/// DLRM: bottom MLP on dense features, pairwise dot products of the 27 vectors
/// (bottom output + 26 embeddings) without self-pairs, top MLP on both.
#[derive(Debug)]
pub struct Dlrm {
    dim: i64,
    bottom: Mlp,
    top: Mlp,
    /// Flat indices of the strictly lower triangle of the 27×27 product.
    pairs: Tensor,
}

impl Dlrm {
    /// DLRM with `config`'s embedding dimension and MLP widths.
    ///
    /// # Errors
    ///
    /// Widths that cannot make the model, or a tensor libtorch cannot make.
    pub fn new(root: &nn::Path, config: &ModelConfig) -> Result<Self> {
        let dim = config.embedding_dim;
        let dlrm = config.dlrm();
        let mut bottom_widths = dlrm.bottom_mlp;
        bottom_widths.push(dim);
        let vectors = 1 + NUM_SPARSE as i64;
        let tril = Tensor::f_tril_indices(vectors, vectors, -1, (Kind::Int64, tch::Device::Cpu))?;
        let pairs = tril.get(0).f_mul_scalar(vectors)?.f_add(&tril.get(1))?;
        let top_input = dim + pairs.size()[0];
        let mut top_widths = dlrm.top_mlp;
        top_widths.push(1);
        Ok(Self {
            dim,
            bottom: Mlp::new(&(root / "bottom"), NUM_DENSE as i64, &bottom_widths, true),
            top: Mlp::new(&(root / "top"), top_input, &top_widths, false),
            pairs,
        })
    }
}

impl CtrModel for Dlrm {
    fn embedding_width(&self) -> i64 {
        self.dim
    }

    fn forward(&self, dense: &Tensor, embedded: &Tensor) -> Result<Tensor> {
        let x = self.bottom(dense)?;
        let top_input = self.interact(&x, embedded)?;
        self.top(&top_input)
    }
}

/// The three stages of [`Dlrm`]'s forward pass, one at a time (a profile of a
/// step times them apart).
impl Dlrm {
    /// The bottom MLP's output `[B, dim]` for dense features `[B, 13]`.
    ///
    /// # Errors
    ///
    /// A tensor operation that fails (a shape the model does not take).
    pub fn bottom(&self, dense: &Tensor) -> Result<Tensor> {
        self.bottom.forward(dense)
    }

    /// The top MLP's input: `x` beside the pairwise dot products of the 27
    /// vectors (`x` and the 26 embeddings `[B, 26, dim]`).
    ///
    /// # Errors
    ///
    /// As [`Dlrm::bottom`].
    pub fn interact(&self, x: &Tensor, embedded: &Tensor) -> Result<Tensor> {
        let batch = x.size()[0];
        let vectors = Tensor::f_cat(&[x.f_unsqueeze(1)?, embedded.shallow_clone()], 1)?;
        let products = vectors.f_bmm(&vectors.f_transpose(1, 2)?)?;
        let interactions = products
            .f_view([batch, -1])?
            .f_index_select(1, &self.pairs)?;
        Ok(Tensor::f_cat(&[x.shallow_clone(), interactions], 1)?)
    }

    /// Click logits `[B]` from the top MLP's input.
    ///
    /// # Errors
    ///
    /// As [`Dlrm::bottom`].
    pub fn top(&self, top_input: &Tensor) -> Result<Tensor> {
        Ok(self.top.forward(top_input)?.f_view(-1)?)
    }
}

/// DeepFM: first-order weights, factorization-machine pairwise term and a deep
/// MLP over the concatenated embeddings. An embedding row is `[w, v₁..v_dim]`: its
/// first entry is the token's first-order weight, the rest its FM vector.
#[derive(Debug)]
pub struct DeepFm {
    dim: i64,
    dense_linear: Linear,
    deep: Mlp,
}

impl DeepFm {
    /// DeepFM with `config`'s embedding dimension and deep MLP widths.
    pub fn new(root: &nn::Path, config: &ModelConfig) -> Self {
        let dim = config.embedding_dim;
        let mut widths = config.deepfm().deep_mlp;
        widths.push(1);
        Self {
            dim,
            dense_linear: Linear::new(root / "linear", NUM_DENSE as i64, 1),
            deep: Mlp::new(
                &(root / "deep"),
                NUM_SPARSE as i64 * dim + NUM_DENSE as i64,
                &widths,
                false,
            ),
        }
    }
}

impl CtrModel for DeepFm {
    fn embedding_width(&self) -> i64 {
        1 + self.dim
    }

    fn forward(&self, dense: &Tensor, embedded: &Tensor) -> Result<Tensor> {
        let batch = dense.size()[0];
        let first_order = embedded
            .f_select(2, 0)?
            .f_sum_dim_intlist([1].as_slice(), false, Kind::Float)?
            .f_add(&self.dense_linear.forward(dense)?.f_view(-1)?)?;
        let v = embedded.f_narrow(2, 1, self.dim)?;
        let sum_then_square = v
            .f_sum_dim_intlist([1].as_slice(), false, Kind::Float)?
            .f_square()?;
        let square_then_sum =
            v.f_square()?
                .f_sum_dim_intlist([1].as_slice(), false, Kind::Float)?;
        let fm = sum_then_square
            .f_sub(&square_then_sum)?
            .f_sum_dim_intlist([1].as_slice(), false, Kind::Float)?
            .f_mul_scalar(0.5)?;
        let deep_input = Tensor::f_cat(&[v.f_reshape([batch, -1])?, dense.shallow_clone()], 1)?;
        let deep = self.deep.forward(&deep_input)?.f_view(-1)?;
        Ok(first_order.f_add(&fm)?.f_add(&deep)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeepFmSettings, DlrmSettings, ModelKind};
    use tch::Device;

    fn config(kind: &str) -> ModelConfig {
        let kind = match kind {
            "dlrm" => ModelKind::Dlrm(DlrmSettings {
                bottom_mlp: vec![8],
                top_mlp: vec![6],
            }),
            "deepfm" => ModelKind::DeepFm(DeepFmSettings { deep_mlp: vec![5] }),
            other => other.into(),
        };
        ModelConfig {
            kind,
            embedding_dim: 4,
            ..ModelConfig::default()
        }
    }

    #[test]
    fn every_model_maps_a_batch_to_logits() {
        for kind in ["lr", "dlrm", "deepfm"] {
            let vs = nn::VarStore::new(Device::Cpu);
            let model = crate::model::Models::default()
                .build(&config(kind), &vs.root())
                .unwrap();
            let w = model.embedding_width();
            let dense = Tensor::rand([3, 13], (Kind::Float, Device::Cpu));
            let emb = Tensor::rand([3, 26, w], (Kind::Float, Device::Cpu));
            assert_eq!(
                model.forward(&dense, &emb).unwrap().size(),
                vec![3],
                "{kind}"
            );
        }
    }

    #[test]
    fn dlrm_interaction_is_the_lower_triangle_of_dot_products() {
        let vs = nn::VarStore::new(Device::Cpu);
        let dlrm = Dlrm::new(&vs.root(), &config("dlrm")).unwrap();
        assert_eq!(dlrm.pairs.size(), vec![27 * 26 / 2]);
        // Independent check of the index set: all (i, j) with j < i, row-major.
        let mut expected = Vec::new();
        for i in 0..27i64 {
            for j in 0..i {
                expected.push(i * 27 + j);
            }
        }
        assert_eq!(Vec::<i64>::try_from(&dlrm.pairs).unwrap(), expected);
    }

    #[test]
    fn deepfm_second_order_term_equals_explicit_pair_sum() {
        // With zero first-order weights, zero dense weights and a zeroed deep MLP
        // output layer, DeepFM's logit is the FM term: Σ_{f<g} <v_f, v_g>.
        let vs = nn::VarStore::new(Device::Cpu);
        let model = DeepFm::new(&vs.root(), &config("deepfm"));
        tch::no_grad(|| {
            for (name, mut t) in vs.variables() {
                if name.starts_with("linear") || name.starts_with("deep.layer1") {
                    let _ = t.zero_();
                }
            }
        });
        let emb = Tensor::rand([1, 26, 5], (Kind::Float, Device::Cpu));
        let _ = tch::no_grad(|| emb.select(2, 0).zero_());
        let dense = Tensor::zeros([1, 13], (Kind::Float, Device::Cpu));
        let got = model.forward(&dense, &emb).unwrap().double_value(&[0]);
        let v = emb.narrow(2, 1, 4).get(0);
        let mut want = 0.0;
        for f in 0..26 {
            for g in (f + 1)..26 {
                want += v.get(f).dot(&v.get(g)).double_value(&[]);
            }
        }
        assert!(
            (got - want).abs() < 1e-3 * want.abs().max(1.0),
            "{got} vs {want}"
        );
    }
}
