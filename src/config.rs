//! Run configuration: a TOML file whose every key has a default, overridden by
//! command-line flags. The book's chapter (docs/book/configuration.md) is the
//! reference, every key with its default; a test below holds it to
//! [`Config::default`].
//!
//! An unknown key or a value of the wrong type is rejected with the file, line
//! and key; an out-of-range value with the key and the allowed range.
//!
//! A mode's settings live inside the mode that reads them: the sync
//! algorithm's in [`Algorithm`], the model's in [`ModelKind`], the row
//! optimizer's in [`RowOptimizer`]. A file is read as a [`ConfigFile`],
//! where any section can be written; flags edit it, then
//! [`Config::try_from`] gives each mode its sections and refuses another
//! mode's set away from its defaults. What only some runs read and no shape
//! can say (a link under `none`, a sharded table's bounds in one process)
//! is refused by `ignored.rs`.

use crate::data::{BadLinePolicy, Dealing, Profile, SyntheticSpec, TableLayout, NUM_SPARSE};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::embedding::RowRule;
use shadowsync_actors::faults::Fault;
use shadowsync_actors::stragglers::Straggler;
use shadowsync_actors::sync::{Algorithm, GroupPlan, Schedule, SyncConfig, SyncFile};
use std::path::{Path, PathBuf};

/// For an enum of modes chosen by name (`named`, `name`), each with the
/// settings only it reads: `From<&str>` (its settings at their defaults),
/// comparison with a name, and `Display` and serde as the name alone.
macro_rules! chosen_by_name {
    ($mode:ty) => {
        impl From<&str> for $mode {
            fn from(name: &str) -> Self {
                Self::named(name)
            }
        }

        impl PartialEq<&str> for $mode {
            fn eq(&self, name: &&str) -> bool {
                self.name() == *name
            }
        }

        impl std::fmt::Display for $mode {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl serde::Serialize for $mode {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $mode {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                Ok(Self::named(&String::deserialize(d)?))
            }
        }
    };
}

mod deprecated;
mod elastic;
mod ignored;
mod model;
mod optim;
pub use elastic::ElasticStep;
pub use ignored::{clear_ignored_in_grid, clear_unread_sections_in_grid};
pub use model::{DeepFmSettings, DlrmSettings, ModelConfig, ModelFile, ModelKind};
pub use optim::{FtrlConfig, OptimConfig, OptimFile, OptimPreset, OptimizerKind, RowOptimizer};

/// Everything a training run needs. Read through [`ConfigFile`], the file's
/// form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ConfigFile")]
#[non_exhaustive]
pub struct Config {
    /// Input data.
    pub data: DataConfig,
    /// Model architecture.
    pub model: ModelConfig,
    /// Optimizers.
    pub optim: OptimConfig,
    /// Training loop.
    pub train: TrainConfig,
    /// Synchronization between trainers (see `shadowsync_actors::sync`).
    pub sync: SyncConfig,
    /// Checkpoints to resume from.
    pub checkpoint: CheckpointConfig,
    /// Faults to inject, for testing that the runtime contains them.
    pub faults: Vec<Fault>,
    /// Trainers slowed on purpose (`[[stragglers]]`), for experiments on
    /// stragglers.
    pub stragglers: Vec<Straggler>,
    /// Trainers that join and leave while the run trains (`[[elastic]]`).
    pub elastic: Vec<ElasticStep>,
}

/// A [`Config`] as a file writes it: `[sync]`, `[model]` and `[optim]` in
/// their flat forms ([`SyncFile`], [`ModelFile`], [`OptimFile`]), where a
/// mode's section can be written whatever the mode, and the keys of the
/// release before that moved into sections still read (with a warning).
/// Command-line flags edit a config in this form: `--sync` then gives the
/// file's sections to the algorithm it names. [`Config::try_from`] gives
/// each mode its sections and refuses another's set away from its defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ConfigFile {
    /// See [`Config::data`].
    pub data: DataConfig,
    /// See [`Config::model`]; the flat MLP widths of the release before
    /// are still read.
    #[serde(deserialize_with = "deprecated::model")]
    pub model: ModelFile,
    /// See [`Config::optim`].
    pub optim: OptimFile,
    /// See [`Config::train`].
    pub train: TrainConfig,
    /// See [`Config::sync`]; the flat keys of the release before are still
    /// read.
    #[serde(deserialize_with = "deprecated::sync")]
    pub sync: SyncFile,
    /// See [`Config::checkpoint`].
    pub checkpoint: CheckpointConfig,
    /// See [`Config::faults`].
    pub faults: Vec<Fault>,
    /// See [`Config::stragglers`].
    pub stragglers: Vec<Straggler>,
    /// See [`Config::elastic`].
    pub elastic: Vec<ElasticStep>,
}

impl ConfigFile {
    /// Reads a TOML file (unknown keys and wrong types are errors, naming
    /// the file, the line and the key).
    ///
    /// # Errors
    ///
    /// A file that cannot be read, or an unknown key or a value of the
    /// wrong type.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        toml::from_str(&text).map_err(|e| Error::config(path.display().to_string(), e.to_string()))
    }
}

impl TryFrom<ConfigFile> for Config {
    type Error = Error;

