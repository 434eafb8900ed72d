//! The examples, run as a user runs them (`cargo run --release --example NAME`;
//! `cargo test` builds them beside the tests): each ends well and shows a
//! model that learned.

use shadowsync_testkit::process::RunToEnd;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the example `name`, built by `cargo test` next to this test.
fn example(name: &str) -> Output {
    example_with(name, &[])
}

/// The built example `name`.
fn example_path(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile = deps.parent().and_then(|d| d.parent()).unwrap();
    profile.join("examples").join(name)
}

/// Runs the example `name` with `args`.
fn example_with(name: &str, args: &[&str]) -> Output {
    let out = Command::new(example_path(name))
        .args(args)
        .env("RUST_LOG", "warn")
        .run_to_end();
    assert!(
        out.status.success(),
        "{name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The number after `label` in `text`.
fn figure_after(text: &str, label: &str) -> f64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
        + label.len();
    text[at..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no figure after {label:?} in {text}"))
}

#[test]
fn custom_learner_trains_a_regression_that_learns() {
    let out = String::from_utf8(example("custom_learner").stdout).unwrap();
    let before = figure_after(&out, "error: ");
    let after = figure_after(&out, "before training, ");
    assert!(after < before / 4.0, "{out}");
}

#[test]
fn the_ctr_examples_train_models_that_learn() {
    for name in ["four_trainers", "embed_runtime"] {
        let out = String::from_utf8(example(name).stdout).unwrap();
        let ne = figure_after(&out, "test NE");
        assert!(ne < 0.95, "{name}: {out}");
    }
}

#[test]
fn sync_monitor_sees_every_trainer_sync() {
    let out = String::from_utf8(example("sync_monitor").stdout).unwrap();
    let line = out
        .lines()
        .find(|l| l.starts_with("final syncs per trainer ["))
        .unwrap_or_else(|| panic!("no final tallies in {out}"));
    let inside = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
    let syncs: Vec<u64> = inside.split(", ").map(|n| n.parse().unwrap()).collect();
    assert_eq!(syncs.len(), 4, "{out}");
    assert!(syncs.iter().all(|&n| n > 0), "{out}");
    assert!(figure_after(&out, "test NE") < 0.95, "{out}");
}

#[test]
fn custom_rule_shields_the_healthy_replicas_from_a_broken_one() {
    let out = String::from_utf8(example("custom_rule").stdout).unwrap();
    let line = |algorithm: &str| {
        out.lines()
            .find(|l| l.contains(algorithm))
            .unwrap_or_else(|| panic!("no {algorithm} in {out}"))
            .to_string()
    };
    let trimmed = line("shadow-trimmed:");
    let before = figure_after(&trimmed, "truth: ");
    let after = figure_after(&trimmed, "before training, ");
    assert!(after < before / 10.0, "{out}");
    let averaged = figure_after(&line("shadow-ma:"), "before training, ");
    assert!(after < averaged / 2.0, "{out}");
}

#[test]
fn custom_actor_stops_training_once_the_target_ne_is_reached() {
    let out = String::from_utf8(example("custom_actor").stdout).unwrap();
    assert!(out.contains("reached: stopping"), "{out}");
    let trained = figure_after(&out, "stopped after ");
    assert!(trained < 400_000.0, "{out}");
    let ne = figure_after(&out, "final test NE ");
    assert!(ne < 0.87, "{out}");
}

#[test]
fn a_rule_and_a_schedule_of_ones_own_train_a_ctr_model_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("run.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!("[data.synthetic]\ntrain_rows = 40000\ntest_rows = 5000\ndir = {data:?}\n"),
    )
    .unwrap();
    let results = dir.path().join("results.json");
    let args = [
        "train",
        "--config",
        config.to_str().unwrap(),
        "--sync",
        "shadow-median",
        "--schedule",
        "rotating",
        "--group-size",
        "2",
        "--trainers",
        "4",
        "--model",
        "lr",
        "--eval-every",
        "0",
        "--results",
        results.to_str().unwrap(),
    ];
    let out = String::from_utf8(example_with("ctr_custom_rule", &args).stdout).unwrap();
    assert!(
        out.contains("shadow-median") && out.contains("(rotating)"),
        "{out}"
    );
    assert!(figure_after(&out, "(rotating), ") > 0.0, "no syncs: {out}");
    assert!(figure_after(&out, "NE ") < 0.95, "{out}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(json["config"]["sync"]["schedule"], "rotating");
    assert_eq!(json["examples"], 40000);
}

#[test]
fn a_model_of_ones_own_trains_from_the_command_line() {
    let out = String::from_utf8(example("ctr_custom_model").stdout).unwrap();
    assert!(out.contains("trained dcn"), "{out}");
    assert!(figure_after(&out, "NE ") < 0.95, "{out}");
    // Its own section, [model.dcn], is read; a key it lacks is named.
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, dcn: &str| {
        let file = dir.path().join(name);
        let text = format!(
            "[data.synthetic]\ntrain_rows = 4000\ntest_rows = 1000\ndir = {:?}\n\
             [model]\nkind = \"dcn\"\n[model.dcn]\n{dcn}\n[train]\neval_every = 0\n",
            dir.path().join("data")
        );
        std::fs::write(&file, text).unwrap();
        file.to_str().unwrap().to_string()
    };
    let results = dir.path().join("dcn.json");
    let small = config("small.toml", "cross_layers = 1\ndeep_mlp = [16]");
    let args = [
        "train",
        "--config",
        &small,
        "--results",
        results.to_str().unwrap(),
    ];
    example_with("ctr_custom_model", &args);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(json["config"]["model"]["dcn"]["cross_layers"], 1, "{json}");
    let typo = config("typo.toml", "cross_layer = 1");
    let out = Command::new(example_path("ctr_custom_model"))
        .args(["train", "--config", &typo])
        .run_to_end();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("model.dcn") && said.contains("cross_layer"),
        "{said}"
    );
}
