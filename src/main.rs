//! The `shadowsync` command line: `train` and `gen-data`.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use shadowsync::config::{Config, ModelKind, OptimizerKind};
use shadowsync::data::{BadLinePolicy, SyntheticData, SyntheticSpec};
use shadowsync::runtime::sync::{Algorithm, Schedule, WriteBack};
use shadowsync::train::{self, EvalPoint, Observer, TrainReport};
use signal_hook::consts::{SIGINT, SIGTERM};
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
    #[arg(long, group = "setup")]
    lr: Option<f64>,
    /// Embedding optimizer (sgd or adagrad).
    #[arg(long, value_enum, group = "setup")]
    sparse_optimizer: Option<OptimizerKind>,
    /// Embedding learning rate.
    #[arg(long, group = "setup")]
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
    /// Group schedule: global, fixed, alternating, random, hypercube.
    #[arg(long, value_parser = parse::<Schedule>, group = "setup")]
    schedule: Option<Schedule>,
    /// Write-back of an average: overwrite or delta.
    #[arg(long, value_parser = parse_write_back, group = "setup")]
    write_back: Option<WriteBack>,
    /// EASGD's elasticity α in (0, 1].
    #[arg(long, group = "setup")]
    alpha: Option<f32>,
    /// Minimum milliseconds between two rounds of a shadow loop.
    #[arg(long, group = "setup")]
    min_interval_ms: Option<f64>,
    /// Minimum steps of its trainer between two rounds of a shadow loop.
    #[arg(long, group = "setup")]
    min_steps: Option<u64>,
    /// Milliseconds a group member is waited for in a round before the round
    /// goes on without it (0 = for ever).
    #[arg(long, group = "setup")]
    peer_timeout_ms: Option<f64>,
    /// Shards of the EASGD parameter server.
    #[arg(long, group = "setup")]
    server_shards: Option<usize>,
    /// Simulated link latency in microseconds.
    #[arg(long, group = "setup")]
    link_latency_us: Option<f64>,
    /// Simulated link bandwidth in Gbit/s (0 = unlimited).
    #[arg(long, group = "setup")]
    link_gbps: Option<f64>,
    /// Synthetic training rows (built-in data).
    #[arg(long, group = "setup")]
    rows: Option<u64>,
    /// Synthetic test rows (built-in data).
    #[arg(long, group = "setup")]
    test_rows: Option<u64>,
    /// Save checkpoints to this directory (SIGINT/SIGTERM and the end of the
    /// run save one too).
    #[arg(long, group = "setup")]
    checkpoint_dir: Option<PathBuf>,
    /// Each trainer's steps between two checkpoints (0 = only on
    /// SIGINT/SIGTERM and at the end).
    #[arg(long, group = "setup")]
    checkpoint_every: Option<u64>,
    /// Checkpoints to keep (the newest).
    #[arg(long, group = "setup")]
    keep_checkpoints: Option<usize>,
    /// Continue the run checkpointed in this directory, from its newest whole
    /// checkpoint, with that run's configuration.
    #[arg(long, conflicts_with = "setup")]
    resume: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    results: Option<PathBuf>,
}

#[derive(Args)]
struct GenDataArgs {
    /// Output directory (gets train.tsv, test.tsv, oracle.json).
    #[arg(long)]
    out: PathBuf,
    /// Training rows.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Test rows.
    #[arg(long, default_value_t = 200_000)]
    test_rows: u64,
    /// Seed of the planted model and rows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse<T: std::str::FromStr<Err = shadowsync::runtime::Error>>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|e: shadowsync::runtime::Error| e.to_string())
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
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if self.train.is_some() {
            c.data.train.clone_from(&self.train);
            c.data.test.clone_from(&self.test);
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

/// A progress bar on a terminal; a log line every few seconds otherwise.
struct Progress {
    bar: ProgressBar,
    last_log: Instant,
    started: Instant,
    /// Raised by SIGINT or SIGTERM.
    interrupt: Arc<AtomicBool>,
}

impl Progress {
    /// Progress of a run that SIGINT and SIGTERM stop gracefully (a second one
    /// ends the process at once).
    fn new() -> Result<Self> {
        let interrupt = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&interrupt))
                .context("installing a signal handler")?;
            signal_hook::flag::register(signal, Arc::clone(&interrupt))
                .context("installing a signal handler")?;
        }
        Ok(Self {
            bar: ProgressBar::hidden(),
            last_log: Instant::now(),
            started: Instant::now(),
            interrupt,
        })
    }
}

impl Observer for Progress {
    fn started(&mut self, total: Option<u64>) {
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
        let interrupted = self.interrupt.load(Ordering::Relaxed);
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

fn print_summary(report: &TrainReport) {
    let m = &report.final_metrics;
    let cluster = &report.cluster;
    println!(
        "trained {:?} on {} examples in {:.1} s: {:.0} examples/s ({} trainer{}, {})",
        report.config.model.kind,
        report.examples,
        report.train_seconds,
        report.examples_per_sec,
        cluster.trainers,
        if cluster.trainers == 1 { "" } else { "s" },
        cluster.algorithm,
    );
    if cluster.trainers > 1 && cluster.algorithm != Algorithm::None {
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

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Train(args) => {
            let mut progress = Progress::new()?;
            let report = match &args.resume {
                Some(dir) => train::resume(dir, &mut progress)?,
                None => train::train(&args.config()?, &mut progress)?,
            };
            if let Some(path) = &args.results {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                let json = serde_json::to_string_pretty(&report)?;
                std::fs::write(path, json)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            print_summary(&report);
            if let Some(path) = &args.results {
                println!("results: {}", path.display());
            }
            if let Some(error) = report.error {
                anyhow::bail!("training stopped early: {error}");
            }
            if report.interrupted {
                match &report.config.checkpoint.dir {
                    Some(dir) => anyhow::bail!(
                        "interrupted; continue with: shadowsync train --resume {}",
                        dir.display()
                    ),
                    None => anyhow::bail!("interrupted (no checkpoint: --checkpoint-dir not set)"),
                }
            }
        }
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
