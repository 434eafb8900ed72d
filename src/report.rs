//! Reports: an experiment's results as a Markdown document with SVG plots.
//!
//! [`ExperimentResults::load`] reads what [`crate::experiment::run_grid`]
//! wrote (`experiment.toml` and `runs/*.json`). [`render`] groups the runs
//! into cells — runs whose settings differ only in keys named `seed` — and
//! writes one table row per cell (test NE, AUC and logloss as mean ± standard
//! deviation over seeds, examples/s and its ratio to the experiment's
//! baseline (`none` unless said) at the same other settings with Welch's
//! p-value of the NE difference, sync gap, staleness, the sync work's share of
//! the CPU), a head-to-head table
//! for the experiment's `pairs` of algorithms, and the plots the
//! results hold data for: test NE against examples and against training
//! seconds, examples/s against trainers, the distributions of sync gaps and
//! stalenesses, and the consensus distance over time. [`Report::write`] puts
//! the document at `OUT/NAME.md` and the plots in `OUT/NAME/`.

use crate::experiment::{run_file, Experiment, RunResult};
use crate::{output, Error, Result};
use plotters::prelude::*;
use shadowsync_actors::stats::HISTOGRAM_BUCKETS;
use shadowsync_actors::ClusterReport;
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use toml::Value;

/// An experiment and the results of its runs that are there.
#[derive(Debug, Clone)]
pub struct ExperimentResults {
    /// The experiment, as its results directory holds it.
    pub experiment: Experiment,
    /// The results of its runs, in grid order.
    pub results: Vec<RunResult>,
    /// Runs of the grid without (finished) results.
    pub missing: Vec<String>,
    /// Results files that are there but left out, with why: damaged, of
    /// another configuration than the experiment's now, or of no run of its
    /// grid (their runs count as missing).
    pub left_out: Vec<String>,
}

impl ExperimentResults {
    /// Reads the results directory of an experiment (`OUT/NAME`).
    ///
    /// # Errors
    ///
    /// A directory without an experiment's results, or a results file that cannot be read
    /// or parsed.
    pub fn load(directory: &Path) -> Result<Self> {
        let spec = directory.join("experiment.toml");
        let text = std::fs::read_to_string(&spec).map_err(|e| Error::io(&spec, e))?;
        let experiment = Experiment::parse(&text, &spec.display().to_string())?;
        let mut results = Vec::new();
        let (mut missing, mut left_out) = (Vec::new(), Vec::new());
        for run in &experiment.runs {
            let path = run_file(directory, &run.id);
            match RunResult::read(&path) {
                Ok(result) if result.report.config != run.config => {
                    left_out.push(format!(
                        "{}: run with another configuration than the experiment gives it \
                         now (run the experiment again to redo it)",
                        path.display()
                    ));
                    missing.push(run.id.clone());
                }
                Ok(result) if result.report.error.is_none() => results.push(result),
                Ok(_) => missing.push(run.id.clone()),
                Err(e) => {
                    if path.exists() {
                        left_out.push(format!("damaged: {e}"));
                    }
                    missing.push(run.id.clone());
                }
            }
        }
        left_out.extend(stray_run_files(directory, &experiment));
        Ok(Self {
            experiment,
            results,
            missing,
            left_out,
        })
    }

    /// What a report of these results reads, which nothing it writes may
    /// replace: the experiment's file and run files under `directory`, and
    /// the data files the runs trained on.
    pub fn inputs(&self, directory: &Path) -> Vec<PathBuf> {
        let mut inputs = vec![directory.join("experiment.toml")];
        inputs.extend(
            self.experiment
                .runs
                .iter()
                .map(|r| run_file(directory, &r.id)),
        );
        for result in &self.results {
            for file in [&result.report.data.train, &result.report.data.test] {
                if !inputs.contains(file) {
                    inputs.push(file.clone());
                }
            }
        }
        inputs
    }
}

/// Where and when a report was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// The command that regenerates it.
    pub command: String,
    /// The machine the results come from.
    pub machine: String,
    /// The date.
    pub date: String,
}

impl Provenance {
    /// This machine (cores, memory, processor) and today's date (UTC).
    pub fn here(command: String) -> Self {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(String::new(), |kb| {
                format!(", {:.0} GiB", kb / 1024.0 / 1024.0)
            });
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map_or(String::new(), |m| {
                format!(", {}", m.trim_start_matches([' ', '\t', ':']).trim())
            });
        Self {
            command,
            machine: format!("{cores} cores{memory_gib}{model}"),
            date: time::OffsetDateTime::now_utc().date().to_string(),
        }
    }
}

/// A rendered report.
#[derive(Debug, Clone)]
pub struct Report {
    /// The experiment's name.
    pub name: String,
    /// The document.
    pub markdown: String,
    /// The plots: file name, SVG text.
    pub plots: Vec<(String, String)>,
}

impl Report {
    /// Writes `OUT/NAME.md` and the plots into `OUT/NAME/`, none of them
    /// over one of `inputs` ([`ExperimentResults::inputs`]); returns the
    /// document's path.
    ///
    /// # Errors
    ///
    /// A document or plot that cannot be written ([`Error::Io`]), or whose
    /// path names an input ([`Error::Data`]).
    pub fn write(&self, out: &Path, inputs: &[&Path]) -> Result<PathBuf> {
        let plots = out.join(&self.name);
        for (file, svg) in &self.plots {
            output::write_output(&plots.join(file), svg.as_bytes(), inputs)?;
        }
        let path = out.join(format!("{}.md", self.name));
        output::write_output(&path, self.markdown.as_bytes(), inputs)?;
        Ok(path)
    }
}

/// Runs whose settings differ only in their seeds.
#[derive(Debug, Clone)]
struct Cell<'a> {
    /// The settings other than seeds: (key, value).
    settings: Vec<(String, Value)>,
    runs: Vec<&'a RunResult>,
}

