//! A training run: N trainers, one pass over the training data, evaluated on
//! held-out data.
//!
//! [`Run::train`] resolves the data (files, or the built-in synthetic set), starts the
//! [`Pipeline`] with one shard per trainer, builds one [`CtrLearner`] per trainer
//! (all sharing one embedding table), runs them on the runtime's [`Cluster`](shadowsync_actors::Cluster) with
//! the configured synchronization, has the runtime's [`Evaluator`](shadowsync_actors::evaluator::Evaluator) actor score
//! the live model every `train.eval_every` examples (training and the progress
//! display go on meanwhile) and at the end, and
//! returns a [`TrainReport`]. The model evaluated is EASGD's centre for
//! `*-easgd` and the mean of the replicas for the other synchronized algorithms.
//! Under `none` the replicas are independent models: the live evaluations score
//! trainer 0's, and the final figures are the mean of every replica's own
//! evaluation (each is in the report), not an arbitrary pick of one.
//!
//! A failure mid-run (a malformed line under `fail`, a read error) stops every
//! trainer but loses nothing already computed: the report keeps the history, the
//! final evaluation of the model trained so far, and the error; the last
//! checkpoint stays as it was.
//!
//! With `checkpoint.dir` set, the run saves its whole state there (see
//! [`crate::checkpoint`]) every `checkpoint.every_steps` steps of each trainer,
//! when the observer reports an interruption (the CLI's SIGINT/SIGTERM), and at
//! the end. [`Run::resume`] continues a run from its newest whole checkpoint: each
//! trainer's data goes on from the batches it had trained, so that over both
//! runs every example is trained exactly once.
//!
//! The names a configuration gives (sync rule, schedule, model, row
//! optimizer) are looked up in a [`Registry`]: the built-in ones unless
//! [`Run::registry`] gives one with one's own added.
//!
//! A run goes through named phases, each in a function of its own: the data
//! (`data.rs`: files resolved and checked, the test set loaded), the learners
//! (on the [`Pipeline`]'s shards), the session (`session.rs`: the cluster
//! started, supervised until the trainers are done, the final model scored)
//! and the report.

use crate::checkpoint::{is_one_checkpoint, Checkpoint, CheckpointStore, Reason, Rejected};
use crate::config::{Config, EmbeddingsMode, RowShape};
use crate::data::{
    BadLinePolicy, Batch, ChunkDealer, ChunkSet, CriteoReader, Dealing, Oracle, Pipeline,
    PipelineConfig, ReadStats, Resume, TableLayout,
};
use crate::distributed::{every_process_u64s, FabricDealer, TableSyncReport};
use crate::metrics::{EvalPoint, Metrics};
use crate::model::{AuditReport, CtrLearner, RowAudit, ShardedTable, Table};
use crate::{Error, Registry, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::embedding::RowTraffic;
use shadowsync_actors::events::Event;
use shadowsync_actors::monitor::Monitor;
use shadowsync_actors::sync::unaccounted_in_job;
use shadowsync_actors::sync::Fabric;
use shadowsync_actors::ClusterReport;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod data;
mod memory;
mod run;
mod session;
mod wall;

pub use memory::MemoryReport;
pub use run::Run;
pub use wall::WallClock;

use data::{no_examples, RunData};
use session::{Built, Ended, Session};
use wall::Stopwatch;

/// Examples per evaluation batch.
pub(crate) const EVAL_BATCH: usize = 8192;

/// The data a run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSummary {
    /// Training file.
    pub train: PathBuf,
    /// Test file.
    pub test: PathBuf,
    /// Training file read counts.
    pub train_read: ReadStats,
    /// Test file read counts.
    pub test_read: ReadStats,
    /// The planted model's figures on the test file (synthetic data only).
    pub test_oracle: Option<Oracle>,
}

