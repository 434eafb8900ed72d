//! The `shadowsync` command line: `train`, `experiment`, `report` and `gen-data`.

use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use shadowsync::config::{Config, ModelKind, OptimizerKind};
use shadowsync::data::{BadLinePolicy, SyntheticData, SyntheticSpec};
use shadowsync::experiment::{self, Experiment, GridObserver, Run};
use shadowsync::output;
use shadowsync::report::{self, ExperimentResults, Provenance};
use shadowsync::runtime::sync::{
    launched_by_mpirun, Algorithm, Fabric, InProcess, Schedule, WriteBack,
};
use shadowsync::train::{self, EvalPoint, Observer, TrainReport};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "shadowsync",
    version,
    about = "Train CTR models with background synchronization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model for one pass and evaluate it (built-in synthetic data unless
    /// --train/--test are given).
    Train(Box<TrainArgs>),
    /// Run a grid of training runs, keeping every run's results as JSON (run it
    /// again to go on after an interruption: finished runs are not run again).
    Experiment(ExperimentArgs),
    /// Turn experiments' results into Markdown documents with SVG plots.
    Report(ReportArgs),
    /// Write synthetic Criteo-format data labelled by a planted model.
    GenData(GenDataArgs),
}

/// Flags override the config file's values.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("setup").multiple(true)))]
struct TrainArgs {
    /// TOML configuration file.
    #[arg(long, group = "setup")]
    config: Option<PathBuf>,
    /// Training file (Criteo TSV, plain or gzip).
    #[arg(long, requires = "test", group = "setup")]
    train: Option<PathBuf>,
    /// Test file (Criteo TSV, plain or gzip).
    #[arg(long, requires = "train", group = "setup")]
    test: Option<PathBuf>,
    /// Model architecture.
    #[arg(long, value_enum, group = "setup")]
    model: Option<ModelKind>,
    /// Examples per step.
    #[arg(long, group = "setup")]
    batch_size: Option<usize>,
    /// Dense optimizer.
    #[arg(long, value_enum, group = "setup")]
    optimizer: Option<OptimizerKind>,
    /// Dense learning rate.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    lr: Option<f64>,
    /// Embedding optimizer.
    #[arg(long, group = "setup", value_parser = sparse_optimizer())]
    sparse_optimizer: Option<OptimizerKind>,
    /// Embedding learning rate.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    sparse_lr: Option<f64>,
    /// Rows of every field's hash table.
    #[arg(long, group = "setup")]
    table_size: Option<u32>,
    /// What to do with malformed lines.
    #[arg(long, value_enum, group = "setup")]
    bad_lines: Option<BadLinePolicy>,
    /// Examples between evaluations (0 = only at the end).
    #[arg(long, group = "setup")]
    eval_every: Option<u64>,
    /// libtorch intra-op threads.
    #[arg(long, group = "setup")]
    threads: Option<usize>,
    /// Seed of parameter initialization.
    #[arg(long, group = "setup")]
    seed: Option<u64>,
    /// Trainers, each on 1/N of the data.
    #[arg(long, group = "setup")]
    trainers: Option<usize>,
    /// Hogwild worker threads per trainer (with none and shadow-*).
    #[arg(long, group = "setup")]
    workers: Option<usize>,
    /// Synchronization: none, sync-sgd, fr-ma:K, fr-easgd:K, fr-bmuf:K, shadow-ma,
    /// shadow-easgd, shadow-bmuf.
    #[arg(long, value_parser = parse::<Algorithm>, group = "setup")]
    sync: Option<Algorithm>,
    /// Trainers per DS-Sync group (0 = all).
    #[arg(long, group = "setup")]
    group_size: Option<usize>,
    /// Group schedule: global, fixed, alternating, random, hypercube, hierarchical.
    #[arg(long, value_parser = parse::<Schedule>, group = "setup")]
    schedule: Option<Schedule>,
    /// Write-back of an average: overwrite or delta.
    #[arg(long, value_parser = parse_write_back, group = "setup")]
    write_back: Option<WriteBack>,
    /// EASGD's elasticity α in (0, 1] (shadow-easgd, fr-easgd:K).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    alpha: Option<f32>,
    /// Minimum milliseconds between two rounds of a shadow loop.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    min_interval_ms: Option<f64>,
    /// Minimum steps of its trainer between two rounds of a shadow loop.
    #[arg(long, group = "setup")]
    min_steps: Option<u64>,
    /// Milliseconds a group member is waited for in a round before the round
    /// goes on without it (0 = for ever).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    peer_timeout_ms: Option<f64>,
    /// Shards of the EASGD parameter server.
    #[arg(long, group = "setup")]
    server_shards: Option<usize>,
    /// Simulated link latency in microseconds.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    link_latency_us: Option<f64>,
    /// Simulated link bandwidth in Gbit/s (0 = unlimited).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    link_gbps: Option<f64>,
    /// Synthetic training rows (built-in data; not with --train).
    #[arg(long, group = "setup", conflicts_with = "train")]
    rows: Option<u64>,
    /// Synthetic test rows (built-in data; not with --train).
    #[arg(long, group = "setup", conflicts_with = "train")]
    test_rows: Option<u64>,
    /// Save checkpoints to this directory (SIGINT/SIGTERM and the end of the
    /// run save one too).
    #[arg(long, group = "setup")]
    checkpoint_dir: Option<PathBuf>,
    /// Each trainer's steps between two checkpoints (0 = only on
    /// SIGINT/SIGTERM and at the end); needs a checkpoint directory.
    #[arg(long, group = "setup")]
    checkpoint_every: Option<u64>,
    /// Checkpoints to keep (the newest).
    #[arg(long, group = "setup")]
    keep_checkpoints: Option<usize>,
    /// Continue the run checkpointed in this directory, from its newest whole
    /// checkpoint, with that run's configuration.
    #[arg(long, conflicts_with = "setup")]
    resume: Option<PathBuf>,
    /// Write the results as JSON to this file (under mpirun: rank 0 writes it).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Where the trainers run: local (this process) or mpi (this process is one
    /// rank of an mpirun job, hosting --trainers of the job's trainers); the
    /// default is mpi when launched by mpirun.
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Under MPI: seconds a send or a collective may take before the rank ends
    /// the job, naming itself (0 = wait for ever).
    #[arg(long, default_value_t = 120)]
    mpi_watchdog_s: u64,
}

