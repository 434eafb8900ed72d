//! Experiments: a grid of training runs, run one after another, every run's
//! results kept as JSON, an interrupted grid going on where it stopped.
//!
//! An experiment is a TOML file:
//!
//! ```toml
//! name = "e1-scaling"                 # its results go to OUT/e1-scaling/
//! title = "E1: examples/s against trainers"
//! about = "What it measures, for the report."
//!
//! [base]                              # a run configuration, as `train --config` reads
//! data.synthetic.train_rows = 200000
//! train.eval_every = 0
//!
//! [grid]                              # configuration keys, each with its values
//! "sync.algorithm" = ["none", "shadow-ma", "fr-ma:5"]
//! "train.trainers" = [1, 2, 4]
//! "train.seed" = [1, 2, 3]
//! ```
//!
//! Every combination of the grid's values is one [`Run`] (the first key varies
//! slowest), named by its values (`algorithm=shadow-ma,trainers=2,seed=1`):
//! its configuration is the base with those keys set. A key or value the
//! configuration does not take fails the whole experiment before anything
//! runs; a combination it rejects as out of range (a group larger than the
//! trainers) is [`Skipped`] with the reason. A key the base sets for some
//! runs that others would ignore (a link for the shadow runs beside a `none`
//! baseline) is taken back to its default in those others; a run whose own
//! grid values set a key its mode ignores (a group size under `none`), or
//! that sets one no run reads, is [`Skipped`]. [`run_grid`] writes each run's
//! [`TrainReport`] to `OUT/NAME/runs/ID.json` as soon as it ends, and reuses a
//! report already there whose configuration is the run's and which finished.
//! The experiments of the project's results documents are built in
//! ([`Experiment::named`]).

use crate::config::{clear_ignored_in_grid, clear_unread_sections_in_grid, Config};
use crate::train::{self, Observer, TrainReport};
use crate::{output, Error, Registry, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// The experiments shipped with the project, by name.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("smoke", include_str!("../experiments/smoke.toml")),
    ("e1-scaling", include_str!("../experiments/e1-scaling.toml")),
    (
        "e1-shadow-cost",
        include_str!("../experiments/e1-shadow-cost.toml"),
    ),
    (
        "e1-shadow-threads",
        include_str!("../experiments/e1-shadow-threads.toml"),
    ),
    ("e2-quality", include_str!("../experiments/e2-quality.toml")),
    (
        "e3-sync-frequency",
        include_str!("../experiments/e3-sync-frequency.toml"),
    ),
    (
        "e4-easgd-shards",
        include_str!("../experiments/e4-easgd-shards.toml"),
    ),
    (
        "e5-ablations",
        include_str!("../experiments/e5-ablations.toml"),
    ),
    (
        "e6-staleness",
        include_str!("../experiments/e6-staleness.toml"),
    ),
    (
        "e7-compression",
        include_str!("../experiments/e7-compression.toml"),
    ),
    (
        "e8-stragglers",
        include_str!("../experiments/e8-stragglers.toml"),
    ),
    ("e9-elastic", include_str!("../experiments/e9-elastic.toml")),
    ("e10-diloco", include_str!("../experiments/e10-diloco.toml")),
    (
        "e11-bmuf-eta",
        include_str!("../experiments/e11-bmuf-eta.toml"),
    ),
    (
        "e12-sgd-n16",
        include_str!("../experiments/e12-sgd-n16.toml"),
    ),
    (
        "e13-ne-vs-n",
        include_str!("../experiments/e13-ne-vs-n.toml"),
    ),
    (
        "e13-hogwild-n",
        include_str!("../experiments/e13-hogwild-n.toml"),
    ),
    (
        "e14-sgd-hybrid",
        include_str!("../experiments/e14-sgd-hybrid.toml"),
    ),
    (
        "d1-schedules",
        include_str!("../experiments/d1-schedules.toml"),
    ),
    (
        "d2-group-size",
        include_str!("../experiments/d2-group-size.toml"),
    ),
];

/// An experiment file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    about: String,
    #[serde(default)]
    target_ne: Option<f64>,
    #[serde(default = "default_baseline")]
    baseline: String,
    #[serde(default)]
    pairs: Vec<(String, String)>,
    #[serde(default)]
    base: Table,
    grid: Table,
}

