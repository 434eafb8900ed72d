//! A training run: N trainers, one pass over the training data, evaluated on
//! held-out data.
//!
//! [`train`] resolves the data (files, or the built-in synthetic set), starts the
//! [`Pipeline`] with one shard per trainer, builds one [`CtrLearner`] per trainer
//! (all sharing one embedding table), runs them on the runtime's [`Cluster`] with
//! the configured synchronization, has the runtime's [`Evaluator`] actor score
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
//! the end. [`resume`] continues a run from its newest whole checkpoint: each
//! trainer's data goes on from the batches it had trained, so that over both
//! runs every example is trained exactly once.

use crate::checkpoint::{Checkpoint, CheckpointStore, DataFile, Reason};
use crate::config::Config;
use crate::data::{
    BadLinePolicy, Batch, CriteoReader, Oracle, Pipeline, PipelineConfig, ReadStats, SyntheticData,
    TableLayout,
};
use crate::distributed::{TableSync, TableSyncReport};
use crate::metrics::{evaluate, EvalPoint, Metrics};
use crate::model::{CtrLearner, EmbeddingTable};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::evaluator::{Evaluation, Evaluator, Scorer};
use shadowsync_actors::events::Event;
use shadowsync_actors::sync::{Algorithm, Fabric, InProcess};
use shadowsync_actors::{Cluster, ClusterConfig, ClusterReport, Learner, ParamAlias};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Examples per evaluation batch.
const EVAL_BATCH: usize = 8192;
/// How often the progress (and the need for an evaluation) is checked.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How often trainers parked for a checkpoint are looked for.
const PARKED_EVERY: Duration = Duration::from_millis(2);

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
    /// Examples this run trained per second.
    pub examples_per_sec: f64,
    /// Evaluations during training, in order (with those of the run it
    /// resumed, up to its checkpoint).
    pub history: Vec<EvalPoint>,
    /// Evaluation of the final model (under `none`, the mean of
    /// `replica_metrics`).
    pub final_metrics: Metrics,
    /// Under `none`, each replica's final evaluation; empty otherwise.
    pub replica_metrics: Vec<Metrics>,
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
    /// Whether the run was interrupted before the end of its data.
    pub interrupted: bool,
    /// For a run spread over processes, this process's part in it (`examples`
    /// and `examples_per_sec` above are then the whole job's; `cluster` is
    /// this process's).
    pub distributed: Option<DistributedReport>,
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
    /// The embedding table's averaging across processes.
    pub table_sync: TableSyncReport,
    /// Bytes this process moved (dense sync and table sync) per example it
    /// trained.
    pub bytes_per_example: f64,
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
}

/// An observer that ignores everything.
impl Observer for () {}

/// Reads a whole (test) file into batches.
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

/// Which model the evaluations score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FinalModel {
    /// Each replica on its own (independent trainers: an average of their
    /// parameters would mix unrelated models); trainer 0's while training.
    EachReplica,
    /// The mean of all replicas (what a last global sync gives).
    Mean,
}

/// Scores dense parameters on the test set with the shared embedding table.
struct CtrScorer {
    model: CtrLearner,
    test: Vec<Batch>,
}

impl Scorer for CtrScorer {
    type Score = Metrics;
    type Error = Error;

    fn score(&mut self, dense: &[f32]) -> Result<Metrics> {
        self.model.dense_params().load_from(dense)?;
        let (predictions, labels) = self.model.predict_all(&self.test)?;
        Ok(evaluate(&predictions, &labels))
    }
}

/// The replicas as they train, read without stopping them.
struct Replicas {
    aliases: Vec<ParamAlias>,
    which: FinalModel,
}

impl Replicas {
    /// Each replica's current parameters.
    fn each(&self) -> Result<Vec<Vec<f32>>> {
        Self::read(&self.aliases)
    }

    /// The current parameters of `aliases`.
    fn read(aliases: &[ParamAlias]) -> Result<Vec<Vec<f32>>> {
        aliases
            .iter()
            .map(|replica| {
                let mut dense = vec![0f32; replica.len()];
                replica.snapshot_into(&mut dense)?;
                Ok(dense)
            })
            .collect()
    }

    /// The model the replicas make right now: trainer 0's or their mean.
    fn model(&self) -> Result<Vec<f32>> {
        let each = match self.which {
            FinalModel::EachReplica => Self::read(&self.aliases[..1.min(self.aliases.len())])?,
            FinalModel::Mean => self.each()?,
        };
        let len = each.first().map_or(0, Vec::len);
        let mut mean = vec![0f32; len];
        for replica in &each {
            mean.iter_mut()
                .zip(replica)
                .for_each(|(m, v)| *m += v / each.len() as f32);
        }
        Ok(mean)
    }
}