/// Where a run's trainers live.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// All in this process.
    Local,
    /// Spread over the ranks of an `mpirun` job (feature `mpi`).
    Mpi,
}

impl Backend {
    /// The fabric of this backend (`None`: MPI's default when under mpirun),
    /// with a watchdog of `watchdog_s` seconds (0: none) under MPI.
    fn fabric(backend: Option<Self>, watchdog_s: u64) -> Result<Arc<dyn Fabric>> {
        let mpi = backend.map_or_else(launched_by_mpirun, |b| b == Backend::Mpi);
        if !mpi {
            return Ok(Arc::new(InProcess));
        }
        #[cfg(feature = "mpi")]
        return Ok(Arc::new(shadowsync::runtime::sync::mpi::MpiNode::start(
            (watchdog_s > 0).then(|| Duration::from_secs(watchdog_s)),
        )?));
        #[cfg(not(feature = "mpi"))]
        {
            let _ = watchdog_s; // only MPI ranks have a watchdog
            anyhow::bail!(
                "--backend mpi (or a launch by mpirun): this shadowsync was built without the \
                 `mpi` feature; build it with `cargo build --release --features mpi`"
            )
        }
    }
}

#[derive(Args)]
struct ExperimentArgs {
    /// A built-in experiment (see --list) or an experiment file (TOML).
    #[arg(required_unless_present = "list")]
    experiment: Option<String>,
    /// Directory of the results (each experiment's in a directory of its own).
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// List the built-in experiments.
    #[arg(long)]
    list: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// Results directories of experiments (RESULTS/NAME); none: every one
    /// under `results/`.
    dirs: Vec<PathBuf>,
    /// Directory of the documents (NAME.md, plots in NAME/).
    #[arg(long, default_value = "docs/results")]
    out: PathBuf,
}

