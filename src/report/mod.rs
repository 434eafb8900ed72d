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
//!
//! The tables are drawn in `table`, the plots in `plot`, and the statistics both
//! use ([`mean_std`], [`Welch`]) live in `stats`.

use crate::experiment::{run_file, Experiment, RunResult};
use crate::{output, Error, Result};
use shadowsync_actors::stats::proc_bytes;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use toml::Value;

mod plot;
mod stats;
mod table;

use plot::{
    bytes_plot, consensus_plot, histogram_plot, largest_n, quality_plot, rate_plot, throughput_plot,
};
pub use stats::{mean_std, welch_p, Welch};
use table::{pairs_table, table};

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
        let memory_gib = proc_bytes("/proc/meminfo", "MemTotal:").map_or(String::new(), |b| {
            format!(", {:.0} GiB", b as f64 / f64::from(1u32 << 30))
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
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        let document = with_findings(&self.markdown, findings(&written));
        output::write_output(&path, document.as_bytes(), inputs)?;
        Ok(path)
    }
}

/// The heading of a report's hand-written section: what a person read in the
/// results. A report written again keeps it, under the regenerated tables.
pub const FINDINGS: &str = "## Findings";

/// The findings section of a report's `document`, from its heading to the
/// end, if it has one.
fn findings(document: &str) -> Option<&str> {
    let at = document.find(&format!("\n{FINDINGS}\n"))?;
    Some(document[at + 1..].trim_end())
}

/// `markdown` with `findings` at its end.
fn with_findings(markdown: &str, findings: Option<&str>) -> String {
    match findings {
        Some(findings) => format!("{}\n\n{findings}\n", markdown.trim_end()),
        None => markdown.to_string(),
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

/// A value as a table shows it.
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
    preamble(&mut md, results, provenance);
    table(&mut md, experiment, &cells);
    pairs_table(&mut md, experiment, &cells);
    let plots = figures(&mut md, experiment, &cells)?;
    Ok(Report {
        name: experiment.name.clone(),
        markdown: md,
        plots,
    })
}

/// The title, what the experiment is, where its results come from and how
/// many there are.
fn preamble(md: &mut String, results: &ExperimentResults, provenance: &Provenance) {
    let experiment = &results.experiment;
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
}

/// Draws every plot the results hold data for, linking each from `md`: the
/// plots' files and SVG texts.
fn figures(
    md: &mut String,
    experiment: &Experiment,
    cells: &[Cell],
) -> Result<Vec<(String, String)>> {
    let mut plots = Vec::new();
    let mut figure = |md: &mut String, file: &str, caption: &str, svg: Option<String>| {
        if let Some(svg) = svg {
            let _ = writeln!(md, "![{caption}]({}/{file})\n", experiment.name);
            plots.push((file.to_string(), svg));
        }
    };
    figure(
        md,
        "ne-vs-examples.svg",
        "test NE against examples seen",
        quality_plot(cells, |p| p.examples as f64, "examples seen")?,
    );
    figure(
        md,
        "ne-vs-seconds.svg",
        "test NE against training seconds",
        quality_plot(cells, |p| p.train_seconds, "training seconds")?,
    );
    figure(
        md,
        "rate-vs-seconds.svg",
        "examples/s between two evaluations against training seconds",
        rate_plot(cells)?,
    );
    figure(
        md,
        "ne-vs-bytes.svg",
        "test NE against the dense sync's bytes per example",
        bytes_plot(cells)?,
    );
    figure(
        md,
        "throughput.svg",
        "total examples/s against trainers",
        throughput_plot(experiment, cells)?,
    );
    let distributed = largest_n(experiment, cells);
    figure(
        md,
        "sync-gap.svg",
        "distribution of sync gaps (steps between two syncs)",
        histogram_plot(&distributed, "sync gap (steps)", |s| s.sync_gap_histogram)?,
    );
    figure(
        md,
        "staleness.svg",
        "distribution of stalenesses (steps between snapshot and write-back)",
        histogram_plot(&distributed, "staleness (steps)", |s| s.staleness_histogram)?,
    );
    figure(
        md,
        "consensus.svg",
        "consensus distance over time",
        consensus_plot(cells)?,
    );
    Ok(plots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_written_again_keeps_its_findings_and_only_them() {
        let old = "# E\n\nold table\n\n## Findings\n\nMA holds (p 0.01).\n";
        let kept = with_findings("# E\n\nnew table\n", findings(old));
        assert_eq!(
            kept,
            "# E\n\nnew table\n\n## Findings\n\nMA holds (p 0.01).\n"
        );
        assert_eq!(findings("# E\n\nno findings\n"), None);
        assert_eq!(with_findings("# E\n", None), "# E\n");
        // Written again, a page with findings stays the same.
        assert_eq!(with_findings("# E\n\nnew table\n", findings(&kept)), kept);
    }
}