    /// Each mode with its sections.
    ///
    /// # Errors
    ///
    /// A section a mode would not read, set away from its defaults (naming
    /// it).
    fn try_from(file: ConfigFile) -> Result<Self> {
        Ok(Config {
            data: file.data,
            model: file.model.try_into()?,
            optim: file.optim.try_into()?,
            train: file.train,
            sync: file.sync.try_into()?,
            checkpoint: file.checkpoint,
            faults: file.faults,
            stragglers: file.stragglers,
            elastic: file.elastic,
        })
    }
}

/// Reads `T` through its file form `F` ([`TryFrom`]): a section its mode
/// would not read is refused as `KEY is set, but …`.
fn through_file<'de, D, F, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    F: Deserialize<'de>,
    T: TryFrom<F, Error = Error>,
{
    T::try_from(F::deserialize(d)?).map_err(|e| match e {
        Error::Config { key, reason } => serde::de::Error::custom(format!("{key} {reason}")),
        other => serde::de::Error::custom(other),
    })
}

/// What each embedding row holds: its values, and beside them the row
/// optimizer's state arrays of as many values each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowShape {
    /// Values per row (the model's embedding width).
    pub width: u64,
    /// The row optimizer's state arrays (Adagrad 1, FTRL 2).
    pub state_arrays: u64,
}

/// Where and how often a run saves its state (see [`crate::checkpoint`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// Directory of the checkpoints; none: no checkpoints.
    pub dir: Option<PathBuf>,
    /// Each trainer's steps between two checkpoints; 0: only when the run is
    /// interrupted (SIGINT, SIGTERM) and at its end.
    pub every_steps: u64,
    /// How many checkpoints to keep (the newest).
    pub keep: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            dir: None,
            every_steps: 0,
            keep: 3,
        }
    }
}

/// Where examples come from and how they are hashed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DataConfig {
    /// Training file (Criteo TSV). With `test`, replaces the synthetic data.
    pub train: Option<PathBuf>,
    /// Held-out file for evaluation.
    pub test: Option<PathBuf>,
    /// What to do with malformed lines.
    pub bad_lines: BadLinePolicy,
    /// How the batches reach the trainers (`None`: shared, but static under
    /// sync-sgd; see [`Config::dealing`]).
    pub dealing: Option<Dealing>,
    /// Rows of every field's hash table.
    pub table_size: u32,
    /// Rows of each field's hash table (26 values); overrides `table_size`.
    pub table_sizes: Option<Vec<u32>>,
    /// Built-in synthetic data, used when no files are given.
    pub synthetic: SyntheticConfig,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            train: None,
            test: None,
            bad_lines: BadLinePolicy::Fail,
            dealing: None,
            table_size: 100_000,
            table_sizes: None,
            synthetic: SyntheticConfig::default(),
        }
    }
}

/// The built-in data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct SyntheticConfig {
    /// Training rows.
    pub train_rows: u64,
    /// Test rows.
    pub test_rows: u64,
    /// Seed of the planted model and rows.
    pub seed: u64,
    /// The fields' vocabularies: `compact` or Criteo Kaggle's (`criteo`).
    pub profile: Profile,
    /// Where generated files are cached (default: `~/.cache/shadowsync/data`).
    pub dir: Option<PathBuf>,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            train_rows: 1_000_000,
            test_rows: 100_000,
            seed: 1,
            profile: Profile::Compact,
            dir: None,
        }
    }
}

impl SyntheticConfig {
    /// The generator's spec.
    pub fn spec(&self) -> SyntheticSpec {
        SyntheticSpec {
            train_rows: self.train_rows,
            test_rows: self.test_rows,
            seed: self.seed,
            profile: self.profile,
        }
    }

    /// The directory of this data set (cache root + a name from the spec).
    pub fn directory(&self) -> PathBuf {
        let root = self.dir.clone().unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache/shadowsync/data")
        });
        let profile = match self.profile {
            Profile::Compact => "",
            Profile::Criteo => "-criteo",
        };
        root.join(format!(
            "synthetic-seed{}-{}-{}{profile}",
            self.seed, self.train_rows, self.test_rows
        ))
    }
}

