//! `shadowsync experiment` and `shadowsync report` as a user runs them: a grid
//! runs, resumes without running its finished runs again, and becomes a
//! document with a table and plots.

mod common;

use common::text;
use std::path::Path;
use std::process::Output;

/// The texts an SVG plot shows (legend labels, ticks, axis names).
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).unwrap();
    svg.split("<text")
        .skip(1)
        .filter_map(|element| {
            let start = element.find('>')? + 1;
            let end = element.find("</text>")?;
            Some(element[start..end].trim().to_string())
        })
        .collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `report` of the grid's results under `results`, into `docs`.
fn report_of_grid(results: &Path, docs: &Path) -> Output {
    common::run(&[
        "report",
        results.join("cli-grid").to_str().unwrap(),
        "--out",
        docs.to_str().unwrap(),
    ])
}

/// A 2 × 2 × 2 grid (two seeds) of logistic regression on 20,000 rows.
fn write_grid(dir: &Path) -> String {
    let path = dir.join("grid.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"cli-grid\"\ntitle = \"A grid of the CLI test\"\nabout = \"Eight small runs.\"\n\
             target_ne = 1.0\n\
             [base]\ndata.synthetic = {{ train_rows = 20000, test_rows = 4000, dir = {:?} }}\n\
             data.table_size = 4000\nmodel.kind = \"lr\"\ntrain.eval_every = 5000\n\
             train.consensus_every_ms = 10\n\
             [grid]\n\"sync.algorithm\" = [\"none\", \"shadow-ma\"]\n\"train.trainers\" = [1, 2]\n\
             \"train.seed\" = [1, 2]\n",
            dir.join("data")
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn a_grid_runs_resumes_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let grid = write_grid(dir.path());
    let results = dir.path().join("results");
    let results_arg = results.display().to_string();
    let run = || common::run(&["experiment", &grid, "--out", &results_arg]);

    let first = run();
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        stdout(&first).contains("8 of 8 runs done (8 now, 0 already)"),
        "{}",
        text(&first)
    );
    let again = run();
    assert!(
        stdout(&again).contains("8 of 8 runs done (0 now, 8 already)"),
        "{}",
        text(&again)
    );
    let runs = results.join("cli-grid/runs");
    std::fs::remove_file(runs.join("algorithm=shadow-ma,trainers=2,seed=2.json")).unwrap();
    let resumed = run();
    assert!(
        stdout(&resumed).contains("8 of 8 runs done (1 now, 7 already)"),
        "{}",
        text(&resumed)
    );

    let docs = dir.path().join("docs");
    let report = || {
        let out = common::run(&[
            "report",
            results.join("cli-grid").to_str().unwrap(),
            "--out",
            docs.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
    };
    report();
    let document = std::fs::read_to_string(docs.join("cli-grid.md")).unwrap();
    assert!(
        document.starts_with("# A grid of the CLI test"),
        "{document}"
    );
    let spec = results.join("cli-grid/experiment.toml");
    assert!(
        document.contains(&format!("experiment {} --out", spec.display())),
        "{document}"
    );
    // One row per cell (the seeds averaged), mean ± standard deviation.
    let rows: Vec<&str> = document
        .lines()
        .filter(|l| l.starts_with("| none") || l.starts_with("| shadow-ma"))
        .collect();
    assert_eq!(rows.len(), 4, "{document}");
    assert!(
        rows.iter()
            .all(|r| r.contains(" | 2 | ") && r.contains('±')),
        "{rows:?}"
    );
    // Every run's replicas scored on their own, beside the final model.
    assert!(
        document.contains("| replicas' NE | consensus distance |"),
        "{document}"
    );
    assert!(rows.iter().all(|r| r.contains(") | ")), "{rows:?}");
    // The CPU each run's trainers and shadow loops took, and the sync work's share.
    for seed in [1, 2] {
        let run = |algorithm: &str| -> serde_json::Value {
            let path = runs.join(format!("algorithm={algorithm},trainers=2,seed={seed}.json"));
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        };
        let cpu = |run: &serde_json::Value, figure: &str| -> f64 {
            let stats = run["report"]["cluster"]["trainer_stats"]
                .as_array()
                .unwrap();
            stats.iter().map(|s| s[figure].as_f64().unwrap()).sum()
        };
        let (none, shadow) = (run("none"), run("shadow-ma"));
        assert!(cpu(&none, "training_cpu_seconds") > 0.0);
        assert!(cpu(&shadow, "training_cpu_seconds") > 0.0);
        assert_eq!(cpu(&none, "sync_cpu_seconds"), 0.0);
        assert!(cpu(&shadow, "sync_cpu_seconds") > 0.0);
    }
    assert!(
        document.contains("| staleness | sync CPU | sync bytes/example | seconds |"),
        "{document}"
    );
    assert!(rows.iter().all(|r| r.contains("% | ")), "{rows:?}");
    // Seconds to the target NE: the first evaluation that reached it, as the
    // runs' histories say (mean of the two seeds).
    let history_seconds = |seed: u32| -> f64 {
        let run = runs.join(format!("algorithm=none,trainers=1,seed={seed}.json"));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run).unwrap()).unwrap();
        let history = report["report"]["history"].as_array().unwrap();
        let reached = history
            .iter()
            .find(|p| p["metrics"]["ne"].as_f64().unwrap() <= 1.0)
            .expect("no evaluation reached NE 1.0");
        reached["train_seconds"].as_f64().unwrap()
    };
    let expected = (history_seconds(1) + history_seconds(2)) / 2.0;
    assert!(document.contains("| seconds to NE ≤ 1 |"), "{document}");
    let none_alone = rows.iter().find(|r| r.starts_with("| none | 1 |")).unwrap();
    let cells: Vec<&str> = none_alone.split(" | ").collect();
    let reported = cells[cells.len() - 1].split(' ').next().unwrap();
    assert_eq!(reported, format!("{expected:.1}"), "{none_alone}");
    for plot in [
        "throughput.svg",
        "sync-gap.svg",
        "staleness.svg",
        "consensus.svg",
    ] {
        assert!(document.contains(&format!("(cli-grid/{plot})")), "{plot}");
        let svg = std::fs::read_to_string(docs.join("cli-grid").join(plot)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("shadow-ma"),
            "{plot}"
        );
    }

    // Legends name what varies among the lines, each line once, whole; a
    // lone line says all it is. Throughput against trainers: the trainers on
    // the axis (a tick at each power of two), not in the legend; y from 0.
    let texts = |plot: &str| svg_texts(&docs.join("cli-grid").join(plot));
    let legends = [
        (
            "throughput.svg",
            &["algorithm none", "algorithm shadow-ma"][..],
        ),
        (
            "consensus.svg",
            &["algorithm none", "algorithm shadow-ma"][..],
        ),
        ("sync-gap.svg", &["algorithm shadow-ma, trainers 2"][..]),
    ];
    for (plot, labels) in legends {
        let shown = texts(plot);
        for label in labels {
            let times = shown.iter().filter(|t| t == label).count();
            assert_eq!(times, 1, "{plot}: {label:?} in {shown:?}");
        }
    }
    let shown = texts("throughput.svg");
    for tick in ["1", "2", "0.0"] {
        assert!(shown.iter().any(|t| t == tick), "{tick:?} in {shown:?}");
    }
    assert!(!shown.iter().any(|t| t.contains("trainers 2")), "{shown:?}");

    // Against `none` unless the grid names another baseline.
    assert!(
        document.contains("| ÷ none | NE − none's (p) |"),
        "{document}"
    );
    let text = std::fs::read_to_string(&spec).unwrap();
    let text = text.replacen(
        "target_ne",
        "baseline = \"shadow-ma\"\npairs = [[\"shadow-ma\", \"none\"]]\ntarget_ne",
        1,
    );
    std::fs::write(&spec, text).unwrap();
    report();
    let document = std::fs::read_to_string(docs.join("cli-grid.md")).unwrap();
    assert!(
        document.contains("| ÷ shadow-ma | NE − shadow-ma's (p) |"),
        "{document}"
    );
    let none_pair = document
        .lines()
        .find(|l| l.starts_with("| none | 2 |"))
        .unwrap();
    assert!(none_pair.contains(" (p "), "{none_pair}");
    // Head to head: shadow-ma against none at each trainer count both ran.
    let heads: Vec<&str> = document
        .lines()
        .filter(|l| l.starts_with("| `shadow-ma` | `none` |"))
        .collect();
    assert!(!heads.is_empty(), "{document}");
    assert!(
        heads
            .iter()
            .all(|h| h.contains(" (p ") && h.contains("2, 2")),
        "{heads:?}"
    );

    // A damaged results file: the report of the others is written, and the
    // command fails naming the file.
    std::fs::write(
        runs.join("algorithm=none,trainers=1,seed=1.json"),
        "{\"trunc",
    )
    .unwrap();
    std::fs::remove_file(docs.join("cli-grid.md")).unwrap();
    let out = report_of_grid(&results, &docs);
    let said = common::text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("algorithm=none,trainers=1,seed=1.json"),
        "{said}"
    );
    let document = std::fs::read_to_string(docs.join("cli-grid.md")).unwrap();
    assert!(document.contains("7 of 8 runs have results"), "{document}");

    // A stray results file, and runs of another configuration (the base
    // edited since): each left out by name, never averaged in.
    std::fs::copy(
        runs.join("algorithm=none,trainers=2,seed=1.json"),
        runs.join("an-old-copy.json"),
    )
    .unwrap();
    let spec = results.join("cli-grid/experiment.toml");
    let edited = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("train.eval_every = 5000", "train.eval_every = 4000");
    std::fs::write(&spec, edited).unwrap();
    let out = report_of_grid(&results, &docs);
    let said = common::text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("an-old-copy.json: names no run of the experiment's grid"),
        "{said}"
    );
    assert!(said.contains("run with another configuration"), "{said}");
    assert!(said.contains("no run has results to report"), "{said}");
}

