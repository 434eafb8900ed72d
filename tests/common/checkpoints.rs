//! Runs of the `shadowsync` binary that checkpoint, as a user makes them:
//! started in the background, killed or stopped, resumed with
//! `shadowsync train --resume DIR`.

use super::{run_within, shadowsync, text};
use rand::Rng;
use serde_json::Value;
use shadowsync::config::Config;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The longest one run may take (seconds to a minute each): a run that hangs
/// fails, showing where.
pub(crate) const LIMIT: Duration = Duration::from_secs(600);

/// `config` written as the TOML file `dir/name.toml`, as a user would pass it.
pub(crate) fn config_file(config: &Config, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = toml::to_string(config).expect("a configuration is TOML");
    std::fs::write(&path, text).expect("a writable test directory");
    path
}

/// The results a run wrote at `path`.
pub(crate) fn results(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

pub(crate) fn ne(results: &Value) -> f64 {
    results["final_metrics"]["ne"].as_f64().unwrap()
}

/// Runs `config` to the end, checkpointing into `checkpoints`.
pub(crate) fn uninterrupted(config: &Path, checkpoints: &Path, results: &Path) -> Value {
    let out = run_within(
        shadowsync(&["train", "--config", config.to_str().unwrap()])
            .args(["--checkpoint-dir", checkpoints.to_str().unwrap()])
            .args(["--results", results.to_str().unwrap()]),
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out));
    self::results(results)
}

/// Starts `config` in the background, checkpointing into `checkpoints`.
pub(crate) fn start(config: &Path, checkpoints: &Path) -> Child {
    shadowsync(&["train", "--config", config.to_str().unwrap()])
        .args(["--checkpoint-dir", checkpoints.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The checkpoint directories in `dir`, oldest first.
pub(crate) fn checkpoints_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ckpt-")
        })
        .collect();
    found.sort();
    found
}

/// Waits (two minutes at most) until `dir` holds `count` checkpoints.
pub(crate) fn wait_for_checkpoints(dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoints_in(dir).len() < count {
        assert!(
            Instant::now() < deadline,
            "fewer than {count} checkpoints written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `config`, kills it (SIGKILL) at a random moment within `window`
/// once `dir/killed` holds `count` checkpoints, and returns that directory.
pub(crate) fn killed_after(config: &Path, dir: &Path, count: usize, window: Duration) -> PathBuf {
    let checkpoints = dir.join("killed");
    let mut child = start(config, &checkpoints);
    wait_for_checkpoints(&checkpoints, count);
    std::thread::sleep(window.mul_f64(rand::rng().random::<f64>()));
    child.kill().unwrap();
    child.wait().unwrap();
    checkpoints
}

pub(crate) fn manifest(checkpoint: &Path) -> Value {
    results(&checkpoint.join("manifest.json"))
}

/// The newest checkpoint's manifest in `dir`.
pub(crate) fn newest_manifest(dir: &Path) -> Value {
    manifest(checkpoints_in(dir).last().expect("a checkpoint"))
}

/// Resumes the run checkpointed in `checkpoints` to its end: its results and
/// what it said.
pub(crate) fn resume(checkpoints: &Path, results: &Path) -> (Value, String) {
    let out = run_within(
        shadowsync(&["train", "--resume", checkpoints.to_str().unwrap()])
            .args(["--results", results.to_str().unwrap()]),
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out));
    (self::results(results), text(&out))
}
