//! The `shadowsync` binary as a user runs it.

mod common;

use common::sample;
use std::process::Output;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Trains on 20,000 synthetic rows (generated in `dir`) under the config
/// file `dir/run.toml`: `settings` after the data section. The config's path
/// and the results JSON; fails the test if the run fails.
fn train_with(dir: &std::path::Path, settings: &str) -> (String, serde_json::Value) {
    let config = dir.join("run.toml");
    let data = format!(
        "[data.synthetic]\ntrain_rows = 20000\ntest_rows = 4000\ndir = {:?}\n",
        dir.join("data")
    );
    std::fs::write(&config, data + settings).unwrap();
    let results = dir.join("results.json");
    let config = config.to_str().unwrap().to_string();
    let out = train_config(&config, &results);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    (config, json)
}

/// `shadowsync train --config CONFIG --results RESULTS`.
fn train_config(config: &str, results: &std::path::Path) -> Output {
    common::run(&[
        "train",
        "--config",
        config,
        "--results",
        results.to_str().unwrap(),
    ])
}

#[test]
fn train_from_a_config_file_writes_json_results_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        format!(
            "[data]\ntable_size = 5000\n[data.synthetic]\ntrain_rows = 6000\ntest_rows = 2000\ndir = {:?}\n\
             [model]\nkind = \"deepfm\"\n[train]\neval_every = 3000\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let results = dir.path().join("out/results.json");
    let out = common::run(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--batch-size",
        "256",
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("test (2000 examples): NE") && stdout.contains("examples/s"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(json["examples"], 6000);
    assert_eq!(json["config"]["train"]["batch_size"], 256); // the flag overrode the file
    assert_eq!(json["config"]["model"]["kind"], "deepfm");
    assert!(!json["history"].as_array().unwrap().is_empty());
    assert_eq!(json["cluster"]["trainers"], 1);
    assert!(json["final_metrics"]["ne"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_config_with_an_unknown_key_is_rejected_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[train]\nbatch_size = 64\nlearning_rate = 0.1\n").unwrap();
    let out = common::run(&["train", "--config", config.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("learning_rate") && stderr.contains("line 3"),
        "{stderr}"
    );
}

#[test]
fn an_out_of_range_flag_is_rejected_naming_the_key() {
    let out = common::run(&["train", "--lr=-1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("optim.dense_lr"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn malformed_data_fails_naming_the_line_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    let bad = good.replacen("\n", "\n0\t1\t2\tthree\n", 1);
    let path = dir.path().join("train.tsv");
    std::fs::write(&path, bad).unwrap();
    let test = sample("criteo_kaggle_paddlerec_test100.tsv");
    let args = [
        "train",
        "--train",
        path.to_str().unwrap(),
        "--test",
        test.to_str().unwrap(),
        "--table-size",
        "1000",
    ];
    let out = common::run(&args);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("train.tsv:2: field 4 (I3): not an integer count: \"three\""),
        "{stderr}"
    );

    let out = common::run(&[&args[..], &["--bad-lines", "skip"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("skipped 1 malformed train lines of 101"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_missing_data_file_is_a_clear_error() {
    let out = common::run(&[
        "train",
        "--train",
        "/no/such/train.tsv",
        "--test",
        "/no/such/test.tsv",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("/no/such/test.tsv") && stderr.contains("no such file"),
        "{stderr}"
    );
}

#[test]
fn gen_data_writes_files_and_reports_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("syn");
    let out = common::run(&[
        "gen-data",
        "--out",
        out_dir.to_str().unwrap(),
        "--rows",
        "3000",
        "--test-rows",
        "500",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("oracle NE"));
    let lines = std::fs::read_to_string(out_dir.join("train.tsv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines, 3000);
    assert!(out_dir.join("oracle.json").exists());
}

#[test]
fn ftrl_rows_learn_and_an_unknown_row_optimizer_is_named_with_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (config, json) = train_with(
        dir.path(),
        "[model]\nkind = \"lr\"\n[optim]\nsparse = \"ftrl\"\n\
         [optim.ftrl]\nl1 = 0.001\n[train]\neval_every = 0\n",
    );
    let config = config.as_str();
    assert_eq!(json["config"]["optim"]["sparse"], "ftrl");
    let ne = json["final_metrics"]["ne"].as_f64().unwrap();
    assert!(ne < 0.95, "FTRL's rows did not learn: NE {ne}");
    // FTRL's section under another row optimizer would be ignored: refused.
    let out = common::run(&["train", "--config", config, "--sparse-optimizer", "adagrad"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("optim.ftrl") && stderr.contains("adagrad"),
        "{stderr}"
    );
    let out = common::run(&["train", "--sparse-optimizer", "adam", "--model", "lr"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("optim.sparse") && stderr.contains("adagrad, ftrl, sgd"),
        "{stderr}"
    );
}

#[test]
fn diloco_and_a_straggler_run_from_the_config_and_learn() {
    let dir = tempfile::tempdir().unwrap();
    let (config, json) = train_with(
        dir.path(),
        "[model]\nkind = \"lr\"\n[train]\ntrainers = 4\neval_every = 0\n\
         [sync]\nalgorithm = \"shadow-diloco\"\n\
         [sync.diloco]\nouter_lr = 1.0\nmomentum = 0.5\n\
         [[stragglers]]\ntrainer = 3\nslowdown = 2.0\n",
    );
    let config = config.as_str();
    assert_eq!(json["config"]["sync"]["diloco"]["momentum"], 0.5);
    assert_eq!(json["config"]["stragglers"][0]["slowdown"], 2.0);
    let ne = json["final_metrics"]["ne"].as_f64().unwrap();
    assert!(ne < 0.95, "shadow-diloco did not learn: NE {ne}");
    // DiLoCo's settings under another rule would be ignored: refused, named.
    let out = common::run(&["train", "--config", config, "--sync", "shadow-ma"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("sync.diloco"), "{stderr}");
    // So would a flag of the background loops under a foreground rule.
    let out = common::run(&[
        "train",
        "--config",
        config,
        "--sync",
        "fr-diloco:4",
        "--min-steps",
        "2",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("sync.shadow") && stderr.contains("fr-diloco:4"),
        "{stderr}"
    );
    // A straggler of no trainer is refused, named.
    let out = common::run(&["train", "--config", config, "--trainers", "2"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("stragglers.trainer"), "{stderr}");
}

#[test]
fn an_elastic_plan_runs_from_the_config_and_what_it_cannot_do_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (config, json) = train_with(
        dir.path(),
        "[model]\nkind = \"lr\"\n[train]\ntrainers = 2\neval_every = 0\n\
         [sync]\nalgorithm = \"shadow-ma\"\n\
         [[elastic]]\nat_step = 20\nadd = 2\n[[elastic]]\nat_step = 60\nremove = 0\n",
    );
    let config = config.as_str();
    let cluster = &json["cluster"];
    assert_eq!(cluster["trainers"], 4);
    assert_eq!(cluster["departed"][0], 0);
    assert!(json["error"].is_null(), "{}", json["error"]);
    let ne = json["final_metrics"]["ne"].as_f64().unwrap();
    assert!(ne < 0.95, "the elastic run did not learn: NE {ne}");
    for (flags, named) in [
        (&["--sync", "sync-sgd"][..], "elastic"),
        (&["--sync", "shadow-easgd"][..], "elastic"),
        (&["--workers", "2"][..], "elastic"),
        (&["--group-size", "2", "--schedule", "fixed"][..], "elastic"),
    ] {
        let mut args = vec!["train", "--config", config];
        args.extend(flags);
        let out = common::run(&args);
        assert!(!out.status.success(), "{flags:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(named), "{flags:?}: {stderr}");
    }
}

#[test]
fn compressed_sync_learns_counts_both_sizes_and_refuses_what_it_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = String::new();
    // A group's rounds, and EASGD's steps against its centre.
    for algorithm in ["shadow-ma", "shadow-easgd"] {
        let (written, json) = train_with(
            dir.path(),
            &format!(
                "[train]\ntrainers = 4\neval_every = 0\n\
                 [sync]\nalgorithm = \"{algorithm}\"\ncompression = \"int8\"\n"
            ),
        );
        let cluster = &json["cluster"];
        let sent = cluster["bytes_sent"].as_f64().unwrap();
        let before = cluster["bytes_before_compression"].as_f64().unwrap();
        // A byte a value and 4 a block of 256, against 4 a value.
        let ratio = before / sent;
        assert!(sent > 0.0 && ratio > 3.8, "{algorithm}: {sent} of {before}");
        let ne = json["final_metrics"]["ne"].as_f64().unwrap();
        assert!(ne < 0.95, "compressed {algorithm} did not learn: NE {ne}");
        config = written;
    }
    let config = config.as_str();
    for (flags, key) in [
        (&["--compression", "zip"][..], "sync.compression"),
        (&["--topk-ratio", "0.5"][..], "sync.topk_ratio"),
        (&["--compression", "topk"][..], "sync.compression"),
    ] {
        let mut args = vec!["train", "--config", config];
        args.extend(flags);
        let out = common::run(&args);
        assert!(!out.status.success(), "{flags:?} ran");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(key), "{flags:?}: {stderr}");
    }
}

/// A step's embedding update lost after the row audit counted it (an
/// injected `lose-push`) fails the run with exit status 1, naming the audit;
/// the results are still written, the figures with them. The same run
/// without the fault passes the audit.
#[test]
fn a_lost_embedding_update_fails_the_row_audit_with_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let settings = "[model]\nkind = \"lr\"\n[train]\ntrainers = 2\neval_every = 0\n\
                    audit_rows = true\n[optim]\nsparse = \"sgd\"\n";
    let (config, json) = train_with(dir.path(), settings);
    assert_eq!(json["row_audit"]["off"], 0, "{}", json["row_audit"]);
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap()
            + "[[faults]]\ntrainer = 1\nkind = \"lose-push\"\nat_step = 5\n",
    )
    .unwrap();
    let results = dir.path().join("lossy.json");
    let out = train_config(&config, &results);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the row audit failed"), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    let off = json["row_audit"]["off"].as_u64().unwrap();
    assert!(off > 0, "{}", json["row_audit"]);
}

#[test]
fn a_config_of_the_release_before_runs_warning_of_each_moved_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("run.toml");
    let old = format!(
        "[data.synthetic]\ntrain_rows = 8000\ntest_rows = 2000\ndir = {:?}\n[model]\nkind = \"deepfm\"\n\
         deep_mlp = [32]\n[train]\ntrainers = 2\neval_every = 0\n[sync]\nalgorithm = \"shadow-bmuf\"\neta = 0.5\n",
        dir.path().join("data")
    );
    std::fs::write(&config, old).unwrap();
    let results = dir.path().join("results.json");
    let out = train_config(config.to_str().unwrap(), &results);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("sync.eta is deprecated") && said.contains("use sync.bmuf.eta"),
        "{said}"
    );
    assert!(said.contains("use model.deepfm.deep_mlp"), "{said}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(report["config"]["sync"]["bmuf"]["eta"], 0.5, "{report}");
    assert_eq!(
        report["config"]["model"]["deepfm"]["deep_mlp"],
        serde_json::json!([32])
    );
    // Its results, written in the new form, read back without a word.
    assert!(report["config"]["sync"].get("eta").is_none(), "{report}");
}
