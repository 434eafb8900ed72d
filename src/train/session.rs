//! A run in progress: the trainers' cluster, the evaluator beside it, and the
//! checkpoints.
//!
//! [`Session::start`] starts them; [`Session::supervise`] watches the run
//! every [`PROGRESS_EVERY`] until the trainers are done: it saves a checkpoint
//! whenever the trainers park for one, stops the run on an interruption or a
//! failed trainer, reports progress, and asks for a live evaluation every
//! `train.eval_every` examples. [`Session::end`] waits for the cluster, saves
//! the last checkpoint and scores the final model.

use super::data::RunData;
use super::{process_dir, Observer};
use crate::checkpoint::{new_run_id, Checkpoint, CheckpointStore, DataFile, Reason, Saved};
use crate::config::{Config, ElasticStep};
use crate::data::{split_rows, Batch, Batches, ChunkLedger, ChunkSet, PipelineHalt};
use crate::distributed::{TableSync, TableSyncReport};
use crate::metrics::{evaluate, EvalPoint, Metrics};
use crate::model::{AuditReport, CtrLearner, Models, Table};
use crate::{Error, Registry, Result};
use crossbeam_channel::Receiver;
use shadowsync_actors::embedding::{Pushes, RowTraffic};
use shadowsync_actors::evaluator::{Evaluator, Scored, Scorer};
use shadowsync_actors::events::{Event, EventBus};
use shadowsync_actors::sync::{Algorithm, Fabric};
use shadowsync_actors::Error as RuntimeError;
use shadowsync_actors::{mean_replica, spread_around};
use shadowsync_actors::{Cluster, ClusterBuilder, ClusterConfig, ClusterReport, Learner};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the progress (and the need for an evaluation) is checked.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How often trainers parked for a checkpoint are looked for.
const PARKED_EVERY: Duration = Duration::from_millis(2);

/// What the run had before this process took it up (from the checkpoint it
/// resumes): training seconds, evaluations, examples.
#[derive(Debug, Clone, Default)]
pub(super) struct Earlier {
    pub train_seconds: f64,
    pub history: Vec<EvalPoint>,
    pub examples: u64,
}

/// How a session ended.
pub(super) struct Ended {
    /// The runtime's figures.
    pub cluster: ClusterReport,
    /// The embedding table's merging across processes, if replicated.
    pub table_sync: Option<TableSyncReport>,
    /// The sharded table's fetches and pushes, if sharded.
    pub embeddings: Option<RowTraffic>,
    /// The rows' audit, if `train.audit_rows`.
    pub row_audit: Option<AuditReport>,
    /// The final model's metrics.
    pub metrics: Metrics,
    /// Each replica's own, of every process.
    pub replica_metrics: Vec<Metrics>,
    /// Mean over the replicas of `‖w_i − w̄‖²` at the end.
    pub consensus_distance: f64,
    /// Every evaluation, the run's earlier ones first (not the final one).
    pub history: Vec<EvalPoint>,
    /// Training seconds before this process took the run up.
    pub earlier_seconds: f64,
    /// Seconds scoring the final model and the replicas.
    pub scoring_seconds: f64,
    /// The checkpoints written, and why some could not be.
    pub checkpoints: Checkpoints,
    pub interrupted: bool,
}

/// The checkpoints a run wrote, why some could not be, and why older ones
/// stayed.
#[derive(Default)]
pub(super) struct Checkpoints {
    pub last: Option<PathBuf>,
    pub errors: Vec<String>,
    /// Why older checkpoints could not be removed after a new one was
    /// written.
    pub unpruned: Vec<String>,
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

/// Scores dense parameters on its part of the test set, with the shared
/// embedding table; the parts of every scorer make the test set's metrics.
struct CtrScorer {
    model: CtrLearner,
    test: Vec<Batch>,
}

impl Scorer for CtrScorer {
    type Part = (Vec<f32>, Vec<f32>);
    type Score = Metrics;
    type Error = Error;