/// Hands finished live evaluations to the history and the observer.
fn record_live(
    done: Vec<Evaluation<Metrics>>,
    requested_at: &mut VecDeque<f64>,
    history: &mut Vec<EvalPoint>,
    observer: &mut dyn Observer,
) -> Result<()> {
    for evaluation in done {
        let train_seconds = requested_at.pop_front().unwrap_or_default();
        let point = EvalPoint {
            examples: evaluation.tag,
            train_seconds,
            metrics: metrics_of(evaluation)?,
        };
        observer.evaluated(&point);
        history.push(point);
    }
    Ok(())
}

/// The metrics of a finished evaluation.
fn metrics_of(evaluation: Evaluation<Metrics>) -> Result<Metrics> {
    evaluation.score.map_err(Error::Evaluation)
}

/// The checkpoints a run wrote, and why some could not be.
#[derive(Default)]
struct Checkpoints {
    last: Option<PathBuf>,
    errors: Vec<String>,
}

/// Notes a checkpoint written, or why it could not be: the run goes on, as a
/// failed checkpoint must not cost what was trained.
fn note_checkpoint(
    saved: Result<PathBuf>,
    checkpoints: &mut Checkpoints,
    observer: &mut dyn Observer,
) {
    match saved {
        Ok(path) => {
            observer.checkpointed(&path);
            checkpoints.last = Some(path);
        }
        Err(e) => {
            tracing::warn!(error = %e, "checkpoint not written; training goes on");
            checkpoints.errors.push(e.to_string());
        }
    }
}

/// Trains `config.train.trainers` replicas for one pass over the data (each on
/// its shard, synchronized by `config.sync`) and evaluates the result.
pub fn train(config: &Config, observer: &mut dyn Observer) -> Result<TrainReport> {
    run(Arc::new(InProcess), config, None, observer)
}

/// This process's part of a run spread over `fabric`'s processes (each runs
/// it with the same `config`): `config.train.trainers` trainers here, on this
/// process's part of the data; see [`crate::distributed`]. Every process gets
/// the report of the same final model (the mean over all trainers). Each
/// process writes its checkpoints to its own directory under
/// `checkpoint.dir` ([`process_dir`]).
pub fn train_on(
    fabric: Arc<dyn Fabric>,
    config: &Config,
    observer: &mut dyn Observer,
) -> Result<TrainReport> {
    run(fabric, config, None, observer)
}

/// Where a process of a job keeps its checkpoints: `dir` itself in one
/// process, `dir/rank-P-of-R` in process `P` of `R`.
pub fn process_dir(dir: &Path, fabric: &dyn Fabric) -> PathBuf {
    match fabric.processes() {
        1 => dir.to_path_buf(),
        processes => dir.join(format!("rank-{}-of-{processes}", fabric.process())),
    }
}

/// Continues the run whose checkpoints are in `dir` from the newest whole one,
/// with that run's configuration (writing further checkpoints to `dir`).
pub fn resume(dir: &Path, observer: &mut dyn Observer) -> Result<TrainReport> {
    resume_on(Arc::new(InProcess), dir, observer)
}

/// This process's part of resuming a job of `fabric`'s processes (as many as
/// the job that wrote the checkpoints): each continues from the newest whole
/// checkpoint in its [`process_dir`]; the sync rounds of all trainers go on
/// from the furthest any of them had come to.
pub fn resume_on(
    fabric: Arc<dyn Fabric>,
    dir: &Path,
    observer: &mut dyn Observer,
) -> Result<TrainReport> {
    let own = process_dir(dir, fabric.as_ref());
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
    let (path, mut checkpoint, rejected) = store.load_latest()?;
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
        let all = fabric.gather(vec![furthest as u32, (furthest >> 32) as u32])?;
        let furthest = all
            .iter()
            .filter_map(|w| Some(u64::from(*w.first()?) | (u64::from(*w.get(1)?) << 32)))
            .max()
            .unwrap_or(furthest);
        for trainer in &mut checkpoint.cluster.trainers {
            trainer.sync.round = furthest;
        }
    }
    let mut config = checkpoint.config.clone();
    config.checkpoint.dir = Some(dir.to_path_buf());
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
    run(fabric, &config, Some((resumed, checkpoint)), observer)
}

