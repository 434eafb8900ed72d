//! Your own CTR model in one file: a Deep & Cross Network (Wang et al.,
//! "Deep & Cross Network for Ad Click Predictions", ADKDD 2017), registered
//! by name and trained by the whole `shadowsync` command line: any flag, any
//! data, any sync algorithm, checkpoints and MPI included.
//!
//! The model's input is `x₀`, the dense features beside every field's
//! embedding. Cross layers build feature crosses of rising degree at the
//! cost of a vector each, `x_{l+1} = x₀ · (x_l · w_l) + b_l + x_l`; a deep MLP
//! runs beside them; one linear layer reads both. It reads `model.embedding_dim`
//! and a section of its own, as the built-in models read theirs:
//!
//! ```toml
//! [model]
//! kind = "dcn"
//! [model.dcn]
//! cross_layers = 3
//! deep_mlp = [400, 400, 400]
//! ```
//!
//! ```sh
//! cargo run --release --example ctr_custom_model          # a small run of its own
//! cargo run --release --example ctr_custom_model -- train --model dcn --trainers 4 \
//!     --sync shadow-ma --train day_0.tsv --test day_1.tsv  # any flags, any data
//! cargo run --release --example ctr_custom_model -- train --config dcn.toml
//! ```

use serde::Deserialize;
use shadowsync::config::ModelConfig;
use shadowsync::data::{NUM_DENSE, NUM_SPARSE};
use shadowsync::model::CtrModel;
use shadowsync::Registry;
use std::ffi::OsString;
use std::process::ExitCode;
use tch::nn::{self, Module};
use tch::Tensor;

/// DCN's settings, `[model.dcn]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DcnSettings {
    /// Cross layers: the highest degree of a feature cross is one more.
    cross_layers: usize,
    /// The deep MLP's hidden widths.
    deep_mlp: Vec<i64>,
}

impl Default for DcnSettings {
    /// 3 cross layers (crosses up to degree 4), beside the deep widths
    /// DeepFM's default uses.
    fn default() -> Self {
        Self {
            cross_layers: 3,
            deep_mlp: vec![400, 400, 400],
        }
    }
}

/// A Deep & Cross Network over the dense features and the looked-up rows.
#[derive(Debug)]
struct Dcn {
    embedding_dim: i64,
    /// Each cross layer's weight vector and bias.
    cross: Vec<(Tensor, Tensor)>,
    deep: Vec<nn::Linear>,
    output: nn::Linear,
}

impl Dcn {
    fn new(root: &nn::Path, config: &ModelConfig) -> shadowsync::Result<Self> {
        let settings: DcnSettings = config.section("dcn")?;
        let width = NUM_DENSE as i64 + NUM_SPARSE as i64 * config.embedding_dim;
        let cross = (0..settings.cross_layers)
            .map(|l| {
                let path = root / format!("cross{l}");
                let w = path.var(
                    "w",
                    &[width],
                    nn::Init::Randn {
                        mean: 0.0,
                        stdev: 0.01,
                    },
                );
                (w, path.zeros("b", &[width]))
            })
            .collect();
        let mut fan_in = width;
        let mut deep = Vec::new();
        for (i, &hidden) in settings.deep_mlp.iter().enumerate() {
            deep.push(nn::linear(
                root / format!("deep{i}"),
                fan_in,
                hidden,
                Default::default(),
            ));
            fan_in = hidden;
        }
        let output = nn::linear(root / "output", width + fan_in, 1, Default::default());
        Ok(Self {
            embedding_dim: config.embedding_dim,
            cross,
            deep,
            output,
        })
    }
}

impl CtrModel for Dcn {
    fn embedding_width(&self) -> i64 {
        self.embedding_dim
    }

    fn forward(&self, dense: &Tensor, embedded: &Tensor) -> shadowsync::Result<Tensor> {
        let batch = dense.size()[0];
        let x0 = Tensor::f_cat(
            &[dense.shallow_clone(), embedded.f_reshape([batch, -1])?],
            1,
        )?;
        let mut x = x0.shallow_clone();
        for (w, b) in &self.cross {
            // x₀ · (x·w) + b + x: the scalar x·w per example scales x₀.
            let xw = x.f_matmul(&w.f_unsqueeze(1)?)?;
            x = x0.f_mul(&xw)?.f_add(b)?.f_add(&x)?;
        }
        let mut h = x0;
        for layer in &self.deep {
            h = layer.forward(&h).f_relu()?;
        }
        let both = Tensor::f_cat(&[x, h], 1)?;
        Ok(self.output.forward(&both).f_view(-1)?)
    }
}

fn main() -> ExitCode {
    let registry =
        Registry::default().model("dcn", |config, root| Ok(Box::new(Dcn::new(root, config)?)));
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if args.len() == 1 {
        // A run of its own: 2 trainers under shadow-ma on 100,000 built-in rows.
        let run = "train --model dcn --trainers 2 --sync shadow-ma --rows 100000 \
                   --test-rows 10000 --eval-every 0";
        args.extend(run.split(' ').map(OsString::from));
    }
    shadowsync::cli::main_with_args(registry, args)
}