#[derive(Args)]
struct GenDataArgs {
    /// Output directory (gets train.tsv, test.tsv, oracle.json).
    #[arg(long)]
    out: PathBuf,
    /// Training rows.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    rows: u64,
    /// Test rows.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    test_rows: u64,
    /// Seed of the planted model and rows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse<T: std::str::FromStr<Err = shadowsync::runtime::Error>>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|e: shadowsync::runtime::Error| e.to_string())
}

/// The embedding optimizers (Adam is for dense parameters only).
fn sparse_optimizer() -> impl clap::builder::TypedValueParser<Value = OptimizerKind> {
    clap::builder::PossibleValuesParser::new(["sgd", "adagrad"]).map(|name| match name.as_str() {
        "adagrad" => OptimizerKind::Adagrad,
        _ => OptimizerKind::Sgd,
    })
}

fn parse_write_back(text: &str) -> Result<WriteBack, String> {
    match text {
        "overwrite" => Ok(WriteBack::Overwrite),
        "delta" => Ok(WriteBack::Delta),
        _ => Err(format!(
            "{text:?} is not a write-back mode; expected overwrite or delta"
        )),
    }
}

impl TrainArgs {
    fn config(&self) -> Result<Config> {
        let mut c = match &self.config {
            // Validated with the flags applied (`train` validates it).
            Some(path) => Config::read_file(path)?,
            None => Config::default(),
        };
        if self.train.is_some() {
            c.data.train.clone_from(&self.train);
            c.data.test.clone_from(&self.test);
        }
        if c.data.train.is_some() && (self.rows.is_some() || self.test_rows.is_some()) {
            anyhow::bail!(
                "--rows and --test-rows size the built-in data; this run reads data.train and data.test"
            );
        }
        macro_rules! set {
            ($($flag:ident => $($field:ident).+),* $(,)?) => {
                $(if let Some(v) = self.$flag.clone() { c.$($field).+ = v; })*
            };
        }
        set!(
            model => model.kind,
            batch_size => train.batch_size,
            optimizer => optim.dense,
            lr => optim.dense_lr,
            sparse_optimizer => optim.sparse,
            sparse_lr => optim.sparse_lr,
            table_size => data.table_size,
            bad_lines => data.bad_lines,
            eval_every => train.eval_every,
            threads => train.threads,
            seed => train.seed,
            rows => data.synthetic.train_rows,
            test_rows => data.synthetic.test_rows,
            trainers => train.trainers,
            workers => train.workers,
            group_size => sync.group_size,
            schedule => sync.schedule,
            write_back => sync.write_back,
            min_interval_ms => sync.min_interval_ms,
            min_steps => sync.min_steps,
            peer_timeout_ms => sync.peer_timeout_ms,
            server_shards => sync.server_shards,
            link_latency_us => sync.link.latency_us,
            link_gbps => sync.link.bandwidth_gbps,
            checkpoint_every => checkpoint.every_steps,
            keep_checkpoints => checkpoint.keep,
        );
        if self.checkpoint_dir.is_some() {
            c.checkpoint.dir.clone_from(&self.checkpoint_dir);
        }
        if let Some(algorithm) = self.sync {
            c.sync.algorithm = algorithm;
        }
        if self.alpha.is_some() {
            c.sync.alpha = self.alpha;
        }
        c.validate()?;
        Ok(c)
    }
}

/// What SIGINT and SIGTERM do. Before training starts (reading data, which may
/// block on a pipe) there is nothing to keep: the process ends at once. While
/// a run trains, the first signal raises `flag` for a graceful stop (the model
/// trained so far is evaluated, results and a checkpoint written); if that
/// takes more than [`Interrupt::GRACE`], or on a second signal, the process ends
/// at once. Exit status 128 + the signal's number, as a shell reports it.
#[derive(Clone)]
struct Interrupt {
    /// Raised by the first signal while training.
    flag: Arc<AtomicBool>,
    /// Whether a run is training (a signal then stops it gracefully).
    training: Arc<AtomicBool>,
}

impl Interrupt {
    /// How long a graceful stop may take.
    const GRACE: Duration = Duration::from_secs(60);

