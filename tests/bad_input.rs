//! Bad and edge inputs, one case per class, against the binary as a user runs
//! it: each ends in a clear error naming what and where, exits non-zero when
//! nothing useful happened, and loses nothing already computed.
//! docs/results/reliability.md lists the cases tried and how each ends.

mod common;

use common::{output_within, run, sample, shadowsync, text, RunToEnd};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Asserts the command failed and said every one of `words`.
#[track_caller]
fn fails_saying(out: &Output, words: &[&str]) {
    let said = text(out);
    assert!(!out.status.success(), "exited 0: {said}");
    for word in words {
        assert!(said.contains(word), "no {word:?} in: {said}");
    }
}

/// A small, fast run on the shipped Criteo samples.
fn small<'a>(train: &'a str, test: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "--train",
        train,
        "--test",
        test,
        "--model",
        "lr",
        "--table-size",
        "1000",
    ]
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn sample_str(name: &str) -> String {
    sample(name).to_str().unwrap().to_string()
}

/// Runs the binary with `args` where no file may grow past `kib` KiB, as on a
/// full disk: the signal that limit sends is ignored, so writes get the error.
fn run_on_a_full_disk(kib: u32, args: &[&str]) -> Output {
    let command = format!(
        "trap '' XFSZ; ulimit -f {kib}; exec {} {}",
        env!("CARGO_BIN_EXE_shadowsync"),
        args.join(" ")
    );
    Command::new("bash")
        .args(["-c", &command])
        .env("RUST_LOG", "warn")
        .run_to_end()
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Sends `signal` (`TERM` or `INT`) to `child` once it has installed its
/// handler for it (a process still loading libtorch would just be killed).
fn signal(child: &Child, signal: &str) {
    let number = match signal {
        "TERM" => 15,
        "INT" => 2,
        other => panic!("no number known for SIG{other}"),
    };
    let status = format!("/proc/{}/status", child.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    let catches = || {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (number - 1)) != 0)
    };
    while !catches() {
        assert!(Instant::now() < deadline, "SIG{signal} never caught");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success());
}

// ---- Data files ----------------------------------------------------------

#[test]
fn a_stream_without_newlines_is_refused_at_its_first_line() {
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let said = ["/dev/zero", "line 1 has no end", "not a Criteo TSV file"];
    let out = run(&small("/dev/zero", &test));
    fails_saying(&out, &said);
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let out = run(&small(&train, "/dev/zero"));
    fails_saying(&out, &said);
}