    fn score(&mut self, dense: &[f32]) -> Result<Self::Part> {
        self.model.dense_params().load_from(dense)?;
        self.model.predict_all(&self.test)
    }

    fn combine(parts: Vec<Self::Part>) -> Result<Metrics> {
        let (predictions, labels): (Vec<Vec<f32>>, Vec<Vec<f32>>) = parts.into_iter().unzip();
        Ok(evaluate(&predictions.concat(), &labels.concat()))
    }
}

/// Test rows a scorer takes at least: below, another scorer costs more
/// than it saves.
const MIN_ROWS_PER_SCORER: usize = 2048;

/// Rows a scorer predicts at once: small enough that a DLRM's activations
/// (some 20 MB at this size) stay near its core's cache. On 2 cores, 2,048
/// scored the same 500k rows 10–15% faster than 8,192.
const SCORE_BATCH: usize = 2048;

/// `train.score_threads` scorers, or one per core this process may use (the
/// machine's cores shared by the job's processes), each with a model on
/// `table` and its part of the `test` rows, in batches of at most
/// [`SCORE_BATCH`].
fn scorers(
    (models, config): (&Models, &Config),
    table: &Table,
    test: Vec<Batch>,
    processes: usize,
) -> Result<Vec<CtrScorer>> {
    let threads = match config.train.score_threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from) / processes.max(1),
        threads => threads,
    };
    let rows: usize = test.iter().map(Batch::len).sum();
    let count = threads.min(rows.div_ceil(MIN_ROWS_PER_SCORER)).max(1);
    split_rows(test, count, SCORE_BATCH)?
        .into_iter()
        .map(|test| {
            let model =
                CtrLearner::with_table(models, &config.model, &config.optim, table.share(), None)?;
            Ok(CtrScorer { model, test })
        })
        .collect()
}

impl FinalModel {
    /// The model the training trainers' `replicas` (in order) make: the
    /// first one's, or their mean.
    fn of(self, replicas: Vec<Vec<f32>>) -> Vec<f32> {
        match self {
            FinalModel::EachReplica => replicas.into_iter().next().unwrap_or_default(),
            FinalModel::Mean => mean_replica(&replicas),
        }
    }
}

/// What a trainer joining an elastic run is built from: the models, and the
/// queue of batches every trainer takes from.
struct Joiners {
    models: Models,
    queue: Batches,
}

/// What a checkpoint reads while the trainers stand still, besides the
/// cluster's state: the table's arrays, its pushes, and under shared dealing
/// the chunks trained (read later, it would hold chunks trained after the
/// state, which a resumed run would then never train).
type Still = (Vec<(String, Vec<f32>)>, Pushes, Option<ChunkSet>);

/// The chunks trained, under shared dealing.
fn dealt(ledger: &Option<ChunkLedger>) -> Option<ChunkSet> {
    ledger.as_ref().map(ChunkLedger::snapshot)
}

/// Where a run's checkpoints go, and what each keeps besides the state.
struct Saver {
    store: CheckpointStore,
    /// The configuration with absolute paths (a resumed run may start in
    /// another directory).
    config: Config,
    files: Vec<DataFile>,
    /// Shared dealing: what the pass has trained.
    ledger: Option<ChunkLedger>,
    /// The run's identity, in each checkpoint: only its own are pruned.
    run: String,
}

impl Saver {
    /// The saver of a run with `checkpoint.dir` set, in this process's
    /// directory: a resumed run goes on with its checkpoint's identity; a
    /// fresh one takes a new one and refuses a directory holding checkpoints.
    fn open(
        config: &Config,
        fabric: &dyn Fabric,
        data: &RunData,
        resumed: Option<&Checkpoint>,
    ) -> Result<Option<Self>> {
        let Some(dir) = &config.checkpoint.dir else {
            return Ok(None);
        };
        let store = CheckpointStore::open(&process_dir(dir, fabric), config.checkpoint.keep)?;
        let run = match resumed {
            Some(checkpoint) => checkpoint.run.clone(),
            None => {
                store.refuse_taken()?;
                new_run_id()
            }
        };
        Ok(Some(Self {
            store,
            config: with_absolute_paths(config)?,
            files: data.files.clone(),
            ledger: data.ledger.clone(),
            run,
        }))
    }

