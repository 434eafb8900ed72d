//! Your own sync rule in one file: a coordinate-wise trimmed mean, which
//! tolerates one bad replica in a group, used with DS-Sync's random schedule.
//!
//! Eight trainers fit least squares `y = w·x`; trainer 0 is broken (its labels
//! are garbage, as from a corrupted shard), and it pulls plain model averaging
//! away from the truth. The trimmed mean drops the highest and the lowest
//! value of every coordinate in each group of four before averaging, so the
//! healthy replicas stay near the truth. A rule is a [`SyncRule`]: here only
//! the group's reduction changes; it could also keep memory (see BMUF's
//! [`BlockMomentum`](shadowsync::runtime::sync::BlockMomentum)).
//!
//! ```sh
//! cargo run --release --example custom_rule
//! ```

use shadowsync::runtime::sync::{Rules, Schedule, SyncRule};
use shadowsync::runtime::{Cluster, ClusterConfig, FlatParams, Learner, StepOutcome};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

/// The mean of each coordinate over the group, without its `trim` highest
/// and `trim` lowest values.
#[derive(Debug)]
struct TrimmedMean {
    trim: usize,
}

impl SyncRule for TrimmedMean {
    fn reduce(&self, out: &mut [f32], contributions: &[&[f32]]) {
        let trim = self.trim.min(contributions.len().saturating_sub(1) / 2);
        let mut column = Vec::with_capacity(contributions.len());
        for (i, o) in out.iter_mut().enumerate() {
            column.clear();
            column.extend(contributions.iter().map(|c| c[i]));
            column.sort_by(f32::total_cmp);
            let kept = &column[trim..column.len() - trim];
            *o = kept.iter().sum::<f32>() / kept.len() as f32;
        }
    }
}

const DIM: i64 = 16;
const BATCH: i64 = 32;

/// Least squares on its own stream of data; a `broken` one learns from garbage.
struct LeastSquares {
    _vars: nn::VarStore,
    layer: nn::Linear,
    params: FlatParams,
    truth: Tensor,
    broken: bool,
    steps_left: u64,
}

impl LeastSquares {
    fn new(broken: bool) -> Result<Self, shadowsync::runtime::Error> {
        let vars = nn::VarStore::new(Device::Cpu);
        let no_bias = nn::LinearConfig {
            bias: false,
            ..Default::default()
        };
        let layer = nn::linear(vars.root() / "w", DIM, 1, no_bias);
        let params = FlatParams::adopt(&vars)?;
        let truth = Tensor::linspace(0.5, 2.0, DIM, (Kind::Float, Device::Cpu));
        Ok(Self {
            _vars: vars,
            layer,
            params,
            truth,
            broken,
            steps_left: 3_000,
        })
    }

    /// Distance of `dense` from the truth.
    fn error_of(&self, dense: &[f32]) -> f64 {
        let w = Tensor::from_slice(dense);
        (w - &self.truth).norm().double_value(&[])
    }
}

impl Learner for LeastSquares {
    type Error = tch::TchError;

    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>, tch::TchError> {
        if self.steps_left == 0 {
            return Ok(None);
        }
        self.steps_left -= 1;
        let x = Tensor::f_randn([BATCH, DIM], (Kind::Float, Device::Cpu))?;
        let y = if self.broken {
            x.matmul(&self.truth) * -5.0
        } else {
            x.matmul(&self.truth)
        };
        let loss = (self.layer.forward(&x).view(-1) - y)
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
        let step = self.params.grad().f_mul_scalar(0.02)?;
        tch::no_grad(|| self.params.values().shallow_clone().f_sub_(&step)).map(drop)
    }

    fn dense_params(&self) -> &FlatParams {
        &self.params
    }

    fn set_learning_rate(&mut self, _lr: f64) {}
}

/// Trains 8 trainers (trainer 0 broken) under `algorithm`; the healthy
/// replicas' mean distance from the truth.
fn healthy_error(algorithm: &str) -> anyhow::Result<f64> {
    tch::manual_seed(1);
    let learners = (0..8)
        .map(|t| LeastSquares::new(t == 0))
        .collect::<Result<Vec<_>, _>>()?;
    let mut initial = vec![0f32; learners[0].params.numel()];
    learners[0].params.copy_to(&mut initial)?;
    let before = learners[0].error_of(&initial);
    let mut config = ClusterConfig::default();
    config.sync.algorithm = algorithm.parse()?;
    config.sync.group_size = 4;
    config.sync.schedule = Schedule::Random;
    if let Some(loops) = config.sync.algorithm.loops_mut() {
        loops.min_steps = 1;
        loops.min_interval_ms = 1.0;
    }
    // The rule, by the name `sync.algorithm` gives it.
    config.rules = Rules::default().with("trimmed", |_| Ok(Box::new(TrimmedMean { trim: 1 })));
    let outcome = Cluster::start(config, learners)?.wait()?;
    let mut errors = Vec::new();
    for learner in &outcome.learners[1..] {
        let mut dense = vec![0f32; learner.params.numel()];
        learner.params.copy_to(&mut dense)?;
        errors.push(learner.error_of(&dense));
    }
    let syncs: u64 = outcome.report.trainer_stats.iter().map(|s| s.syncs).sum();
    let error = errors.iter().sum::<f64>() / errors.len() as f64;
    println!(
        "{algorithm:>15}: {syncs} background syncs; the healthy replicas' distance from \
         the truth: {before:.3} before training, {error:.4} after"
    );
    Ok(error)
}

fn main() -> anyhow::Result<()> {
    println!("8 trainers in random groups of 4; trainer 0 learns from garbage");
    let averaged = healthy_error("shadow-ma")?;
    let trimmed = healthy_error("shadow-trimmed")?;
    anyhow::ensure!(
        trimmed < averaged / 2.0,
        "the trimmed mean did not shield the healthy replicas"
    );
    Ok(())
}