/// The shipped 100-line training sample `times` times over, with line
/// `long` (1-based) replaced by one of 70 KiB.
fn with_an_over_long_line(dir: &Path, times: usize, long: usize) -> PathBuf {
    let sample = std::fs::read_to_string(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    let mut lines: Vec<&str> = sample.lines().cycle().take(times * 100).collect();
    let over_long = format!("1\t{}", "7".repeat(70 * 1024));
    lines[long - 1] = &over_long;
    let file = dir.join("long.tsv");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

#[test]
fn an_over_long_line_mid_file_stops_the_run_naming_it_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let train = with_an_over_long_line(dir.path(), 100, 1001);
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let results = dir.path().join("results.json");
    for trainers in ["1", "2"] {
        let mut args = small(path(&train), &test);
        args.extend(["--trainers", trainers, "--results", path(&results)]);
        let out = run(&args);
        let at = format!("{}: line 1001 is longer than 64 KiB", train.display());
        fails_saying(&out, &[&at]);
        args.extend(["--bad-lines", "skip"]);
        let out = run(&args);
        assert!(out.status.success(), "{}", text(&out));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
        assert_eq!(report["examples"], 9_999, "{trainers} trainers: {report}");
        assert!(
            text(&out).contains("skipped 1 malformed train lines of 10000"),
            "{}",
            text(&out)
        );
    }
}

/// The shipped training sample, gzip-compressed, at `dir/train.tsv.gz`.
fn gzipped_sample(dir: &Path) -> PathBuf {
    let gzip = dir.join("train.tsv.gz");
    let mut encoder = flate2::write::GzEncoder::new(
        std::fs::File::create(&gzip).unwrap(),
        flate2::Compression::default(),
    );
    encoder
        .write_all(&std::fs::read(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap())
        .unwrap();
    encoder.finish().unwrap();
    gzip
}

#[test]
fn pipes_fifos_and_standard_input_train_plain_or_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let plain = sample("criteo_kaggle_paddlerec_train100.tsv");
    let gzip = gzipped_sample(dir.path());
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let results = dir.path().join("results.json");
    let fifo = dir.path().join("train.fifo");
    mkfifo(&fifo);
    for input in [&plain, &gzip] {
        for train in ["-", "/dev/stdin", path(&fifo)] {
            let mut args = small(train, &test);
            args.extend(["--results", path(&results)]);
            let mut command = shadowsync(&args);
            let writer = match train {
                "-" | "/dev/stdin" => {
                    command.stdin(std::fs::File::open(input).unwrap());
                    None
                }
                _ => {
                    let (fifo, input) = (fifo.clone(), input.to_path_buf());
                    Some(std::thread::spawn(move || {
                        std::fs::write(fifo, std::fs::read(input).unwrap()).unwrap()
                    }))
                }
            };
            let out = output_within(
                command
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
                Duration::from_secs(60),
            );
            if let Some(writer) = writer {
                writer.join().unwrap();
            }
            let what = format!("{} through {train}", input.display());
            assert!(out.status.success(), "{what}: {}", text(&out));
            let report: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
            assert_eq!(report["examples"], 100, "{what}");
        }
    }
}

#[test]
fn an_empty_training_file_plain_or_gzip_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.tsv");
    std::fs::write(&empty, b"").unwrap();
    let gzip = dir.path().join("empty.tsv.gz");
    let mut encoder = flate2::write::GzEncoder::new(
        std::fs::File::create(&gzip).unwrap(),
        flate2::Compression::default(),
    );
    encoder.write_all(b"").unwrap();
    encoder.finish().unwrap();
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    for file in [&empty, &gzip] {
        let out = run(&small(path(file), &test));
        fails_saying(&out, &[path(file), "has no examples: the file is empty"]);
    }
}

#[test]
fn a_file_of_only_bad_lines_skipped_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tsv");
    std::fs::write(&bad, "x\t1\n2\t3\nlabel\n").unwrap();
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut args = small(path(&bad), &test);
    args.extend(["--bad-lines", "skip"]);
    let out = run(&args);
    fails_saying(&out, &["bad.tsv", "every one of its 3 lines is malformed"]);
}

#[test]
fn an_empty_test_file_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("test.tsv");
    std::fs::write(&empty, b"").unwrap();
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let out = run(&small(&train, path(&empty)));
    fails_saying(&out, &["test.tsv", "has no examples"]);
    assert!(!text(&out).contains("trained"), "{}", text(&out));
}

// ---- Results and other output files -------------------------------------

#[test]
fn a_results_path_that_cannot_be_written_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    // A directory; a path under a regular file (root ignores permissions,
    // not file types).
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"x").unwrap();
    let under_a_file = plain.join("results.json");
    for results in [dir.path(), under_a_file.as_path()] {
        let mut args = small(&train, &test);
        args.extend(["--results", path(results)]);
        let out = run(&args);
        fails_saying(&out, &["--results"]);
        assert!(!text(&out).contains("trained"), "{}", text(&out));
    }
}

#[test]
fn results_that_cannot_be_written_leave_the_previous_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.json");
    let previous = br#"{"a valid": "results file"}"#;
    std::fs::write(&results, previous).unwrap();
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut args = small(&train, &test);
    args.extend(["--results", path(&results)]);
    let out = run_on_a_full_disk(2, &args);
    fails_saying(&out, &["results not written", "test (100 examples): NE"]);
    assert_eq!(std::fs::read(&results).unwrap(), previous);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["results.json"], "a temporary file was left");
}

