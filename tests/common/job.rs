//! Jobs of the `shadowsync` binary, in one process or under `mpirun`, on
//! 400,000 synthetic rows: the launcher, the data and the `train` arguments
//! the MPI tests and the claims share.

#![allow(dead_code)] // each test binary uses its own part

use serde_json::Value;
use shadowsync::report::mean_std;
use shadowsync_testkit::process::{mpirun, text, RunToEnd};
use std::path::Path;
use std::process::{Command, Output};

/// The binary, under `mpirun` on `ranks` ranks when given; run to its end.
pub(crate) fn shadowsync(ranks: Option<usize>, args: &[&str]) -> Output {
    command(ranks, args).run_to_end()
}

/// The binary with `args`, under `mpirun` on `ranks` ranks when given.
pub(crate) fn command(ranks: Option<usize>, args: &[&str]) -> Command {
    match ranks {
        Some(ranks) => {
            let mut command = mpirun(ranks);
            command.arg(env!("CARGO_BIN_EXE_shadowsync")).args(args);
            command
        }
        None => super::shadowsync(args),
    }
}

/// 400,000 synthetic rows (and 20,000 test rows) in `dir`.
pub(crate) fn data(dir: &Path) -> (String, String) {
    data_of_profile(dir, "compact")
}

/// [`data`] with the fields' vocabularies of `profile` (`gen-data --profile`).
pub(crate) fn data_of_profile(dir: &Path, profile: &str) -> (String, String) {
    let out = dir.join("data");
    let made = shadowsync(
        None,
        &[
            "gen-data",
            "--out",
            out.to_str().unwrap(),
            "--rows",
            "400000",
            "--test-rows",
            "20000",
            "--profile",
            profile,
        ],
    );
    assert!(made.status.success(), "{}", text(&made));
    data_paths(dir)
}

/// `train` arguments of a run (of logistic regression unless `more` names a
/// model) on `dir`'s data with
/// the configuration file `config`, `trainers` per rank under `sync`, without
/// evaluations on the way, writing `results`; then `more`.
pub(crate) fn lr_run(
    dir: &Path,
    config: &Path,
    trainers: usize,
    sync: &str,
    results: &Path,
    more: &[&str],
) -> Vec<String> {
    let (train, test) = data_paths(dir);
    let config = config.display().to_string();
    let (trainers, results) = (trainers.to_string(), results.display().to_string());
    let args = [
        "train",
        "--config",
        &config,
        "--train",
        &train,
        "--test",
        &test,
        "--table-size",
        "20000",
        "--trainers",
        &trainers,
        "--sync",
        sync,
        "--eval-every",
        "0",
        "--results",
        &results,
    ];
    // Logistic regression unless `more` says otherwise, with plain SGD 0.1
    // (the bounds below were set for it) unless `more` names optimizers.
    let model = if more.contains(&"--model") {
        &[][..]
    } else {
        &["--model", "lr"][..]
    };
    args.iter()
        .chain(&["--optim-preset", "dlrm-reference"])
        .chain(model)
        .chain(more)
        .map(|a| a.to_string())
        .collect()
}

pub(crate) fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The test NE and the results of a run of logistic regression under `sync`.
pub(crate) fn train(
    dir: &Path,
    ranks: Option<usize>,
    trainers: usize,
    seed: u64,
    sync: &str,
) -> (f64, Value) {
    train_with(dir, ranks, trainers, seed, sync, ("", &[]))
}

/// [`train`] with `train_keys` added to the configuration's `[train]`, then
/// `more` arguments.
pub(crate) fn train_with(
    dir: &Path,
    ranks: Option<usize>,
    trainers: usize,
    seed: u64,
    sync: &str,
    (train_keys, more): (&str, &[&str]),
) -> (f64, Value) {
    let results = dir.join(format!(
        "r{ranks:?}-t{trainers}-s{seed}-{sync}-{}{}.json",
        train_keys.replace(['"', ' ', '=', '\n'], ""),
        more.join("").replace(['/', '-'], "")
    ));
    let config = dir.join("mpi.toml");
    // EASGD's centre in 2 shards, one per rank.
    let shards = if sync.contains("easgd") {
        "[sync.easgd]\nserver_shards = 2\n"
    } else {
        ""
    };
    std::fs::write(&config, format!("[train]\n{train_keys}\n{shards}")).unwrap();
    let seed = seed.to_string();
    let more: Vec<&str> = ["--seed", seed.as_str()]
        .into_iter()
        .chain(more.iter().copied())
        .collect();
    let args = lr_run(dir, &config, trainers, sync, &results, &more);
    let run = shadowsync(ranks, &strs(&args));
    assert!(run.status.success(), "{}", text(&run));
    let report: Value = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    (report["final_metrics"]["ne"].as_f64().unwrap(), report)
}

pub(crate) fn data_paths(dir: &Path) -> (String, String) {
    let path = |name: &str| dir.join("data").join(name).display().to_string();
    (path("train.tsv"), path("test.tsv"))
}

pub(crate) fn mean(values: &[f64]) -> f64 {
    mean_std(values).0
}