#[test]
fn a_bad_experiment_fails_before_anything_runs_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let grid = write_grid(dir.path());
    let misspelt = std::fs::read_to_string(&grid)
        .unwrap()
        .replace("\"train.seed\"", "\"train.sead\"");
    std::fs::write(&grid, misspelt).unwrap();
    let out = common::run(&["experiment", &grid, "--out", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("sead"), "{}", text(&out));
    assert!(!dir.path().join("cli-grid").exists());

    let listed = common::run(&["experiment", "--list"]);
    assert!(listed.status.success());
    for name in ["smoke", "e1-scaling", "e2-quality", "d1-schedules"] {
        assert!(stdout(&listed).contains(name), "{}", stdout(&listed));
    }
    let unknown = common::run(&["experiment", "no-such-grid"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("neither a built-in experiment"),
        "{}",
        text(&unknown)
    );
}

/// No file an experiment or a report writes replaces an input, even where
/// the path it writes is a link to one: a run file or the experiment's copy
/// linked to the training data, a report linked to a run file. Each is
/// refused, naming the input, and the input stays whole.
#[test]
fn experiments_and_reports_never_write_through_a_link_onto_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let grid = dir.path().join("one.toml");
    std::fs::write(
        &grid,
        format!(
            "name = \"one\"\ntitle = \"One run\"\nabout = \"A run.\"\n\
             [base]\ndata.synthetic = {{ train_rows = 2000, test_rows = 500, dir = {:?} }}\n\
             data.table_size = 1000\nmodel.kind = \"lr\"\ntrain.eval_every = 0\n\
             [grid]\n\"train.seed\" = [1]\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let (grid, results) = (grid.display().to_string(), dir.path().join("results"));
    let results_arg = results.display().to_string();
    let run = || common::run(&["experiment", &grid, "--out", &results_arg]);
    assert!(run().status.success());
    let train = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().path().join("train.tsv"))
        .find(|p| p.exists())
        .unwrap();
    let data = std::fs::read(&train).unwrap();
    let run_file = results.join("one/runs/seed=1.json");
    let relink = |link: &Path, to: &Path| {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(to, link).unwrap();
    };
    for link in [&run_file, &results.join("one/experiment.toml")] {
        relink(link, &train);
        let out = run();
        assert!(!out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("is an input of this run"),
            "{}",
            text(&out)
        );
        assert_eq!(
            std::fs::read(&train).unwrap(),
            data,
            "the training data is whole"
        );
        std::fs::remove_file(link).unwrap();
    }
    assert!(run().status.success());
    let reports = dir.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    let run_bytes = std::fs::read(&run_file).unwrap();
    for input in [&run_file, &train] {
        relink(&reports.join("one.md"), input);
        let out = common::run(&[
            "report",
            &results.join("one").display().to_string(),
            "--out",
            &reports.display().to_string(),
        ]);
        assert!(!out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("is an input of this run"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(std::fs::read(&run_file).unwrap(), run_bytes);
    assert_eq!(std::fs::read(&train).unwrap(), data);
}
