//! The command line: subcommands, their flags, and a run's configuration from
//! a config file and the flags that override it.

#[cfg(test)]
use crate::config::RowOptimizer;
use crate::config::{Config, ConfigFile, OptimConfig, OptimPreset, OptimizerKind};
use crate::data::{BadLinePolicy, Dealing, Profile};
use crate::runtime::sync::{
    launched_by_mpirun, Algorithm, Fabric, InProcess, Schedule, ShadowThreads, WriteBack,
};
use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "mpi")]
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "shadowsync",
    version,
    about = "Train CTR models with background synchronization"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
#[command(
    group(clap::ArgGroup::new("setup").multiple(true)),
    // `--trainers -1` is a bad value, not an unknown flag.
    allow_negative_numbers = true
)]
pub(crate) struct TrainArgs {
    /// TOML configuration file.
    #[arg(long, group = "setup")]
    pub(crate) config: Option<PathBuf>,
    /// Training file (Criteo TSV, plain or gzip).
    #[arg(long, requires = "test", group = "setup")]
    pub(crate) train: Option<PathBuf>,
    /// Test file (Criteo TSV, plain or gzip).
    #[arg(long, requires = "train", group = "setup")]
    pub(crate) test: Option<PathBuf>,
    /// Model: lr, dlrm, deepfm, or one the binary registered.
    #[arg(long, group = "setup")]
    pub(crate) model: Option<String>,
    /// Examples per step.
    #[arg(long, group = "setup")]
    pub(crate) batch_size: Option<usize>,
    /// Named optimizer settings; the optimizer and learning-rate flags
    /// override them
    #[arg(long, value_enum, group = "setup")]
    pub(crate) optim_preset: Option<OptimPreset>,
    /// Dense optimizer.
    #[arg(long, value_enum, group = "setup")]
    pub(crate) optimizer: Option<OptimizerKind>,
    /// Dense learning rate.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) lr: Option<f64>,
    /// Embedding row optimizer: sgd, adagrad, ftrl (settings in
    /// [optim.ftrl]), or one the binary registered.
    #[arg(long, group = "setup")]
    pub(crate) sparse_optimizer: Option<String>,
    /// Embedding learning rate.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) sparse_lr: Option<f64>,
    /// Rows of every field's hash table.
    #[arg(long, group = "setup")]
    pub(crate) table_size: Option<u32>,
    /// What to do with malformed lines.
    #[arg(long, value_enum, group = "setup")]
    pub(crate) bad_lines: Option<BadLinePolicy>,
    /// How batches reach the trainers: shared (each to whichever trainer
    /// asks first; the default but under sync-sgd) or static (fixed 1/N
    /// shares).
    #[arg(long, value_enum, group = "setup")]
    pub(crate) dealing: Option<Dealing>,
    /// Examples between evaluations (0 = only at the end).
    #[arg(long, group = "setup")]
    pub(crate) eval_every: Option<u64>,
    /// Threads scoring the test set, each on its part (0 = one per core).
    #[arg(long, group = "setup")]
    pub(crate) score_threads: Option<usize>,
    /// Score only the final model at the end, not each replica too.
    #[arg(long, group = "setup")]
    pub(crate) no_replica_scores: bool,
    /// libtorch intra-op threads.
    #[arg(long, group = "setup")]
    pub(crate) threads: Option<usize>,
    /// Seed of parameter initialization.
    #[arg(long, group = "setup")]
    pub(crate) seed: Option<u64>,
    /// Trainers, each on 1/N of the data.
    #[arg(long, group = "setup")]
    pub(crate) trainers: Option<usize>,
    /// Hogwild worker threads per trainer (with none and shadow-*).
    #[arg(long, group = "setup")]
    pub(crate) workers: Option<usize>,
    /// Synchronization: none, sync-sgd, fr-RULE:K or shadow-RULE, the rule ma,
    /// easgd, bmuf, diloco or one the binary registered.
    #[arg(long, value_parser = parse::<Algorithm>, group = "setup")]
    pub(crate) sync: Option<Algorithm>,
    /// Trainers per DS-Sync group (0 = all).
    #[arg(long, group = "setup")]
    pub(crate) group_size: Option<usize>,
    /// Group schedule: global, fixed, alternating, random, hypercube,
    /// hierarchical, or one the binary registered.
    #[arg(long, value_parser = parse::<Schedule>, group = "setup")]
    pub(crate) schedule: Option<Schedule>,
    /// Write-back of an average: overwrite or delta.
    #[arg(long, value_parser = parse_value::<WriteBack>, group = "setup")]
    pub(crate) write_back: Option<WriteBack>,
    /// Threads running the shadow rounds: per-process (one serving every
    /// trainer, where it can) or per-trainer.
    #[arg(long, value_parser = parse_value::<ShadowThreads>, group = "setup")]
    pub(crate) shadow_threads: Option<ShadowThreads>,
    /// EASGD's elasticity α in (0, 1] (shadow-easgd, fr-easgd:K).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) alpha: Option<f32>,
    /// Minimum milliseconds between two rounds of a shadow loop.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) min_interval_ms: Option<f64>,
    /// Minimum steps of its trainer between two rounds of a shadow loop.
    #[arg(long, group = "setup")]
    pub(crate) min_steps: Option<u64>,
    /// Most CPU time a shadow loop may take against its trainer's (default 0.027; 0 = no bound).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) max_cpu_share: Option<f64>,
    /// Milliseconds a group member is waited for in a round before the round
    /// goes on without it (0 = for ever).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) peer_timeout_ms: Option<f64>,
    /// Shards of the EASGD parameter server.
    #[arg(long, group = "setup")]
    pub(crate) server_shards: Option<usize>,
    /// How the values of sync rounds (a group's, EASGD's steps against its
    /// centre) cross: none, fp16, int8, topk (group rounds only), or a codec
    /// the binary registered.
    #[arg(long, group = "setup")]
    pub(crate) compression: Option<String>,
    /// The share of each message's values topk sends, in (0, 1].
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) topk_ratio: Option<f64>,
    /// Bounded staleness (shadow-*): a trainer waits while the newest
    /// average applied is more than this many of its steps old.
    #[arg(long, group = "setup")]
    pub(crate) max_staleness: Option<u64>,
    /// Milliseconds added on purpose to every shadow round (staleness
    /// injected).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) delay_ms: Option<f64>,
    /// Simulated link latency in microseconds.
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) link_latency_us: Option<f64>,
    /// Simulated link bandwidth in Gbit/s (0 = unlimited).
    #[arg(long, group = "setup", allow_negative_numbers = true)]
    pub(crate) link_gbps: Option<f64>,
    /// Synthetic training rows (built-in data; not with --train).
    #[arg(long, group = "setup", conflicts_with = "train")]
    pub(crate) rows: Option<u64>,
    /// Synthetic test rows (built-in data; not with --train).
    #[arg(long, group = "setup", conflicts_with = "train")]
    pub(crate) test_rows: Option<u64>,
    /// Save checkpoints to this directory (SIGINT/SIGTERM and the end of the
    /// run save one too).
    #[arg(long, group = "setup")]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// Each trainer's steps between two checkpoints (0 = only on
    /// SIGINT/SIGTERM and at the end); needs a checkpoint directory.
    #[arg(long, group = "setup")]
    pub(crate) checkpoint_every: Option<u64>,
    /// Checkpoints to keep (the newest).
    #[arg(long, group = "setup")]
    pub(crate) keep_checkpoints: Option<usize>,
    /// Continue the run checkpointed in this directory, from its newest whole
    /// checkpoint, with that run's configuration.
    #[arg(long, conflicts_with = "setup")]
    pub(crate) resume: Option<PathBuf>,
    /// Write the results as JSON to this file (under mpirun: rank 0 writes it).
    #[arg(long)]
    pub(crate) results: Option<PathBuf>,
    /// Where the trainers run: local (this process) or mpi (this process is one
    /// rank of an mpirun job, hosting --trainers of the job's trainers); the
    /// default is mpi when launched by mpirun.
    #[arg(long, value_enum)]
    pub(crate) backend: Option<Backend>,
    /// Under MPI: seconds a send or a collective may take before the rank ends
    /// the job, naming itself (0 = wait for ever).
    #[arg(long, default_value_t = 120)]
    pub(crate) mpi_watchdog_s: u64,
}