fn default_baseline() -> String {
    "none".into()
}

/// A grid of runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// Its name (the directory of its results).
    pub name: String,
    /// One line saying what it shows.
    pub title: String,
    /// What it measures and how to read it.
    pub about: String,
    /// A test NE whose time to reach the report gives (evaluated during the
    /// runs: set `train.eval_every`).
    pub target_ne: Option<f64>,
    /// The `sync.algorithm` the report compares every cell with, at the
    /// cell's other settings (`none` unless said).
    pub baseline: String,
    /// Algorithms the report compares head to head, the first against the
    /// second, at the same other settings (`pairs = [["shadow-ma",
    /// "fr-ma:10"]]`).
    pub pairs: Vec<(String, String)>,
    /// The runs, in order.
    pub runs: Vec<Run>,
    /// The combinations the configuration rejects.
    pub skipped: Vec<Skipped>,
    /// The grid's keys, in order.
    pub keys: Vec<String>,
    /// The file's text, kept beside the results.
    pub source: String,
}

/// One run of a grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Its name: the grid's values, `key=value` by the key's last part.
    pub id: String,
    /// The grid's values, by full key.
    pub settings: Vec<(String, Value)>,
    /// Its whole configuration.
    pub config: Config,
}

/// A combination of the grid's values that is not a valid configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// What it would have been named.
    pub id: String,
    /// Why it is not run.
    pub reason: String,
}

