//! The `shadowsync` command line: `train`, `experiment`, `report` and
//! `gen-data`. The `shadowsync` binary is [`main`] with the built-in
//! [`Registry`]; a binary of one's own calls it with its own rules,
//! schedules, models and row optimizers added, and every flag and config
//! key then takes their names (examples/ctr_custom_rule.rs). The command
//! line's own errors are `anyhow`'s, printed with their causes; the library
//! beneath it returns [`crate::Error`].

mod flags;
mod progress;
mod summary;

use crate::data::{SyntheticData, SyntheticSpec};
use crate::experiment::{self, Experiment};
use crate::report::{self, ExperimentResults, Provenance};
use crate::runtime::faults::InjectedPanic;
use crate::runtime::sync::Fabric;
use crate::train::TrainReport;
use crate::{output, train, Registry};
use anyhow::{Context, Result};
use clap::Parser;
use flags::{Backend, Cli, Command, ExperimentArgs, GenDataArgs, ReportArgs, TrainArgs};
use progress::{GridProgress, Interrupt, Progress};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use summary::{error_text, print_summary};

fn run_experiment(args: &ExperimentArgs, registry: &Registry) -> Result<()> {
    if args.list {
        for (name, _) in experiment::BUILT_IN {
            let e = Experiment::named(name)?;
            println!("{name:14} {} runs  {}", e.runs.len(), e.title);
        }
        return Ok(());
    }
    let name = args
        .experiment
        .as_deref()
        .context("name an experiment or give --list")?;
    let experiment = Experiment::named(name)?;
    println!(
        "{}: {} runs{}",
        experiment.title,
        experiment.runs.len(),
        match experiment.skipped.len() {
            0 => String::new(),
            n => format!(" ({n} combinations skipped)"),
        }
    );
    for skipped in &experiment.skipped {
        println!("  skipped {}: {}", skipped.id, skipped.reason);
    }
    let mut progress = GridProgress::new(Interrupt::install()?)?;
    let outcome = experiment::run_grid(&experiment, &args.out, registry, &mut progress)?;
    progress.bar.finish_and_clear();
    let done = outcome.trained + outcome.reused;
    println!(
        "{done} of {} runs done ({} now, {} already), results in {}",
        experiment.runs.len(),
        outcome.trained,
        outcome.reused,
        outcome.directory.display()
    );
    if outcome.interrupted {
        anyhow::bail!("interrupted; run the same command again to go on");
    }
    if !outcome.failed.is_empty() {
        anyhow::bail!(
            "{} runs failed (their results say why; they run again next time): {}",
            outcome.failed.len(),
            outcome.failed.join(", ")
        );
    }
    Ok(())
}

