//! Training-step benchmark: shadowsync's DLRM against PyTorch's eager loop on the
//! same data, side by side in one run.
//!
//! ```text
//! cargo bench --bench train_step
//! SHADOWSYNC_BENCH_ROWS=200000 cargo bench --bench train_step      # quicker
//! SHADOWSYNC_BENCH_TRAIN=a.tsv SHADOWSYNC_BENCH_TEST=b.tsv cargo bench --bench train_step
//! ```
//!
//! Figures: examples/s of one trainer (one intra-op thread, batch 128, DLRM Kaggle
//! shape, SGD 0.1) on pre-parsed batches, the same end to end with the parsing
//! pipeline running beside it, and PyTorch's examples/s on pre-parsed tensors
//! (`benches/pytorch_reference.py`, run with `$SHADOWSYNC_TORCH_PYTHON`, else the
//! venv `scripts/setup.sh --with-torch` makes, else `python3`; skipped with a
//! message where `torch` cannot be imported). Then the ratio and the test NE of
//! each.

use anyhow::{Context, Result};
use shadowsync::config::Config;
use shadowsync::data::{SyntheticData, SyntheticSpec};
use shadowsync::metrics::evaluate;
use shadowsync::model::CtrLearner;
use shadowsync::train::{load_batches, train};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> Result<u64> {
    std::env::var(name).map_or(Ok(default), |v| {
        v.parse()
            .with_context(|| format!("{name}={v} is not a number"))
    })
}

fn torch_python() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let candidates = [
        std::env::var_os("SHADOWSYNC_TORCH_PYTHON").map(PathBuf::from),
        Some(home.join(".cache/shadowsync/torch-venv/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn main() -> Result<()> {
    let mut config = Config::default();
    config.train.eval_every = 0;
    let (train_path, test_path) = match (
        std::env::var_os("SHADOWSYNC_BENCH_TRAIN"),
        std::env::var_os("SHADOWSYNC_BENCH_TEST"),
    ) {
        (Some(train), Some(test)) => (PathBuf::from(train), PathBuf::from(test)),
        _ => {
            config.data.synthetic.train_rows = env_u64("SHADOWSYNC_BENCH_ROWS", 1_000_000)?;
            config.data.synthetic.test_rows = config.data.synthetic.train_rows / 5;
            let spec: SyntheticSpec = config.data.synthetic.spec();
            eprintln!(
                "data: synthetic {} + {} rows",
                spec.train_rows, spec.test_rows
            );
            let data = SyntheticData::ensure(spec, &config.data.synthetic.directory())?;
            (data.train, data.test)
        }
    };
    config.data.train = Some(train_path.clone());
    config.data.test = Some(test_path.clone());
    tch::set_num_threads(1);
    tch::manual_seed(0);

    // 1. Steps on pre-parsed batches: the trainer alone.
    let layout = config.table_layout()?;
    let policy = config.data.bad_lines;
    let parse_start = Instant::now();
    let (batches, _) = load_batches(&train_path, &layout, policy, config.train.batch_size)?;
    let (test_batches, _) = load_batches(&test_path, &layout, policy, 8192)?;
    eprintln!(
        "parsed in {:.1} s; training on pre-parsed batches",
        parse_start.elapsed().as_secs_f64()
    );
    let mut learner = CtrLearner::new(&config.model, &config.optim, &layout, None)?;
    let start = Instant::now();
    let mut examples = 0;
    for batch in &batches {
        learner.train_on(batch)?;
        examples += batch.len();
    }
    let steps_eps = examples as f64 / start.elapsed().as_secs_f64();
    let (p, y) = learner.predict_all(&test_batches)?;
    let steps_metrics = evaluate(&p, &y);
    drop((batches, learner));

    // 2. End to end, with the parsing pipeline beside the trainer.
    eprintln!("training end to end with the pipeline");
    let report = train(&config, &mut ())?;

    // 3. PyTorch's eager loop on the same files.
    let reference = match torch_python() {
        None => {
            eprintln!("PyTorch reference skipped: no python with `torch` (run scripts/setup.sh --with-torch)");
            None
        }
        Some(python) => {
            eprintln!("PyTorch reference with {}", python.display());
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pytorch_reference.py");
            let out = Command::new(&python)
                .arg(&script)
                .arg("--train")
                .arg(&train_path)
                .arg("--test")
                .arg(&test_path)
                .arg("--table-size")
                .arg(config.data.table_size.to_string())
                .output()
                .context("running the PyTorch reference")?;
            anyhow::ensure!(
                out.status.success(),
                "PyTorch reference failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(serde_json::from_slice::<serde_json::Value>(&out.stdout)?)
        }
    };

    println!("\ntrain_step: DLRM Kaggle shape, batch 128, 1 intra-op thread, SGD 0.1, one pass");
    println!(
        "data: {} ({examples} examples), test {}",
        train_path.display(),
        test_path.display()
    );
    println!(
        "{:<40} {:>12} {:>9} {:>8}",
        "run", "examples/s", "test NE", "AUC"
    );
    println!(
        "{:<40} {:>12.0} {:>9.4} {:>8.4}",
        "shadowsync, pre-parsed batches", steps_eps, steps_metrics.ne, steps_metrics.auc
    );
    let e2e = &report.final_metrics;
    println!(
        "{:<40} {:>12.0} {:>9.4} {:>8.4}",
        "shadowsync, end to end with pipeline", report.examples_per_sec, e2e.ne, e2e.auc
    );
    if let Some(r) = reference {
        let field = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let (eps, ne) = (field("examples_per_sec"), field("ne"));
        println!(
            "{:<40} {:>12.0} {:>9.4} {:>8.4}",
            "PyTorch eager (pre-parsed tensors)",
            eps,
            ne,
            field("auc")
        );
        println!("ratio shadowsync/PyTorch examples/s: {:.2} (pre-parsed), {:.2} (end to end); target >= 1.3", steps_eps / eps, report.examples_per_sec / eps);
        println!("test NE difference (shadowsync - PyTorch): {:+.4} (pre-parsed), {:+.4} (end to end); target |diff| <= 0.01", steps_metrics.ne - ne, e2e.ne - ne);
    }
    Ok(())
}
