//! `mpirun -np R shadowsync train` (feature `mpi`): a job of 2 ranks × 2
//! trainers trains as well as 4 trainers in one process (under MA, and under
//! EASGD with the centre sharded over the ranks), a job killed mid-run resumes
//! with the same ranks from each rank's checkpoints, one rank behaves like
//! one process, and a rank that fails ends the job within seconds, named.

#![cfg(feature = "mpi")]

use serde_json::Value;
use shadowsync::report::mean_std;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SEEDS: [u64; 3] = [1, 2, 3];
/// Seeds of the DLRM comparison. Its runs vary by thread timing alone (one
/// seed run three times in one process: NE 0.779, 0.792, 0.800), so the
/// means of 5 differ by ~0.004 between two identical jobs.
const DLRM_SEEDS: [u64; 5] = [1, 2, 3, 4, 5];

/// The binary, under `mpirun` on `ranks` ranks when given; run to its end.
fn shadowsync(ranks: Option<usize>, args: &[&str]) -> Output {
    command(ranks, args)
        .output()
        .expect("mpirun (Open MPI) is needed: scripts/setup.sh --with-mpi installs it")
}

/// The binary with `args`, under `mpirun` on `ranks` ranks when given.
fn command(ranks: Option<usize>, args: &[&str]) -> Command {
    let exe = env!("CARGO_BIN_EXE_shadowsync");
    let mut command = match ranks {
        Some(ranks) => {
            let mut c = Command::new("mpirun");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
                "-np",
            ])
            .arg(ranks.to_string())
            .arg(exe);
            c
        }
        None => Command::new(exe),
    };
    command.args(args).stdin(Stdio::null());
    command
}

fn said(output: &Output) -> String {
    format!(
        "status {:?}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// 400,000 synthetic rows (and 20,000 test rows) in `dir`.
fn data(dir: &Path) -> (String, String) {
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
        ],
    );
    assert!(made.status.success(), "{}", said(&made));
    data_paths(dir)
}

/// `train` arguments of a run (of logistic regression unless `more` names a
/// model) on `dir`'s data with
/// the configuration file `config`, `trainers` per rank under `sync`, without
/// evaluations on the way, writing `results`; then `more`.
fn lr_run(
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
    let model = match more.contains(&"--model") {
        true => &[][..],
        false => &["--model", "lr"][..],
    };
    args.iter()
        .chain(&["--optim-preset", "dlrm-reference"])
        .chain(model)
        .chain(more)
        .map(|a| a.to_string())
        .collect()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The test NE and the results of a run of logistic regression under `sync`.
fn train(dir: &Path, ranks: Option<usize>, trainers: usize, seed: u64, sync: &str) -> (f64, Value) {
    train_with(dir, ranks, trainers, seed, sync, ("", &[]))
}

/// [`train`] with `train_keys` added to the configuration's `[train]`, then
/// `more` arguments.
fn train_with(
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
    std::fs::write(
        &config,
        format!("[train]\ntable_sync_ms = 50\n{train_keys}\n[sync]\nserver_shards = 2\n"),
    )
    .unwrap();
    let seed = seed.to_string();
    let more: Vec<&str> = ["--seed", seed.as_str()]
        .into_iter()
        .chain(more.iter().copied())
        .collect();
    let args = lr_run(dir, &config, trainers, sync, &results, &more);
    let run = shadowsync(ranks, &strs(&args));
    assert!(run.status.success(), "{}", said(&run));
    let report: Value = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    (report["final_metrics"]["ne"].as_f64().unwrap(), report)
}

fn data_paths(dir: &Path) -> (String, String) {
    let path = |name: &str| dir.join("data").join(name).display().to_string();
    (path("train.tsv"), path("test.tsv"))
}

fn mean(values: &[f64]) -> f64 {
    mean_std(values).0
}

/// The standard error of the difference of the means of `a` and `b` (Welch).
fn difference_standard_error(a: &[f64], b: &[f64]) -> f64 {
    let variance_of_mean = |v: &[f64]| mean_std(v).1.powi(2) / v.len() as f64;
    (variance_of_mean(a) + variance_of_mean(b)).sqrt()
}

/// DLRM with Adagrad on tables sharded over the ranks (2 × 2 and 4 × 1) learns
/// as the same 4 trainers in one process do: the mean NEs over 5 seeds differ
/// by at most 0.005 beyond twice the standard error of their difference (which
/// the runs' own spread gives; ~0.004 here). A fixed 0.005 alone failed one CI
/// run in three with nothing wrong; a gap that timing does not explain fails.
#[test]
fn dlrm_with_sharded_tables_learns_across_ranks_as_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    let dlrm = [
        "--model",
        "dlrm",
        "--optimizer",
        "adagrad",
        "--lr",
        "0.01",
        "--sparse-optimizer",
        "adagrad",
        "--sparse-lr",
        "0.01",
    ];
    let mut nes = [Vec::new(), Vec::new(), Vec::new()];
    for seed in DLRM_SEEDS {
        for (ne, (ranks, trainers)) in nes.iter_mut().zip([(None, 4), (Some(2), 2), (Some(4), 1)]) {
            let (value, report) =
                train_with(dir.path(), ranks, trainers, seed, "shadow-ma", ("", &dlrm));
            assert_eq!(report["examples"], 400_000, "{report}");
            ne.push(value);
        }
    }
    let [together, two_by_two, four_by_one] = nes.clone().map(|ne| mean(&ne));
    eprintln!(
        "DLRM NE: 4 in one process {together:.4}, 2 × 2 {two_by_two:.4}, 4 × 1 {four_by_one:.4}"
    );
    assert!(together < 0.85, "DLRM did not learn: NE {together:.4}");
    for (layout, spread, runs) in [
        ("2 × 2", two_by_two, &nes[1]),
        ("4 × 1", four_by_one, &nes[2]),
    ] {
        let allowed = 0.005 + 2.0 * difference_standard_error(&nes[0], runs);
        assert!(
            (spread - together).abs() <= allowed,
            "{layout}: NE {spread:.4}, 4 in one process: {together:.4}, allowed {allowed:.4} \
             (each seed: {nes:?})"
        );
    }
}

