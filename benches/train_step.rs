//! Training-step benchmark: shadowsync's DLRM against PyTorch's eager loop on the
//! same data, side by side in one run, with plain SGD and with Adagrad.
//!
//! ```text
//! cargo bench --bench train_step
//! SHADOWSYNC_BENCH_ROWS=200000 cargo bench --bench train_step      # quicker
//! SHADOWSYNC_BENCH_TRAIN=a.tsv SHADOWSYNC_BENCH_TEST=b.tsv cargo bench --bench train_step
//! ```
//!
//! Figures, for each optimizer setting (SGD 0.1; Adagrad dense 0.02,
//! embeddings 0.05): examples/s of one trainer (one intra-op thread, batch 128,
//! DLRM Kaggle shape) on pre-parsed batches, the same end to end with the
//! parsing pipeline running beside it, and PyTorch's examples/s on pre-parsed
//! tensors (`benches/pytorch_reference.py`, skipped with a message where
//! `torch` cannot be imported). Then the ratios (shadowsync ÷ PyTorch, and
//! Adagrad ÷ SGD of each) and the test NE of each.

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use shadowsync::config::Config;
use shadowsync::metrics::{evaluate, Metrics};
use shadowsync::model::CtrLearner;
use shadowsync::train::{load_batches, Run};
use shadowsync::Registry;
use std::time::Instant;

/// One optimizer setting's figures: examples/s and test metrics of each run.
struct Figures {
    name: &'static str,
    pre_parsed: (f64, Metrics),
    end_to_end: (f64, Metrics),
    pytorch: Option<(f64, f64, f64)>,
}

/// One trainer's examples/s on pre-parsed batches and its test metrics.
fn pre_parsed(config: &Config) -> Result<(f64, Metrics)> {
    let layout = config.table_layout()?;
    let policy = config.data.bad_lines;
    let (Some(train_path), Some(test_path)) = (&config.data.train, &config.data.test) else {
        anyhow::bail!("the benchmark's config names no data");
    };
    let (batches, _) = load_batches(train_path, &layout, policy, config.train.batch_size)?;
    let (test_batches, _) = load_batches(test_path, &layout, policy, 8192)?;
    tch::manual_seed(0);
    let registry = Registry::default();
    let table = registry.local_table(config, &layout)?;
    let mut learner =
        CtrLearner::with_table(registry.models(), &config.model, &config.optim, table, None)?;
    let start = Instant::now();
    let mut examples = 0;
    for batch in &batches {
        learner.train_on(batch)?;
        examples += batch.len();
    }
    let eps = examples as f64 / start.elapsed().as_secs_f64();
    let (p, y) = learner.predict_all(&test_batches)?;
    Ok((eps, evaluate(&p, &y)))
}

fn main() -> Result<()> {
    let base = common::bench_config(1_000_000)?;
    tch::set_num_threads(1);
    let mut all = Vec::new();
    for setting in common::OPTIMIZERS {
        let config = common::with_optimizer(&base, setting);
        eprintln!("{}: training on pre-parsed batches", setting.0);
        let pre_parsed = pre_parsed(&config)?;
        eprintln!("{}: training end to end with the pipeline", setting.0);
        tch::manual_seed(0);
        let report = Run::new().train(&config)?;
        let pytorch = common::pytorch_reference(&config, setting, &[])?.map(|r| {
            let field = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            (field("examples_per_sec"), field("ne"), field("auc"))
        });
        all.push(Figures {
            name: setting.0,
            pre_parsed,
            end_to_end: (report.examples_per_sec, report.final_metrics),
            pytorch,
        });
    }

    println!("\ntrain_step: DLRM Kaggle shape, batch 128, 1 intra-op thread, one pass");
    println!(
        "data: {:?}, test {:?}",
        base.data.train.as_deref().unwrap_or_else(|| "?".as_ref()),
        base.data.test.as_deref().unwrap_or_else(|| "?".as_ref())
    );
    println!(
        "{:<9} {:<38} {:>11} {:>8} {:>7}",
        "optimizer", "run", "examples/s", "test NE", "AUC"
    );
    for f in &all {
        let row = |run: &str, eps: f64, ne: f64, auc: f64| {
            println!("{:<9} {run:<38} {eps:>11.0} {ne:>8.4} {auc:>7.4}", f.name)
        };
        let (eps, m) = &f.pre_parsed;
        row("shadowsync, pre-parsed batches", *eps, m.ne, m.auc);
        let (eps, m) = &f.end_to_end;
        row("shadowsync, end to end with pipeline", *eps, m.ne, m.auc);
        if let Some((eps, ne, auc)) = f.pytorch {
            row("PyTorch eager (pre-parsed tensors)", eps, ne, auc);
        }
    }
    for f in &all {
        if let Some((eps, ne, _)) = f.pytorch {
            println!(
                "{}: shadowsync / PyTorch examples/s {:.2} (pre-parsed), {:.2} (end to end); NE − PyTorch's {:+.4} (pre-parsed)",
                f.name,
                f.pre_parsed.0 / eps,
                f.end_to_end.0 / eps,
                f.pre_parsed.1.ne - ne
            );
        }
    }
    if let [sgd, adagrad] = &all[..] {
        println!(
            "Adagrad / SGD examples/s: shadowsync {:.2} (pre-parsed), PyTorch {}",
            adagrad.pre_parsed.0 / sgd.pre_parsed.0,
            match (adagrad.pytorch, sgd.pytorch) {
                (Some(a), Some(s)) => format!("{:.2}", a.0 / s.0),
                _ => "—".to_string(),
            }
        );
    }
    println!("targets: shadowsync / PyTorch >= 1.6 with either optimizer; Adagrad / SGD >= 0.9");
    Ok(())
}
