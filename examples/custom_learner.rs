//! Your own model on the runtime: a small MLP regression (not CTR) trained by
//! four trainers, each on its own stream of generated data, averaged in the
//! background by shadow model averaging. A learner is anything that can take
//! one SGD step and hand the runtime its dense parameters as one buffer
//! ([`FlatParams`]); the runtime does the rest.
//!
//! ```sh
//! cargo run --release --example custom_learner
//! ```

use shadowsync::runtime::{Cluster, ClusterConfig, FlatParams, Learner, StepOutcome};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

const INPUTS: i64 = 8;
const BATCH: i64 = 64;

/// The function to learn: `y = sin(3 x·a) + x₀ x₁`, seen through noise.
fn target(x: &Tensor) -> Tensor {
    let a = Tensor::linspace(-1.0, 1.0, INPUTS, (Kind::Float, Device::Cpu));
    (x.matmul(&a) * 3.0).sin() + x.select(1, 0) * x.select(1, 1)
}

/// An MLP 8-32-32-1 on plain SGD, with `steps` batches of its own data.
struct Regression {
    _vars: nn::VarStore,
    mlp: nn::Sequential,
    params: FlatParams,
    lr: f64,
    steps_left: u64,
}

impl Regression {
    fn new(steps: u64) -> Result<Self, shadowsync::runtime::Error> {
        let vars = nn::VarStore::new(Device::Cpu);
        let root = vars.root();
        let mlp = nn::seq()
            .add(nn::linear(&root / "l1", INPUTS, 32, Default::default()))
            .add_fn(|x| x.tanh())
            .add(nn::linear(&root / "l2", 32, 32, Default::default()))
            .add_fn(|x| x.tanh())
            .add(nn::linear(&root / "l3", 32, 1, Default::default()));
        // One contiguous buffer for every parameter: what the runtime syncs.
        let params = FlatParams::adopt(&vars)?;
        Ok(Self {
            _vars: vars,
            mlp,
            params,
            lr: 0.05,
            steps_left: steps,
        })
    }

    /// Mean squared error of `dense` on `x`, `y`.
    fn error_of(&self, dense: &[f32], x: &Tensor, y: &Tensor) -> anyhow::Result<f64> {
        self.params.load_from(dense)?;
        let prediction = tch::no_grad(|| self.mlp.forward(x)).view(-1);
        Ok((prediction - y)
            .square()
            .mean(Kind::Float)
            .double_value(&[]))
    }
}

impl Learner for Regression {
    type Error = tch::TchError;

    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>, tch::TchError> {
        if self.steps_left == 0 {
            return Ok(None);
        }
        self.steps_left -= 1;
        let x = Tensor::f_rand([BATCH, INPUTS], (Kind::Float, Device::Cpu))? * 2.0 - 1.0;
        let y = target(&x) + Tensor::f_randn([BATCH], (Kind::Float, Device::Cpu))? * 0.05;
        let loss = (self.mlp.forward(&x).view(-1) - y)
            .square()
            .mean(Kind::Float);
        self.params
            .zero_grad()
            .map_err(|e| tch::TchError::Kind(e.to_string()))?;
        loss.f_backward()?;
        Ok(Some(StepOutcome {
            examples: BATCH as usize,
            loss: loss.double_value(&[]),
        }))
    }

    fn apply_gradients(&mut self) -> Result<(), tch::TchError> {
        let step = self.params.grad().f_mul_scalar(self.lr)?;
        tch::no_grad(|| self.params.values().shallow_clone().f_sub_(&step)).map(drop)
    }

    fn dense_params(&self) -> &FlatParams {
        &self.params
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }
}

fn main() -> anyhow::Result<()> {
    tch::manual_seed(7);
    let trainers = 4;
    let learners = (0..trainers)
        .map(|_| Regression::new(3_000))
        .collect::<Result<Vec<_>, _>>()?;
    // Held-out data, and the error of the untrained model (every replica
    // starts from the first one's parameters).
    let x = Tensor::rand([4096, INPUTS], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
    let y = target(&x);
    let mut initial = vec![0f32; learners[0].params.numel()];
    learners[0].params.copy_to(&mut initial)?;
    let before = learners[0].error_of(&initial, &x, &y)?;

    let mut config = ClusterConfig::default();
    config.sync.algorithm = "shadow-ma".parse()?;
    let cluster = Cluster::start(config, learners)?;
    let outcome = cluster.wait()?;

    let after = outcome.learners[0].error_of(&outcome.model()?, &x, &y)?;
    let syncs: u64 = outcome.report.trainer_stats.iter().map(|s| s.syncs).sum();
    println!(
        "{trainers} trainers, {} examples, {syncs} background syncs",
        outcome.report.examples
    );
    println!("held-out mean squared error: {before:.4} before training, {after:.4} after");
    anyhow::ensure!(after < before / 4.0, "the model did not learn");
    Ok(())
}