#[test]
fn two_ranks_of_two_trainers_train_as_well_as_four_trainers_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    let mut spread = Vec::new();
    let mut together = Vec::new();
    for seed in SEEDS {
        let (ne, report) = train(dir.path(), Some(2), 2, seed, "shadow-ma");
        // The whole pass, over both ranks; the job's figures in rank 0's results.
        assert_eq!(report["examples"], 400_000, "{report}");
        let distributed = &report["distributed"];
        assert_eq!(distributed["processes"], 2, "{report}");
        assert_eq!(distributed["job_trainers"], 4, "{report}");
        // Every replica of the job scored as it is.
        assert_eq!(report["replica_metrics"].as_array().unwrap().len(), 4);
        // Sharded tables (the default across processes): rows fetched and
        // pushed, counted apart from the dense sync's bytes.
        assert_eq!(distributed["embeddings"], "sharded", "{report}");
        assert!(distributed["sharded"]["fetches"].as_u64().unwrap() > 0);
        assert!(distributed["sparse_bytes_per_example"].as_f64().unwrap() > 0.0);
        assert!(distributed["dense_bytes_sent"].as_u64().unwrap() > 0);
        spread.push(ne);
        let (ne, alone) = train(dir.path(), None, 4, seed, "shadow-ma");
        together.push(ne);
        // Each rank holds its half of the rows one process holds.
        let whole = alone["memory"]["table_bytes"].as_u64().unwrap();
        let shares: Vec<u64> = distributed["memory_per_process"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["table_bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(shares.len(), 2, "{report}");
        assert_eq!(shares.iter().sum::<u64>(), whole, "{shares:?} of {whole}");
        assert!(shares.iter().all(|&s| s as f64 <= 1.1 * whole as f64 / 2.0));
        assert!(
            distributed["memory_per_process"][1]["peak_rss_bytes"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
    let (spread, together) = (mean(&spread), mean(&together));
    assert!(
        (spread - together).abs() <= 0.005,
        "2 × 2: NE {spread:.4}, 4 in one process: {together:.4}"
    );
}

/// With replicated tables (each rank a whole copy, merged in the background).
#[test]
fn easgd_with_its_centre_sharded_over_two_ranks_trains_as_well_as_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    for sync in ["shadow-easgd", "fr-easgd:10"] {
        let replicated = ("embeddings = \"replicated\"", &[][..]);
        let (spread, report) = train_with(dir.path(), Some(2), 2, 1, sync, replicated);
        assert_eq!(report["examples"], 400_000, "{report}");
        let distributed = &report["distributed"];
        assert_eq!(distributed["embeddings"], "replicated", "{report}");
        assert!(distributed["table_sync"]["rounds"].as_u64().unwrap() >= 1);
        // Every trainer of rank 0 synced with the centre, half of it elsewhere.
        let stats = report["cluster"]["trainer_stats"].as_array().unwrap();
        assert!(
            stats.iter().all(|t| t["syncs"].as_u64().unwrap() > 0),
            "{sync}: {report}"
        );
        assert!(
            report["cluster"]["errors"].as_array().unwrap().is_empty(),
            "{report}"
        );
        let (together, _) = train(dir.path(), None, 4, 1, sync);
        assert!(
            (spread - together).abs() <= 0.005,
            "{sync}: 2 × 2: NE {spread:.4}, 4 in one process: {together:.4}"
        );
    }
}

/// Checkpoint files of `dir` (`rank-R-of-2/ckpt-*`): how many each rank has.
fn checkpoints_per_rank(dir: &Path) -> [usize; 2] {
    [0, 1].map(|rank| {
        std::fs::read_dir(dir.join(format!("rank-{rank}-of-2")))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))
                    .count()
            })
            .unwrap_or(0)
    })
}