#[test]
fn no_output_replaces_an_input_a_link_or_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.tsv");
    std::fs::copy(sample("criteo_kaggle_paddlerec_train100.tsv"), &train).unwrap();
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "[train]\nseed = 3\n").unwrap();
    let before = std::fs::read(&train).unwrap();
    let run_writing = |results: &Path| {
        let mut args = small(path(&train), &test);
        args.extend(["--config", path(&config), "--results", path(results)]);
        run(&args)
    };
    // The training data, the config file, and the data through a link.
    let link_to_train = dir.path().join("train-link.json");
    std::os::unix::fs::symlink(&train, &link_to_train).unwrap();
    for input in [&train, &config, &link_to_train] {
        let out = run_writing(input);
        fails_saying(&out, &["--results", "an input of this run"]);
        assert!(!text(&out).contains("trained"), "{}", text(&out));
    }
    assert_eq!(std::fs::read(&train).unwrap(), before, "the data is whole");
    // A link to an output is written through: the link stays a link.
    let results = dir.path().join("results.json");
    let link = dir.path().join("latest.json");
    std::os::unix::fs::symlink("results.json", &link).unwrap();
    let out = run_writing(&link);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    assert_eq!(report["examples"], 100);
    // A FIFO is written into, not replaced by a file.
    let fifo = dir.path().join("results.fifo");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let out = run_writing(&fifo);
    assert!(out.status.success(), "{}", text(&out));
    let sent: serde_json::Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    assert_eq!(sent["examples"], 100);
    assert!(!std::fs::metadata(&fifo).unwrap().is_file());
}

#[test]
fn checkpoints_on_a_full_disk_fail_the_run_and_leave_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ckpt");
    let (train, test) = (
        sample_str("criteo_kaggle_paddlerec_train100.tsv"),
        sample_str("criteo_kaggle_paddlerec_test100.tsv"),
    );
    let mut args = small(&train, &test);
    args.extend(["--checkpoint-dir", path(&checkpoints)]);
    let out = run_on_a_full_disk(2, &args);
    fails_saying(
        &out,
        &["trained to the end, but 1 checkpoints could not be saved"],
    );
    let left: Vec<_> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn resume_given_one_checkpoint_or_a_missing_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("ckpt");
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut args = small(&train, &test);
    args.extend(["--checkpoint-dir", path(&checkpoints)]);
    let out = run(&args);
    assert!(out.status.success(), "{}", text(&out));
    let one = checkpoints.join("ckpt-000001");
    let out = run(&["train", "--resume", path(&one)]);
    let parent = format!("--resume {}", checkpoints.display());
    fails_saying(&out, &["is one checkpoint", &parent]);
    // The run finished: nothing is left to resume.
    let out = run(&["train", "--resume", path(&checkpoints)]);
    fails_saying(&out, &["already finished", "100 examples", "nothing"]);
    let missing = dir.path().join("missing");
    let out = run(&["train", "--resume", path(&missing)]);
    fails_saying(&out, &["is not a checkpoint directory (it does not exist)"]);
    assert!(!missing.exists(), "--resume made the directory");
}

/// A fresh run never removes what is not its own: a directory holding
/// another run's checkpoints, or the user's folders named like them, is
/// refused before anything is written, and nothing in it changes.
#[test]
fn a_fresh_run_refuses_a_directory_of_checkpoints_and_prunes_only_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test) = (
        sample_str("criteo_kaggle_paddlerec_train100.tsv"),
        sample_str("criteo_kaggle_paddlerec_test100.tsv"),
    );
    let user = dir.path().join("userdir");
    for n in 1..=4 {
        let folder = user.join(format!("ckpt-{n:06}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("holiday.txt"), b"mine").unwrap();
    }
    let mut args = small(&train, &test);
    args.extend(["--checkpoint-dir", path(&user), "--keep-checkpoints", "1"]);
    let out = run(&args);
    fails_saying(
        &out,
        &["checkpoint.dir", "already holds 4 checkpoints", "--resume"],
    );
    for n in 1..=4 {
        let kept = user.join(format!("ckpt-{n:06}/holiday.txt"));
        assert_eq!(std::fs::read(&kept).unwrap(), b"mine", "{}", kept.display());
    }
    // A run's own checkpoints: re-running the command without --resume is
    // refused, and the run it could resume is whole.
    let ours = dir.path().join("ours");
    let mut args = small(&train, &test);
    args.extend(["--checkpoint-dir", path(&ours), "--batch-size", "10"]);
    args.extend(["--checkpoint-every", "2", "--keep-checkpoints", "2"]);
    assert!(run(&args).status.success());
    let before: Vec<_> = std::fs::read_dir(&ours)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before.len(), 2, "{before:?}");
    fails_saying(&run(&args), &["already holds 2 checkpoints", "--resume"]);
    let after: Vec<_> = std::fs::read_dir(&ours)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(after.len(), 2, "{after:?}");
}