/// The shared table's arrays, by name.
fn table_arrays(table: &EmbeddingTable) -> Result<Vec<(String, Vec<f32>)>> {
    table
        .state()
        .into_iter()
        .map(|(name, tensor)| {
            let flat = tensor.f_flatten(0, -1)?;
            Ok((name.to_string(), Vec::<f32>::try_from(&flat)?))
        })
        .collect()
}

/// The error of a data file that gave no example: empty, or every line
/// malformed and skipped.
fn no_examples(path: &Path, read: &ReadStats) -> Error {
    let reason = match (read.lines, read.skipped) {
        (0, _) => "has no examples: the file is empty".to_string(),
        (lines, skipped) if skipped == lines => format!(
            "has no examples: every one of its {lines} lines is malformed (skipped under \
             data.bad_lines = \"skip\"); the first: {}",
            read.first_skipped.join("; ")
        ),
        (lines, _) => format!("has no examples in its {lines} lines"),
    };
    Error::data(path, reason)
}

/// Bytes of memory available to a new allocation (`MemAvailable`), if the
/// system says.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// `config` with its file and directory paths made absolute, so that a run
/// resumed from another working directory reads the same files.
fn with_absolute_paths(config: &Config) -> Result<Config> {
    let mut config = config.clone();
    for path in [
        &mut config.data.train,
        &mut config.data.test,
        &mut config.data.synthetic.dir,
        &mut config.checkpoint.dir,
    ]
    .into_iter()
    .flatten()
    {
        *path = std::path::absolute(&*path).map_err(|e| Error::io(&*path, e))?;
    }
    Ok(config)
}