impl Experiment {
    /// Reads an experiment from TOML text; `origin` names it in errors.
    ///
    /// # Errors
    ///
    /// TOML that does not parse, or a grid that cannot run (an unknown key, a
    /// value out of range), named with `origin`.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file: ExperimentFile =
            toml::from_str(text).map_err(|e| Error::config(origin, e.to_string()))?;
        check_name(&file.name, origin)?;
        let axes = axes_of(file.grid, origin)?;
        let (runs, skipped) = runs_of(&file.base, &axes, origin)?;
        let experiment = Experiment {
            title: if file.title.is_empty() {
                file.name.clone()
            } else {
                file.title
            },
            name: file.name,
            about: file.about,
            target_ne: file.target_ne,
            baseline: file.baseline,
            pairs: file.pairs,
            runs,
            skipped,
            keys: axes.iter().map(|(k, _)| k.clone()).collect(),
            source: text.to_string(),
        };
        experiment.check_runs(origin)?;
        Ok(experiment)
    }

    /// Some run of the grid is valid, and no two runs share a name (a run's
    /// results are found by it).
    fn check_runs(&self, origin: &str) -> Result<()> {
        if self.runs.is_empty() {
            let first = self
                .skipped
                .first()
                .map_or(String::new(), |s| format!("; {}: {}", s.id, s.reason));
            return Err(Error::config(
                format!("{origin}: base"),
                format!(
                    "no run of the grid is a valid configuration ({} rejected){first}",
                    self.skipped.len()
                ),
            ));
        }
        let mut ids: Vec<&str> = self.runs.iter().map(|r| r.id.as_str()).collect();
        ids.extend(self.skipped.iter().map(|s| s.id.as_str()));
        ids.sort_unstable();
        if let Some(twice) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::config(
                format!("{origin}: grid"),
                format!(
                    "two runs would be named {}: make their values differ",
                    twice[0]
                ),
            ));
        }
        Ok(())
    }

    /// A built-in experiment by name, or the experiment file at that path.
    ///
    /// # Errors
    ///
    /// No built-in experiment of that name and no readable file at that path, or a file
    /// that does not parse (as [`Experiment::parse`]).
    pub fn named(name_or_path: &str) -> Result<Self> {
        if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("built-in experiment {name}"));
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            return Err(Error::config(
                "experiment",
                format!(
                    "{name_or_path:?} is neither a built-in experiment ({}) nor a file",
                    names.join(", ")
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Where its results go under `out`.
    pub fn directory(&self, out: &Path) -> PathBuf {
        out.join(&self.name)
    }

    /// The data files its runs read (given, or the built-in set's), which
    /// nothing it writes may replace.
    pub fn inputs(&self) -> Vec<PathBuf> {
        let mut inputs: Vec<PathBuf> = Vec::new();
        for run in &self.runs {
            let data = &run.config.data;
            let files = match (&data.train, &data.test) {
                (Some(train), Some(test)) => vec![train.clone(), test.clone()],
                _ => {
                    let dir = data.synthetic.directory();
                    vec![dir.join("train.tsv"), dir.join("test.tsv")]
                }
            };
            for file in files {
                if !inputs.contains(&file) {
                    inputs.push(file);
                }
            }
        }
        inputs
    }
}

/// An experiment's name: letters, digits, `-` and `_` (it names a directory).
fn check_name(name: &str, origin: &str) -> Result<()> {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(valid) {
        return Err(Error::config(
            format!("{origin}: name"),
            format!("{name:?} is not a name; use letters, digits, - and _"),
        ));
    }
    Ok(())
}

/// The grid's axes: each key with its values, a list of at least one.
fn axes_of(grid: Table, origin: &str) -> Result<Vec<(String, Vec<Value>)>> {
    grid.into_iter()
        .map(|(key, values)| match values {
            Value::Array(values) if !values.is_empty() => Ok((key, values)),
            _ => Err(Error::config(
                format!("{origin}: grid.{key}"),
                "must be a list of at least one value",
            )),
        })
        .collect()
}

/// Every combination of the axes' values over `base`: the valid runs and the
/// skipped ones. The base may set a key for the cells that read it (a link
/// for the shadow runs beside a `none` baseline): it is cleared in the others.
fn runs_of(
    base: &Table,
    axes: &[(String, Vec<Value>)],
    origin: &str,
) -> Result<(Vec<Run>, Vec<Skipped>)> {
    let (mut cells, mut tables, mut own_keys) = (Vec::new(), Vec::new(), Vec::new());
    for settings in combinations(axes) {
        let mut table = base.clone();
        for (key, value) in &settings {
            set_key(&mut table, key, value.clone())
                .map_err(|reason| Error::config(format!("{origin}: grid.{key}"), reason))?;
        }
        let own: Vec<_> = (settings.iter())
            .flat_map(|(key, value)| leaf_keys(key, value))
            .collect();
        own_keys.push(own);
        cells.push((run_id(&settings), settings));
        tables.push(table);
    }
    clear_unread_sections_in_grid(&mut tables, &own_keys);
    let mut configs = (cells.iter().zip(tables))
        .map(|((id, _), table)| {
            Value::Table(table)
                .try_into()
                .map_err(|e| Error::config(format!("{origin}: run {id}"), e.to_string()))
        })
        .collect::<Result<Vec<Config>>>()?;
    clear_ignored_in_grid(&mut configs, &own_keys);
    let (mut runs, mut skipped) = (Vec::new(), Vec::new());
    for ((id, settings), config) in cells.into_iter().zip(configs) {
        match config.validate() {
            Ok(()) => runs.push(Run {
                id,
                settings,
                config,
            }),
            Err(e) => skipped.push(Skipped {
                id,
                reason: e.to_string(),
            }),
        }
    }
    Ok((runs, skipped))
}

/// Every combination of the axes' values, the first axis varying slowest.
fn combinations(axes: &[(String, Vec<Value>)]) -> Vec<Vec<(String, Value)>> {
    axes.iter()
        .fold(vec![Vec::new()], |partial, (key, values)| {
            partial
                .iter()
                .flat_map(|settings| {
                    values.iter().map(move |value| {
                        let mut more = settings.clone();
                        more.push((key.clone(), value.clone()));
                        more
                    })
                })
                .collect()
        })
}

/// `key=value,...` by each key's last part; a table value as its values
/// joined by `-`.
fn run_id(settings: &[(String, Value)]) -> String {
    fn label(value: &Value) -> String {
        match value {
            Value::String(s) => s.clone(),
            // Keys too: two tables setting different keys to one value differ.
            Value::Table(t) => t
                .iter()
                .map(|(k, v)| format!("{k}_{}", label(v)))
                .collect::<Vec<_>>()
                .join("+"),
            Value::Array(a) => a.iter().map(label).collect::<Vec<_>>().join("-"),
            other => other.to_string(),
        }
    }
    if settings.is_empty() {
        // An empty grid: its one run, named (never a hidden `runs/.json`).
        return "run".to_string();
    }
    settings
        .iter()
        .map(|(key, value)| {
            let short = key.rsplit('.').next().unwrap_or(key);
            let text: String = label(value)
                .chars()
                .map(|c| match c {
                    '/' | ' ' | ',' | '=' => '_',
                    c => c,
                })
                .collect();
            format!("{short}={text}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Sets the dotted `key` of `table` to `value`, creating tables on the way; a
/// table value sets each of its keys, leaving the others as they were.
/// The dotted keys `value` sets at `key`: `key` itself, or each of its
/// table's leaves.
fn leaf_keys(key: &str, value: &Value) -> Vec<String> {
    match value {
        Value::Table(keys) => keys
            .iter()
            .flat_map(|(k, v)| leaf_keys(&format!("{key}.{k}"), v))
            .collect(),
        _ => vec![key.to_string()],
    }
}

fn set_key(table: &mut Table, key: &str, value: Value) -> std::result::Result<(), String> {
    let mut parts = key.split('.').peekable();
    let mut at = table;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            match (at.get_mut(part), value) {
                (Some(Value::Table(existing)), Value::Table(keys)) => {
                    for (key, value) in keys {
                        set_key(existing, &key, value)?;
                    }
                }
                (_, value) => {
                    at.insert(part.to_string(), value);
                }
            }
            return Ok(());
        }
        let next = at
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        at = next
            .as_table_mut()
            .ok_or_else(|| format!("{part} is a value, not a table of keys"))?;
    }
    Err("the key is empty".into())
}

/// Hears about a grid's progress; each run's progress too, as a
/// [`train::Observer`].
pub trait GridObserver: Observer {
    /// Run `index` (from 0) of `total` starts.
    fn run_started(&mut self, _index: usize, _total: usize, _run: &Run) {}
    /// A run ended (`reused`: its results were already there).
    fn run_ended(&mut self, _run: &Run, _report: &TrainReport, _reused: bool) {}
}

impl GridObserver for () {}

/// What [`run_grid`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GridOutcome {
    /// Runs trained now.
    pub trained: usize,
    /// Runs whose results were already there.
    pub reused: usize,
    /// Runs that stopped with an error (their results say which), to be run
    /// again next time.
    pub failed: Vec<String>,
    /// Whether the grid was interrupted (the run under way is run again next
    /// time).
    pub interrupted: bool,
    /// Where the results are.
    pub directory: PathBuf,
}

/// The results of a run, as [`run_grid`] keeps them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// The run's name.
    pub id: String,
    /// The grid's values, `key = value` by full key.
    pub settings: Table,
    /// What the run measured.
    pub report: TrainReport,
}

impl RunResult {
    /// Reads a run's results file.
    ///
    /// # Errors
    ///
    /// A file that cannot be read ([`Error::Io`]) or is not a results file
    /// ([`Error::Parse`]).
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::config(path.display().to_string(), e.to_string()))
    }
}