fn write_reports(args: &ReportArgs) -> Result<()> {
    let dirs = if !args.dirs.is_empty() {
        args.dirs.clone()
    } else {
        let root = PathBuf::from("results");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .with_context(|| {
                format!(
                    "reading {} (name results directories to report)",
                    root.display()
                )
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("experiment.toml").exists())
            .collect();
        dirs.sort();
        dirs
    };
    anyhow::ensure!(!dirs.is_empty(), "no experiment results to report");
    let mut left_out = Vec::new();
    for dir in &dirs {
        let results = ExperimentResults::load(dir)?;
        let name = &results.experiment.name;
        let built_in = experiment::BUILT_IN.iter().any(|(n, _)| n == name);
        let source = if built_in {
            name.clone()
        } else {
            dir.join("experiment.toml").display().to_string()
        };
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let command = format!(
            "./dev shadowsync experiment {source} --out {}\n./dev shadowsync report {} --out {}",
            parent.display(),
            dir.display(),
            args.out.display()
        );
        for why in &results.left_out {
            tracing::warn!("results file left out: {why}");
        }
        anyhow::ensure!(
            !results.results.is_empty(),
            "{}: no run has results to report ({} runs, {} results files left out)",
            dir.display(),
            results.experiment.runs.len(),
            results.left_out.len()
        );
        let document = report::render(&results, &Provenance::here(command))?;
        let inputs = results.inputs(dir);
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        let path = document.write(&args.out, &inputs)?;
        println!(
            "{}: {} of {} runs, {} plots",
            path.display(),
            results.results.len(),
            results.experiment.runs.len(),
            document.plots.len()
        );
        left_out.extend(results.left_out.iter().cloned());
    }
    // The reports are written without them; the command still fails.
    anyhow::ensure!(
        left_out.is_empty(),
        "{} results files left out of the reports (run the experiment again to redo \
         them):\n  {}",
        left_out.len(),
        left_out.join("\n  ")
    );
    Ok(())
}

/// `result`, its error naming this process's rank when there are several (a
/// rank that fails exits at once, which ends the whole `mpirun` job).
fn name_rank<T, E: Into<anyhow::Error>>(
    result: std::result::Result<T, E>,
    fabric: &dyn Fabric,
) -> Result<T> {
    result.map_err(|e| match fabric.processes() {
        1 => e.into(),
        ranks => e
            .into()
            .context(format!("rank {} of {ranks}", fabric.process())),
    })
}

/// The `shadowsync` command line on this process's arguments, with the
/// names of `registry` (`--sync shadow-RULE`, `--schedule`, `--model`,
/// `--sparse-optimizer`, and the same config keys); an error is printed
/// with its causes and makes the exit status 1.
pub fn main(registry: Registry) -> ExitCode {
    main_with_args(registry, std::env::args_os())
}

/// [`main`] on `args` (the first being the program's name).
pub fn main_with_args(registry: Registry, args: impl IntoIterator<Item = OsString>) -> ExitCode {
    quiet_injected_panics();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // Help and version are printed to stdout with success, usage errors
        // to stderr with clap's status.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli, &registry) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_text(&error));
            ExitCode::FAILURE
        }
    }
}

/// An injected fault's panic is expected and reported by the recovery's WARN
/// line; any other panic still gets the default report.
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<InjectedPanic>() {
            default(info);
        }
    }));
}

fn run(cli: Cli, registry: &Registry) -> Result<()> {
    // A grid logs its runs' warnings only: its progress bar says the rest.
    let quiet = matches!(cli.command, Command::Experiment(_) | Command::Report(_));
    // A program that set its own subscriber keeps it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if quiet { "warn" } else { "info" })
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    match cli.command {
        Command::Train(args) => train_command(&args, registry),
        Command::Experiment(args) => run_experiment(&args, registry),
        Command::Report(args) => write_reports(&args),
        Command::GenData(args) => gen_data(&args),
    }
}

/// How a `shadowsync train` run starts.
enum Start<'a> {
    /// From its configuration (file and flags).
    Fresh(Box<crate::config::Config>),
    /// From the newest checkpoint in a directory.
    Resume(&'a Path),
}

/// `shadowsync train`: one run (or this rank's part of one), its summary and
/// results; non-zero when it stopped early or was interrupted.
fn train_command(args: &TrainArgs, registry: &Registry) -> Result<()> {
    let mut progress = Progress::new(Interrupt::install()?);
    let fabric = Backend::fabric(args.backend, args.mpi_watchdog_s)?;
    // A resumed run's configuration is its checkpoint's, read by `Run::resume`.
    let start = match &args.resume {
        Some(dir) => Start::Resume(dir),
        None => Start::Fresh(Box::new(args.config(fabric.processes())?)),
    };
    if let (Some(path), 0) = (&args.results, fabric.process()) {
        check_results_path(path, args, &start)?;
    }
    let run = train::Run::new()
        .fabric(Arc::clone(&fabric))
        .registry(registry)
        .observer(&mut progress);
    let report = match &start {
        Start::Resume(dir) => run.resume(dir),
        Start::Fresh(config) => run.train(config),
    };
    let report = name_rank(report, fabric.as_ref())?;
    // One rank of a job speaks for it: they all have the same model.
    if let Some(error) = report.error.as_ref().filter(|_| fabric.processes() > 1) {
        name_rank(
            Err(anyhow::anyhow!("training stopped early: {error}")),
            fabric.as_ref(),
        )?;
    }
    fabric.finish()?;
    if fabric.process() > 0 {
        return Ok(());
    }
    print_summary(&report);
    if let Some(path) = &args.results {
        write_results(path, &report)?;
    }
    verdict(&report, fabric.processes())
}