#[test]
fn gen_data_never_replaces_data_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("train.tsv");
    std::fs::write(&theirs, "the user's own data\n").unwrap();
    let out = run(&[
        "gen-data",
        "--out",
        path(dir.path()),
        "--rows",
        "10",
        "--test-rows",
        "10",
    ]);
    fails_saying(&out, &["train.tsv", "is not data this generator made"]);
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "the user's own data\n"
    );
    // Its own data it makes again.
    let own = dir.path().join("own");
    for _ in 0..2 {
        let out = run(&[
            "gen-data",
            "--out",
            path(&own),
            "--rows",
            "10",
            "--test-rows",
            "10",
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[test]
fn a_file_given_where_a_directory_is_needed_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "x").unwrap();
    let at = path(&file);
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut checkpoints = small(&train, &test);
    checkpoints.extend(["--checkpoint-dir", at]);
    let under = file.join("runs");
    for args in [
        &["gen-data", "--out", at, "--rows", "10", "--test-rows", "10"][..],
        &checkpoints,
        &["experiment", "smoke", "--out", at],
        &[
            "gen-data",
            "--out",
            path(&under),
            "--rows",
            "10",
            "--test-rows",
            "10",
        ],
    ] {
        fails_saying(&run(args), &[at, "is a file, not a directory"]);
    }
    fails_saying(
        &run(&["train", "--resume", at]),
        &["is not a checkpoint directory (it is a file)"],
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn gen_data_on_a_full_disk_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let done = run_on_a_full_disk(64, &["gen-data", "--out", path(&out), "--rows", "20000"]);
    fails_saying(&done, &["train.tsv"]);
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_bad_first_line_is_named_not_reported_as_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let sample = std::fs::read_to_string(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let cases = [
        (
            "header.tsv",
            format!("label\tI1\tI2\n{sample}"),
            "label must be 0 or 1",
        ),
        (
            "bom.tsv",
            format!("\u{feff}{sample}"),
            "label must be 0 or 1",
        ),
        (
            "spaces.tsv",
            sample.replace('\t', " "),
            "label must be 0 or 1",
        ),
    ];
    for (name, content, reason) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, content).unwrap();
        let at = format!("{}:1: field 1 (label)", file.display());
        let out = run(&small(path(&file), &test));
        fails_saying(&out, &[&at, reason]);
        assert!(!text(&out).contains("has no examples"), "{}", text(&out));
    }
}

// ---- Signals -------------------------------------------------------------

#[test]
fn sigterm_ends_a_run_blocked_opening_a_pipe_with_no_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("test.fifo");
    mkfifo(&fifo);
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let child = shadowsync(&small(&train, path(&fifo)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "TERM");
    let out = output_within(child, Duration::from_secs(10));
    fails_saying(&out, &["SIGTERM", "before training started"]);
}

#[test]
fn sigint_ends_a_run_whose_input_pipe_stalls_with_results_and_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("train.fifo");
    mkfifo(&fifo);
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let (results, checkpoints) = (dir.path().join("results.json"), dir.path().join("ckpt"));
    let mut args = small(path(&fifo), &test);
    args.extend(["--batch-size", "10", "--results", path(&results)]);
    args.extend([
        "--checkpoint-dir",
        path(&checkpoints),
        "--checkpoint-every",
        "5",
    ]);
    let child = shadowsync(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The writer sends 500 lines, then stalls with the pipe open.
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let lines = std::fs::read(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    for _ in 0..5 {
        writer.write_all(&lines).unwrap();
    }
    // Once training has gone on (a periodic checkpoint is there).
    let started = Instant::now();
    while std::fs::read_dir(&checkpoints).map_or(true, |mut d| d.next().is_none()) {
        assert!(started.elapsed() < Duration::from_secs(60), "never trained");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&child, "INT");
    let out = output_within(child, Duration::from_secs(10));
    drop(writer);
    fails_saying(&out, &["interrupted", "--resume"]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let examples = report["examples"].as_u64().unwrap();
    assert!((50..=500).contains(&examples), "{examples} examples");
    assert!(report["final_metrics"]["ne"].as_f64().is_some(), "{report}");
}

#[test]
fn sigint_ends_a_run_promptly_while_sync_rounds_cross_a_slow_link() {
    let dir = tempfile::tempdir().unwrap();
    // A DLRM replica of about 50k floats over a 100 kbit/s link: a round's
    // messages take seconds to cross.
    let child = shadowsync(&[
        "train",
        "--rows",
        "400000",
        "--test-rows",
        "2000",
        "--table-size",
        "1000",
        "--trainers",
        "2",
        "--sync",
        "shadow-ma",
        "--link-gbps",
        "0.0001",
        "--eval-every",
        "0",
        "--checkpoint-dir",
        path(&dir.path().join("ckpt")),
    ])
    .env("HOME", dir.path())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Until the data is made and training has gone on a while.
    let started = Instant::now();
    let data = dir.path().join(".cache/shadowsync/data");
    let made = || {
        std::fs::read_dir(&data)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("oracle.json").exists())
    };
    while !made() {
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(4));
    signal(&child, "INT");
    let out = output_within(child, Duration::from_secs(20));
    fails_saying(&out, &["interrupted", "--resume"]);
}

// ---- Flags and configuration ---------------------------------------------

#[test]
fn options_that_would_be_ignored_are_refused_naming_the_key() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "train",
                "--trainers",
                "4",
                "--group-size",
                "2",
                "--sync",
                "shadow-ma",
            ],
            &["sync.group_size", "schedule"],
        ),
        (
            &["train", "--checkpoint-every", "100"],
            &["checkpoint.every_steps", "checkpoint.dir"],
        ),
        (
            &[
                "train",
                "--sync",
                "shadow-ma",
                "--trainers",
                "2",
                "--alpha",
                "0.5",
            ],
            &["sync.easgd", "EASGD"],
        ),
        (&["train", "--lr", "-1"], &["optim.dense_lr", "-1"]),
        (&["train", "--sparse-lr", "-0.5"], &["optim.sparse_lr"]),
        (
            &["train", "--sparse-optimizer", "adam"],
            &["optim.sparse", "\"adam\"", "adagrad, ftrl, sgd"],
        ),
        (&["train", "--trainers", "0"], &["train.trainers"]),
        (&["train", "--batch-size", "0"], &["train.batch_size"]),
        (&["train", "--table-size", "0"], &["data.table_size"]),
        (&["train", "--threads", "0"], &["train.threads"]),
        (
            &["gen-data", "--out", "/tmp/never", "--rows", "0"],
            &["--rows", "0"],
        ),
        // Edge values of integer and time fields.
        (
            &["train", "--trainers", "18446744073709551615"],
            &["train.trainers"],
        ),
        (
            &["train", "--trainers", "100000"],
            &["train.trainers", "1024"],
        ),
        (
            &["train", "--batch-size", "18446744073709551615"],
            &["train.batch_size"],
        ),
        (&["train", "--threads", "100000"], &["train.threads"]),
        (
            &[
                "train",
                "--sync",
                "shadow-easgd",
                "--trainers",
                "2",
                "--server-shards",
                "100000",
            ],
            &["sync.easgd.server_shards"],
        ),
        (
            &[
                "train",
                "--sync",
                "shadow-ma",
                "--trainers",
                "2",
                "--peer-timeout-ms",
                "1e300",
            ],
            &["sync.peer_timeout_ms"],
        ),
        (
            &[
                "train",
                "--sync",
                "shadow-ma",
                "--trainers",
                "2",
                "--link-latency-us",
                "1e300",
            ],
            &["sync.link"],
        ),
    ];
    for (args, words) in cases {
        fails_saying(&run(args), words);
    }
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut args = small(&train, &test);
    args.extend(["--rows", "1000"]);
    fails_saying(&run(&args), &["--rows"]);
    // What --help offers is what is accepted.
    let help = text(&run(&["train", "--help"]));
    let line = help
        .lines()
        .skip_while(|l| !l.contains("--sparse-optimizer"))
        .take_while(|l| !l.contains("--sparse-lr"))
        .collect::<String>();
    assert!(
        line.contains("adagrad") && line.contains("ftrl") && !line.contains("adam"),
        "{line}"
    );
}