/// The file of a run's results under an experiment's `directory`.
pub fn run_file(directory: &Path, id: &str) -> PathBuf {
    directory.join("runs").join(format!("{id}.json"))
}

/// Runs every run of `experiment` whose finished results are not in `out`
/// yet, writing each one's as it ends; stops at the first interruption. The
/// names its runs give are looked up in `registry`.
///
/// # Errors
///
/// A results directory that cannot be written, or a run that cannot start
/// (a run that fails while training is kept as failed, and the grid goes on).
pub fn run_grid(
    experiment: &Experiment,
    out: &Path,
    registry: &Registry,
    observer: &mut impl GridObserver,
) -> Result<GridOutcome> {
    let directory = experiment.directory(out);
    let runs_dir = directory.join("runs");
    output::create_dir(&runs_dir)?;
    let inputs = experiment.inputs();
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    output::write_output(
        &directory.join("experiment.toml"),
        experiment.source.as_bytes(),
        &inputs,
    )?;
    let mut outcome = GridOutcome {
        directory: directory.clone(),
        ..GridOutcome::default()
    };
    let total = experiment.runs.len();
    for (index, run) in experiment.runs.iter().enumerate() {
        let path = run_file(&directory, &run.id);
        observer.run_started(index, total, run);
        if let Some(done) = finished(&path, &run.config) {
            observer.run_ended(run, &done.report, true);
            outcome.reused += 1;
            continue;
        }
        // Refused before it trains, not after: a run file that is a link
        // to an input.
        output::check_output(&path, &inputs)?;
        let report = train::Run::new()
            .registry(registry)
            .observer(observer)
            .train(&run.config)?;
        if report.interrupted {
            outcome.interrupted = true;
            return Ok(outcome);
        }
        let result = RunResult {
            id: run.id.clone(),
            settings: run.settings.iter().cloned().collect(),
            report,
        };
        let json = serde_json::to_vec_pretty(&result)
            .map_err(|e| Error::config(path.display().to_string(), e.to_string()))?;
        // Whole or not at all: a run killed while writing is run again.
        output::write_output(&path, &json, &inputs)?;
        if result.report.error.is_some() {
            outcome.failed.push(run.id.clone());
        } else {
            outcome.trained += 1;
        }
        observer.run_ended(run, &result.report, false);
    }
    Ok(outcome)
}