    /// Saves a checkpoint; `held`: how long the trainers stood still for it.
    fn save(
        &self,
        reason: Reason,
        cluster: shadowsync_actors::ClusterState,
        (table, pushes, dealt): Still,
        held: Duration,
        train_seconds: f64,
        history: &[EvalPoint],
    ) -> Result<Saved> {
        let writing = Instant::now();
        let checkpoint = Checkpoint {
            reason,
            run: self.run.clone(),
            config: self.config.clone(),
            cluster,
            table,
            pushes,
            train_seconds,
            history: history.to_vec(),
            data: self.files.clone(),
            dealt,
        };
        let saved = self.store.save(&checkpoint)?;
        tracing::info!(
            checkpoint = %saved.path.display(),
            examples = checkpoint.examples(),
            ?reason,
            trainers_held_ms = held.as_millis() as u64,
            write_ms = writing.elapsed().as_millis() as u64,
            "checkpoint written"
        );
        Ok(saved)
    }
}

/// A run in progress.
pub(super) struct Session<'a> {
    config: &'a Config,
    fabric: Arc<dyn Fabric>,
    cluster: Cluster<CtrLearner>,
    /// The cluster's events, for failed trainers.
    events: Receiver<Event>,
    /// Where live evaluations are published too, for the monitors.
    bus: EventBus,
    evaluator: Evaluator<CtrScorer>,
    /// Which model the evaluations score.
    which: FinalModel,
    /// The `[[elastic]]` steps still to come.
    elastic: VecDeque<ElasticStep>,
    joiners: Option<Joiners>,
    /// The shared embedding table (or this process's shard), for checkpoints.
    table: Table,
    table_sync: Option<TableSync>,
    saver: Option<Saver>,
    earlier: Earlier,
    started: Instant,
    history: Vec<EvalPoint>,
    /// Training seconds at each live evaluation still being scored, in
    /// request order (the evaluator answers in order).
    requested_at: VecDeque<f64>,
    next_eval: u64,
    checkpoints: Checkpoints,
    interrupted: bool,
    /// Whether this process told the others it takes no more checkpoints.
    withdrawn: bool,
}