    /// Installs the handling of SIGINT and SIGTERM.
    fn install() -> Result<Self> {
        let interrupt = Self {
            flag: Arc::default(),
            training: Arc::default(),
        };
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("installing a signal handler")?;
        let watch = interrupt.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    watch.received(signal);
                }
            })
            .context("starting the signal thread")?;
        Ok(interrupt)
    }

    fn received(&self, signal: i32) {
        let name = if signal == SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        let quit = |why: &str| {
            eprintln!("{name}: {why}");
            signal_hook::low_level::exit(128 + signal)
        };
        if !self.training.load(Ordering::SeqCst) {
            quit("interrupted before training started; nothing to keep");
        }
        if self.flag.swap(true, Ordering::SeqCst) {
            quit("second signal: exiting now (the last checkpoint, if any, is kept)");
        }
        eprintln!(
            "{name}: stopping: evaluating the model trained so far, writing results and a checkpoint \
             (a second signal exits at once)"
        );
        std::thread::sleep(Self::GRACE);
        quit(&format!(
            "the graceful stop took more than {} s: exiting now",
            Self::GRACE.as_secs()
        ));
    }

    /// Marks whether a run is training.
    fn set_training(&self, training: bool) {
        self.training.store(training, Ordering::SeqCst);
    }

    fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// A progress bar on a terminal; a log line every few seconds otherwise.
struct Progress {
    bar: ProgressBar,
    last_log: Instant,
    started: Instant,
    /// SIGINT and SIGTERM.
    interrupt: Interrupt,
}

impl Progress {
    /// Progress of a run that SIGINT and SIGTERM stop gracefully.
    fn new(interrupt: Interrupt) -> Self {
        Self {
            bar: ProgressBar::hidden(),
            last_log: Instant::now(),
            started: Instant::now(),
            interrupt,
        }
    }
}

impl Observer for Progress {
    fn started(&mut self, total: Option<u64>) {
        self.interrupt.set_training(true);
        self.bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{bar:40} {human_pos}/{human_len} examples  {prefix}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {human_pos} examples  {prefix}  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        self.started = Instant::now();
    }

    fn progressed(&mut self, examples: u64) {
        let rate = examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        self.bar.set_position(examples);
        self.bar.set_prefix(format!("{rate:.0} examples/s"));
        if self.bar.is_hidden() && self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            tracing::info!(examples, examples_per_sec = rate.round(), "training");
        }
    }

    fn interrupted(&mut self) -> bool {
        let interrupted = self.interrupt.raised();
        if interrupted {
            self.bar.set_message("interrupted: stopping");
        }
        interrupted
    }

    fn evaluated(&mut self, point: &EvalPoint) {
        let m = &point.metrics;
        self.bar
            .set_message(format!("test NE {:.4} AUC {:.4}", m.ne, m.auc));
        self.bar.suspend(|| {
            tracing::info!(
                examples = point.examples,
                ne = format!("{:.4}", m.ne),
                auc = format!("{:.4}", m.auc),
                logloss = format!("{:.4}", m.logloss),
                "evaluated"
            )
        });
    }
}

/// One progress bar over a grid's runs, its message the current run's progress.
struct GridProgress {
    bar: ProgressBar,
    run: String,
    run_total: Option<u64>,
    started: Instant,
    last_log: Instant,
    interrupt: Interrupt,
}

impl GridProgress {
    fn new(interrupt: Interrupt) -> Result<Self> {
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{bar:30} run {pos}/{len}  elapsed {elapsed}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Ok(Self {
            bar,
            run: String::new(),
            run_total: None,
            started: Instant::now(),
            last_log: Instant::now(),
            interrupt,
        })
    }
}

impl Observer for GridProgress {
    fn started(&mut self, total: Option<u64>) {
        self.interrupt.set_training(true);
        self.run_total = total;
        self.started = Instant::now();
    }

    fn progressed(&mut self, examples: u64) {
        let rate = examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let done = match self.run_total {
            Some(total) => format!("{:.0}%", 100.0 * examples as f64 / total.max(1) as f64),
            None => format!("{examples} examples"),
        };
        self.bar
            .set_message(format!("{}: {done}, {rate:.0} examples/s", self.run));
        if self.bar.is_hidden() && self.last_log.elapsed() >= Duration::from_secs(10) {
            self.last_log = Instant::now();
            tracing::info!(run = %self.run, examples, examples_per_sec = rate.round(), "training");
        }
    }