/// The results at `path`, if they are of `config` and finished.
fn finished(path: &Path, config: &Config) -> Option<RunResult> {
    let result = RunResult::read(path).ok()?;
    let report = &result.report;
    (report.config == *config && report.error.is_none() && !report.interrupted).then_some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
        name = "tiny"
        title = "A test grid"
        [base]
        data.synthetic.train_rows = 4000
        data.synthetic.test_rows = 1000
        train.eval_every = 0
        [grid]
        "sync.algorithm" = ["none", "shadow-ma"]
        "train.trainers" = [1, 2]
        "sync.group_size" = [0, 2]
    "#;

    #[test]
    fn an_empty_grid_is_one_named_run_and_a_title_defaults_to_the_name() {
        let e = Experiment::parse("name = \"one\"\n[grid]\n", "test").unwrap();
        let ids: Vec<&str> = e.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["run"]);
        assert_eq!(e.title, "one");
    }

    #[test]
    fn a_grid_is_every_combination_of_its_values_first_key_slowest() {
        let e = Experiment::parse(GRID, "test").unwrap();
        assert_eq!(
            e.keys,
            ["sync.algorithm", "train.trainers", "sync.group_size"]
        );
        let ids: Vec<&str> = e.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "algorithm=none,trainers=1,group_size=0",
                "algorithm=none,trainers=2,group_size=0",
                "algorithm=shadow-ma,trainers=1,group_size=0",
                "algorithm=shadow-ma,trainers=2,group_size=0",
                "algorithm=shadow-ma,trainers=2,group_size=2",
            ]
        );
        // A group of 2 with 1 trainer is out of range, and `none` has no
        // groups: skipped, with why.
        let skipped: Vec<&str> = e.skipped.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "algorithm=none,trainers=1,group_size=2",
                "algorithm=none,trainers=2,group_size=2",
                "algorithm=shadow-ma,trainers=1,group_size=2"
            ]
        );
        assert!(
            e.skipped[1].reason.contains("sync.group_size") && e.skipped[1].reason.contains("none"),
            "{}",
            e.skipped[1].reason
        );
        let run = &e.runs[4];
        assert_eq!(run.config.train.trainers, 2);
        assert_eq!(run.config.sync.group_size, 2);
        assert_eq!(run.config.sync.algorithm.to_string(), "shadow-ma");
        assert_eq!(run.config.data.synthetic.train_rows, 4000);
    }

    #[test]
    fn a_table_value_sets_several_keys_and_keeps_the_others() {
        let text = r#"
            name = "variants"
            [base]
            sync = { link = { latency_us = 200.0 }, seed = 7 }
            [grid]
            "sync" = [
              { algorithm = "sync-sgd" },
              { algorithm = "fr-ma:1", group_size = 2, schedule = "random" },
              { algorithm = "shadow-bmuf", bmuf = { eta = 0.5 } },
              { algorithm = "shadow-bmuf", bmuf = { zeta = 0.5 } },
            ]
            "train.trainers" = [4]
        "#;
        let e = Experiment::parse(text, "test").unwrap();
        let ids: Vec<&str> = e.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "sync=algorithm_sync-sgd,trainers=4",
                "sync=algorithm_fr-ma:1+group_size_2+schedule_random,trainers=4",
                "sync=algorithm_shadow-bmuf+bmuf_eta_0.5,trainers=4",
                "sync=algorithm_shadow-bmuf+bmuf_zeta_0.5,trainers=4",
            ]
        );
        // Two runs of one name would share one results file.
        let twice = Experiment::parse(&text.replace("[4]", "[4, 4]"), "exp.toml").unwrap_err();
        assert!(
            twice.to_string().contains("two runs would be named"),
            "{twice}"
        );
        let ds_sync = &e.runs[1].config.sync;
        assert_eq!(ds_sync.algorithm.to_string(), "fr-ma:1");
        assert_eq!((ds_sync.group_size, ds_sync.seed), (2, 7));
        assert_eq!(ds_sync.link.latency_us, 200.0);
        assert_eq!(e.runs[0].config.sync.group_size, 0);
        // The base's seed is the random schedule's: the others run without it.
        assert_eq!(e.runs[0].config.sync.seed, 0);
    }

    #[test]
    fn a_bad_key_or_value_fails_the_whole_experiment_naming_it() {
        let typo = GRID.replace("\"train.trainers\"", "\"train.trainer\"");
        let message = Experiment::parse(&typo, "exp.toml")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("exp.toml") && message.contains("trainer"),
            "{message}"
        );
        let wrong = GRID.replace("[1, 2]", "[1, \"two\"]");
        let message = Experiment::parse(&wrong, "exp.toml")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("run algorithm=none,trainers=two"),
            "{message}"
        );
        let empty = GRID.replace("[0, 2]", "[]");
        let message = Experiment::parse(&empty, "exp.toml")
            .unwrap_err()
            .to_string();
        assert!(message.contains("grid.sync.group_size"), "{message}");
        let through_a_value = GRID.replace("\"sync.group_size\"", "\"train.trainers.x\"");
        assert!(Experiment::parse(&through_a_value, "exp.toml").is_err());
        assert!(Experiment::parse(&GRID.replace("tiny", "a/b"), "x").is_err());
        assert!(Experiment::named("no-such-experiment").is_err());
    }

    #[test]
    fn the_built_in_experiments_parse_and_have_runs() {
        for (name, _) in BUILT_IN {
            let e = Experiment::named(name).unwrap();
            assert_eq!(e.name, *name);
            assert!(!e.runs.is_empty() && !e.title.is_empty(), "{name}");
            assert!(e.skipped.is_empty(), "{name}: {:?}", e.skipped);
        }
    }

    #[test]
    fn finished_runs_are_reused_and_the_others_run() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let text = GRID.replace(
            "train.eval_every = 0",
            &format!("train.eval_every = 0\ndata.synthetic.dir = {data:?}\nmodel.kind = \"lr\""),
        );
        let e = Experiment::parse(&text, "test").unwrap();
        let first = run_grid(&e, dir.path(), &Registry::default(), &mut ()).unwrap();
        assert_eq!((first.trained, first.reused), (5, 0));
        assert!(!first.interrupted && first.failed.is_empty());
        for run in &e.runs {
            let result = RunResult::read(&run_file(&first.directory, &run.id)).unwrap();
            assert_eq!(result.report.examples, 4000);
            assert_eq!(result.report.config, run.config);
            assert_eq!(result.settings.len(), 3);
        }
        // One result lost, one from another configuration: both run again.
        std::fs::remove_file(run_file(&first.directory, &e.runs[0].id)).unwrap();
        let mut changed = e.clone();
        changed.runs[1].config.train.seed += 1;
        let again = run_grid(&changed, dir.path(), &Registry::default(), &mut ()).unwrap();
        assert_eq!((again.trained, again.reused), (2, 3));
        assert!(first.directory.join("experiment.toml").exists());
    }
}