/// Everything a run measured (written as JSON by `shadowsync train --results`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The configuration the run used.
    pub config: Config,
    /// The data it used.
    pub data: DataSummary,
    /// Training examples consumed (with those of the run it resumed).
    pub examples: u64,
    /// Optimizer steps taken.
    pub steps: u64,
    /// Training wall-clock seconds (with those of the run it resumed).
    pub train_seconds: f64,
    /// Examples this run trained per second of the training clock (across
    /// processes, the whole job's over the clock of the process that
    /// trained longest).
    pub examples_per_sec: f64,
    /// This run from launch to results: setup, training, scoring, and
    /// examples/s over the whole (absent in reports from before it was kept).
    #[serde(default)]
    pub wall: WallClock,
    /// Evaluations during training, in order (with those of the run it
    /// resumed, up to its checkpoint).
    pub history: Vec<EvalPoint>,
    /// Evaluation of the final model: EASGD's centre, the replicas' mean, or
    /// under `none` the mean of `replica_metrics`.
    pub final_metrics: Metrics,
    /// Each replica's own final evaluation (of every process), whatever the
    /// algorithm: the models as the trainers hold them, before any last
    /// average.
    pub replica_metrics: Vec<Metrics>,
    /// Mean over the replicas of `‖w_i − w̄‖²` at the end (0 when they
    /// agree; NaN once a replica diverged).
    #[serde(default, deserialize_with = "shadowsync_actors::stats::null_as_nan")]
    pub consensus_distance: f64,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
    /// The runtime's figures: per-trainer examples/s, syncs, sync gap,
    /// staleness, consensus distance over time.
    pub cluster: ClusterReport,
    /// The checkpoint this run resumed from, if it did.
    pub resumed: Option<Resumed>,
    /// The last checkpoint written, if any.
    pub checkpoint: Option<PathBuf>,
    /// Why checkpoints could not be written, if some could not (the run went
    /// on without them).
    pub checkpoint_errors: Vec<String>,
    /// Why older checkpoints of the run could not be removed after a newer
    /// one was written (the newer ones were written).
    #[serde(default)]
    pub checkpoints_unpruned: Vec<String>,
    /// Settings that never took effect, each with why (see
    /// [`Config::unreached`]; not looked for in an interrupted run).
    #[serde(default)]
    pub unreached_settings: Vec<String>,
    /// Whether the run was interrupted before the end of its data.
    pub interrupted: bool,
    /// For a run spread over processes, this process's part in it (`examples`
    /// and `examples_per_sec` above are then the whole job's; `cluster` is
    /// this process's).
    pub distributed: Option<DistributedReport>,
    /// This process's memory: its embedding rows and peak resident set.
    #[serde(default)]
    pub memory: MemoryReport,
    /// With `train.audit_rows`: this process's rows against their initial
    /// values minus every step of the job's (the CLI fails a run where they
    /// are off).
    #[serde(default)]
    pub row_audit: Option<AuditReport>,
}

/// A process's part in a run spread over processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistributedReport {
    /// Number of processes.
    pub processes: usize,
    /// This process's index.
    pub process: usize,
    /// Trainers of the whole job.
    pub job_trainers: usize,
    /// Bytes this process sent to the others syncing dense replicas.
    pub dense_bytes_sent: u64,
    /// How the embedding tables were kept.
    pub embeddings: EmbeddingsMode,
    /// Replicated tables: their merging across processes.
    pub table_sync: Option<TableSyncReport>,
    /// Sharded tables: this process's fetches and pushes of rows, and the
    /// pushes its shard applied.
    pub sharded: Option<RowTraffic>,
    /// Sharded tables: every pair of processes where what one pushed the
    /// other differs from what the other applied (empty: every push applied
    /// exactly once). The CLI fails a run where it is not empty.
    #[serde(default)]
    pub unaccounted_pushes: Vec<String>,
    /// Bytes this process sent for the embeddings: table merges, or rows
    /// fetched, served and pushed.
    pub sparse_bytes_sent: u64,
    /// Bytes this process sent per example it trained, syncing dense
    /// replicas.
    pub dense_bytes_per_example: f64,
    /// Bytes this process sent per example it trained, for the embeddings.
    pub sparse_bytes_per_example: f64,
    /// Both.
    pub bytes_per_example: f64,
    /// Every process's memory, in process order.
    #[serde(default)]
    pub memory_per_process: Vec<MemoryReport>,
}

/// Where a resumed run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// The checkpoint.
    pub checkpoint: PathBuf,
    /// Examples the job had trained (counted in [`TrainReport::examples`]).
    pub examples: u64,
    /// Newer checkpoints that could not be used, with why.
    pub rejected: Vec<String>,
}