/// Where a run's trainers live.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// All in this process.
    Local,
    /// Spread over the ranks of an `mpirun` job (feature `mpi`).
    Mpi,
}

impl Backend {
    /// The fabric of this backend (`None`: MPI's default when under mpirun),
    /// with a watchdog of `watchdog_s` seconds (0: none) under MPI.
    pub(crate) fn fabric(backend: Option<Self>, watchdog_s: u64) -> Result<Arc<dyn Fabric>> {
        let mpi = backend.map_or_else(launched_by_mpirun, |b| b == Backend::Mpi);
        if !mpi {
            return Ok(Arc::new(InProcess));
        }
        #[cfg(feature = "mpi")]
        return Ok(Arc::new(crate::runtime::sync::mpi::MpiNode::start(
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
pub(crate) struct ExperimentArgs {
    /// A built-in experiment (see --list) or an experiment file (TOML).
    #[arg(required_unless_present = "list")]
    pub(crate) experiment: Option<String>,
    /// Directory of the results (each experiment's in a directory of its own).
    #[arg(long, default_value = "results")]
    pub(crate) out: PathBuf,
    /// List the built-in experiments.
    #[arg(long)]
    pub(crate) list: bool,
}

#[derive(Args)]
pub(crate) struct ReportArgs {
    /// Results directories of experiments (RESULTS/NAME); none: every one
    /// under `results/`.
    pub(crate) dirs: Vec<PathBuf>,
    /// Directory of the documents (NAME.md, plots in NAME/).
    #[arg(long, default_value = "docs/results")]
    pub(crate) out: PathBuf,
}

#[derive(Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct GenDataArgs {
    /// Output directory (gets train.tsv, test.tsv, oracle.json).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Training rows.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rows: u64,
    /// Test rows.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) test_rows: u64,
    /// Seed of the planted model and rows.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// The fields' vocabularies: compact (3 to 200,000 tokens a field) or
    /// Criteo Kaggle's published cardinalities (up to 10,131,227: most
    /// tokens rare, the hot ones colliding in small tables).
    #[arg(long, value_enum, default_value_t = Profile::Compact)]
    pub(crate) profile: Profile,
}

pub(crate) fn parse<T: std::str::FromStr<Err = crate::runtime::Error>>(
    text: &str,
) -> Result<T, String> {
    text.parse()
        .map_err(|e: crate::runtime::Error| e.to_string())
}

/// Parses a config value the way the config file spells it (an error naming
/// the values expected).
pub(crate) fn parse_value<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    use serde::de::IntoDeserializer;
    let text: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        text.into_deserializer();
    T::deserialize(text).map_err(|e| e.to_string())
}

impl TrainArgs {
    /// The run's config: the file's (or the defaults), the flags applied,
    /// validated for a job of `processes` processes.
    pub(crate) fn config(&self, processes: usize) -> Result<Config> {
        let mut file = match &self.config {
            Some(path) => ConfigFile::read(path)?,
            None => ConfigFile::default(),
        };
        self.apply_data(&mut file)?;
        self.apply(&mut file);
        // The modes take their sections once every flag is in: a section
        // set for a mode the flags replaced is refused by its key.
        let c = Config::try_from(file)?;
        c.validate_for(processes)?;
        Ok(c)
    }

    /// The data flags: files in place of the built-in set, or its sizes.
    fn apply_data(&self, c: &mut ConfigFile) -> Result<()> {
        if self.train.is_some() {
            c.data.train.clone_from(&self.train);
            c.data.test.clone_from(&self.test);
        }
        if c.data.train.is_some() && (self.rows.is_some() || self.test_rows.is_some()) {
            anyhow::bail!(
                "--rows and --test-rows size the built-in data; this run reads data.train and data.test"
            );
        }
        Ok(())
    }

    /// Every other flag given, over the file's value.
    fn apply(&self, c: &mut ConfigFile) {
        /// `c.FIELD = flag` for each flag given.
        macro_rules! set {
            ($($flag:ident => $($field:ident).+),* $(,)?) => {
                $(if let Some(v) = &self.$flag { c.$($field).+ = v.clone().into(); })*
            };
        }
        if self.table_size.is_some() {
            // The flag sizes every table, over the file's sizes per table.
            c.data.table_sizes = None;
        }
        if let Some(preset) = self.optim_preset {
            c.optim = OptimConfig::from(preset).into();
        }
        if let Some(model) = &self.model {
            c.model.kind = model.as_str().into();
        }
        if let Some(sparse) = &self.sparse_optimizer {
            c.optim.sparse = sparse.as_str().into();
        }
        if self.sparse_lr.is_some() {
            c.optim.sparse_lr = self.sparse_lr;
        }
        set!(
            batch_size => train.batch_size,
            optimizer => optim.dense,
            lr => optim.dense_lr,
            table_size => data.table_size,
            bad_lines => data.bad_lines,
            eval_every => train.eval_every,
            score_threads => train.score_threads,
            threads => train.threads,
            seed => train.seed,
            rows => data.synthetic.train_rows,
            test_rows => data.synthetic.test_rows,
            trainers => train.trainers,
            workers => train.workers,
            checkpoint_every => checkpoint.every_steps,
            keep_checkpoints => checkpoint.keep,
            sync => sync.algorithm,
            group_size => sync.group_size,
            schedule => sync.schedule,
            write_back => sync.shadow.write_back,
            shadow_threads => sync.shadow.threads,
            min_interval_ms => sync.shadow.min_interval_ms,
            min_steps => sync.shadow.min_steps,
            max_cpu_share => sync.shadow.max_cpu_share,
            delay_ms => sync.shadow.delay_ms,
            peer_timeout_ms => sync.peer_timeout_ms,
            link_latency_us => sync.link.latency_us,
            link_gbps => sync.link.bandwidth_gbps,
            topk_ratio => sync.topk_ratio,
            compression => sync.compression,
        );
        if self.checkpoint_dir.is_some() {
            c.checkpoint.dir.clone_from(&self.checkpoint_dir);
        }
        if self.dealing.is_some() {
            c.data.dealing = self.dealing;
        }
        if self.no_replica_scores {
            c.train.score_replicas = false;
        }
        if self.alpha.is_some() {
            c.sync.easgd.alpha = self.alpha;
        }
        if self.server_shards.is_some() {
            c.sync.easgd.server_shards = self.server_shards;
        }
        if self.max_staleness.is_some() {
            c.sync.shadow.max_staleness = self.max_staleness;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config of `shadowsync train ARGS` over the file `toml`.
    fn config(toml: &str, args: &[&str]) -> Result<Config> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("run.toml");
        std::fs::write(&path, toml)?;
        let path = path.display().to_string();
        let mut argv = vec!["shadowsync", "train", "--config", path.as_str()];
        argv.extend(args);
        let Command::Train(args) = Cli::try_parse_from(argv)?.command else {
            anyhow::bail!("not a train command");
        };
        args.config(1)
    }

    #[test]
    fn the_modes_flags_choose_take_the_files_sections() {
        let file = "[train]\ntrainers = 4\n[sync.shadow]\nmin_steps = 8\n\
                    [sync.easgd]\nserver_shards = 2\n[optim.ftrl]\nl1 = 0.5\n";
        let c = config(
            file,
            &["--sync", "shadow-easgd", "--sparse-optimizer", "ftrl"],
        )
        .unwrap();
        assert_eq!(c.sync.algorithm.loops().map(|l| l.min_steps), Some(8));
        assert_eq!(c.sync.server_shards_for(4, 1), 2);
        assert!(matches!(c.optim.sparse, RowOptimizer::Ftrl(f) if f.l1 == 0.5));
        // A section no chosen mode reads is refused, by its key.
        let e = config(
            file,
            &["--sync", "fr-easgd:4", "--sparse-optimizer", "ftrl"],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sync.shadow") && e.contains("fr-easgd:4"), "{e}");
        let e = config("", &["--min-steps", "2"]).unwrap_err().to_string();
        assert!(e.contains("sync.shadow") && e.contains("none"), "{e}");
        // A flag over a file's mode keeps the file's section for it.
        let file = "[model]\nkind = \"deepfm\"\n[model.deepfm]\ndeep_mlp = [8]\n";
        assert_eq!(config(file, &[]).unwrap().model.deepfm().deep_mlp, [8]);
        let e = config(file, &["--model", "dlrm"]).unwrap_err().to_string();
        assert!(e.contains("model.deepfm"), "{e}");
    }
}