/// The training loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TrainConfig {
    /// Examples per step.
    pub batch_size: usize,
    /// Examples between evaluations on the test file (0 = only at the end).
    pub eval_every: u64,
    /// Intra-op threads of libtorch.
    pub threads: usize,
    /// Seed of parameter initialization.
    pub seed: u64,
    /// Trainers, each on its own 1/`trainers` of the data.
    pub trainers: usize,
    /// Hogwild worker threads per trainer, stepping its one dense replica, each
    /// on its own part of the trainer's data (with `none` and `shadow-*`).
    pub workers: usize,
    /// Across processes (`mpirun`): how the embedding tables are kept
    /// (`None`: sharded).
    pub embeddings: Option<EmbeddingsMode>,
    /// Sharded tables: the batches a trainer may have in flight, fetched but
    /// not yet applied by the rows' owners (1: every batch sees every earlier
    /// one; 2: the next batch's rows are fetched while one computes).
    pub embedding_staleness: usize,
    /// Sharded tables: milliseconds a fetch or a push may go unanswered
    /// before the trainer fails, naming the process.
    pub embedding_timeout_ms: u64,
    /// Replicated tables: milliseconds between two rounds merging the
    /// processes' tables (one round follows the last).
    pub table_sync_ms: u64,
    /// Milliseconds between two samples of the replicas' consensus distance
    /// (0 = none; one more is taken when training ends).
    pub consensus_every_ms: u64,
    /// Checks at the end that every row equals its initial values minus
    /// every SGD step pushed to it (`optim.sparse = "sgd"`; not on a resumed
    /// run); a run whose rows are off fails. For tests and small tables: it
    /// keeps two `f64` copies of the table.
    pub audit_rows: bool,
    /// Scores each replica at the end besides the final model (their
    /// figures are in the report); under `none` the replicas are the final
    /// model, and are scored whatever this says.
    pub score_replicas: bool,
    /// Threads scoring the model on the test set, each on its own part of
    /// it (0: one per core, the machine's cores shared by the job's
    /// processes).
    pub score_threads: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            batch_size: 128,
            eval_every: 250_000,
            threads: 1,
            seed: 0,
            trainers: 1,
            workers: 1,
            embeddings: None,
            embedding_staleness: 2,
            embedding_timeout_ms: 30_000,
            table_sync_ms: 50,
            consensus_every_ms: 500,
            audit_rows: false,
            score_replicas: true,
            score_threads: 0,
        }
    }
}

/// How the embedding tables of a job spread over processes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingsMode {
    /// Each process owns 1/R of every table's rows and serves them to the
    /// others (the default).
    Sharded,
    /// Each process keeps a whole copy; a background thread merges them
    /// (small tables).
    Replicated,
}

impl TrainConfig {
    /// How the tables are kept in a job of `processes` processes: as
    /// configured, else sharded across processes and one table in one process
    /// (a "sharded" table in one process is one shard behind the same client:
    /// the sharded path, tested without MPI).
    pub fn embeddings_for(&self, processes: usize) -> EmbeddingsMode {
        match (processes, self.embeddings) {
            (_, Some(mode)) => mode,
            (1, None) => EmbeddingsMode::Replicated,
            (_, None) => EmbeddingsMode::Sharded,
        }
    }
}

impl Config {
    /// The largest batch (a batch is parsed into one buffer).
    pub const MAX_BATCH: usize = 1 << 20;
    /// The most learners (trainers × workers) one process runs.
    pub const MAX_LEARNERS: usize = 1024;
    /// The most libtorch intra-op threads per trainer.
    pub const MAX_THREADS: usize = 256;