/// Receives progress from a running training loop.
pub trait Observer {
    /// Training starts; `total` examples if known.
    fn started(&mut self, _total: Option<u64>) {}
    /// `examples` seen so far.
    fn progressed(&mut self, _examples: u64) {}
    /// An evaluation finished.
    fn evaluated(&mut self, _point: &EvalPoint) {}
    /// The trainers' cluster started; `events` receives what happens in it
    /// (every sync written back, every trainer finishing).
    fn cluster_started(&mut self, _events: crossbeam_channel::Receiver<Event>) {}
    /// A checkpoint was written.
    fn checkpointed(&mut self, _path: &Path) {}
    /// Whether to stop the run now (asked every progress tick), keeping what
    /// it trained: it is evaluated and, with checkpoints, saved.
    fn interrupted(&mut self) -> bool {
        false
    }
    /// Monitors to run beside the cluster (asked once, before it starts):
    /// each sees every event from the first step, the run's live
    /// evaluations among them ([`Event::Evaluated`]), and can steer the run
    /// (see [`shadowsync_actors::monitor`]).
    fn monitors(&mut self) -> Vec<Box<dyn Monitor>> {
        Vec::new()
    }
}

/// An observer that ignores everything.
impl Observer for () {}

/// Reads a whole (test) file into batches.
///
/// # Errors
///
/// A file that cannot be read, a bad line (under the policy of `config`), or a tensor that
/// cannot be made.
pub fn load_batches(
    path: &Path,
    layout: &TableLayout,
    policy: BadLinePolicy,
    batch_size: usize,
) -> Result<(Vec<Batch>, ReadStats)> {
    let mut reader = CriteoReader::open(path, policy)?;
    let mut batches = Vec::new();
    let mut examples = Vec::with_capacity(batch_size);
    for example in reader.by_ref() {
        examples.push(example?);
        if examples.len() == batch_size {
            batches.push(Batch::from_examples(&examples, layout)?);
            examples.clear();
        }
    }
    if !examples.is_empty() {
        batches.push(Batch::from_examples(&examples, layout)?);
    }
    Ok((batches, reader.stats().clone()))
}

/// Where a process of a job keeps its checkpoints: `dir` itself in one
/// process, `dir/rank-P-of-R` in process `P` of `R`.
pub fn process_dir(dir: &Path, fabric: &dyn Fabric) -> PathBuf {
    match fabric.processes() {
        1 => dir.to_path_buf(),
        processes => dir.join(format!("rank-{}-of-{processes}", fabric.process())),
    }
}

/// What resuming from `dir` goes on with, in this process of `fabric`'s:
/// the run's configuration (its checkpoint's, writing further checkpoints to
/// `dir`), what it resumes from, and the checkpoint (see [`Run::resume`]).
fn resumed_from(fabric: &dyn Fabric, dir: &Path) -> Result<(Config, Resumed, Checkpoint)> {
    let own = process_dir(dir, fabric);
    if is_one_checkpoint(dir) {
        let parent = dir.parent().unwrap_or(dir);
        return Err(Error::config(
            "resume",
            format!(
                "{} is one checkpoint; --resume takes the directory that holds them: \
                 --resume {}",
                dir.display(),
                parent.display()
            ),
        ));
    }
    if fabric.processes() == 1 && !dir.is_dir() {
        let why = if dir.exists() {
            "it is a file"
        } else {
            "it does not exist"
        };
        return Err(Error::config(
            "resume",
            format!("{} is not a checkpoint directory ({why})", dir.display()),
        ));
    }
    if fabric.processes() > 1 && !own.is_dir() {
        return Err(Error::config(
            "resume",
            format!(
                "{} does not exist: was the job run with {} processes and checkpoint.dir {}?",
                own.display(),
                fabric.processes(),
                dir.display()
            ),
        ));
    }
    let store = CheckpointStore::open(&own, 1)?;
    let (path, mut checkpoint, rejected) = load_job_checkpoint(fabric, &store)?;
    if fabric.processes() > 1 {
        // A round every trainer of the job goes on from (in one process, the
        // cluster aligns the rounds itself).
        let furthest = checkpoint
            .cluster
            .trainers
            .iter()
            .map(|t| t.sync.round)
            .max()
            .unwrap_or(0);
        let furthest = every_process_u64s(fabric, &[furthest])?
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(furthest);
        for trainer in &mut checkpoint.cluster.trainers {
            trainer.sync.round = furthest;
        }
        checkpoint.dealt = dealt_in_job(fabric, checkpoint.dealt.take())?;
    }
    let mut config = checkpoint.config.clone();
    config.checkpoint.dir = Some(dir.to_path_buf());
    // The run goes on dealing as it dealt: shared dealing keeps a ledger,
    // fixed shares (chosen, a default, or before shared dealing) none.
    config.data.dealing = Some(match checkpoint.dealt {
        Some(_) => Dealing::Shared,
        None => Dealing::Static,
    });
    tracing::info!(checkpoint = %path.display(), examples = checkpoint.examples(), "resuming");
    // The job's examples before it.
    let mut examples = [checkpoint.examples()];
    fabric.sum(&mut examples)?;
    let resumed = Resumed {
        checkpoint: path,
        examples: examples[0],
        rejected: rejected
            .iter()
            .map(|r| format!("{}: {}", r.path.display(), r.reason))
            .collect(),
    };
    Ok((config, resumed, checkpoint))
}

