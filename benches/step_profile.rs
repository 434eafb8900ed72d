//! Where a training step's time goes, in shadowsync and in PyTorch's eager
//! loop, with SGD and with Adagrad; and the FLOP/s each phase achieves against
//! this machine's measured GEMM peak.
//!
//! ```text
//! cargo bench --bench step_profile
//! SHADOWSYNC_BENCH_ROWS=50000 cargo bench --bench step_profile      # quicker
//! ```
//!
//! One trainer, one intra-op thread, batch 128, DLRM Kaggle shape, pre-parsed
//! batches. Each phase is timed by a clock read between phases (CPU kernels are
//! synchronous): the embedding lookup, the bottom MLP, the interaction, the top
//! MLP with the loss, the backward pass, the dense optimizer and the sparse one.
//! The peak is the best of single-threaded GEMMs of the step's shapes and of a
//! large square one.

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use shadowsync::config::Config;
use shadowsync::data::NUM_DENSE;
use shadowsync::model::{DenseOptimizer, Dlrm, EmbeddingTable, RowRules};
use shadowsync::train::load_batches;
use shadowsync_actors::FlatParams;
use std::time::Instant;
use tch::nn::VarStore;
use tch::{Device, Kind, Reduction, Tensor};

const PHASES: [&str; 7] = [
    "embedding lookup",
    "bottom MLP",
    "interaction",
    "top MLP and loss",
    "backward",
    "dense optimizer",
    "sparse optimizer",
];

/// FLOPs of one step's phases (multiply-adds × 2; the backward pass of a
/// layer is two GEMMs of its forward's size, the bottom MLP's first layer one).
fn phase_flops(config: &Config, batch: f64) -> [f64; 7] {
    let mlp = |input: i64, widths: &[i64]| -> f64 {
        let mut fan_in = input;
        widths
            .iter()
            .map(|&w| {
                let macs = (fan_in * w) as f64;
                fan_in = w;
                macs
            })
            .sum::<f64>()
    };
    let m = &config.model;
    let dim = m.embedding_dim;
    let dlrm = m.dlrm();
    let mut bottom_widths = dlrm.bottom_mlp.clone();
    bottom_widths.push(dim);
    let vectors = 27;
    let pairs = vectors * (vectors - 1) / 2;
    let mut top_widths = dlrm.top_mlp.clone();
    top_widths.push(1);
    let bottom = 2.0 * batch * mlp(NUM_DENSE as i64, &bottom_widths);
    let interaction = 2.0 * batch * (vectors * vectors * dim) as f64;
    let top = 2.0 * batch * mlp(dim + pairs, &top_widths);
    let first_layer = 2.0 * batch * (NUM_DENSE as i64 * dlrm.bottom_mlp[0]) as f64;
    let backward = 2.0 * (bottom + interaction + top) - first_layer;
    [0.0, bottom, interaction, top, backward, 0.0, 0.0]
}

/// The best FLOP/s of single-threaded GEMMs: the step's shapes and 1024³.
fn gemm_peak() -> Result<f64> {
    let shapes = [
        (128, 367, 512),
        (128, 512, 256),
        (128, 512, 512),
        (1024, 1024, 1024),
    ];
    let mut best = 0f64;
    for (m, k, n) in shapes {
        let a = Tensor::f_rand([m, k], (Kind::Float, Device::Cpu))?;
        let b = Tensor::f_rand([k, n], (Kind::Float, Device::Cpu))?;
        let _ = a.f_matmul(&b)?;
        let reps = (2e9 / (2.0 * (m * k * n) as f64)).ceil() as usize;
        let start = Instant::now();
        for _ in 0..reps {
            let _ = a.f_matmul(&b)?;
        }
        let flops = 2.0 * (m * k * n) as f64 * reps as f64 / start.elapsed().as_secs_f64();
        best = best.max(flops);
    }
    Ok(best)
}