    /// Reads and validates a TOML file.
    ///
    /// # Errors
    ///
    /// As [`ConfigFile::read`], a section a mode would not read, and
    /// [`Config::validate`]'s.
    pub fn from_file(path: &Path) -> Result<Self> {
        let config: Self = ConfigFile::read(path)?
            .try_into()
            .map_err(|e: Error| Error::config(path.display().to_string(), e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value against its allowed range.
    ///
    /// # Errors
    ///
    /// The first value out of its range, naming its key and the range.
    pub fn validate(&self) -> Result<()> {
        self.validate_for(1)
    }

    /// [`Config::validate`] for one of `processes` processes of a job, each
    /// with `train.trainers` trainers (groups may span processes).
    ///
    /// # Errors
    ///
    /// As [`Config::validate`], and groups or faults that do not fit the
    /// job's trainers.
    pub fn validate_for(&self, processes: usize) -> Result<()> {
        self.validate_optim()?;
        self.validate_train()?;
        self.validate_sync(processes)?;
        self.validate_elastic(processes)?;
        self.validate_checkpoint()?;
        self.validate_model()?;
        self.validate_data()?;
        match self.ignored_keys(processes).into_iter().next() {
            Some((key, why)) => Err(Error::config(
                key,
                format!("is set, but this run would ignore it: {why}"),
            )),
            None => Ok(()),
        }
    }

    fn validate_optim(&self) -> Result<()> {
        // The models step in f32: a rate must be one there too (1e-50
        // rounds to 0 and 1e300 to ∞).
        let positive_lr = |key: &str, lr: f64| {
            if (lr as f32).is_normal() && lr > 0.0 {
                Ok(())
            } else {
                Err(Error::config(
                    key,
                    format!(
                        "{lr} is not a learning rate; must be > 0, and one that f32 holds \
                         (from {:e} to {:e})",
                        f32::MIN_POSITIVE,
                        f32::MAX
                    ),
                ))
            }
        };
        positive_lr("optim.dense_lr", self.optim.dense_lr)?;
        if let Some(lr) = self.optim.sparse_lr {
            positive_lr("optim.sparse_lr", lr)?;
        }
        match &self.optim.sparse {
            RowOptimizer::Ftrl(ftrl) => ftrl.validate(),
            _ => Ok(()),
        }
    }

    fn validate_train(&self) -> Result<()> {
        if !(1..=Self::MAX_BATCH).contains(&self.train.batch_size) {
            return Err(Error::config(
                "train.batch_size",
                format!("must be in 1..={}", Self::MAX_BATCH),
            ));
        }
        if self.train.trainers == 0 {
            return Err(Error::config("train.trainers", "must be at least 1"));
        }
        if self.train.workers == 0 {
            return Err(Error::config("train.workers", "must be at least 1"));
        }
        // Each learner is a few threads (parser, trainer, sync loop).
        if self.train.trainers.saturating_mul(self.train.workers) > Self::MAX_LEARNERS {
            return Err(Error::config(
                "train.trainers",
                format!(
                    "{} trainers of {} workers each are more than the {} learners one process runs",
                    self.train.trainers,
                    self.train.workers,
                    Self::MAX_LEARNERS
                ),
            ));
        }
        if self.train.table_sync_ms == 0 {
            return Err(Error::config("train.table_sync_ms", "must be at least 1"));
        }
        if self.train.embedding_staleness == 0 {
            return Err(Error::config(
                "train.embedding_staleness",
                "must be at least 1 (the batch being trained)",
            ));
        }
        if self.train.audit_rows && self.optim.sparse != "sgd" {
            return Err(Error::config(
                "train.audit_rows",
                "audits plain SGD on the rows (whose steps add up whatever their order); \
                 set optim.sparse = \"sgd\"",
            ));
        }
        if self.train.embedding_timeout_ms == 0 {
            return Err(Error::config(
                "train.embedding_timeout_ms",
                "must be at least 1",
            ));
        }
        if self.train.workers > 1
            && !matches!(
                self.sync.algorithm,
                Algorithm::None | Algorithm::Shadow { .. }
            )
        {
            return Err(Error::config(
                "train.workers",
                format!(
                    "Hogwild workers run with none or shadow-* (a trainer that syncs in the foreground, as {} does, is one thread)",
                    self.sync.algorithm
                ),
            ));
        }
        if !(1..=Self::MAX_THREADS).contains(&self.train.threads) {
            return Err(Error::config(
                "train.threads",
                format!("must be in 1..={}", Self::MAX_THREADS),
            ));
        }
        if self.train.score_threads > Self::MAX_THREADS {
            return Err(Error::config(
                "train.score_threads",
                format!("must be in 0..={} (0: one per core)", Self::MAX_THREADS),
            ));
        }
        Ok(())
    }

    /// The sync settings, over the job's `processes` × `train.trainers` trainers.
    fn validate_sync(&self, processes: usize) -> Result<()> {
        self.sync.validate()?;
        let n = self.train.trainers;
        if let Some(fault) = self.faults.iter().find(|f| f.trainer >= n) {
            return Err(Error::config(
                "faults.trainer",
                format!("{} names no trainer; trainers are 0..{n}", fault.trainer),
            ));
        }
        shadowsync_actors::stragglers::check_all(&self.stragglers, n)?;
        // Groups are formed over the whole job's trainers.
        let n = n * processes.max(1);
        if self.sync.group_size > n {
            return Err(Error::config(
                "sync.group_size",
                format!(
                    "{} is more than the {n} trainers; must be 0 (all of them) or 1..={n}",
                    self.sync.group_size
                ),
            ));
        }
        // A group of one averages a trainer with itself (EASGD's replicas
        // meet the centre instead, whatever their groups).
        let in_groups = self.sync.algorithm != Algorithm::None
            && self.sync.algorithm.rule_name() != Some("easgd");
        if self.sync.group_size == 1 && n > 1 && in_groups {
            return Err(Error::config(
                "sync.group_size",
                format!(
                    "1 makes each of the {n} trainers a group of its own, so nothing is \
                     synced; use 2..={n} (or 0, all of them), or sync.algorithm = \"none\" \
                     for independent trainers"
                ),
            ));
        }
        let outer_lr = self.sync.diloco().outer_lr;
        let group_size = self.sync.group_size_for(n);
        if self.sync.algorithm.rule_name() == Some("diloco") && outer_lr > group_size as f64 {
            return Err(Error::config(
                "sync.diloco.outer_lr",
                format!(
                    "{outer_lr} is more than the {group_size} trainers of a group: an outer \
                     rate of {group_size} moves the model by the sum of their progress in a \
                     round (DiLoCo uses 0.7, their mean progress × 0.7); past it the step \
                     overshoots all of it, and the model diverges"
                ),
            ));
        }
        if let Schedule::Registered(_) = self.sync.schedule {
            return Ok(()); // the registered schedule's own factory decides
        }
        GroupPlan::new(self.sync.schedule.clone(), n, group_size)?;
        if self.sync.schedule == Schedule::Global && group_size != n {
            return Err(Error::config(
                "sync.group_size",
                format!(
                    "groups of {group_size} need a schedule that divides the {n} trainers \
                     (sync.schedule = random, alternating, fixed, hypercube or hierarchical); \
                     the global schedule makes one group of all of them"
                ),
            ));
        }
        Ok(())
    }

    fn validate_checkpoint(&self) -> Result<()> {
        if self.checkpoint.keep == 0 {
            return Err(Error::config(
                "checkpoint.keep",
                "must be at least 1 (the newest checkpoint)",
            ));
        }
        Ok(())
    }

    fn validate_model(&self) -> Result<()> {
        if self.model.embedding_dim < 1 {
            return Err(Error::config("model.embedding_dim", "must be at least 1"));
        }
        let (dlrm, deepfm) = (self.model.dlrm(), self.model.deepfm());
        for (key, widths) in [
            ("model.dlrm.bottom_mlp", &dlrm.bottom_mlp),
            ("model.dlrm.top_mlp", &dlrm.top_mlp),
            ("model.deepfm.deep_mlp", &deepfm.deep_mlp),
        ] {
            if widths.iter().any(|&w| w < 1) {
                return Err(Error::config(key, "every layer width must be at least 1"));
            }
        }
        Ok(())
    }

    /// How the run deals its batches: as `data.dealing` says, else to
    /// whoever asks first, except in equal shares under sync-sgd, whose
    /// trainers step in lockstep, and to Hogwild workers (`train.workers` >
    /// 1), which finish one by one and so settle their shared replica at the
    /// end of the pass, where first come they stop together in mid-swing
    /// (measured in docs/results/peers.md).
    pub fn dealing(&self) -> Dealing {
        match (self.data.dealing, &self.sync.algorithm) {
            (Some(dealing), _) => dealing,
            (None, Algorithm::SyncSgd) => Dealing::Static,
            (None, _) if self.train.workers > 1 => Dealing::Static,
            (None, _) => Dealing::Shared,
        }
    }

    fn validate_data(&self) -> Result<()> {
        let paths = [
            ("data.train", &self.data.train),
            ("data.test", &self.data.test),
            ("checkpoint.dir", &self.checkpoint.dir),
        ];
        for (key, path) in paths {
            if let Some(path) = path.as_ref().filter(|p| p.to_str().is_none()) {
                return Err(Error::config(
                    key,
                    format!(
                        "{} is not valid UTF-8, which the results JSON cannot record: \
                         rename it, or link it under a UTF-8 name",
                        path.display()
                    ),
                ));
            }
        }
        match (self.dealing(), &self.sync.algorithm) {
            (Dealing::Shared, Algorithm::SyncSgd) => {
                return Err(Error::config(
                    "data.dealing",
                    "sync-sgd steps every trainer in lockstep, one batch each, which needs \
                     equal shares of the pass: use \"static\" (its default)",
                ))
            }
            (Dealing::Static, _) if !self.elastic.is_empty() => {
                return Err(Error::config(
                    "data.dealing",
                    "trainers that join and leave ([[elastic]]) take their batches from one \
                     queue: use \"shared\" (the default)",
                ))
            }
            _ => {}
        }
        match (&self.data.train, &self.data.test) {
            (Some(_), None) => {
                return Err(Error::config(
                    "data.test",
                    "a test file is needed with data.train",
                ))
            }
            (None, Some(_)) => {
                return Err(Error::config(
                    "data.train",
                    "a training file is needed with data.test",
                ))
            }
            _ => {}
        }
        if self.data.train.is_none()
            && (self.data.synthetic.train_rows == 0 || self.data.synthetic.test_rows == 0)
        {
            return Err(Error::config(
                "data.synthetic.train_rows",
                "synthetic row counts must be at least 1",
            ));
        }
        self.table_layout().map(|_| ())
    }

    /// The embeddings' learning rate under `rule`: `optim.sparse_lr`, or
    /// the rule's own default when it is unset.
    pub fn row_lr(&self, rule: &dyn RowRule) -> f64 {
        self.optim.sparse_lr.unwrap_or_else(|| rule.default_lr())
    }

    /// Bytes of the embedding table and its optimizer state, for rows of
    /// `shape`.
    ///
    /// # Errors
    ///
    /// As [`Config::table_layout`].
    pub fn table_bytes(&self, shape: RowShape) -> Result<u64> {
        let rows = self.table_layout()?.total_rows().max(0) as u64;
        Ok(rows
            .saturating_mul(shape.width)
            .saturating_mul(4 * (1 + shape.state_arrays)))
    }

    /// Bytes of the embedding table and its optimizer state that each of
    /// `processes` processes keeps: about 1/`processes` of it when sharded;
    /// the whole table in one process; replicated across processes, the
    /// whole table and the common base its merges start from.
    ///
    /// # Errors
    ///
    /// As [`Config::table_bytes`].
    pub fn table_bytes_per_process(&self, shape: RowShape, processes: usize) -> Result<u64> {
        let whole = self.table_bytes(shape)?;
        Ok(match (self.train.embeddings_for(processes), processes) {
            (EmbeddingsMode::Sharded, _) => whole.div_ceil(processes.max(1) as u64),
            (EmbeddingsMode::Replicated, 0 | 1) => whole,
            (EmbeddingsMode::Replicated, _) => whole.saturating_mul(2),
        })
    }

    /// The settings that never took effect in a run whose trainers took
    /// `steps` (per trainer of this process, in order), each saying why: a
    /// straggler's pause past its trainer's last step, an elastic step past
    /// the steps of all, `fr-RULE:K` on trainers that never reached step K.
    pub fn unreached(&self, steps: &[u64]) -> Vec<String> {
        let mut unreached = Vec::new();
        for straggler in &self.stragglers {
            let took = steps.get(straggler.trainer).copied().unwrap_or(0);
            let late: Vec<String> = (straggler.pause_at_steps.iter())
                .filter(|&&at| at >= took)
                .map(u64::to_string)
                .collect();
            if !late.is_empty() {
                unreached.push(format!(
                    "stragglers.pause_at_steps: trainer {} took {took} steps, so its pauses \
                     before step {} never came",
                    straggler.trainer,
                    late.join(", ")
                ));
            }
        }
        let all: u64 = steps.iter().sum();
        for step in self.elastic.iter().filter(|s| s.at_step > all) {
            unreached.push(format!(
                "elastic.at_step: the trainers took {all} steps in all, so the step at {} \
                 never came",
                step.at_step
            ));
        }
        if let Algorithm::Foreground { every, .. } = &self.sync.algorithm {
            let most = steps.iter().copied().max().unwrap_or(0);
            if most < *every {
                unreached.push(format!(
                    "sync.algorithm: {} syncs every {every} steps, and no trainer took more \
                     than {most}: nothing was synced",
                    self.sync.algorithm
                ));
            }
        }
        unreached
    }

    /// Refuses a table whose part in each of `processes` processes does not
    /// fit in `available` bytes of memory, naming the key that sizes it and
    /// the bytes it needs.
    ///
    /// # Errors
    ///
    /// A table that does not fit, naming the key that sizes it and the bytes it needs
    /// ([`Error::Config`]).
    pub fn check_table_fits(
        &self,
        available: u64,
        shape: RowShape,
        processes: usize,
    ) -> Result<()> {
        let needed = self.table_bytes_per_process(shape, processes)?;
        if needed <= available {
            return Ok(());
        }
        let key = match self.data.table_sizes {
            Some(_) => "data.table_sizes",
            None => "data.table_size",
        };
        let rows = self.table_layout()?.total_rows();
        Err(Error::config(
            key,
            format!(
                "the embedding table ({rows} rows of {} floats{}) needs {}{}, more than the {} of memory available",
                shape.width,
                match shape.state_arrays {
                    0 => String::new(),
                    n => format!(", with {n} arrays of {}'s state", self.optim.sparse),
                },
                human_bytes(needed),
                match (self.train.embeddings_for(processes), processes) {
                    (_, 0 | 1) => String::new(),
                    (EmbeddingsMode::Sharded, n) => format!(" in each of {n} processes (its shard)"),
                    (EmbeddingsMode::Replicated, n) => format!(
                        " in each of {n} processes (a replica and the base of its merges)"
                    ),
                },
                human_bytes(available)
            ),
        ))
    }

    /// The hashing layout of the embedding table.
    ///
    /// # Errors
    ///
    /// A table of 0 rows a field, or per-field sizes that are not 26 sizes of at
    /// least 1 ([`Error::Config`] naming `data.table_size` or `data.table_sizes`).
    pub fn table_layout(&self) -> Result<TableLayout> {
        match &self.data.table_sizes {
            Some(sizes) => TableLayout::new(sizes),
            None if self.data.table_size == 0 => Err(Error::config(
                "data.table_size",
                format!("must be at least 1 (rows of each of the {NUM_SPARSE} field tables)"),
            )),
            None => TableLayout::uniform(self.data.table_size),
        }
    }
}

/// `bytes` in GB (or MB, KB) for messages.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_000_000 => format!("{:.1} KB", b / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The book's configuration chapter, whose first TOML block is the
    /// reference: every key, with its default.
    const CHAPTER: &str = include_str!("../docs/book/configuration.md");

    #[test]
    fn the_documented_reference_is_every_key_with_its_default() {
        let reference = CHAPTER
            .split("```toml\n")
            .nth(1)
            .and_then(|block| block.split("```").next())
            .expect("a TOML block in docs/book/configuration.md");
        let documented: toml::Table = toml::from_str(reference).expect("the reference parses");
        let defaults = toml::Table::try_from(Config::default()).expect("the defaults as TOML");
        assert_eq!(
            documented,
            defaults,
            "docs/book/configuration.md's reference differs from Config::default():\n{}",
            toml::to_string(&Config::default()).unwrap_or_default()
        );
    }
    use shadowsync_actors::sync::ShadowThreads;

    #[test]
    fn rates_f32_cannot_hold_and_paths_json_cannot_record_are_refused() {
        for (lr, key) in [(1e-50, "optim.sparse_lr"), (1e300, "optim.sparse_lr")] {
            let mut c = Config::default();
            c.optim.sparse_lr = Some(lr);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("f32"), "{lr}: {e}");
        }
        let mut c = Config::default();
        c.optim.dense_lr = 1e-40; // subnormal in f32
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("optim.dense_lr"));
        use std::os::unix::ffi::OsStrExt;
        let mut c = Config::default();
        c.data.train = Some(PathBuf::from(std::ffi::OsStr::from_bytes(b"day\xff.tsv")));
        c.data.test = Some(PathBuf::from("test.tsv"));
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("data.train") && e.contains("UTF-8"), "{e}");
    }

    fn parse(text: &str) -> Result<Config> {
        let config: Config =
            toml::from_str(text).map_err(|e| Error::config("test.toml", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn defaults_are_dlrm_kaggle_with_adagrad() {
        let c = parse("").unwrap();
        assert_eq!(c.model.kind, "dlrm");
        assert_eq!(c.model.dlrm().bottom_mlp, vec![512, 256, 64]);
        assert_eq!(c.train.batch_size, 128);
        assert_eq!(c.optim, OptimConfig::from(OptimPreset::Default));
        assert_eq!(c.optim.dense, OptimizerKind::Adagrad);
        let reference = OptimConfig::from(OptimPreset::DlrmReference);
        assert_eq!(
            (reference.dense, reference.dense_lr),
            (OptimizerKind::Sgd, 0.1)
        );
    }

    #[test]
    fn batches_are_dealt_shared_but_to_sync_sgd_and_hogwild_workers() {
        let dealing = |text: &str| parse(text).map(|c| c.dealing());
        for algorithm in ["none", "shadow-ma", "fr-bmuf:4"] {
            let sync = format!("[sync]\nalgorithm = \"{algorithm}\"\n");
            assert_eq!(dealing(&sync).unwrap(), Dealing::Shared, "{algorithm}");
            let fixed = format!("[data]\ndealing = \"static\"\n{sync}");
            assert_eq!(dealing(&fixed).unwrap(), Dealing::Static, "{algorithm}");
        }
        let sync_sgd = "[sync]\nalgorithm = \"sync-sgd\"\n";
        assert_eq!(dealing(sync_sgd).unwrap(), Dealing::Static);
        let workers = "[train]\nworkers = 4\n";
        assert_eq!(dealing(workers).unwrap(), Dealing::Static);
        let shared = format!("[data]\ndealing = \"shared\"\n{workers}");
        assert_eq!(dealing(&shared).unwrap(), Dealing::Shared);
        let e = dealing(&format!("[data]\ndealing = \"shared\"\n{sync_sgd}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.dealing") && e.contains("lockstep"), "{e}");
        let elastic = "[data]\ndealing = \"static\"\n[sync]\nalgorithm = \"shadow-ma\"\n\
                       [[elastic]]\nat_step = 10\nadd = 1\n";
        let e = dealing(elastic).unwrap_err().to_string();
        assert!(e.contains("data.dealing") && e.contains("elastic"), "{e}");
        let e = parse("[train]\nscore_threads = 100000\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.score_threads"), "{e}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_named() {
        let e = parse("[train]\nbatch_sise = 3\n").unwrap_err().to_string();
        assert!(e.contains("batch_sise") && e.contains("line 2"), "{e}");
        let e = parse("[train]\nbatch_size = \"big\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("batch_size") && e.contains("invalid type"),
            "{e}"
        );
        // Names of models and row optimizers are checked against the
        // registry where the run starts (crate::Registry::check). In [model],
        // which moves keys of the release before, the line is the section's.
        let e = parse("[model]\nkind = 7\n").unwrap_err().to_string();
        assert!(e.contains("model.kind") && e.contains("line 1"), "{e}");
        let e = parse("[optim]\nsparse = \"ftrl\"\n[optim.ftrl]\nl1 = -1.0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("optim.ftrl.l1"), "{e}");
    }

    #[test]
    fn the_documented_sync_section_parses() {
        let c = parse(
            "[train]\ntrainers = 4\n[sync]\nalgorithm = \"shadow-ma\"\ngroup_size = 2\n\
             schedule = \"random\"\nseed = 0\n\
             link = { latency_us = 200.0, bandwidth_gbps = 1.0 }\n\
             [sync.shadow]\nwrite_back = \"delta\"\nmin_interval_ms = 20.0\nmin_steps = 4\n\
             max_cpu_share = 0.02\nthreads = \"per-trainer\"\n",
        )
        .unwrap();
        let loops = c.sync.algorithm.loops().unwrap();
        assert_eq!(loops.threads, ShadowThreads::PerTrainer);
        assert_eq!(loops.max_cpu_share, 0.02);
        assert_eq!(c.sync.algorithm.to_string(), "shadow-ma");
        assert_eq!((c.sync.group_size, c.train.trainers), (2, 4));
        assert_eq!(
            (c.sync.link.latency_us, c.sync.link.bandwidth_gbps),
            (200.0, 1.0)
        );
        let e = parse("[sync]\nschedule = \"ring of 3\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schedule"), "{e}");
        let e = parse("[sync.shadow]\nthreads = \"per-core\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sync.shadow.threads") && e.contains("per-trainer"),
            "{e}"
        );
    }

    #[test]
    fn settings_past_the_runs_end_are_named() {
        let c = parse(
            "[train]\ntrainers = 2\n[sync]\nalgorithm = \"fr-ma:1000000\"\n\
             [[stragglers]]\ntrainer = 1\npause_ms = 10\npause_at_steps = [5, 40, 90]\n",
        )
        .unwrap();
        let unreached = c.unreached(&[100, 40]);
        assert_eq!(unreached.len(), 2, "{unreached:?}");
        assert!(
            unreached[0].contains("trainer 1 took 40 steps")
                && unreached[0].contains("before step 40, 90 never"),
            "{unreached:?}"
        );
        assert!(
            unreached[1].contains("fr-ma:1000000") && unreached[1].contains("more than 100"),
            "{unreached:?}"
        );
        assert!(c.unreached(&[1_000_000, 91]).is_empty());
        let elastic =
            parse("[sync]\nalgorithm = \"shadow-ma\"\n[[elastic]]\nat_step = 500\nadd = 1\n")
                .unwrap();
        let unreached = elastic.unreached(&[200, 100]);
        assert!(
            unreached.len() == 1 && unreached[0].contains("300 steps in all"),
            "{unreached:?}"
        );
        assert!(elastic.unreached(&[300, 200]).is_empty());
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let cases = [
            ("[optim]\ndense_lr = -0.1", "optim.dense_lr"),
            ("[train]\nbatch_size = 0", "train.batch_size"),
            ("[data]\ntable_size = 0", "data.table_size"),
            ("[data]\ntable_sizes = [1, 2]", "data.table_sizes"),
            ("[data]\ntrain = \"a.tsv\"", "data.test"),
            ("[model.dlrm]\ntop_mlp = [0]", "model.dlrm.top_mlp"),
            ("[train]\ntrainers = 0", "train.trainers"),
            ("[train]\nworkers = 0", "train.workers"),
            (
                "[train]\nworkers = 2\n[sync]\nalgorithm = \"sync-sgd\"",
                "train.workers",
            ),
            (
                "[train]\ntrainers = 4\n[sync]\ngroup_size = 3\nschedule = \"fixed\"",
                "sync.group_size",
            ),
            (
                "[sync]\nalgorithm = \"shadow-easgd\"\nalpha = 2.0",
                "sync.easgd.alpha",
            ),
            ("[sync]\nalgorithm = \"fr-ma:0\"", "sync.algorithm"),
            (
                "[train]\ntrainers = 2\n[sync]\ngroup_size = 4",
                "sync.group_size",
            ),
            ("[checkpoint]\nkeep = 0", "checkpoint.keep"),
            ("[sync]\npeer_timeout_ms = -1.0", "sync.peer_timeout_ms"),
            // Groups of one sync nothing, under every schedule.
            (
                "[train]\ntrainers = 4\n[sync]\ngroup_size = 1\nschedule = \"random\"",
                "sync.group_size",
            ),
            (
                "[train]\ntrainers = 4\n[sync]\ngroup_size = 1\nschedule = \"fixed\"",
                "sync.group_size",
            ),
            (
                "[train]\ntrainers = 4\n[sync]\nalgorithm = \"fr-ma:4\"\ngroup_size = 1\n\
                 schedule = \"hypercube\"",
                "sync.group_size",
            ),
            (
                "[train]\ntrainers = 4\n[sync]\nalgorithm = \"shadow-diloco\"\n\
                 [sync.diloco]\nouter_lr = 1e30",
                "sync.diloco.outer_lr",
            ),
            (
                "[train]\ntrainers = 4\n[sync]\nalgorithm = \"shadow-diloco\"\n\
                 [sync.diloco]\nouter_lr = 4.5",
                "sync.diloco.outer_lr",
            ),
        ];
        for (text, key) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        // EASGD's replicas meet the centre whatever their groups; one
        // trainer is its own group anyway.
        parse("[train]\ntrainers = 4\n[sync]\nalgorithm = \"shadow-easgd\"\ngroup_size = 1\nschedule = \"random\"")
            .unwrap();
        parse("[train]\ntrainers = 1\n[sync]\nalgorithm = \"shadow-ma\"\ngroup_size = 1").unwrap();
        parse("[train]\ntrainers = 4\n[sync]\nalgorithm = \"shadow-diloco\"\n[sync.diloco]\nouter_lr = 4.0")
            .unwrap();
        assert!(parse("[train]\ntable_sync_ms = 0")
            .unwrap_err()
            .to_string()
            .contains("train.table_sync_ms"));
    }

    #[test]
    fn across_processes_groups_span_the_whole_job() {
        let mut c = Config::default();
        c.sync.algorithm = "shadow-ma".parse().unwrap();
        c.train.trainers = 2;
        c.sync.group_size = 4;
        assert!(c.validate().is_err());
        c.validate_for(2).unwrap();
        c.sync.schedule = shadowsync_actors::sync::Schedule::Fixed;
        c.sync.group_size = 3;
        assert!(c
            .validate_for(2)
            .unwrap_err()
            .to_string()
            .contains("sync.group_size"));
    }

    #[test]
    fn a_sharded_table_needs_its_share_of_memory_in_each_process() {
        let mut c = Config::default();
        c.data.table_size = 2_000_000;
        let sgd = RowShape {
            width: 16,
            state_arrays: 0,
        };
        let whole = 26 * 2_000_000 * 16 * 4;
        assert_eq!(c.table_bytes(sgd).unwrap(), whole);
        assert_eq!(c.table_bytes_per_process(sgd, 4).unwrap(), whole / 4);
        // 2 GB free: the whole table does not fit, a quarter of it does.
        c.check_table_fits(2_000_000_000, sgd, 4).unwrap();
        let e = c
            .check_table_fits(2_000_000_000, sgd, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.table_size"), "{e}");
        // FTRL's z and n triple it.
        let ftrl = RowShape {
            state_arrays: 2,
            ..sgd
        };
        assert_eq!(c.table_bytes(ftrl).unwrap(), 3 * whole);
        // Replicated: the table and the base of its merges in each.
        c.train.embeddings = Some(EmbeddingsMode::Replicated);
        assert_eq!(c.table_bytes_per_process(sgd, 4).unwrap(), 2 * whole);
        let e = c
            .check_table_fits(2_000_000_000, sgd, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("in each of 4 processes"), "{e}");
    }
}