    fn interrupted(&mut self) -> bool {
        self.interrupt.raised()
    }
}

impl GridObserver for GridProgress {
    fn run_started(&mut self, index: usize, total: usize, run: &Run) {
        // Between runs (a run's data being made) a signal ends the grid at
        // once: the runs done are kept.
        self.interrupt.set_training(false);
        self.bar.set_length(total as u64);
        self.bar.set_position(index as u64);
        self.run.clone_from(&run.id);
        self.bar.set_message(run.id.clone());
    }

    fn run_ended(&mut self, run: &Run, report: &TrainReport, reused: bool) {
        self.bar.inc(1);
        let m = &report.final_metrics;
        let line = format!(
            "{}: NE {:.4} AUC {:.4}, {:.0} examples/s{}{}",
            run.id,
            m.ne,
            m.auc,
            report.examples_per_sec,
            if reused {
                " (results already there)"
            } else {
                ""
            },
            report
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(" — FAILED: {e}")),
        );
        self.bar.suspend(|| println!("{line}"));
    }
}

fn run_experiment(args: &ExperimentArgs) -> Result<()> {
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
    let outcome = experiment::run_grid(&experiment, &args.out, &mut progress)?;
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
    let dirs = match args.dirs.is_empty() {
        false => args.dirs.clone(),
        true => {
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
        }
    };
    anyhow::ensure!(!dirs.is_empty(), "no experiment results to report");
    for dir in &dirs {
        let results = ExperimentResults::load(dir)?;
        let name = &results.experiment.name;
        let built_in = experiment::BUILT_IN.iter().any(|(n, _)| n == name);
        let source = match built_in {
            true => name.clone(),
            false => dir.join("experiment.toml").display().to_string(),
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
        for damaged in &results.damaged {
            tracing::warn!("damaged results file, its run left out: {damaged}");
        }
        anyhow::ensure!(
            !results.results.is_empty(),
            "{}: no run has results to report ({} runs, {} results files damaged)",
            dir.display(),
            results.experiment.runs.len(),
            results.damaged.len()
        );
        let document = report::render(&results, &Provenance::here(command))?;
        let path = document.write(&args.out)?;
        println!(
            "{}: {} of {} runs, {} plots",
            path.display(),
            results.results.len(),
            results.experiment.runs.len(),
            document.plots.len()
        );
    }
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

fn print_summary(report: &TrainReport) {
    let m = &report.final_metrics;
    let cluster = &report.cluster;
    let trainers = report
        .distributed
        .as_ref()
        .map_or(cluster.trainers, |d| d.job_trainers);
    println!(
        "trained {:?} on {} examples in {:.1} s: {:.0} examples/s ({} trainer{}{}, {})",
        report.config.model.kind,
        report.examples,
        report.train_seconds,
        report.examples_per_sec,
        trainers,
        if trainers == 1 { "" } else { "s" },
        report
            .distributed
            .as_ref()
            .map_or(String::new(), |d| format!(" in {} processes", d.processes)),
        cluster.algorithm,
    );
    if let Some(d) = &report.distributed {
        println!(
            "across processes (rank 0): {} table-sync rounds, {:.0} bytes moved per example (dense {} B, tables {} B)",
            d.table_sync.rounds, d.bytes_per_example, d.dense_bytes_sent, d.table_sync.bytes
        );
    }
    if trainers > 1 && cluster.algorithm != Algorithm::None {
        let n = cluster.trainer_stats.len() as f64;
        let mean = |f: fn(&shadowsync::runtime::stats::TrainerStats) -> f64| {
            cluster.trainer_stats.iter().map(f).sum::<f64>() / n
        };
        println!(
            "sync: groups of {} ({:?}), {:.0} syncs per trainer, sync gap {:.1} steps, staleness {:.1} steps",
            cluster.group_size,
            report.config.sync.schedule,
            mean(|s| s.syncs as f64),
            mean(|s| s.mean_sync_gap),
            mean(|s| s.mean_staleness),
        );
    }
    println!(
        "test ({} examples): NE {:.4}  AUC {:.4}  logloss {:.4}  calibration {:.3}",
        m.examples, m.ne, m.auc, m.logloss, m.calibration
    );
    if let Some(o) = &report.data.test_oracle {
        println!(
            "oracle (true probabilities) on test: NE {:.4}  logloss {:.4}",
            o.ne, o.logloss
        );
    }
    if let Some(resumed) = &report.resumed {
        println!(
            "resumed from {} ({} examples trained before it)",
            resumed.checkpoint.display(),
            resumed.examples
        );
        for rejected in &resumed.rejected {
            println!("  unusable newer checkpoint: {rejected}");
        }
    }
    if let Some(path) = &report.checkpoint {
        println!("checkpoint: {}", path.display());
    }
    for error in &report.checkpoint_errors {
        println!("checkpoint not written: {error}");
    }
    for (name, read) in [
        ("train", &report.data.train_read),
        ("test", &report.data.test_read),
    ] {
        if read.skipped > 0 {
            println!(
                "skipped {} malformed {name} lines of {}; first:",
                read.skipped, read.lines
            );
            for reason in &read.first_skipped {
                println!("  {reason}");
            }
        }
    }
}

/// An error's chain of messages, one per line, without the OS's own words
/// where shadowsync already said them plainly.
fn error_text(error: &anyhow::Error) -> String {
    let mut lines = vec![error.to_string()];
    let mut said_plainly = error.downcast_ref::<shadowsync::Error>().is_some();
    for cause in error.chain().skip(1) {
        let repeat = said_plainly && cause.downcast_ref::<std::io::Error>().is_some();
        if !repeat {
            lines.push(format!("  caused by: {cause}"));
        }
        said_plainly = cause.downcast_ref::<shadowsync::Error>().is_some();
    }
    lines.join("\n")
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_text(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // A grid logs its runs' warnings only: its progress bar says the rest.
    let quiet = matches!(cli.command, Command::Experiment(_) | Command::Report(_));
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if quiet { "warn" } else { "info" })
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
        Command::Train(args) => {
            let mut progress = Progress::new(Interrupt::install()?);
            let fabric = Backend::fabric(args.backend, args.mpi_watchdog_s)?;
            // A results file that cannot be written is found now, not after the run.
            if let (Some(path), 0) = (&args.results, fabric.process()) {
                output::check_writable(path).context("--results")?;
            }
            let report = match &args.resume {
                Some(dir) => train::resume_on(Arc::clone(&fabric), dir, &mut progress),
                None => train::train_on(Arc::clone(&fabric), &args.config()?, &mut progress),
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
                // Atomically: on a full disk the file that was there stays whole.
                let json = serde_json::to_vec_pretty(&report)?;
                output::write_atomic(path, &json).with_context(|| {
                    format!(
                        "results not written (the summary above has the figures; {} is as it was)",
                        path.display()
                    )
                })?;
                println!("results: {}", path.display());
            }
            if let Some(error) = report.error {
                anyhow::bail!("training stopped early: {error}");
            }
            if report.interrupted {
                match &report.config.checkpoint.dir {
                    Some(dir) => anyhow::bail!(
                        "interrupted; continue with: {}shadowsync train --resume {}",
                        match fabric.processes() {
                            1 => String::new(),
                            ranks => format!("mpirun -np {ranks} "),
                        },
                        dir.display()
                    ),
                    None => anyhow::bail!("interrupted (no checkpoint: --checkpoint-dir not set)"),
                }
            }
        }
        Command::Experiment(args) => run_experiment(&args)?,
        Command::Report(args) => write_reports(&args)?,
        Command::GenData(args) => {
            let spec = SyntheticSpec {
                train_rows: args.rows,
                test_rows: args.test_rows,
                seed: args.seed,
            };
            let data = SyntheticData::generate(spec, &args.out)?;
            println!("wrote {} and {}", data.train.display(), data.test.display());
            for (name, o) in [("train", data.train_oracle), ("test", data.test_oracle)] {
                println!(
                    "{name}: {} rows, CTR {:.4}, oracle logloss {:.4}, oracle NE {:.4}",
                    o.rows, o.ctr, o.logloss, o.ne
                );
            }
        }
    }
    Ok(())
}