#[test]
fn a_job_killed_mid_run_resumes_with_the_same_ranks_and_trains_every_example_once() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    // Every trainer stands still 20 ms every 5 steps: the job takes seconds,
    // time to kill it after a few checkpoints.
    let config = dir.path().join("paced.toml");
    std::fs::write(
        &config,
        "faults = [\n\
         { trainer = 0, kind = { hang = { ms = 20 } }, at_step = 1, every = 5 },\n\
         { trainer = 1, kind = { hang = { ms = 20 } }, at_step = 1, every = 5 },\n]\n",
    )
    .unwrap();
    let checkpoints = dir.path().join("ck");
    let run = |checkpoint_dir: &Path, results: &Path| {
        let checkpoint_dir = checkpoint_dir.display().to_string();
        let more = [
            "--checkpoint-dir",
            &checkpoint_dir,
            "--checkpoint-every",
            "100",
        ];
        let args = lr_run(dir.path(), &config, 2, "shadow-ma", results, &more);
        let mut c = command(Some(2), &strs(&args));
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    let killed_results = dir.path().join("killed.json");
    let mut job = run(&checkpoints, &killed_results).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while checkpoints_per_rank(&checkpoints).iter().any(|&n| n < 3) {
        assert!(Instant::now() < deadline, "no checkpoints written");
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGKILL to every rank (mpirun's children): nothing is written at exit.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", job.id())).unwrap();
    for rank in children.split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", rank]).status();
    }
    assert!(!job.wait().unwrap().success());
    assert!(!killed_results.exists());

    let resumed = shadowsync(
        Some(2),
        &[
            "train",
            "--resume",
            checkpoints.to_str().unwrap(),
            "--results",
            dir.path().join("resumed.json").to_str().unwrap(),
        ],
    );
    assert!(resumed.status.success(), "{}", said(&resumed));
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("resumed.json")).unwrap()).unwrap();
    let before = report["resumed"]["examples"].as_u64().unwrap();
    assert!(before > 0 && before < 400_000, "{report}");
    // Cursor accounting: the pass, whole, once, over both ranks.
    assert_eq!(report["examples"], 400_000, "{report}");
    let ne = report["final_metrics"]["ne"].as_f64().unwrap();

    let uninterrupted = run(&dir.path().join("ck-whole"), &dir.path().join("whole.json"))
        .status()
        .unwrap();
    assert!(uninterrupted.success());
    let whole: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("whole.json")).unwrap()).unwrap();
    let whole_ne = whole["final_metrics"]["ne"].as_f64().unwrap();
    assert!(
        (ne - whole_ne).abs() <= 0.005,
        "resumed NE {ne:.4}, uninterrupted {whole_ne:.4}"
    );

    // Resuming needs as many ranks as wrote the checkpoints.
    let three = shadowsync(
        Some(3),
        &["train", "--resume", checkpoints.to_str().unwrap()],
    );
    assert!(!three.status.success());
    assert!(
        String::from_utf8_lossy(&three.stderr).contains("rank-0-of-3 does not exist"),
        "{}",
        said(&three)
    );
}

#[test]
fn without_sync_the_job_reports_every_ranks_replicas() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    let (ne, report) = train(dir.path(), Some(2), 2, 1, "none");
    let each = report["replica_metrics"].as_array().unwrap();
    assert_eq!(each.len(), 4, "{report}");
    let mean = each.iter().map(|m| m["ne"].as_f64().unwrap()).sum::<f64>() / 4.0;
    assert!((mean - ne).abs() < 1e-12, "{mean} vs {ne}");
    // Rank 1's replicas trained on other shards than rank 0's.
    assert_ne!(each[0]["ne"], each[2]["ne"], "{report}");
}

#[test]
fn one_rank_behaves_like_one_process() {
    let dir = tempfile::tempdir().unwrap();
    data(dir.path());
    let (alone, report) = train(dir.path(), Some(1), 4, 1, "shadow-ma");
    assert!(report["distributed"].is_null(), "{report}");
    let (local, _) = train(dir.path(), None, 4, 1, "shadow-ma");
    assert!((alone - local).abs() <= 0.003, "{alone} vs {local}");
}

#[test]
fn a_rank_that_fails_ends_the_job_within_seconds_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test) = data(dir.path());
    // A malformed line in chunk 42 of 128 lines: shard 42 % 4 = 2, rank 1's.
    let text = std::fs::read_to_string(&train).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let bad = 42 * 128 + 5;
    let broken = format!("x\t{}", lines[bad].split_once('\t').unwrap().1);
    lines[bad] = &broken;
    let bad_train = dir.path().join("bad.tsv");
    std::fs::write(&bad_train, lines.join("\n") + "\n").unwrap();
    let started = Instant::now();
    let run = shadowsync(
        Some(2),
        &[
            "train",
            "--train",
            bad_train.to_str().unwrap(),
            "--test",
            &test,
            "--model",
            "lr",
            "--trainers",
            "2",
            "--sync",
            "shadow-ma",
        ],
    );
    let took = started.elapsed();
    assert!(!run.status.success(), "{}", said(&run));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("rank 1 of 2"), "{}", said(&run));
    assert!(
        stderr.contains(&format!("bad.tsv:{}: field 1 (label)", bad + 1)),
        "{}",
        said(&run)
    );
}