#[test]
fn options_the_chosen_mode_would_ignore_are_refused_naming_it() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "train",
                "--sync",
                "shadow-ma",
                "--trainers",
                "2",
                "--server-shards",
                "2",
            ],
            &["sync.easgd", "shadow-ma", "EASGD"],
        ),
        (
            &["train", "--trainers", "2", "--link-gbps", "1"],
            &["sync.link", "none"],
        ),
        (
            &["train", "--trainers", "2", "--schedule", "random"],
            &["sync.schedule", "none"],
        ),
        (
            &[
                "train",
                "--sync",
                "fr-ma:4",
                "--trainers",
                "2",
                "--min-steps",
                "8",
            ],
            &["sync.shadow", "fr-ma:4", "shadow-*"],
        ),
        (
            &["train", "--keep-checkpoints", "5"],
            &["checkpoint.keep", "checkpoint.dir"],
        ),
    ];
    for (args, words) in cases {
        fails_saying(&run(args), words);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str, text: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        file
    };
    let lr = config(
        "lr.toml",
        "[model]\nkind = \"lr\"\n[model.deepfm]\ndeep_mlp = [8]\n",
    );
    fails_saying(
        &run(&["train", "--config", path(&lr)]),
        &["model.deepfm", "lr"],
    );
    // [model], [sync] and [optim] take sections of registered models, rules
    // and row optimizers, so a typo is caught by name once the registry is
    // known.
    let typo = config("typo.toml", "[model]\nembeding_dim = 8\n");
    fails_saying(
        &run(&["train", "--config", path(&typo)]),
        &["model.embeding_dim", "unknown key"],
    );
    let typo = config("sync-typo.toml", "[sync]\ngrup_size = 2\n");
    fails_saying(
        &run(&["train", "--config", path(&typo)]),
        &["sync.grup_size", "unknown key"],
    );
    let typo = config("optim-typo.toml", "[optim]\nsparse_rl = 0.1\n");
    fails_saying(
        &run(&["train", "--config", path(&typo)]),
        &["optim.sparse_rl", "unknown key"],
    );
    let sharded = config("sharded.toml", "[train]\nembedding_staleness = 4\n");
    fails_saying(
        &run(&["train", "--config", path(&sharded)]),
        &["train.embedding_staleness", "replicated"],
    );
    // A flag overrides the file: --table-size replaces the file's sizes per
    // table (here with a value that is refused, naming the flag's key).
    let sizes = format!("[data]\ntable_sizes = [{}]\n", ["10"; 26].join(", "));
    let sizes = config("sizes.toml", &sizes);
    fails_saying(
        &run(&["train", "--config", path(&sizes), "--table-size", "0"]),
        &["data.table_size"],
    );
}