fn run(
    fabric: Arc<dyn Fabric>,
    config: &Config,
    resumed: Option<(Resumed, Checkpoint)>,
    observer: &mut dyn Observer,
) -> Result<TrainReport> {
    config.validate_for(fabric.processes())?;
    // What a checkpoint keeps to resume from (perhaps in another directory).
    let resumable = with_absolute_paths(config)?;
    tch::set_num_threads(config.train.threads as i32);
    tch::manual_seed(config.train.seed as i64);
    let layout = config.table_layout()?;
    let trainers = config.train.trainers;
    let workers = config.train.workers;

    let (train_path, test_path, test_oracle, total) = match (&config.data.train, &config.data.test)
    {
        (Some(train), Some(test)) => (train.clone(), test.clone(), None, None),
        _ => {
            let synthetic = &config.data.synthetic;
            let dir = synthetic.directory();
            tracing::info!(dir = %dir.display(), "using built-in synthetic data");
            // Across processes, the first makes the data before the others
            // look (they would replace files under each other's readers).
            let ensure = || SyntheticData::ensure(synthetic.spec(), &dir);
            let data = if fabric.process() == 0 {
                let data = ensure()?;
                fabric.sum(&mut [0])?;
                data
            } else {
                fabric.sum(&mut [0])?;
                ensure()?
            };
            (
                data.train,
                data.test,
                Some(data.test_oracle),
                Some(synthetic.train_rows),
            )
        }
    };
    // The files as read now; a resumed run must read the same ones.
    let data_files = [&train_path, &test_path]
        .into_iter()
        .filter_map(|path| DataFile::of(path).transpose())
        .collect::<Result<Vec<_>>>()?;
    if let Some((_, checkpoint)) = &resumed {
        for file in &checkpoint.data {
            file.check_unchanged()?;
        }
    }
    let (test_batches, test_read) =
        load_batches(&test_path, &layout, config.data.bad_lines, EVAL_BATCH)?;
    if test_batches.is_empty() {
        return Err(no_examples(&test_path, &test_read));
    }
    if let Some(available) = available_memory() {
        config.check_table_fits(available)?;
    }

    let mut pipeline = Pipeline::spawn(
        &train_path,
        layout.clone(),
        &PipelineConfig {
            batch_size: config.train.batch_size,
            shards: trainers * workers * fabric.processes(),
            keep: Some(fabric.local_trainers(trainers * workers)),
            policy: config.data.bad_lines,
            capacity: 64,
            // A learner that had finished its data skips all of it.
            skip: resumed.as_ref().map_or_else(Vec::new, |(_, c)| {
                c.cluster
                    .learners
                    .iter()
                    .map(|l| l.as_ref().map_or(u64::MAX, |l| l.position))
                    .collect()
            }),
        },
    )?;
    let learners = CtrLearner::replicas(
        &config.model,
        &config.optim,
        &layout,
        pipeline.take_shards(),
        workers,
    )?;
    let shared_table = learners
        .first()
        .map(|l| l.table().share())
        .ok_or_else(|| Error::config("train.trainers", "must be at least 1"))?;
    if let Some((_, checkpoint)) = &resumed {
        shared_table.load_state(|name| {
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
    }
    let store = config
        .checkpoint
        .dir
        .as_deref()
        .map(|dir| {
            CheckpointStore::open(&process_dir(dir, fabric.as_ref()), config.checkpoint.keep)
        })
        .transpose()?;
    let saved_table = shared_table.share();
    let table_sync = (fabric.processes() > 1)
        .then(|| {
            let every = Duration::from_millis(config.train.table_sync_ms);
            TableSync::start(Arc::clone(&fabric), shared_table.share(), every)
        })
        .transpose()?;
    let mut evaluator = Evaluator::start(CtrScorer {
        model: CtrLearner::with_table(&config.model, &config.optim, shared_table, None)?,
        test: test_batches,
    })?;
    let replicas = Replicas {
        aliases: learners
            .iter()
            .step_by(workers)
            .map(|l| ParamAlias::new(l.dense_params()))
            .collect::<shadowsync_actors::Result<_>>()?,
        which: match config.sync.algorithm {
            Algorithm::None => FinalModel::EachReplica,
            _ => FinalModel::Mean,
        },
    };
    let cluster_config = ClusterConfig {
        sync: config.sync.clone(),
        intra_op_threads: config.train.threads,
        consensus_every_ms: config.train.consensus_every_ms,
        workers,
        faults: config.faults.clone(),
        checkpoint_every: match store {
            Some(_) => config.checkpoint.every_steps,
            None => 0,
        },
        ..ClusterConfig::default()
    };
    // Subscribed before the start: a trainer failing at once is seen.
    let events = cluster_config.events.subscribe();
    let observed = cluster_config.events.subscribe();
    let cluster = Cluster::start_on(
        Arc::clone(&fabric),
        cluster_config,
        learners,
        resumed.as_ref().map(|(_, checkpoint)| &checkpoint.cluster),
    )?;
    observer.cluster_started(observed);
    // Training seconds and evaluations of the runs this one continues.
    let (earlier_seconds, mut history) = resumed.as_ref().map_or((0.0, Vec::new()), |(_, c)| {
        (c.train_seconds, c.history.clone())
    });
    let started = Instant::now();
    let train_seconds = || earlier_seconds + started.elapsed().as_secs_f64();
    // `held`: how long the trainers stood still for it.
    let save = |reason, cluster_state, table, held: Duration, history: &[EvalPoint]| {
        let writing = Instant::now();
        let store = store
            .as_ref()
            .ok_or_else(|| Error::config("checkpoint.dir", "not set"))?;
        let checkpoint = Checkpoint {
            reason,
            config: resumable.clone(),
            cluster: cluster_state,
            table,
            train_seconds: train_seconds(),
            history: history.to_vec(),
            data: data_files.clone(),
        };
        let path = store.save(&checkpoint)?;
        tracing::info!(
            checkpoint = %path.display(),
            examples = checkpoint.examples(),
            ?reason,
            trainers_held_ms = held.as_millis() as u64,
            write_ms = writing.elapsed().as_millis() as u64,
            "checkpoint written"
        );
        Ok(path)
    };
    let mut checkpoints = Checkpoints::default();
    let mut interrupted = false;
    observer.started(total);

    // Train seconds at each live evaluation still being scored, in request order
    // (the evaluator answers in order).
    let mut requested_at = VecDeque::new();
    let every = config.train.eval_every;
    let resumed_examples = resumed.as_ref().map_or(0, |(_, c)| c.examples());
    let mut next_eval = (resumed_examples - resumed_examples % every.max(1)).saturating_add(every);
    loop {
        // Parked trainers wait for the checkpoint: look for them more often.
        let tick = Instant::now();
        while tick.elapsed() < PROGRESS_EVERY && !(store.is_some() && cluster.parked()) {
            std::thread::sleep(PARKED_EVERY);
        }
        if store.is_some() && cluster.parked() {
            let holding = Instant::now();
            let saved = cluster
                .checkpoint(|| table_arrays(&saved_table))
                .map_err(Error::from)
                .and_then(|(state, table)| {
                    save(Reason::Periodic, state, table?, holding.elapsed(), &history)
                });
            note_checkpoint(saved, &mut checkpoints, observer);
        }
        if !interrupted && observer.interrupted() {
            interrupted = true;
            cluster.stop();
        }
        let failed = events.try_iter().find_map(|e| match e {
            Event::TrainerFailed { trainer, error } => Some(format!("trainer {trainer}: {error}")),
            _ => None,
        });
        if let Some(failure) = failed {
            // Across processes, at once: the others cannot finish the pass
            // without this one's shards, and its exit ends the job.
            if fabric.processes() > 1 {
                cluster.stop();
                return Err(Error::Runtime(shadowsync_actors::Error::System(failure)));
            }
            cluster.stop(); // a failed shard ends the run, as one trainer would
        }
        let stats = cluster.stats();
        let examples: u64 = stats.iter().map(|s| s.examples).sum();
        observer.progressed(examples);
        record_live(
            evaluator.finished(),
            &mut requested_at,
            &mut history,
            observer,
        )?;
        let training = !stats.iter().all(|s| s.finished);
        // One live evaluation at a time: a slow one delays the next rather than
        // queueing them up.
        if every > 0 && examples >= next_eval && training && evaluator.pending() == 0 {
            next_eval = (examples - examples % every).saturating_add(every);
            evaluator.request(replicas.model()?, examples)?;
            requested_at.push_back(train_seconds());
        }
        if !training {
            break;
        }
    }
    let outcome = cluster.wait()?;
    let table_sync = table_sync.map(TableSync::finish).transpose()?;
    record_live(
        evaluator.wait_all()?,
        &mut requested_at,
        &mut history,
        observer,
    )?;
    // The state as it ended, unless a trainer failed (the last checkpoint
    // stays the one to resume from then).
    if store.is_some() && outcome.report.errors.is_empty() {
        let reason = if interrupted {
            Reason::Interrupted
        } else {
            Reason::End
        };
        let saved = outcome
            .state(workers)
            .map_err(Error::from)
            .and_then(|state| {
                let table = table_arrays(&saved_table)?;
                save(reason, state, table, Duration::ZERO, &history)
            });
        note_checkpoint(saved, &mut checkpoints, observer);
    }
    let train_read = pipeline.finish()?;
    let cluster_report = outcome.report;
    // The whole job's examples and examples/s (this process's, in one).
    let mut job = [
        cluster_report.examples,
        cluster_report.examples_per_sec.round() as u64,
    ];
    fabric.sum(&mut job)?;
    let [examples, examples_per_sec] = job;
    let distributed = table_sync.map(|table_sync| {
        let dense_bytes_sent = fabric.bytes_sent();
        DistributedReport {
            processes: fabric.processes(),
            process: fabric.process(),
            job_trainers: trainers * fabric.processes(),
            dense_bytes_sent,
            table_sync,
            bytes_per_example: (dense_bytes_sent + table_sync.bytes) as f64
                / cluster_report.examples.max(1) as f64,
        }
    });
    let (metrics, replica_metrics) = match (outcome.center, replicas.which) {
        (Some(center), _) => (metrics_of(evaluator.score(center, examples)?)?, Vec::new()),
        (None, FinalModel::Mean) => {
            let mut model = replicas.model()?;
            fabric.average(&mut model)?;
            (metrics_of(evaluator.score(model, examples)?)?, Vec::new())
        }
        (None, FinalModel::EachReplica) => {
            for dense in replicas.each()? {
                evaluator.request(dense, examples)?;
            }
            let mine = evaluator
                .wait_all()?
                .into_iter()
                .map(metrics_of)
                .collect::<Result<Vec<_>>>()?;
            // Across processes, every replica of the job.
            let each = crate::distributed::every_process_metrics(fabric.as_ref(), mine)?;
            let mean = Metrics::mean(&each)
                .ok_or_else(|| Error::config("train.trainers", "must be at least 1"))?;
            (mean, each)
        }
    };
    if examples == 0 && !interrupted {
        return Err(no_examples(&train_path, &train_read));
    }
    let last = EvalPoint {
        examples,
        train_seconds: earlier_seconds + cluster_report.seconds,
        metrics,
    };
    observer.evaluated(&last);
    history.push(last);
    Ok(TrainReport {
        config: config.clone(),
        data: DataSummary {
            train: train_path,
            test: test_path,
            train_read,
            test_read,
            test_oracle,
        },
        examples,
        steps: cluster_report.trainer_stats.iter().map(|s| s.steps).sum(),
        train_seconds: last.train_seconds,
        examples_per_sec: if distributed.is_some() {
            examples_per_sec as f64
        } else {
            cluster_report.examples_per_sec
        },
        history,
        final_metrics: last.metrics,
        replica_metrics,
        error: cluster_report.errors.first().cloned(),
        cluster: cluster_report,
        resumed: resumed.map(|(r, _)| r),
        checkpoint: checkpoints.last,
        checkpoint_errors: checkpoints.errors,
        interrupted,
        distributed,
    })
}
