//! What the training benchmarks share: their data, their optimizer settings,
//! and PyTorch's reference (`benches/pytorch_reference.py`).

use anyhow::{Context, Result};
use shadowsync::config::{Config, OptimizerKind};
use shadowsync::data::{SyntheticData, SyntheticSpec};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The optimizer settings compared: plain SGD 0.1 (the DLRM reference) and
/// Adagrad (dense 0.02, embeddings 0.05: the experiments' setting).
pub(crate) const OPTIMIZERS: [(&str, OptimizerKind, f64, f64); 2] = [
    ("sgd", OptimizerKind::Sgd, 0.1, 0.1),
    ("adagrad", OptimizerKind::Adagrad, 0.02, 0.05),
];

/// `config` with the optimizer setting `(name, kind, dense lr, sparse lr)`.
pub(crate) fn with_optimizer(config: &Config, setting: (&str, OptimizerKind, f64, f64)) -> Config {
    let mut config = config.clone();
    let (_, kind, dense_lr, sparse_lr) = setting;
    config.optim.dense = kind;
    config.optim.sparse = setting.0.into();
    config.optim.dense_lr = dense_lr;
    config.optim.sparse_lr = Some(sparse_lr);
    config
}

/// `$name` as a number, else `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> Result<u64> {
    std::env::var(name).map_or(Ok(default), |v| {
        v.parse()
            .with_context(|| format!("{name}={v} is not a number"))
    })
}

/// The default config pointed at the benchmark's data: the files in
/// `$SHADOWSYNC_BENCH_TRAIN` and `$SHADOWSYNC_BENCH_TEST`, else synthetic
/// data of `$SHADOWSYNC_BENCH_ROWS` rows (`rows` unless set), made once and
/// cached.
pub(crate) fn bench_config(rows: u64) -> Result<Config> {
    let mut config = Config::default();
    config.train.eval_every = 0;
    let (train, test) = match (
        std::env::var_os("SHADOWSYNC_BENCH_TRAIN"),
        std::env::var_os("SHADOWSYNC_BENCH_TEST"),
    ) {
        (Some(train), Some(test)) => (PathBuf::from(train), PathBuf::from(test)),
        _ => {
            config.data.synthetic.train_rows = env_u64("SHADOWSYNC_BENCH_ROWS", rows)?;
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
    // The files replace the built-in data: its settings are left at their
    // defaults, which a run reading files refuses to see changed.
    config.data.synthetic = Default::default();
    config.data.train = Some(train);
    config.data.test = Some(test);
    Ok(config)
}

/// A Python that imports `torch`: `$SHADOWSYNC_TORCH_PYTHON`, else the venv
/// `scripts/setup.sh --with-torch` makes, else `python3`.
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

/// PyTorch's eager loop on `config`'s data with its optimizer setting (and
/// `extra` flags), as the JSON the script prints; `None`, with a message,
/// where no Python imports `torch`.
pub(crate) fn pytorch_reference(
    config: &Config,
    setting: (&str, OptimizerKind, f64, f64),
    extra: &[&str],
) -> Result<Option<serde_json::Value>> {
    let Some(python) = torch_python() else {
        eprintln!(
            "PyTorch reference skipped: no python with `torch` (run scripts/setup.sh --with-torch)"
        );
        return Ok(None);
    };
    let (name, _, dense_lr, sparse_lr) = setting;
    let (Some(train), Some(test)) = (&config.data.train, &config.data.test) else {
        anyhow::bail!("the benchmark's config names no data");
    };
    eprintln!("PyTorch reference ({name}) with {}", python.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pytorch_reference.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg("--train")
        .arg(train)
        .arg("--test")
        .arg(test)
        .args(["--table-size", &config.data.table_size.to_string()])
        .args(["--optimizer", name])
        .args(["--lr", &dense_lr.to_string()])
        .args(["--sparse-lr", &sparse_lr.to_string()])
        .args(extra)
        .output()
        .context("running the PyTorch reference")?;
    anyhow::ensure!(
        out.status.success(),
        "PyTorch reference failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}