#[test]
fn a_table_too_big_for_memory_is_one_line_naming_the_key_and_bytes() {
    for args in [
        &["train", "--table-size", "4294967295"][..],
        &[
            "train",
            "--table-size",
            "200000000",
            "--rows",
            "10",
            "--test-rows",
            "10",
        ],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = shadowsync(args).env("HOME", dir.path()).run_to_end();
        fails_saying(&out, &["data.table_size", "GB", "memory available"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.lines().count() <= 3, "{stderr}");
    }
}

#[test]
fn an_experiment_with_no_valid_run_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.toml");
    std::fs::write(
        &file,
        "name = \"broken\"\n[base.train]\nbatch_size = 0\n[grid]\n\"train.seed\" = [1, 2]\n",
    )
    .unwrap();
    let out = run(&["experiment", path(&file), "--out", path(dir.path())]);
    fails_saying(&out, &["no run of the grid", "train.batch_size"]);
}

#[test]
fn a_report_over_damaged_results_names_them_and_fails_if_none_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results/tiny");
    std::fs::create_dir_all(results.join("runs")).unwrap();
    std::fs::write(
        results.join("experiment.toml"),
        "name = \"tiny\"\n[grid]\n\"train.seed\" = [1]\n",
    )
    .unwrap();
    std::fs::write(
        results.join("runs/seed=1.json"),
        b"{\"id\": \"seed=1\", \"trunc",
    )
    .unwrap();
    let out = run(&[
        "report",
        path(&results),
        "--out",
        path(&dir.path().join("docs")),
    ]);
    fails_saying(&out, &["damaged", "seed=1.json", "no run has results"]);
}