/// Fails now, not after the run, when the results file cannot or must not be
/// written (over the config or the data, say).
fn check_results_path(path: &Path, args: &TrainArgs, start: &Start) -> Result<()> {
    let mut inputs: Vec<&Path> = args.config.iter().map(PathBuf::as_path).collect();
    if let Start::Fresh(config) = start {
        let data = config.data.train.iter().chain(&config.data.test);
        inputs.extend(data.map(PathBuf::as_path));
    }
    output::check_output(path, &inputs).context("--results")
}

/// Writes the results JSON, atomically: on a full disk the file that was
/// there stays whole. (A resumed run's data is known only now.)
fn write_results(path: &Path, report: &TrainReport) -> Result<()> {
    let json = serde_json::to_vec_pretty(report)?;
    let inputs = [report.data.train.as_path(), report.data.test.as_path()];
    output::write_output(path, &json, &inputs).with_context(|| {
        format!(
            "results not written (the summary above has the figures; {} is as it was)",
            path.display()
        )
    })?;
    println!("results: {}", path.display());
    Ok(())
}

/// What the finished run comes to for the exit status: an error when it
/// stopped early, lost or doubled an update, was interrupted, or could not
/// save its checkpoints.
fn verdict(report: &TrainReport, processes: usize) -> Result<()> {
    if let Some(error) = &report.error {
        anyhow::bail!("training stopped early: {error}");
    }
    if let Some(lost) = report.distributed.as_ref().map(|d| &d.unaccounted_pushes) {
        anyhow::ensure!(
            lost.is_empty(),
            "embedding pushes were lost or applied twice, the tables are not what the \
             trainers computed:\n  {}",
            lost.join("\n  ")
        );
    }
    if let Some(audit) = report.row_audit.filter(|a| !a.holds()) {
        anyhow::bail!(
            "the row audit failed: {} values of the job's {} rows are not their initial \
             values minus every step pushed to them (largest error {:.2e} of their movement, \
             bound {:.0e}): updates were lost or applied twice",
            audit.off,
            audit.rows,
            audit.max_relative_error,
            audit.bound,
        );
    }
    if report.interrupted {
        return Err(interrupted(report, processes));
    }
    if let Some(error) = report.checkpoint_errors.last() {
        anyhow::bail!(
            "trained to the end, but {} checkpoints could not be saved; the last: {error}",
            report.checkpoint_errors.len()
        );
    }
    Ok(())
}

/// Why an interrupted run exits non-zero, and how to go on from it.
fn interrupted(report: &TrainReport, processes: usize) -> anyhow::Error {
    let resume = match processes {
        1 => String::new(),
        ranks => format!("mpirun -np {ranks} "),
    };
    let unsaved = report.checkpoint_errors.last();
    match (&report.config.checkpoint.dir, &report.checkpoint, unsaved) {
        (None, _, _) => anyhow::anyhow!("interrupted (no checkpoint: --checkpoint-dir not set)"),
        (Some(_), None, error) => anyhow::anyhow!(
            "interrupted; no checkpoint was saved, nothing to resume from{}",
            error.map_or(String::new(), |e| format!(" ({e})"))
        ),
        (Some(dir), Some(last), Some(error)) => anyhow::anyhow!(
            "interrupted; {} checkpoints could not be saved (the last: {error}); the \
             newest saved is {}; continue with: {resume}shadowsync train --resume {}",
            report.checkpoint_errors.len(),
            last.display(),
            dir.display()
        ),
        (Some(dir), Some(_), None) => anyhow::anyhow!(
            "interrupted; continue with: {resume}shadowsync train --resume {}",
            dir.display()
        ),
    }
}

/// `shadowsync gen-data`: synthetic data and its oracle's figures.
fn gen_data(args: &GenDataArgs) -> Result<()> {
    let spec = SyntheticSpec {
        train_rows: args.rows,
        test_rows: args.test_rows,
        seed: args.seed,
        profile: args.profile,
    };
    let data = SyntheticData::generate(spec, &args.out)?;
    println!("wrote {} and {}", data.train.display(), data.test.display());
    for (name, o) in [("train", data.train_oracle), ("test", data.test_oracle)] {
        println!(
            "{name}: {} rows, CTR {:.4}, oracle logloss {:.4}, oracle NE {:.4}",
            o.rows, o.ctr, o.logloss, o.ne
        );
    }
    Ok(())
}