/// The newest checkpoint that every process of the job has whole, from
/// `store` (this process's), and this process's newer ones passed over: a job
/// killed while its processes were writing one goes on from the one before,
/// in all of them. The processes number their checkpoints alike (they take
/// them together); the newer ones are set aside ([`CheckpointStore::set_aside`])
/// so that they go on numbering alike. In one process, the newest whole one.
fn load_job_checkpoint(
    fabric: &dyn Fabric,
    store: &CheckpointStore,
) -> Result<(PathBuf, Checkpoint, Vec<Rejected>)> {
    if fabric.processes() == 1 {
        return store.load_latest();
    }
    let mine = store.numbers()?;
    let everyone = every_process_u64s(fabric, &mine)?;
    let mut rejected = Vec::new();
    for &number in mine.iter().rev() {
        let missing: Vec<usize> = (0..everyone.len())
            .filter(|&p| !everyone[p].contains(&number))
            .collect();
        if !missing.is_empty() {
            rejected.push(Rejected {
                path: store.path(number),
                reason: format!("processes {missing:?} have no checkpoint {number}"),
            });
            continue;
        }
        // Every process tries the same numbers, so they sum alike.
        let loaded = store.load(number);
        let mut unusable = [u64::from(loaded.is_err())];
        fabric.sum(&mut unusable)?;
        match loaded {
            Ok((path, checkpoint)) if unusable[0] == 0 => {
                for newer in mine.iter().filter(|&&n| n > number) {
                    store.set_aside(*newer)?;
                }
                return Ok((path, checkpoint, rejected));
            }
            Ok((path, _)) => rejected.push(Rejected {
                path,
                reason: "another process's copy of it is not whole".into(),
            }),
            Err(r) => rejected.push(r),
        }
    }
    Err(store.none_usable(&rejected))
}