impl<'a> Session<'a> {
    /// Starts `built`'s learners (sharing its table) on `fabric`'s cluster,
    /// with an evaluator over `data`'s test set (taken from it), going on
    /// from `resumed` if given.
    pub(super) fn start(
        fabric: Arc<dyn Fabric>,
        (config, registry): (&'a Config, &Registry),
        built: Built,
        data: &mut RunData,
        resumed: Option<&Checkpoint>,
        observer: &mut dyn Observer,
    ) -> Result<Self> {
        let Built {
            learners,
            table,
            joiner_queue,
        } = built;
        let test = std::mem::take(&mut data.test_batches);
        let saver = Saver::open(config, fabric.as_ref(), data, resumed)?;
        let table_sync = start_table_sync(&fabric, config, registry, &table)?;
        let scorers = scorers(
            (registry.models(), config),
            &table,
            test,
            fabric.processes(),
        )?;
        let evaluator = Evaluator::start(scorers)?;
        let cluster_config = cluster_config(config, registry, saver.is_some());
        // Subscribed before the start: a trainer failing at once is seen.
        let events = cluster_config.events.subscribe();
        let observed = cluster_config.events.subscribe();
        let bus = cluster_config.events.clone();
        let mut builder = ClusterBuilder::new(cluster_config, learners).fabric(Arc::clone(&fabric));
        if let Some(checkpoint) = resumed {
            builder = builder.resume_from(checkpoint.cluster.clone());
        }
        for monitor in observer.monitors() {
            builder = builder.monitor(monitor);
        }
        let cluster = builder.start()?;
        observer.cluster_started(observed);
        let earlier = resumed.map_or_else(Earlier::default, |c| Earlier {
            train_seconds: c.train_seconds,
            history: c.history.clone(),
            examples: c.examples(),
        });
        let every = config.train.eval_every;
        Ok(Self {
            config,
            fabric,
            cluster,
            events,
            bus,
            evaluator,
            which: match config.sync.algorithm {
                Algorithm::None => FinalModel::EachReplica,
                _ => FinalModel::Mean,
            },
            elastic: config.elastic.iter().cloned().collect(),
            joiners: joiner_queue.map(|queue| Joiners {
                models: registry.models().clone(),
                queue,
            }),
            table,
            table_sync,
            saver,
            next_eval: (earlier.examples - earlier.examples % every.max(1)).saturating_add(every),
            history: earlier.history.clone(),
            earlier,
            started: Instant::now(),
            requested_at: VecDeque::new(),
            checkpoints: Checkpoints::default(),
            interrupted: false,
            withdrawn: false,
        })
    }

    /// Training seconds so far, the earlier runs' included.
    fn train_seconds(&self) -> f64 {
        self.earlier.train_seconds + self.started.elapsed().as_secs_f64()
    }

    /// Watches the run until every trainer is done (see the module doc). Once
    /// the cluster is stopped (an interrupt, a failure, a monitor), `data` is
    /// halted: a trainer waiting for a batch must not wait on one that stopped.
    pub(super) fn supervise(
        &mut self,
        observer: &mut dyn Observer,
        total: Option<u64>,
        data: &PipelineHalt,
    ) -> Result<()> {
        observer.started(total);
        loop {
            self.checkpoint_when_parked(observer);
            if !self.interrupted && observer.interrupted() {
                self.interrupted = true;
                self.cluster.stop();
            }
            self.stop_on_failure()?;
            if self.cluster.stopped() {
                data.halt();
                self.withdraw();
            }
            let stats = self.cluster.stats();
            let examples: u64 = stats.iter().map(|s| s.examples).sum();
            observer.progressed(examples);
            let done = self.evaluator.finished();
            self.record_live(done, observer)?;
            let training = !stats.iter().all(|s| s.finished);
            if !training {
                self.withdraw();
                return Ok(());
            }
            self.change_trainers()?;
            self.evaluate_live(examples)?;
        }
    }

    /// The trainers' steps in all.
    fn steps(&self) -> u64 {
        self.cluster.stats().iter().map(|s| s.steps).sum()
    }

    /// Whether an `[[elastic]]` step is due.
    fn change_due(&self) -> bool {
        (self.elastic.front()).is_some_and(|step| step.at_step <= self.steps())
    }

    /// Makes the `[[elastic]]` steps that are due: trainers join (built on
    /// the shared table, taking from the one queue of batches) or leave. A
    /// trainer that has finished its data already has nothing left to leave.
    fn change_trainers(&mut self) -> Result<()> {
        while self.change_due() {
            let Some(step) = self.elastic.pop_front() else {
                break;
            };
            let steps = self.steps();
            if let Some(trainer) = step.remove {
                match self.cluster.remove_trainer(trainer) {
                    Ok(()) => tracing::info!(trainer, steps, "trainer removed"),
                    Err(_) if self.cluster.stats()[trainer].finished => {
                        tracing::info!(trainer, "trainer to remove had finished its data")
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if step.add > 0 {
                let joiners = self.joiners.as_ref().ok_or(RuntimeError::Internal(
                    "an elastic run without its queue of batches",
                ))?;
                let learners = (0..step.add)
                    .map(|_| {
                        CtrLearner::with_table(
                            &joiners.models,
                            &self.config.model,
                            &self.config.optim,
                            self.table.share(),
                            Some(joiners.queue.clone()),
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                let trainers = self.cluster.add_trainers(learners)?;
                tracing::info!(?trainers, steps, "trainers added");
            }
        }
        Ok(())
    }

    /// This process's trainers are done or stopping: it comes to no more
    /// checkpoints, and the others must not wait for it at one.
    fn withdraw(&mut self) {
        if !std::mem::replace(&mut self.withdrawn, true) {
            self.fabric.withdraw();
        }
    }

    /// Waits a progress tick, and saves a checkpoint if the trainers parked
    /// for one meanwhile (they wait for it: they are looked for more often).
    /// Not once the cluster is stopped: its trainers are ending, parked or
    /// not, and [`Session::end`] saves the state they end in.
    ///
    /// A parked trainer has nothing in flight: its pushes to the rows of
    /// other processes are applied ([`Learner::settle`]). Across processes
    /// the checkpoint is the job's: every process's trainers park at the
    /// same step, and the processes agree twice ([`Fabric::agree`]): all
    /// parked before any reads its shard of the rows (so that every push
    /// sent before the checkpoint is in it, once), and all read before any
    /// trainer goes on (so that none sent after it is). A process that will
    /// not come to it (its trainers done or stopping) makes the others skip it.
    fn checkpoint_when_parked(&mut self, observer: &mut dyn Observer) {
        let tick = Instant::now();
        let parked = || self.saver.is_some() && self.cluster.parked();
        while tick.elapsed() < PROGRESS_EVERY && !parked() && !self.change_due() {
            std::thread::sleep(PARKED_EVERY);
        }
        let stopped = self.cluster.stopped();
        let Some(saver) = self
            .saver
            .as_ref()
            .filter(|_| self.cluster.parked() && !stopped)
        else {
            return;
        };
        let holding = Instant::now();
        // The step the trainers parked at, the same in every process.
        let step = self.cluster.stats().iter().map(|s| s.steps).max();
        let point = 2 * step.unwrap_or(0);
        let (fabric, table, ledger) = (&self.fabric, &self.table, &saver.ledger);
        let read = || -> Result<Option<_>> {
            if !fabric.agree(point)? {
                return Ok(None);
            }
            let state = (table.arrays()?, table.pushes(), dealt(ledger));
            Ok(fabric.agree(point + 1)?.then_some(state))
        };
        let saved = match self.cluster.checkpoint(read) {
            Ok((_, Ok(None))) => {
                tracing::info!(
                    step,
                    "checkpoint skipped: another process will not come to it"
                );
                return;
            }
            Ok((state, Ok(Some(table)))) => {
                let held = holding.elapsed();
                let seconds = self.train_seconds();
                saver.save(Reason::Periodic, state, table, held, seconds, &self.history)
            }
            Ok((_, Err(e))) => Err(e),
            Err(e) => Err(e.into()),
        };
        note_checkpoint(saved, &mut self.checkpoints, observer);
    }

    /// Stops the run when a trainer failed. Across processes it is an error
    /// at once: the others cannot finish the pass without this one's shards,
    /// and its exit ends the job.
    fn stop_on_failure(&mut self) -> Result<()> {
        let failed = self.events.try_iter().find_map(|e| match e {
            Event::TrainerFailed { trainer, error } => {
                Some(RuntimeError::TrainerFailed { trainer, error })
            }
            _ => None,
        });
        if let Some(failure) = failed {
            self.cluster.stop(); // a failed shard ends the run, as one trainer would
            if self.fabric.processes() > 1 {
                return Err(Error::Runtime(failure));
            }
        }
        Ok(())
    }

    /// Asks for a live evaluation when `examples` passed the next one's
    /// mark; one at a time: a slow one delays the next rather than queueing
    /// them up.
    fn evaluate_live(&mut self, examples: u64) -> Result<()> {
        let every = self.config.train.eval_every;
        if every > 0 && examples >= self.next_eval && self.evaluator.pending() == 0 {
            self.next_eval = (examples - examples % every).saturating_add(every);
            let model = self.which.of(self.cluster.replicas()?);
            self.evaluator.request(model, examples)?;
            self.requested_at.push_back(self.train_seconds());
        }
        Ok(())
    }

    /// Hands finished live evaluations to the history and the observer.
    fn record_live(
        &mut self,
        done: Vec<Scored<CtrScorer>>,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        for evaluation in done {
            let train_seconds = self.requested_at.pop_front().unwrap_or_default();
            let point = EvalPoint {
                examples: evaluation.tag,
                train_seconds,
                metrics: metrics_of(evaluation)?,
            };
            observer.evaluated(&point);
            let m = &point.metrics;
            self.bus.publish(Event::Evaluated {
                examples: point.examples,
                metrics: [("ne", m.ne), ("auc", m.auc), ("logloss", m.logloss)]
                    .map(|(name, value)| (name.to_string(), value))
                    .to_vec(),
            });
            self.history.push(point);
        }
        Ok(())
    }

    /// Waits for the cluster, saves the state as it ended (unless a trainer
    /// failed: the last checkpoint stays the one to resume from then) and
    /// scores the final model: EASGD's centre, the mean of the replicas (of
    /// the whole job), or under `none` each replica.
    pub(super) fn end(mut self, observer: &mut dyn Observer) -> Result<Ended> {
        let outcome = self.cluster.wait()?;
        let table_sync = self.table_sync.take().map(TableSync::finish).transpose()?;
        let done = self.evaluator.wait_all()?;
        self.record_live(done, observer)?;
        if let (Some(saver), true) = (&self.saver, outcome.report.errors.is_empty()) {
            let reason = if self.interrupted {
                Reason::Interrupted
            } else {
                Reason::End
            };
            let seconds = self.train_seconds();
            let saved = outcome
                .state(self.config.train.workers)
                .map_err(Error::from)
                .and_then(|state| {
                    let table = (
                        self.table.arrays()?,
                        self.table.pushes(),
                        dealt(&saver.ledger),
                    );
                    saver.save(reason, state, table, Duration::ZERO, seconds, &self.history)
                });
            note_checkpoint(saved, &mut self.checkpoints, observer);
        }
        // The whole job's examples (this process's, in one).
        let mut examples = [outcome.report.examples];
        self.fabric.sum(&mut examples)?;
        let scoring = Instant::now();
        let Final {
            metrics,
            replicas: replica_metrics,
            consensus_distance,
        } = self.final_metrics(outcome.center, examples[0])?;
        let scoring_seconds = scoring.elapsed().as_secs_f64();
        let embeddings = match &self.table {
            Table::Sharded(sharded) => {
                // Every process has read what it needs from the others' shards.
                self.fabric.rendezvous()?;
                Some(sharded.traffic())
            }
            Table::Local(_) => None,
        };
        // Every update is in: the pushes applied, the last merge done.
        let fabric = self.fabric.as_ref();
        let row_audit = (self.table.audit(fabric)?)
            .map(|audit| audit.over_job(fabric))
            .transpose()?;
        Ok(Ended {
            cluster: outcome.report,
            table_sync,
            embeddings,
            row_audit,
            metrics,
            replica_metrics,
            consensus_distance,
            history: self.history,
            earlier_seconds: self.earlier.train_seconds,
            scoring_seconds,
            checkpoints: self.checkpoints,
            interrupted: self.interrupted,
        })
    }

    /// The final figures: each replica scored on its own (of every
    /// process; unless `train.score_replicas` is off), how far apart they
    /// are, and the final model — EASGD's centre, the replicas' mean, or
    /// under `none` (independent models, whose mean would mix unrelated
    /// parameters) the mean of their metrics. Every model is queued at once,
    /// so that every scorer is busy until the last.
    fn final_metrics(&mut self, center: Option<Vec<f32>>, examples: u64) -> Result<Final> {
        let each = self.cluster.replicas()?;
        let mut mean = mean_replica(&each);
        self.fabric.average(&mut mean)?;
        let mut distance = [spread_around(&each, &mean) as f32];
        self.fabric.average(&mut distance)?;
        let evaluator = &mut self.evaluator;
        let final_model = match (center, self.which) {
            (Some(center), _) => Some(center),
            (None, FinalModel::Mean) => Some(mean),
            (None, FinalModel::EachReplica) => None,
        };
        let score_each = self.config.train.score_replicas || final_model.is_none();
        let asked = usize::from(final_model.is_some());
        if let Some(model) = final_model {
            evaluator.request(model, examples)?;
        }
        if score_each {
            for dense in each {
                evaluator.request(dense, examples)?;
            }
        }
        let mut scored = evaluator
            .wait_all()?
            .into_iter()
            .map(metrics_of)
            .collect::<Result<Vec<_>>>()?;
        let mine = scored.split_off(asked);
        let replicas = crate::distributed::every_process_metrics(self.fabric.as_ref(), mine)?;
        let metrics = match scored.pop() {
            Some(metrics) => metrics,
            None => Metrics::mean(&replicas)
                .ok_or_else(|| Error::config("train.trainers", "must be at least 1"))?,
        };
        Ok(Final {
            metrics,
            replicas,
            consensus_distance: f64::from(distance[0]),
        })
    }
}

/// What a run's learners are built into (see `build_learners`): the
/// learners, the embedding table they share, and the batches of the trainers
/// an `[[elastic]]` plan adds.
pub(super) struct Built {
    pub learners: Vec<CtrLearner>,
    pub table: Table,
    pub joiner_queue: Option<Batches>,
}

/// Merges a table kept whole in each of several processes every
/// `train.table_sync_ms`; `None` for one process or a sharded table.
fn start_table_sync(
    fabric: &Arc<dyn Fabric>,
    config: &Config,
    registry: &Registry,
    table: &Table,
) -> Result<Option<TableSync>> {
    let Table::Local(local) = table else {
        return Ok(None);
    };
    if fabric.processes() == 1 {
        return Ok(None);
    }
    let every = Duration::from_millis(config.train.table_sync_ms);
    let codec = registry.row_codec(&config.sync)?;
    let sync = TableSync::start(Arc::clone(fabric), local.share(), every, codec)?;
    Ok(Some(sync))
}

/// The runtime's settings for `config`'s run, with `registry`'s names;
/// periodic checkpoints only when the run keeps them.
fn cluster_config(config: &Config, registry: &Registry, checkpointing: bool) -> ClusterConfig {
    let mut cluster = ClusterConfig::default();
    cluster.sync = config.sync.clone();
    cluster.intra_op_threads = config.train.threads;
    cluster.consensus_every_ms = config.train.consensus_every_ms;
    cluster.workers = config.train.workers;
    cluster.faults = config.faults.clone();
    cluster.stragglers = config.stragglers.clone();
    if checkpointing {
        cluster.checkpoint_every = config.checkpoint.every_steps;
    }
    cluster.elastic_capacity = config.elastic_capacity();
    cluster.rules = registry.rules().clone();
    cluster.schedules = registry.schedules().clone();
    cluster.codecs = registry.codecs().clone();
    cluster
}

/// A session's final figures (see [`Session::final_metrics`]).
struct Final {
    metrics: Metrics,
    replicas: Vec<Metrics>,
    consensus_distance: f64,
}

/// The metrics of a finished evaluation.
fn metrics_of(evaluation: Scored<CtrScorer>) -> Result<Metrics> {
    evaluation.score.map_err(|e| Error::Evaluation(Box::new(e)))
}

/// Notes a checkpoint written, or why it could not be: the run goes on, as a
/// failed checkpoint must not cost what was trained.
fn note_checkpoint(
    saved: Result<Saved>,
    checkpoints: &mut Checkpoints,
    observer: &mut dyn Observer,
) {
    match saved {
        Ok(saved) => {
            if let Some(e) = saved.unpruned {
                tracing::warn!(error = %e, "older checkpoints not removed; training goes on");
                checkpoints.unpruned.push(e.to_string());
            }
            observer.checkpointed(&saved.path);
            checkpoints.last = Some(saved.path);
        }
        Err(e) => {
            tracing::warn!(error = %e, "checkpoint not written; training goes on");
            checkpoints.errors.push(e.to_string());
        }
    }
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