impl Cell<'_> {
    fn setting(&self, key: &str) -> Option<&Value> {
        self.settings.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The sync algorithm, if the grid varies it (`sync.algorithm`, or the
    /// `algorithm` of a `sync` table).
    fn algorithm(&self) -> Option<&str> {
        self.setting(ALGORITHM)
            .or_else(|| self.setting(SYNC)?.get("algorithm"))
            .and_then(Value::as_str)
    }

    /// Mean and standard deviation over the runs of `figure`.
    fn stat(&self, figure: impl Fn(&RunResult) -> f64) -> (f64, f64) {
        mean_std(&self.values(figure))
    }

    /// `figure` of each run.
    fn values(&self, figure: impl Fn(&RunResult) -> f64) -> Vec<f64> {
        self.runs.iter().map(|r| figure(r)).collect()
    }
}

/// A value as a table shows it.
/// The results files under `directory/runs` that name no run of
/// `experiment`'s grid, each with why it is left out.
fn stray_run_files(directory: &Path, experiment: &Experiment) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(directory.join("runs")) else {
        return Vec::new();
    };
    let mut stray: Vec<String> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .filter(|path| {
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            !experiment.runs.iter().any(|run| run.id == id)
        })
        .map(|path| format!("{}: names no run of the experiment's grid", path.display()))
        .collect();
    stray.sort();
    stray
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Table(t) => t
            .iter()
            .map(|(k, v)| format!("{k} {}", text(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Mean and sample standard deviation (0 for one value, NaN for none).
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

fn is_seed(key: &str) -> bool {
    key.rsplit('.').next() == Some("seed")
}

/// The results grouped into cells, in grid order.
fn cells(results: &[RunResult]) -> Vec<Cell<'_>> {
    let mut cells: Vec<Cell> = Vec::new();
    for result in results {
        let settings: Vec<(String, Value)> = result
            .settings
            .iter()
            .filter(|(k, _)| !is_seed(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match cells.iter_mut().find(|c| c.settings == settings) {
            Some(cell) => cell.runs.push(result),
            None => cells.push(Cell {
                settings,
                runs: vec![result],
            }),
        }
    }
    cells
}

/// Mean over a run's trainers of a per-trainer figure.
fn per_trainer(
    run: &RunResult,
    figure: impl Fn(&shadowsync_actors::stats::TrainerStats) -> f64,
) -> f64 {
    let stats = &run.report.cluster.trainer_stats;
    stats.iter().map(figure).sum::<f64>() / stats.len().max(1) as f64
}

const ALGORITHM: &str = "sync.algorithm";
const SYNC: &str = "sync";
const TRAINERS: &str = "train.trainers";

/// The document and plots of `results`.
///
/// # Errors
///
/// A plot that cannot be drawn.
pub fn render(results: &ExperimentResults, provenance: &Provenance) -> Result<Report> {
    let experiment = &results.experiment;
    let cells = cells(&results.results);
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", experiment.title);
    let _ = writeln!(md, "{}\n", experiment.about.trim());
    let _ = writeln!(
        md,
        "Generated {} from the results of this machine ({}). Regenerate with:\n\n```sh\n{}\n```\n",
        provenance.date, provenance.machine, provenance.command
    );
    let _ = writeln!(
        md,
        "{} of {} runs have results{}.\n",
        results.results.len(),
        experiment.runs.len(),
        match results.missing.len() {
            0 => String::new(),
            _ => format!(" (missing: {})", results.missing.join("; ")),
        }
    );
    if !results.left_out.is_empty() {
        let _ = writeln!(md, "Results files left out:\n");
        for why in &results.left_out {
            let _ = writeln!(md, "- {why}");
        }
        md.push('\n');
    }
    table(&mut md, experiment, &cells);
    pairs_table(&mut md, experiment, &cells);
    let mut plots = Vec::new();
    let mut figure = |md: &mut String, file: &str, caption: &str, svg: Option<String>| {
        if let Some(svg) = svg {
            let _ = writeln!(md, "![{caption}]({}/{file})\n", experiment.name);
            plots.push((file.to_string(), svg));
        }
    };
    figure(
        &mut md,
        "ne-vs-examples.svg",
        "test NE against examples seen",
        quality_plot(&cells, |p| p.examples as f64, "examples seen")?,
    );
    figure(
        &mut md,
        "ne-vs-seconds.svg",
        "test NE against training seconds",
        quality_plot(&cells, |p| p.train_seconds, "training seconds")?,
    );
    figure(
        &mut md,
        "rate-vs-seconds.svg",
        "examples/s between two evaluations against training seconds",
        rate_plot(&cells)?,
    );
    figure(
        &mut md,
        "ne-vs-bytes.svg",
        "test NE against the dense sync's bytes per example",
        bytes_plot(&cells)?,
    );
    figure(
        &mut md,
        "throughput.svg",
        "total examples/s against trainers",
        throughput_plot(experiment, &cells)?,
    );
    let distributed = largest_n(experiment, &cells);
    figure(
        &mut md,
        "sync-gap.svg",
        "distribution of sync gaps (steps between two syncs)",
        histogram_plot(&distributed, "sync gap (steps)", |s| s.sync_gap_histogram)?,
    );
    figure(
        &mut md,
        "staleness.svg",
        "distribution of stalenesses (steps between snapshot and write-back)",
        histogram_plot(&distributed, "staleness (steps)", |s| s.staleness_histogram)?,
    );
    figure(
        &mut md,
        "consensus.svg",
        "consensus distance over time",
        consensus_plot(&cells)?,
    );
    Ok(Report {
        name: experiment.name.clone(),
        markdown: md,
        plots,
    })
}

/// The table: one row per cell.
fn table(md: &mut String, experiment: &Experiment, cells: &[Cell]) {
    let keys: Vec<&String> = experiment.keys.iter().filter(|k| !is_seed(k)).collect();
    let seeds = experiment.keys.iter().any(|k| is_seed(k));
    let name = experiment.baseline.as_str();
    let compared = cells.iter().any(|c| c.algorithm() == Some(name));
    let baseline = |cell: &Cell| counterpart(cells, cell, name);
    let header = header(&keys, compared.then_some(name), experiment.target_ne);
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    let pm = |(mean, std): (f64, f64), digits: usize| match seeds {
        true => format!("{mean:.digits$} ± {std:.digits$}"),
        false => format!("{mean:.digits$}"),
    };
    for cell in cells {
        let mut row: Vec<String> = keys
            .iter()
            .map(|k| cell.setting(k).map_or(String::new(), text))
            .collect();
        let rate = cell.stat(|r| r.report.examples_per_sec);
        row.push(cell.runs.len().to_string());
        row.push(pm(cell.stat(|r| r.report.final_metrics.ne), 4));
        row.push(pm(cell.stat(|r| r.report.final_metrics.auc), 4));
        row.push(pm(cell.stat(|r| r.report.final_metrics.logloss), 4));
        row.push(replicas_ne(cell));
        row.push(format!(
            "{:.2e}",
            cell.stat(|r| r.report.consensus_distance).0
        ));
        row.push(format!("{:.0}", rate.0));
        if compared {
            let base = baseline(cell);
            row.push(base.map_or("".into(), |base| {
                format!("{:.2}", rate.0 / base.stat(|r| r.report.examples_per_sec).0)
            }));
            let other = base.filter(|base| !std::ptr::eq(*base, cell));
            row.push(other.map_or("".into(), |base| ne_against(cell, base)));
        }
        row.push(format!(
            "{:.1}",
            cell.stat(|r| per_trainer(r, |s| s.mean_sync_gap)).0
        ));
        row.push(format!(
            "{:.1}",
            cell.stat(|r| per_trainer(r, |s| s.mean_staleness)).0
        ));
        let sync_cpu = |r: &RunResult| r.report.cluster.sync_cpu_share();
        let measured = cell.runs.iter().all(|r| sync_cpu(r).is_some());
        row.push(match measured {
            true => format!(
                "{:.1}%",
                100.0 * cell.stat(|r| sync_cpu(r).unwrap_or(0.0)).0
            ),
            false => String::new(),
        });
        row.push(sync_bytes(cell));
        row.push(format!("{:.1}", cell.stat(|r| r.report.train_seconds).0));
        if let Some(target) = experiment.target_ne {
            let round = cell.stat(|r| {
                1000.0 * r.report.cluster.seconds / per_trainer(r, |s| s.syncs as f64).max(1.0)
            });
            row.push(format!("{:.1}", round.0));
            let reached: Vec<f64> = cell
                .runs
                .iter()
                .filter_map(|r| seconds_to(r, target))
                .collect();
            row.push(match reached.len() == cell.runs.len() {
                true => pm(mean_std(&reached), 1),
                false => format!("reached by {} of {} runs", reached.len(), cell.runs.len()),
            });
        }
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    let _ = writeln!(
        md,
        "\nNE, AUC and logloss on the test set after the run, of the final model (EASGD's \
         centre, the replicas' mean; under `none` the mean of the replicas' own){}; replicas' \
         NE: each replica scored as it is, mean (standard deviation over the replicas); \
         consensus distance: mean over the replicas of ‖w_i − w̄‖² at the end; examples/s: \
         all trainers together{}; sync gap and staleness: mean over trainers, in steps; sync \
         CPU: the CPU time of the shadow loops' rounds and of EASGD's server shards against \
         the trainers' own (a foreground sync counts in its trainer's); sync bytes/example: \
         the dense sync's payload bytes between trainers per example trained (of: before \
         compression).\n",
        if seeds {
            " (mean ± standard deviation over seeds)"
        } else {
            ""
        },
        if compared {
            format!(
                "; ÷ {name}: against `{name}` at the same other settings; NE − {name}'s: the \
                 difference of the mean test NEs, with the two-sided p-value of Welch's \
                 t-test over the runs (p > 0.05: no difference measured)"
            )
        } else {
            String::new()
        },
    );
    if let Some(target) = experiment.target_ne {
        let _ = writeln!(
            md,
            "ms per sync round: the run's wall-clock time over its syncs per trainer (for a \
             foreground algorithm syncing every step, a step and its sync); seconds to NE ≤ \
             {target}: training seconds at the first evaluation that reached it.\n"
        );
    }
}

/// The cell of algorithm `name` at `cell`'s other settings.
fn counterpart<'c, 'r>(cells: &'c [Cell<'r>], cell: &Cell, name: &str) -> Option<&'c Cell<'r>> {
    cell.algorithm()?;
    cells.iter().find(|c| {
        c.algorithm() == Some(name)
            && c.settings
                .iter()
                .all(|(k, v)| k == ALGORITHM || k == SYNC || cell.setting(k) == Some(v))
    })
}

/// The head-to-head table of the experiment's pairs: for each cell of a
/// pair's first algorithm and the second's at the same other settings, n,
/// test NE and AUC (mean ± standard deviation over the runs) and their
/// differences with Welch's p-value.
fn pairs_table(md: &mut String, experiment: &Experiment, cells: &[Cell]) {
    if experiment.pairs.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Head to head\n");
    let _ = writeln!(
        md,
        "| A | B | settings | runs (A, B) | test NE A | test NE B | NE A − B (p) | AUC A | AUC B | AUC A − B (p) | replicas' NE A | B |"
    );
    let _ = writeln!(md, "|{}", "---|".repeat(12));
    let ne = |r: &RunResult| r.report.final_metrics.ne;
    let auc = |r: &RunResult| r.report.final_metrics.auc;
    let pm = |values: &[f64]| {
        let (mean, sd) = mean_std(values);
        format!("{mean:.4} ± {sd:.4}")
    };
    for (a, b) in &experiment.pairs {
        let firsts = cells.iter().filter(|c| c.algorithm() == Some(a.as_str()));
        let mut found = false;
        for first in firsts {
            let Some(second) = counterpart(cells, first, b) else {
                continue;
            };
            found = true;
            let settings: Vec<String> = first
                .settings
                .iter()
                .filter(|(k, _)| k != ALGORITHM)
                .map(|(k, v)| format!("`{k}` {}", text(v)))
                .collect();
            let row = [
                format!("`{a}`"),
                format!("`{b}`"),
                settings.join(", "),
                format!("{}, {}", first.runs.len(), second.runs.len()),
                pm(&first.values(ne)),
                pm(&second.values(ne)),
                difference(&first.values(ne), &second.values(ne)),
                pm(&first.values(auc)),
                pm(&second.values(auc)),
                difference(&first.values(auc), &second.values(auc)),
                replicas_ne(first),
                replicas_ne(second),
            ];
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
        if !found {
            let _ = writeln!(md, "| `{a}` | `{b}` | not both run | | | | | | | | | |");
        }
    }
    let _ = writeln!(
        md,
        "\nMeans ± standard deviations over the runs; differences of the means with the \
         two-sided p-value of Welch's t-test (p > 0.05: no difference measured).\n"
    );
}

/// The table's header: the grid's keys, then the figures (with the ratio to
/// and difference from `baseline` when it ran).
fn header(keys: &[&String], baseline: Option<&str>, target_ne: Option<f64>) -> Vec<String> {
    let mut header: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    header.extend(
        [
            "runs",
            "test NE",
            "AUC",
            "logloss",
            "replicas' NE",
            "consensus distance",
            "examples/s",
        ]
        .map(String::from),
    );
    if let Some(name) = baseline {
        header.extend([format!("÷ {name}"), format!("NE − {name}'s (p)")]);
    }
    header.extend(
        [
            "sync gap",
            "staleness",
            "sync CPU",
            "sync bytes/example",
            "seconds",
        ]
        .map(String::from),
    );
    if let Some(target) = target_ne {
        header.extend([
            "ms per sync round".into(),
            format!("seconds to NE ≤ {target}"),
        ]);
    }
    header
}

/// The dense sync's bytes sent per example trained (mean over runs), with
/// what they were before compression where they were compressed.
fn sync_bytes(cell: &Cell) -> String {
    let per_example = |bytes: fn(&ClusterReport) -> u64| {
        cell.stat(|r| {
            let cluster = &r.report.cluster;
            cluster.per_example(bytes(cluster))
        })
        .0
    };
    let sent = per_example(|c| c.bytes_sent);
    let before = per_example(|c| c.bytes_before_compression);
    match before > sent {
        true => format!("{sent:.0} (of {before:.0})"),
        false => format!("{sent:.0}"),
    }
}

/// `cell`'s test NE against the baseline's: [`difference`].
fn ne_against(cell: &Cell, baseline: &Cell) -> String {
    let ne = |r: &RunResult| r.report.final_metrics.ne;
    difference(&cell.values(ne), &baseline.values(ne))
}

/// The difference of the means of `mine` and `theirs` and Welch's p-value
/// ("no difference measured" above 0.05; no p-value with fewer than 2 runs
/// on either side).
fn difference(mine: &[f64], theirs: &[f64]) -> String {
    let difference = mean_std(mine).0 - mean_std(theirs).0;
    match welch_p(mine, theirs) {
        Some(p) if p > 0.05 => format!("{difference:+.4} (p {p:.2}: no difference measured)"),
        Some(p) => format!("{difference:+.4} (p {p:.3})"),
        None => format!("{difference:+.4}"),
    }
}

/// The two-sided p-value of Welch's t-test that samples `a` and `b` have
/// the same mean; `None` with fewer than 2 values in either, or no spread
/// in both.
pub fn welch_p(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let ((mean_a, sd_a), (mean_b, sd_b)) = (mean_std(a), mean_std(b));
    let (va, vb) = (sd_a.powi(2) / a.len() as f64, sd_b.powi(2) / b.len() as f64);
    if va + vb == 0.0 {
        return None;
    }
    let t = (mean_a - mean_b) / (va + vb).sqrt();
    let df =
        (va + vb).powi(2) / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
    let student = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(2.0 * student.sf(t.abs()))
}

/// The replicas' own NE in `cell`'s runs: the mean over runs of their mean,
/// and of their standard deviation, or "—" for results that have none.
fn replicas_ne(cell: &Cell) -> String {
    let spreads: Vec<(f64, f64)> = cell
        .runs
        .iter()
        .filter(|r| !r.report.replica_metrics.is_empty())
        .map(|r| {
            mean_std(
                &r.report
                    .replica_metrics
                    .iter()
                    .map(|m| m.ne)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    if spreads.is_empty() {
        return "—".into();
    }
    let n = spreads.len() as f64;
    let mean = spreads.iter().map(|s| s.0).sum::<f64>() / n;
    let sd = spreads.iter().map(|s| s.1).sum::<f64>() / n;
    format!("{mean:.4} ({sd:.4})")
}

/// Training seconds at the first evaluation of `run` with test NE ≤ `target`.
fn seconds_to(run: &RunResult, target: f64) -> Option<f64> {
    run.report
        .history
        .iter()
        .find(|p| p.metrics.ne <= target)
        .map(|p| p.train_seconds)
}

/// The cells at the largest number of trainers, if the grid varies it (the
/// distributions of the others would crowd the plot).
fn largest_n<'a>(experiment: &Experiment, cells: &[Cell<'a>]) -> Vec<Cell<'a>> {
    let n = |c: &Cell| c.setting(TRAINERS).and_then(Value::as_integer);
    if !experiment.keys.iter().any(|k| k == TRAINERS) {
        return cells.to_vec();
    }
    let largest = cells.iter().filter_map(n).max();
    cells.iter().filter(|c| n(c) == largest).cloned().collect()
}

/// Width of a plot's data area, and height of one of its panels.
const DATA_WIDTH: u32 = 680;
const PANEL_HEIGHT: u32 = 340;
/// The most lines a panel holds before the plot is split into panels.
const LINES_PER_PANEL: usize = 6;
/// Colours of a panel's lines, told apart at a glance (Tableau's 10).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The legend's width for labels of `chars` characters at most: wide enough
/// that no label is cut (13 px sans-serif is under 8 px a character).
fn legend_width(chars: usize) -> u32 {
    48 + 8 * chars as u32
}

/// A plot's SVG text, `width` wide and `panels` high, drawn by `draw`.
fn svg(
    width: u32,
    panels: usize,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend, plotters::coord::Shift>,
    ) -> std::result::Result<(), String>,
) -> Result<String> {
    let mut text = String::new();
    {
        let size = (width, PANEL_HEIGHT * panels.max(1) as u32);
        let area = SVGBackend::with_string(&mut text, size).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        draw(&area).map_err(|e| Error::config("report", format!("drawing a plot: {e}")))?;
        area.present().map_err(plot_error)?;
    }
    Ok(text)
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::config("report", format!("drawing a plot: {e}"))
}

/// A point of a line: x, the mean of y over the runs it stands for, and their
/// standard deviation (0 for one run).
type Point = (f64, f64, f64);

/// Lines with a legend: (label, points).
type Series = Vec<(String, Vec<Point>)>;

/// The legend labels of `cells`: only the settings that vary among them
/// (a table's keys one by one), each as `name value`, leaving out the
/// `leave_out` key (the plot's axis); where nothing varies (one line), every
/// setting; "all runs" when there is none.
fn legend_labels(cells: &[&Cell], leave_out: &str) -> Vec<String> {
    let flat = |cell: &Cell| -> Vec<(String, String)> {
        let mut settings = Vec::new();
        for (key, value) in cell.settings.iter().filter(|(k, _)| k != leave_out) {
            match value {
                Value::Table(table) => {
                    settings.extend(table.iter().map(|(k, v)| (format!("{key}.{k}"), text(v))))
                }
                other => settings.push((key.clone(), text(other))),
            }
        }
        settings
    };
    let all: Vec<Vec<(String, String)>> = cells.iter().map(|c| flat(c)).collect();
    let value = |settings: &[(String, String)], key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let mut varying: Vec<String> = Vec::new();
    for (key, _) in all.iter().flatten() {
        let first = value(&all[0], key);
        if !varying.contains(key) && all.iter().any(|s| value(s, key) != first) {
            varying.push(key.clone());
        }
    }
    all.iter()
        .map(|settings| {
            let label = varying
                .iter()
                .filter_map(|key| {
                    let name = key.rsplit('.').next().unwrap_or(key);
                    value(settings, key).map(|v| format!("{name} {v}"))
                })
                .collect::<Vec<_>>()
                .join(", ");
            match (label.is_empty(), settings.is_empty()) {
                (false, _) => label,
                // One line, or lines alike: what they all are.
                (true, false) => settings
                    .iter()
                    .map(|(key, v)| format!("{} {v}", key.rsplit('.').next().unwrap_or(key)))
                    .collect::<Vec<_>>()
                    .join(", "),
                (true, true) => "all runs".to_string(),
            }
        })
        .collect()
}

/// The panels `series` are drawn in: one, or — over [`LINES_PER_PANEL`]
/// lines — one per first setting of their labels (the algorithm, in most
/// grids), each cut to at most that many lines.
fn panels(series: &Series) -> Vec<Series> {
    if series.len() <= LINES_PER_PANEL {
        return vec![series.clone()];
    }
    let mut groups: Vec<(String, Series)> = Vec::new();
    for line in series {
        let first = line.0.split(", ").next().unwrap_or_default().to_string();
        match groups.iter_mut().find(|(g, _)| *g == first) {
            Some((_, group)) => group.push(line.clone()),
            None => groups.push((first, vec![line.clone()])),
        }
    }
    groups
        .into_iter()
        .flat_map(|(_, group)| {
            group
                .chunks(LINES_PER_PANEL)
                .map(<[_]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A log axis's tick label: `1e-6`, `3e-4`, `20`, `0.5`.
fn log_tick(v: &f64) -> String {
    match v.abs() {
        a if a != 0.0 && !(1e-2..1e4).contains(&a) => format!("{v:.0e}"),
        _ => format!("{v}"),
    }
}

/// A log₂ axis's tick label at `v` = log₂ x: x where it is a whole power of
/// two, nothing between.
fn log2_tick(v: &f64) -> String {
    match (v - v.round()).abs() < 1e-9 {
        true => format!("{}", 2f64.powf(v.round())),
        false => String::new(),
    }
}

/// How a plot's axes are drawn.
#[derive(Debug, Clone, Copy, Default)]
struct Axes {
    /// A logarithmic y axis.
    log_y: bool,
    /// x values are powers of two (trainers): a log₂ axis with a tick at each.
    log2_x: bool,
    /// The y axis starts at 0 (throughput, ratios), not at the smallest value.
    y_from_zero: bool,
}

/// The range of `series`' points and their spreads, padded; `None` without
/// two finite points.
fn bounds(series: &Series, axes: Axes) -> Option<((f64, f64), (f64, f64))> {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let mut count = 0;
    for &(x, y, sd) in
        points.filter(|(x, y, _)| x.is_finite() && y.is_finite() && (!axes.log_y || *y > 0.0))
    {
        let sd = if sd.is_finite() && !axes.log_y {
            sd
        } else {
            0.0
        };
        (x0, x1) = (x0.min(x), x1.max(x));
        (y0, y1) = (y0.min(y - sd), y1.max(y + sd));
        count += 1;
    }
    if count < 2 {
        return None;
    }
    let pad = |lo: f64, hi: f64| {
        let span = (hi - lo).abs().max(hi.abs() * 1e-3).max(1e-12);
        (lo - 0.05 * span, hi + 0.05 * span)
    };
    // A log axis spans 8 decades at most below the largest value: a run's
    // last sample of replicas made equal (1e-17) would flatten every line.
    let y = match (axes.log_y, axes.y_from_zero) {
        (true, _) => (y0.max(y1 * 1e-8) * 0.8, y1 * 1.25),
        (false, true) => (0.0, pad(0.0, y1).1),
        (false, false) => pad(y0, y1),
    };
    let x = match axes.log2_x {
        true => (x0 - 0.25, x1 + 0.25),
        false => pad(x0, x1),
    };
    Some((x, y))
}

/// A line plot of `series`, in panels of at most [`LINES_PER_PANEL`] lines
/// that share their axes' ranges, each with its legend right of its data, as
/// wide as its longest label. Where a point stands for several runs, a band
/// of ± one standard deviation shows their spread.
fn line_plot(series: &Series, x_label: &str, y_label: &str, axes: Axes) -> Result<Option<String>> {
    let series: Series = match axes.log2_x {
        true => series
            .iter()
            .map(|(label, points)| {
                let points = points.iter().filter(|p| p.0 > 0.0);
                (
                    label.clone(),
                    points.map(|&(x, y, sd)| (x.log2(), y, sd)).collect(),
                )
            })
            .collect(),
        false => series.clone(),
    };
    let Some(((x0, x1), (y0, y1))) = bounds(&series, axes) else {
        return Ok(None);
    };
    let longest = series.iter().map(|(l, _)| l.chars().count()).max();
    let legend = legend_width(longest.unwrap_or(0));
    let panels = panels(&series);
    let svg_text = svg(DATA_WIDTH + legend, panels.len(), |area| {
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        for (lines, area) in panels.iter().zip(area.split_evenly((panels.len(), 1))) {
            let (data, legend_area) = area.split_horizontally(DATA_WIDTH);
            let mut builder = ChartBuilder::on(&data);
            builder
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70);
            macro_rules! finish {
                ($chart:expr $(, $y_ticks:expr)?) => {{
                    let mut chart = $chart;
                    let mut mesh = chart.configure_mesh();
                    mesh.x_desc(x_label).y_desc(y_label);
                    if axes.log2_x {
                        let ticks = (x1 - x0).ceil() as usize + 1;
                        mesh.x_labels(ticks).x_label_formatter(&log2_tick);
                    }
                    $(mesh.y_label_formatter($y_ticks);)?
                    mesh.draw().map_err(draw)?;
                    for (i, (_, pts)) in lines.iter().enumerate() {
                        let colour = COLOURS[i % COLOURS.len()];
                        let finite: Vec<Point> = pts
                            .iter()
                            .copied()
                            .filter(|(_, y, _)| y.is_finite() && (!axes.log_y || *y > 0.0))
                            .collect();
                        if !axes.log_y && finite.iter().any(|p| p.2 > 0.0) {
                            let upper = finite.iter().map(|&(x, y, sd)| (x, y + sd));
                            let lower = finite.iter().rev().map(|&(x, y, sd)| (x, y - sd));
                            let band = upper.chain(lower).collect::<Vec<_>>();
                            chart
                                .draw_series(std::iter::once(Polygon::new(band, colour.mix(0.18))))
                                .map_err(draw)?;
                        }
                        let line = finite.iter().map(|&(x, y, _)| (x, y));
                        chart
                            .draw_series(LineSeries::new(line, colour.stroke_width(2)))
                            .map_err(draw)?;
                    }
                }};
            }
            if axes.log_y {
                let chart = builder
                    .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                    .map_err(draw)?;
                finish!(chart, &log_tick);
            } else {
                let chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(draw)?;
                finish!(chart);
            }
            draw_legend(&legend_area, lines).map_err(draw)?;
        }
        Ok(())
    })?;
    Ok(Some(svg_text))
}

/// The legend of `lines`, in `area` (right of the data): a stroke of each
/// line's colour and its label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    lines: &Series,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    for (i, (label, _)) in lines.iter().enumerate() {
        let y = 24 + 22 * i as i32;
        let colour = COLOURS[i % COLOURS.len()].stroke_width(3);
        area.draw(&PathElement::new(vec![(4, y), (28, y)], colour))?;
        area.draw(&Text::new(label.clone(), (34, y - 7), style.clone()))?;
    }
    Ok(())
}

/// Test NE against `x` of each evaluation, mean and spread over a cell's
/// seeds (their evaluations are at the same points).
fn quality_plot(
    cells: &[Cell],
    x: impl Fn(&crate::metrics::EvalPoint) -> f64,
    x_label: &str,
) -> Result<Option<String>> {
    let series = history_series(cells, 0, |cell, i| {
        let (ne, sd) = cell.stat(|r| r.report.history[i].metrics.ne);
        (cell.stat(|r| x(&r.report.history[i])).0, ne, sd)
    });
    line_plot(
        &series,
        x_label,
        "test NE (band: ± sd over seeds)",
        Axes::default(),
    )
}

/// A line per cell whose runs all have two evaluations or more: `point`
/// of each evaluation from `first` on (up to the fewest any run has).
fn history_series(
    cells: &[Cell],
    first: usize,
    point: impl Fn(&Cell, usize) -> (f64, f64, f64),
) -> Series {
    let plotted: Vec<(&Cell, usize)> = cells
        .iter()
        .filter_map(|cell| {
            let len = cell.runs.iter().map(|r| r.report.history.len()).min()?;
            (len >= 2).then_some((cell, len))
        })
        .collect();
    let labels = legend_labels(&plotted.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    plotted
        .iter()
        .zip(labels)
        .map(|((cell, len), label)| (label, (first..*len).map(|i| point(cell, i)).collect()))
        .collect()
}

/// Examples/s between two consecutive evaluations, at the later one's
/// training seconds (mean ± sd over seeds): how fast each cell trained as
/// it went; only for an experiment whose trainers join and leave
/// (`[[elastic]]`), where the pace changes within a run.
fn rate_plot(cells: &[Cell]) -> Result<Option<String>> {
    let mut runs = cells.iter().flat_map(|cell| &cell.runs);
    if !runs.any(|r| !r.report.config.elastic.is_empty()) {
        return Ok(None);
    }
    let series = history_series(cells, 1, |cell, i| {
        let rate = |r: &RunResult| {
            let (a, b) = (&r.report.history[i - 1], &r.report.history[i]);
            (b.examples - a.examples) as f64 / (b.train_seconds - a.train_seconds).max(1e-9)
        };
        let (mean, sd) = cell.stat(rate);
        (cell.stat(|r| r.report.history[i].train_seconds).0, mean, sd)
    });
    line_plot(
        &series,
        "training seconds",
        "examples/s since the last evaluation (band: ± sd over seeds)",
        Axes::default(),
    )
}

/// Test NE against the dense sync's bytes sent per example (a log axis),
/// one point per cell that synced, with bars of ± sd over seeds; only for
/// an experiment that compresses its payloads (what each codec saves and
/// costs).
fn bytes_plot(cells: &[Cell]) -> Result<Option<String>> {
    let compressed = |c: &&Cell| {
        let shrunk =
            |cluster: &ClusterReport| cluster.bytes_before_compression > cluster.bytes_sent;
        c.runs.iter().any(|r| shrunk(&r.report.cluster))
    };
    if !cells.iter().any(|c| compressed(&c)) {
        return Ok(None);
    }
    let synced: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.runs.iter().all(|r| r.report.cluster.bytes_sent > 0))
        .collect();
    let per_example = |r: &RunResult| r.report.cluster.per_example(r.report.cluster.bytes_sent);
    let points: Vec<(String, Point)> = legend_labels(&synced, "")
        .into_iter()
        .zip(&synced)
        .map(|(label, cell)| {
            let (ne, sd) = cell.stat(|r| r.report.final_metrics.ne);
            (label, (cell.stat(per_example).0, ne, sd))
        })
        .filter(|(_, (x, y, _))| *x > 0.0 && y.is_finite())
        .collect();
    let series: Series = points.iter().map(|(l, p)| (l.clone(), vec![*p])).collect();
    let Some((_, (y0, y1))) = bounds(&series, Axes::default()) else {
        return Ok(None);
    };
    let xs = points.iter().map(|(_, (x, _, _))| *x);
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let longest = points.iter().map(|(l, _)| l.chars().count()).max();
    let legend = legend_width(longest.unwrap_or(0));
    let text = svg(DATA_WIDTH + legend, 1, |area| {
        let draw = |e: DrawingAreaErrorKind<_>| e.to_string();
        let (data, legend_area) = area.split_horizontally(DATA_WIDTH);
        let (x0, x1) = (x0 * 0.7, x1 * 1.4);
        let mut chart = ChartBuilder::on(&data)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("dense sync bytes sent per example (log)")
            .y_desc("test NE (bar: ± sd over seeds)")
            .x_label_formatter(&log_tick)
            .draw()
            .map_err(draw)?;
        for (i, (_, (x, y, sd))) in points.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let bar = vec![(*x, y - sd), (*x, y + sd)];
            chart
                .draw_series(std::iter::once(PathElement::new(bar, colour)))
                .map_err(draw)?;
            chart
                .draw_series(std::iter::once(Circle::new((*x, *y), 5, colour.filled())))
                .map_err(draw)?;
        }
        draw_legend(&legend_area, &series).map_err(draw)
    })?;
    Ok(Some(text))
}

/// Examples/s against trainers (a log₂ axis, y from 0), one line per setting
/// of the other keys, bands of ± sd over seeds.
fn throughput_plot(experiment: &Experiment, cells: &[Cell]) -> Result<Option<String>> {
    if !experiment.keys.iter().any(|k| k == TRAINERS) {
        return Ok(None);
    }
    let with_n: Vec<(&Cell, i64)> = cells
        .iter()
        .filter_map(|c| Some((c, c.setting(TRAINERS).and_then(Value::as_integer)?)))
        .collect();
    let labels = legend_labels(
        &with_n.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        TRAINERS,
    );
    let mut series: Series = Vec::new();
    for ((cell, n), label) in with_n.iter().zip(labels) {
        let (mean, sd) = cell.stat(|r| r.report.examples_per_sec);
        let point = (*n as f64, mean, sd);
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, points)) => points.push(point),
            None => series.push((label, vec![point])),
        }
    }
    for (_, points) in &mut series {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let axes = Axes {
        log2_x: true,
        y_from_zero: true,
        ..Axes::default()
    };
    line_plot(&series, "trainers", "examples/s, all trainers (± sd)", axes)
}

/// The share of each bucket of a histogram summed over a cell's trainers and
/// runs, one line per cell that synced.
fn histogram_plot(
    cells: &[Cell],
    x_label: &str,
    histogram: impl Fn(&shadowsync_actors::stats::TrainerStats) -> [u64; HISTOGRAM_BUCKETS],
) -> Result<Option<String>> {
    let shares: Vec<(&Cell, Vec<Point>)> = cells
        .iter()
        .filter_map(|cell| {
            let mut counts = [0u64; HISTOGRAM_BUCKETS];
            for stats in cell
                .runs
                .iter()
                .flat_map(|r| &r.report.cluster.trainer_stats)
            {
                for (total, c) in counts.iter_mut().zip(histogram(stats)) {
                    *total += c;
                }
            }
            let total: u64 = counts.iter().sum();
            (total > 0).then(|| {
                // Bucket k ≥ 1 holds [2^(k−1), 2^k): at the log2 of its
                // lower end; bucket 0 (no steps) at −1.
                let points = counts
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| (k as f64 - 1.0, c as f64 / total as f64, 0.0))
                    .collect();
                (cell, points)
            })
        })
        .collect();
    let labels = legend_labels(&shares.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    let series: Series = labels
        .into_iter()
        .zip(shares.into_iter().map(|s| s.1))
        .collect();
    let axes = Axes {
        y_from_zero: true,
        ..Axes::default()
    };
    line_plot(
        &series,
        &format!("{x_label}: log2 of the bucket's lower end (−1: none)"),
        "share of syncs",
        axes,
    )
}

/// Consensus distance over time, of each cell's first run.
fn consensus_plot(cells: &[Cell]) -> Result<Option<String>> {
    let sampled: Vec<(&Cell, Vec<Point>)> = cells
        .iter()
        .filter_map(|cell| {
            let run = cell.runs.first()?;
            let points: Vec<Point> = run
                .report
                .cluster
                .consensus
                .iter()
                .map(|p| (p.seconds, p.distance, 0.0))
                .collect();
            points
                .iter()
                .any(|(_, d, _)| *d > 0.0)
                .then_some((cell, points))
        })
        .collect();
    let labels = legend_labels(&sampled.iter().map(|(c, _)| *c).collect::<Vec<_>>(), "");
    let series: Series = labels
        .into_iter()
        .zip(sampled.into_iter().map(|s| s.1))
        .collect();
    let axes = Axes {
        log_y: true,
        ..Axes::default()
    };
    line_plot(&series, "seconds", "consensus distance (log)", axes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_six_lines_a_plot_has_a_panel_per_algorithm() {
        let line = |label: &str| (label.to_string(), vec![(0.0, 1.0, 0.0), (1.0, 2.0, 0.0)]);
        let few: Series = ["none, 2", "shadow-ma, 2"].map(line).to_vec();
        assert_eq!(panels(&few).len(), 1);
        let algorithms = ["none", "shadow-ma", "shadow-easgd", "shadow-bmuf"];
        let many: Series = algorithms
            .iter()
            .flat_map(|a| [2, 4, 8, 16].map(|n| line(&format!("{a}, {n}"))))
            .collect();
        let split = panels(&many);
        assert_eq!(split.len(), 4);
        for (panel, algorithm) in split.iter().zip(algorithms) {
            assert_eq!(panel.len(), 4);
            assert!(panel.iter().all(|(l, _)| l.starts_with(algorithm)));
        }
        // One algorithm with more lines than a panel holds: cut.
        let one: Series = (0..8).map(|n| line(&format!("none, {n}"))).collect();
        assert_eq!(
            panels(&one).iter().map(Vec::len).collect::<Vec<_>>(),
            [6, 2]
        );
    }

    #[test]
    fn welch_p_values_match_an_independent_computation() {
        // Reference: Welch's t and degrees of freedom, then the t density
        // integrated numerically (Simpson) in Python from the formulas.
        let p = welch_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        assert!((p - 0.107_531_194_9).abs() < 1e-6, "{p}");
        let a = [0.7952, 0.7921, 0.7983];
        let b = [0.7877, 0.7850, 0.7905];
        let p = welch_p(&a, &b).unwrap();
        assert!((p - 0.036_188_757_2).abs() < 1e-6, "{p}");
        assert_eq!(welch_p(&a, &b[..1]), None);
        assert_eq!(welch_p(&[1.0, 1.0], &[1.0, 1.0]), None);
    }

    #[test]
    fn legends_name_only_what_varies_each_table_key_apart() {
        let results: Vec<RunResult> = Vec::new();
        let cell = |algorithm: &str, trainers: i64, schedule: &str| Cell {
            settings: vec![
                ("train.trainers".into(), Value::Integer(trainers)),
                (
                    "sync".into(),
                    Value::Table(toml::toml! {
                        algorithm = algorithm
                        group_size = 2
                        schedule = schedule
                    }),
                ),
            ],
            runs: results.iter().collect(),
        };
        let cells = [
            cell("fr-ma:1", 8, "alternating"),
            cell("fr-ma:1", 8, "random"),
            cell("sync-sgd", 8, "random"),
        ];
        let refs: Vec<&Cell> = cells.iter().collect();
        assert_eq!(
            legend_labels(&refs, ""),
            [
                "algorithm fr-ma:1, schedule alternating",
                "algorithm fr-ma:1, schedule random",
                "algorithm sync-sgd, schedule random"
            ]
        );
        assert_eq!(
            legend_labels(&refs[..1], TRAINERS),
            ["algorithm fr-ma:1, group_size 2, schedule alternating"]
        );
        let by_n = [cell("none", 2, "global"), cell("none", 4, "global")];
        let refs: Vec<&Cell> = by_n.iter().collect();
        let alike = "algorithm none, group_size 2, schedule global";
        assert_eq!(legend_labels(&refs, TRAINERS), [alike, alike]);
    }

    #[test]
    fn log2_ticks_are_whole_powers_of_two() {
        assert_eq!(log2_tick(&0.0), "1");
        assert_eq!(log2_tick(&4.0), "16");
        assert_eq!(log2_tick(&2.5), "");
        assert!(legend_width(40) > 40 * 7);
    }

    #[test]
    fn log_axis_ticks_read_as_numbers() {
        assert_eq!(log_tick(&2e-6), "2e-6");
        assert_eq!(log_tick(&0.001), "1e-3");
        assert_eq!(log_tick(&0.5), "0.5");
        assert_eq!(log_tick(&20.0), "20");
        assert_eq!(log_tick(&1e5), "1e5");
    }

    #[test]
    fn mean_and_sample_standard_deviation() {
        let (mean, std) = mean_std(&[1.0, 2.0, 3.0, 6.0]);
        assert_eq!(mean, 3.0);
        // Σ(x−3)² = 4 + 1 + 0 + 9 = 14; 14 / 3.
        assert!((std - (14.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_std(&[5.0]), (5.0, 0.0));
        assert!(mean_std(&[]).0.is_nan());
    }
}