/// The chunks the whole job had trained at its checkpoint, from `own`, this
/// process's (a collective): each process's checkpoint holds the chunks its
/// own trainers trained, dealt to it by rank 0, so the job's are their union.
fn dealt_in_job(fabric: &dyn Fabric, own: Option<ChunkSet>) -> Result<Option<ChunkSet>> {
    let words = own.as_ref().map(ChunkSet::to_words).unwrap_or_default();
    let every = every_process_u64s(fabric, &words)?;
    if own.is_none() && every.iter().all(Vec::is_empty) {
        return Ok(None); // dealt in fixed shares
    }
    let sets = every
        .iter()
        .enumerate()
        .map(|(process, words)| {
            ChunkSet::from_words(words).ok_or_else(|| {
                Error::config(
                    "resume",
                    format!(
                        "the checkpoints of the job's processes disagree on how the data was \
                         dealt: process {process}'s {} a ledger of the chunks trained",
                        if words.is_empty() {
                            "has no"
                        } else {
                            "holds a malformed"
                        }
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(ChunkSet::union(&sets)))
}

/// One run (or this process's part of one), phase by phase.
fn run(
    fabric: Arc<dyn Fabric>,
    config: &Config,
    registry: &Registry,
    resumed: Option<(Resumed, Checkpoint)>,
    observer: &mut dyn Observer,
) -> Result<TrainReport> {
    let mut watch = Stopwatch::launch();
    config.validate_for(fabric.processes())?;
    let row_shape = registry.check(config)?;
    tch::set_num_threads(config.train.threads as i32);
    tch::manual_seed(config.train.seed as i64);
    let layout = config.table_layout()?;
    let checkpoint = resumed.as_ref().map(|(_, c)| c);
    let mut data = RunData::prepare(fabric.as_ref(), config, &layout, row_shape, checkpoint)?;
    if let Some((resumed, checkpoint)) = &resumed {
        refuse_finished(resumed, checkpoint)?;
    }
    let mut pipeline = spawn_pipeline(&data.train, &layout, config, &fabric, checkpoint)?;
    data.ledger = pipeline.ledger().cloned();
    let learners = build_learners(
        (config, registry),
        (&layout, row_shape),
        &mut pipeline,
        fabric.as_ref(),
        checkpoint,
    )?;
    let table_bytes = learners.table.bytes();
    let mut session = Session::start(
        Arc::clone(&fabric),
        (config, registry),
        learners,
        &mut data,
        checkpoint,
        observer,
    )?;
    watch.trainers_started();
    session.supervise(observer, data.total, &pipeline.halt_handle())?;
    watch.trainers_done();
    let ended = session.end(observer)?;
    let train_read = pipeline.finish()?;
    let memory = MemoryReport::now(table_bytes);
    report(
        fabric.as_ref(),
        config,
        (data, train_read),
        (ended, memory, watch),
        resumed.map(|(r, _)| r),
        observer,
    )
}

/// The checkpoint a run saved when it ended on its own (not interrupted, no
/// trainer failed: the whole pass trained) leaves nothing to train: an error
/// saying so, not a run of 0 examples.
fn refuse_finished(resumed: &Resumed, checkpoint: &Checkpoint) -> Result<()> {
    if checkpoint.reason != Reason::End {
        return Ok(());
    }
    Err(Error::config(
        "resume",
        format!(
            "the run already finished: its checkpoint {} holds all {} examples trained, \
             nothing is left to resume; start a new run to train another pass",
            resumed.checkpoint.display(),
            resumed.examples
        ),
    ))
}

/// Examples read but not trained, said as an error (a collective): in a run
/// that ended on its own from the start of its data, every line read is
/// trained once, skipped as malformed, or `dropped` by design (this
/// process's trainers' `dropped_examples`: sync-sgd's last uneven round), in
/// whichever process handled it.
fn untrained(
    fabric: &dyn Fabric,
    read: &ReadStats,
    examples: u64,
    dropped: u64,
) -> Result<Option<String>> {
    let mut not_trained = [read.skipped, dropped];
    fabric.sum(&mut not_trained)?;
    let [skipped, dropped] = not_trained;
    let parsed = read.lines.saturating_sub(skipped);
    Ok((parsed != examples + dropped).then(|| {
        format!(
            "{parsed} examples were read ({} lines, {skipped} malformed skipped) and \
             {examples} trained ({dropped} dropped by sync-sgd's last round): batches were \
             lost or trained twice",
            read.lines
        )
    }))
}

/// The reader and parsers of the training file, one shard per learner of
/// the job (this process's kept), past the chunks `resumed` had trained.
/// Dealt shared across processes, rank 0 deals the chunks through `fabric`,
/// and each process buffers few batches: one buffered here is one no other
/// process can take.
fn spawn_pipeline(
    train: &Path,
    layout: &TableLayout,
    config: &Config,
    fabric: &Arc<dyn Fabric>,
    resumed: Option<&Checkpoint>,
) -> Result<Pipeline> {
    let learners = config.train.trainers * config.train.workers;
    let dealing = config.dealing();
    let dealer = (fabric.processes() > 1 && dealing == Dealing::Shared)
        .then(|| Arc::new(FabricDealer(Arc::clone(fabric))) as Arc<dyn ChunkDealer>);
    Pipeline::spawn(
        train,
        layout.clone(),
        &PipelineConfig {
            batch_size: config.train.batch_size,
            shards: learners * fabric.processes(),
            keep: Some(fabric.local_trainers(learners)),
            policy: config.data.bad_lines,
            capacity: if dealer.is_some() { 4 } else { 64 },
            dealing,
            dealer,
            resume: match (resumed, dealing) {
                (None, _) => Resume::Start,
                (Some(c), Dealing::Shared) => Resume::Past(c.dealt.clone().unwrap_or_default()),
                // A learner that had finished its data skips all of it.
                (Some(c), Dealing::Static) => Resume::Skip(
                    c.cluster
                        .learners
                        .iter()
                        .map(|l| l.as_ref().map_or(u64::MAX, |l| l.position))
                        .collect(),
                ),
            },
        },
    )
}

/// Refuses `train.audit_rows` when sharded pushes cross between processes
/// `encoded` (by `sync.compression`): the audit sums the pushes as computed,
/// the shards apply them rounded, and it would count the rounding as lost
/// updates. (A replicated table's merges settle their rounding at the end.)
fn check_audit_of_pushes(config: &Config, encoded: bool) -> Result<()> {
    if config.train.audit_rows && encoded {
        return Err(Error::config(
            "train.audit_rows",
            format!(
                "compares each row with the pushes as computed, but sharded pushes cross \
                 between processes encoded by sync.compression = {:?} (rounded), which the \
                 audit would count as lost updates: audit with sync.compression = \"none\" \
                 or with train.embeddings = \"replicated\"",
                config.sync.compression
            ),
        ));
    }
    Ok(())
}

/// One learner per shard of `pipeline`, all sharing one embedding table (the
/// checkpoint's, when resumed): this process's, or one sharded over
/// `fabric`'s processes, its rows of `row_shape` (what [`Registry::check`]
/// found). The table is returned too, and an elastic run's one queue of
/// batches, for the trainers that join.
fn build_learners(
    (config, registry): (&Config, &Registry),
    (layout, row_shape): (&TableLayout, RowShape),
    pipeline: &mut Pipeline,
    fabric: &dyn Fabric,
    resumed: Option<&Checkpoint>,
) -> Result<Built> {
    let width = row_shape.width as i64;
    let rule = registry.row_rules().build(config)?;
    let lr = config.row_lr(&*rule);
    let mut table = match config.train.embeddings_for(fabric.processes()) {
        EmbeddingsMode::Replicated => Table::local(layout, width, rule, lr)?,
        EmbeddingsMode::Sharded => {
            let codec = registry.row_codec(&config.sync)?;
            let encoded = codec.is_some() && fabric.processes() > 1;
            check_audit_of_pushes(config, encoded)?;
            Table::Sharded(ShardedTable::start(
                layout,
                width,
                (rule, lr),
                &config.train,
                (fabric, codec),
            )?)
        }
    };
    if config.train.audit_rows && resumed.is_none() {
        let rows = layout.total_rows() as usize;
        table.audit_with(Arc::new(RowAudit::new(rows, width as usize)));
    }
    if let Some(checkpoint) = resumed {
        table.load_arrays(|name| {
            checkpoint
                .table
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, values)| values.clone())
                .ok_or_else(|| {
                    Error::config(
                        "resume",
                        format!("the checkpoint has no embedding table {name:?} (another sparse optimizer?)"),
                    )
                })
        })?;
        table.resume_pushes(checkpoint.pushes.clone());
    }
    let shards = pipeline.take_shards();
    let joiner_queue = shards
        .first()
        .filter(|_| !config.elastic.is_empty())
        .cloned();
    let learners = CtrLearner::replicas(registry.models(), config, &table, shards)?;
    Ok(Built {
        learners,
        table,
        joiner_queue,
    })
}

/// This process's part in a run across processes (`None` in one process),
/// after the collectives every process takes part in: each process's memory,
/// the job's pushes sent and applied.
fn distributed_report(
    fabric: &dyn Fabric,
    config: &Config,
    (cluster, memory): (&ClusterReport, MemoryReport),
    table_sync: Option<TableSyncReport>,
    embeddings: Option<RowTraffic>,
) -> Result<Option<DistributedReport>> {
    let memory_per_process = memory.every_process(fabric)?;
    let unaccounted_pushes = match &embeddings {
        Some(rows) => unaccounted_in_job(fabric, &rows.pushes_sent, &rows.pushes_applied)?
            .iter()
            .map(ToString::to_string)
            .collect(),
        None => Vec::new(),
    };
    if fabric.processes() == 1 {
        return Ok(None);
    }
    let dense_bytes_sent = fabric.bytes_sent();
    let sparse_bytes_sent = fabric.row_bytes_sent() + table_sync.map_or(0, |sync| sync.bytes);
    let per_example = |bytes: u64| bytes as f64 / cluster.examples.max(1) as f64;
    Ok(Some(DistributedReport {
        processes: fabric.processes(),
        process: fabric.process(),
        job_trainers: config.train.trainers * fabric.processes(),
        dense_bytes_sent,
        embeddings: config.train.embeddings_for(fabric.processes()),
        table_sync,
        sharded: embeddings,
        unaccounted_pushes,
        sparse_bytes_sent,
        dense_bytes_per_example: per_example(dense_bytes_sent),
        sparse_bytes_per_example: per_example(sparse_bytes_sent),
        bytes_per_example: per_example(dense_bytes_sent + sparse_bytes_sent),
        memory_per_process,
    }))
}

/// The whole job's examples (with those of the run it resumed) and this
/// run's examples/s over the training clock of the process that trained
/// longest (a collective): ranks dealt shared end together, ranks in fixed
/// shares when the slowest does.
fn job_examples(fabric: &dyn Fabric, cluster: &ClusterReport) -> Result<(u64, f64)> {
    let trained = (cluster.examples_per_sec * cluster.seconds).round() as u64;
    let mut job = [cluster.examples, trained];
    fabric.sum(&mut job)?;
    let micros = (cluster.seconds * 1e6).round() as u64;
    let longest = every_process_u64s(fabric, &[micros])?
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(micros) as f64
        / 1e6;
    Ok((job[0], job[1] as f64 / longest.max(f64::MIN_POSITIVE)))
}

/// The report of an ended session: the whole job's examples and examples/s,
/// the final evaluation added to the history. A run that trained nothing is an
/// error, unless interrupted: the first trainer's error where one failed (the
/// first line malformed), else the training file's emptiness.
fn report(
    fabric: &dyn Fabric,
    config: &Config,
    (data, train_read): (RunData, ReadStats),
    (ended, memory, watch): (Ended, MemoryReport, Stopwatch),
    resumed: Option<Resumed>,
    observer: &mut dyn Observer,
) -> Result<TrainReport> {
    let cluster = ended.cluster;
    let (examples, job_examples_per_sec) = job_examples(fabric, &cluster)?;
    if examples == 0 && !ended.interrupted {
        return Err(match cluster.errors.first() {
            Some(failed) => Error::data(&data.train, format!("nothing trained: {failed}")),
            None => no_examples(&data.train, &train_read),
        });
    }
    let dropped = cluster
        .trainer_stats
        .iter()
        .map(|s| s.dropped_examples)
        .sum();
    let lost = untrained(fabric, &train_read, examples, dropped)?
        .filter(|_| !ended.interrupted && cluster.errors.is_empty() && resumed.is_none());
    let distributed = distributed_report(
        fabric,
        config,
        (&cluster, memory),
        ended.table_sync,
        ended.embeddings,
    )?;
    let last = EvalPoint {
        examples,
        train_seconds: ended.earlier_seconds + cluster.seconds,
        metrics: ended.metrics,
    };
    observer.evaluated(&last);
    let this_run = examples.saturating_sub(resumed.as_ref().map_or(0, |r| r.examples));
    let wall = watch.read(this_run, ended.scoring_seconds);
    let mut history = ended.history;
    history.push(last);
    let steps: Vec<u64> = cluster.trainer_stats.iter().map(|s| s.steps).collect();
    let unreached_settings = if ended.interrupted {
        Vec::new()
    } else {
        config.unreached(&steps)
    };
    Ok(TrainReport {
        config: config.clone(),
        data: DataSummary {
            train: data.train,
            test: data.test,
            train_read,
            test_read: data.test_read,
            test_oracle: data.test_oracle,
        },
        examples,
        steps: steps.iter().sum(),
        train_seconds: last.train_seconds,
        examples_per_sec: match distributed {
            Some(_) => job_examples_per_sec,
            None => cluster.examples_per_sec,
        },
        history,
        wall,
        final_metrics: last.metrics,
        replica_metrics: ended.replica_metrics,
        consensus_distance: ended.consensus_distance,
        error: cluster.errors.first().cloned().or(lost),
        cluster,
        resumed,
        checkpoint: ended.checkpoints.last,
        checkpoint_errors: ended.checkpoints.errors,
        checkpoints_unpruned: ended.checkpoints.unpruned,
        unreached_settings,
        interrupted: ended.interrupted,
        distributed,
        memory,
        row_audit: ended.row_audit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_audit_refuses_pushes_that_cross_encoded() {
        let mut config = Config::default();
        config.train.audit_rows = true;
        config.sync.compression = "int8".into();
        let e = check_audit_of_pushes(&config, true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train.audit_rows") && e.contains("\"int8\""),
            "{e}"
        );
        assert!(check_audit_of_pushes(&config, false).is_ok());
        config.train.audit_rows = false;
        assert!(check_audit_of_pushes(&config, true).is_ok());
    }
}