// ---- Faults and logs -----------------------------------------------------

#[test]
fn a_trainer_that_panics_at_every_step_is_given_up_and_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("faults.toml");
    std::fs::write(
        &config,
        "[[faults]]\ntrainer = 0\nkind = \"panic\"\nat_step = 0\nevery = 1\n",
    )
    .unwrap();
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let mut args = small(&train, &test);
    args.extend(["--config", path(&config), "--batch-size", "10"]);
    let out = run(&args);
    fails_saying(
        &out,
        &["trainer 0 failed 5 steps in a row", "injected panic"],
    );
    // The recoveries' WARN lines say it, without the raw panic reports.
    let said = text(&out);
    assert!(!said.contains("panicked at"), "{said}");
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let train = sample_str("criteo_kaggle_paddlerec_train100.tsv");
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let out = shadowsync(&small(&train, &test))
        .env("RUST_LOG", "info")
        .run_to_end();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INFO"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

// ---- Resume --------------------------------------------------------------

#[test]
fn a_run_resumes_from_another_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("data")).unwrap();
    for name in [
        "criteo_kaggle_paddlerec_train100.tsv",
        "criteo_kaggle_paddlerec_test100.tsv",
    ] {
        std::fs::copy(sample(name), work.join("data").join(name)).unwrap();
    }
    // Relative paths, as a user types them.
    let first = shadowsync(&small(
        "data/criteo_kaggle_paddlerec_train100.tsv",
        "data/criteo_kaggle_paddlerec_test100.tsv",
    ))
    .args(["--checkpoint-dir", "ckpt", "--batch-size", "10"])
    .args(["--checkpoint-every", "3"])
    .current_dir(&work)
    .run_to_end();
    assert!(first.status.success(), "{}", text(&first));
    // As if killed after its last periodic checkpoint: the end-of-run one
    // goes.
    let saved = common::checkpoints::checkpoints_in(&work.join("ckpt"));
    std::fs::remove_dir_all(saved.last().unwrap()).unwrap();
    let elsewhere: PathBuf = dir.path().to_path_buf();
    let resumed = shadowsync(&["train", "--resume", "work/ckpt"])
        .current_dir(&elsewhere)
        .run_to_end();
    let said = text(&resumed);
    assert!(resumed.status.success(), "{said}");
    assert!(said.contains("test (100 examples)"), "{said}");
    assert!(said.contains("resumed from"), "{said}");
}

#[test]
fn a_run_is_not_resumed_on_a_changed_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.tsv");
    std::fs::copy(sample("criteo_kaggle_paddlerec_train100.tsv"), &train).unwrap();
    let test = sample_str("criteo_kaggle_paddlerec_test100.tsv");
    let checkpoints = dir.path().join("ckpt");
    let first = shadowsync(&small(path(&train), &test))
        .args(["--checkpoint-dir", path(&checkpoints)])
        .run_to_end();
    assert!(first.status.success(), "{}", text(&first));
    // The file gets more rows, as a log being appended to would.
    let mut more = std::fs::OpenOptions::new()
        .append(true)
        .open(&train)
        .unwrap();
    more.write_all(b"1\t\t\t\t\t\t\t\t\t\t\t\t\t\n").unwrap();
    let out = run(&["train", "--resume", path(&checkpoints)]);
    fails_saying(
        &out,
        &["resume", "train.tsv", "changed since the checkpoint"],
    );
}