/// Milliseconds per step of each phase, over one pass of `config`'s data.
fn profile(config: &Config) -> Result<[f64; 7]> {
    let layout = config.table_layout()?;
    let Some(train_path) = &config.data.train else {
        anyhow::bail!("the benchmark's config names no data");
    };
    let (batches, _) = load_batches(
        train_path,
        &layout,
        config.data.bad_lines,
        config.train.batch_size,
    )?;
    tch::manual_seed(0);
    let vs = VarStore::new(Device::Cpu);
    let model = Dlrm::new(&vs.root(), &config.model)?;
    let params = FlatParams::adopt(&vs)?;
    let (optim, dim) = (&config.optim, config.model.embedding_dim);
    let mut dense = DenseOptimizer::new(optim.dense, optim.dense_lr, &params)?;
    let rule = RowRules::default().build(config)?;
    let lr = config.row_lr(&*rule);
    let mut table = EmbeddingTable::new(&layout, dim, rule, lr)?;
    let mut seconds = [0f64; 7];
    for batch in &batches {
        let mut clock = Instant::now();
        let mut lap = |phase: usize| {
            seconds[phase] += clock.elapsed().as_secs_f64();
            clock = Instant::now();
        };
        let embedded = table.lookup(&batch.sparse)?.f_set_requires_grad(true)?;
        lap(0);
        let x = model.bottom(&batch.dense)?;
        lap(1);
        let top_input = model.interact(&x, &embedded)?;
        lap(2);
        let loss = model
            .top(&top_input)?
            .f_binary_cross_entropy_with_logits::<Tensor>(
                &batch.labels,
                None,
                None,
                Reduction::Mean,
            )?;
        lap(3);
        params.zero_grad()?;
        loss.f_backward()?;
        lap(4);
        dense.step(&params)?;
        lap(5);
        table.apply(&batch.sparse, &embedded.grad())?;
        lap(6);
    }
    Ok(seconds.map(|s| 1e3 * s / batches.len() as f64))
}

fn main() -> Result<()> {
    let base = common::bench_config(200_000)?;
    tch::set_num_threads(1);
    let peak = gemm_peak()?;
    let flops = phase_flops(&base, base.train.batch_size as f64);
    println!("\nstep_profile: DLRM Kaggle shape, batch 128, 1 intra-op thread, pre-parsed batches");
    println!(
        "measured peak (single-threaded GEMM): {:.1} GFLOP/s",
        peak / 1e9
    );
    for setting in common::OPTIMIZERS {
        let config = common::with_optimizer(&base, setting);
        eprintln!("{}: profiling shadowsync", setting.0);
        let ours = profile(&config)?;
        let theirs = common::pytorch_reference(&config, setting, &["--profile"])?
            .map(|r| PHASES.map(|p| r["phase_ms_per_step"][p].as_f64().unwrap_or(f64::NAN)));
        println!(
            "\n{} (dense lr {}, embeddings lr {})",
            setting.0, setting.2, setting.3
        );
        println!(
            "{:<18} {:>10} {:>9} {:>7} {:>10} {:>9} {:>7}",
            "phase", "shadowsync", "GFLOP/s", "% peak", "PyTorch", "GFLOP/s", "% peak"
        );
        let cells = |ms: f64, flops: f64| -> String {
            if flops > 0.0 {
                let rate = flops / (ms / 1e3);
                format!("{:>9.1} {:>7.0}", rate / 1e9, 100.0 * rate / peak)
            } else {
                format!("{:>9} {:>7}", "", "")
            }
        };
        for (i, phase) in PHASES.iter().enumerate() {
            let theirs = theirs.map_or(String::new(), |t| {
                format!("{:>10.3} {}", t[i], cells(t[i], flops[i]))
            });
            println!(
                "{phase:<18} {:>10.3} {} {theirs}",
                ours[i],
                cells(ours[i], flops[i])
            );
        }
        let total: f64 = ours.iter().sum();
        let theirs_total = theirs.map(|t| t.iter().sum::<f64>());
        println!(
            "{:<18} {total:>10.3} {} {}",
            "step",
            cells(total, flops.iter().sum()),
            theirs_total.map_or(String::new(), |t| format!(
                "{t:>10.3} {}",
                cells(t, flops.iter().sum())
            ))
        );
    }
    println!("(ms per step; GFLOP/s of the GEMM work each phase does)");
    Ok(())
}
