//! The whole system, started from a config; a cloneable [`Cluster`] handle is
//! the public API.
//!
//! [`Cluster::start`] takes one learner per trainer and builds:
//! * a `TrainerActor` per trainer, each on its own arbiter thread — or, with
//!   `workers = W`, W of them per trainer stepping one dense replica Hogwild-style;
//! * for `shadow-*`, one `ShadowHubActor` running every trainer's rounds on one
//!   thread (a job of one process, a rule that averages a group), or else a
//!   `ShadowActor` beside each trainer, on its own thread
//!   (`sync.shadow_threads`);
//! * for `*-easgd`, the parameter server: one actor per shard of the centre
//!   ([`ServerClient`]; across processes, each serves its share of the shards);
//! * the `GroupCoordinator` that every sync peer asks for its group each round
//!   (following the [`GroupPlan`] of the configured DS-Sync schedule);
//! * the transport between trainers, with the simulated link: a [`mesh`](crate::sync::mesh) in
//!   this process, or across the processes of a job through a [`Fabric`]
//!   ([`Cluster::start_on`]; the trainers of this process are then numbered
//!   across the job, groups span processes, and syncing ends when every
//!   process agrees it does);
//! * a monitor thread sampling the consensus distance of the replicas.
//!
//! Shutdown: syncing ends when [`Cluster::stop`] is called or the trainers run
//! out of data — for the foreground algorithms when the first trainer does (they
//! move in lockstep, and a finished trainer can no longer take part in a round);
//! for the shadow ones when the last trainer does: the shadow loop of a finished
//! trainer keeps averaging its final parameters, so the trainers still running
//! never train unsynchronized. Pending collectives then return at once, so
//! nothing can hang, and [`Cluster::wait`] hands back the learners with a
//! [`ClusterReport`].

use crate::checkpoint::{read_peer, ClusterState};
use crate::coordinator::{CoordinatorClient, GroupCoordinator};
use crate::events::{Event, EventBus};
use crate::faults::Fault;
use crate::hogwild::ParamAlias;
use crate::monitor::{ClusterControl, Monitor, Watcher};
use crate::recovery::RecoveryPoint;
use crate::shadow::{Pacing, ShadowActor, ShadowHub, ShadowHubActor, ShadowLoop};
use crate::stats::{TrainerCounters, TrainerStats};
use crate::sync::{
    check_partitions, Algorithm, Endpoint, Exchange, Fabric, GroupPlan, GroupSchedule, InProcess,
    LinkModel, ModelAveraging, PeerState, RuleContext, Rules, Schedule, ScheduleContext, Schedules,
    ServerClient, ShadowThreads, SharedPeer, SyncConfig, SyncPeer, SyncRule,
};
use crate::system::spawn_system;
use crate::trainer::{Control, Foreground, Parking, TrainerActor, TrainerCore, TrainerExit};
use crate::{with_causes, Error, Learner, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, Receiver, Sender};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runtime settings besides the sync algorithm.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Synchronization.
    pub sync: SyncConfig,
    /// Training time between two looks at a trainer's mailbox, in milliseconds.
    pub chunk_ms: u64,
    /// Milliseconds between two consensus-distance samples (0 = none).
    pub consensus_every_ms: u64,
    /// libtorch intra-op threads of each trainer.
    pub intra_op_threads: usize,
    /// Hogwild worker threads per trainer, stepping one dense replica (with
    /// `none` and `shadow-*` only).
    pub workers: usize,
    /// Faults to inject, for testing that they are contained (none normally).
    pub faults: Vec<Fault>,
    /// Trainer steps between two points where every trainer parks so that
    /// [`Cluster::checkpoint`] can save the whole state (0 = never); rounded
    /// up to a multiple of a foreground algorithm's sync period.
    pub checkpoint_every: u64,
    /// Where the cluster publishes its [`Event`]s. Subscribe to it before
    /// starting to receive every event from the first step on
    /// ([`Cluster::subscribe`] receives those published after it is called).
    #[serde(skip)]
    pub events: EventBus,
    /// The sync rules `sync.algorithm` may name: the built-in ones, and
    /// those of one's own added with [`Rules::with`].
    #[serde(skip)]
    pub rules: Rules,
    /// The group schedules of one's own `sync.schedule` may name, added with
    /// [`Schedules::with`] (the built-in ones need no registering).
    #[serde(skip)]
    pub schedules: Schedules,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            sync: SyncConfig::default(),
            chunk_ms: 20,
            consensus_every_ms: 500,
            intra_op_threads: 1,
            workers: 1,
            faults: Vec::new(),
            checkpoint_every: 0,
            events: EventBus::default(),
            rules: Rules::default(),
            schedules: Schedules::default(),
        }
    }
}

/// The spread of the replicas at one moment: mean over trainers of ‖wᵢ − w̄‖².
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConsensusPoint {
    /// Seconds since the start.
    pub seconds: f64,
    /// Consensus distance.
    pub distance: f64,
}

/// What a cluster run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterReport {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Number of trainers.
    pub trainers: usize,
    /// Group size.
    pub group_size: usize,
    /// Wall-clock seconds from start to the last trainer's end.
    pub seconds: f64,
    /// Examples trained, all trainers (with those of a run it resumes).
    pub examples: u64,
    /// Examples trained by this run per second.
    pub examples_per_sec: f64,
    /// Per trainer.
    pub trainer_stats: Vec<TrainerStats>,
    /// Consensus distance over time.
    pub consensus: Vec<ConsensusPoint>,
    /// Parameter bytes sent between trainers.
    pub bytes_sent: u64,
    /// CPU seconds EASGD's server shards in this process spent serving.
    #[serde(default)]
    pub server_cpu_seconds: f64,
    /// Errors of trainers or sync loops, if any.
    pub errors: Vec<String>,
    /// Events that slow subscribers missed.
    pub events_dropped: u64,
}

impl ClusterReport {
    /// The CPU time the shadow loops' rounds and EASGD's server shards took
    /// against the trainers' own; `None` where no CPU time was measured.
    pub fn sync_cpu_share(&self) -> Option<f64> {
        let stats = &self.trainer_stats;
        let training: f64 = stats.iter().map(|s| s.training_cpu_seconds).sum();
        let sync: f64 = stats.iter().map(|s| s.sync_cpu_seconds).sum();
        (training > 0.0).then(|| (sync + self.server_cpu_seconds) / training)
    }
}

/// The learners as trained, and the report.
#[derive(Debug)]
pub struct ClusterOutcome<L> {
    /// The learners in the order they were given (trainer by trainer, a
    /// trainer's workers consecutive).
    pub learners: Vec<L>,
    /// EASGD's centre copy, for `*-easgd`.
    pub center: Option<Vec<f32>>,
    /// Each trainer's sync peer's state as it ended.
    pub peers: Vec<PeerState>,
    /// The figures.
    pub report: ClusterReport,
}

impl<L: Learner> ClusterOutcome<L> {
    /// The trained model's dense parameters: EASGD's centre, or else the mean
    /// of the trainers' replicas (of this process's, across processes).
    pub fn model(&self) -> Result<Vec<f32>> {
        if let Some(center) = &self.center {
            return Ok(center.clone());
        }
        let workers = (self.learners.len() / self.report.trainers.max(1)).max(1);
        let replicas: Vec<&L> = self.learners.iter().step_by(workers).collect();
        let len = replicas.first().map_or(0, |l| l.dense_params().numel());
        let (mut mean, mut replica) = (vec![0f32; len], vec![0f32; len]);
        for learner in &replicas {
            learner.dense_params().copy_to(&mut replica)?;
            let share = 1.0 / replicas.len() as f32;
            mean.iter_mut()
                .zip(&replica)
                .for_each(|(m, r)| *m += r * share);
        }
        Ok(mean)
    }
}

pub(crate) struct Running<L: Learner> {
    pub(crate) trainers: Vec<Addr<TrainerActor<L>>>,
    trainer_exits: Receiver<TrainerExit<L>>,
    shadow_exits: Receiver<(usize, Option<Error>)>,
    system: System,
    system_thread: JoinHandle<()>,
    monitor: Option<JoinHandle<Vec<ConsensusPoint>>>,
}

pub(crate) struct Inner<L: Learner> {
    config: ClusterConfig,
    group_size: usize,
    pub(crate) counters: Vec<Arc<TrainerCounters>>,
    stop: Arc<AtomicBool>,
    events: EventBus,
    pub(crate) server: Option<ServerClient>,
    bytes_sent: Vec<Arc<AtomicU64>>,
    started: Instant,
    fabric: Arc<dyn Fabric>,
    pub(crate) running: Mutex<Option<Running<L>>>,
    /// Where trainers park for checkpoints.
    pub(crate) parking: Parking,
    /// Each trainer's replica, read for checkpoints.
    pub(crate) replicas: Vec<ParamAlias>,
    /// Each trainer's sync peer's state, read for checkpoints.
    pub(crate) peers: Vec<SharedPeer>,
    /// Examples trained before this cluster started (by the run it resumes).
    resumed_examples: u64,
    /// What the trainers are told (by the handle and the monitors).
    control: ClusterControl,
    /// The monitors' and actors' threads, and the flag that ends them.
    watchers: Mutex<Vec<JoinHandle<()>>>,
    ended: Arc<AtomicBool>,
}

/// A cloneable handle on a running cluster.
pub struct Cluster<L: Learner> {
    pub(crate) inner: Arc<Inner<L>>,
}

impl<L: Learner> Clone for Cluster<L> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<L: Learner> Cluster<L> {
    /// Starts training `learners` under `config`: one per trainer, or with
    /// `config.workers = W`, W consecutive learners per trainer whose dense
    /// parameters are one buffer (built with [`FlatParams::adopt_shared`](crate::FlatParams::adopt_shared)).
    /// Every replica starts from the first one's parameters. (The shorthand
    /// of [`ClusterBuilder`] with nothing else.)
    pub fn start(config: ClusterConfig, learners: Vec<L>) -> Result<Self> {
        ClusterBuilder::new(config, learners).start()
    }

    /// Starts this process's part of a job spread over `fabric`'s processes
    /// (see [`ClusterBuilder::fabric`]), from `resumed` if given.
    pub fn start_on(
        fabric: Arc<dyn Fabric>,
        config: ClusterConfig,
        learners: Vec<L>,
        resumed: Option<&ClusterState>,
    ) -> Result<Self> {
        let builder = ClusterBuilder::new(config, learners).fabric(fabric);
        match resumed {
            Some(state) => builder.resume_from(state.clone()),
            None => builder,
        }
        .start()
    }

    /// Starts training `learners` from `state` (see
    /// [`ClusterBuilder::resume_from`]).
    pub fn start_from(
        config: ClusterConfig,
        learners: Vec<L>,
        state: &ClusterState,
    ) -> Result<Self> {
        ClusterBuilder::new(config, learners)
            .resume_from(state.clone())
            .start()
    }

    fn launch(
        fabric: Arc<dyn Fabric>,
        config: ClusterConfig,
        mut learners: Vec<L>,
        resumed: Option<&ClusterState>,
        watchers: Vec<Watcher>,
    ) -> Result<Self> {
        // Fed from the first step: subscribed before anything starts.
        let feeds: Vec<_> = watchers.iter().map(|_| config.events.subscribe()).collect();
        let sync = &config.sync;
        let mut wiring = Wiring::prepare(&fabric, &config, &mut learners, resumed)?;
        let (system, system_thread, (coordinator, server)) = start_services(
            &config,
            &fabric,
            Arc::clone(&wiring.plan),
            &wiring.initial,
            wiring.centre,
        )?;
        // On a failure from here on, the system thread is told to end (and does).
        let stop_system = |e: Error| {
            system.stop();
            e
        };
        let server = server.transpose().map_err(stop_system)?;
        let groups = CoordinatorClient::new(coordinator, &*wiring.plan);
        let Parts {
            cores,
            shadows,
            replicas: monitor_replicas,
            peers,
        } = wiring
            .parts(learners, &groups, &config, &server, resumed)
            .map_err(stop_system)?;
        let parking = parking_of(&config, &wiring.counters);
        let (trainer_exit_tx, trainer_exits) = bounded(cores.len());
        let (shadow_exit_tx, shadow_exits) = bounded(wiring.trainers);
        let actors = Actors {
            shadow: sync.algorithm.is_shadow(),
            chunk: Duration::from_millis(config.chunk_ms.max(1)),
            threads: config.intra_op_threads.max(1),
            pacing: Pacing {
                min_interval: Duration::from_secs_f64(sync.min_interval_ms / 1000.0),
                min_steps: sync.min_steps,
                max_cpu_share: sync.max_cpu_share,
            },
            hub_link: (sync.shadow_threads == ShadowThreads::PerProcess && fabric.processes() == 1)
                .then_some(sync.link),
            events: config.events.clone(),
            stop: Arc::clone(&wiring.stop),
            parking: parking.clone(),
            fabric: Arc::clone(&fabric),
            trainer_exits: trainer_exit_tx,
            shadow_exits: shadow_exit_tx,
        };
        let addrs = start_actors(&system, cores, shadows, actors).map_err(stop_system)?;
        let started = Instant::now();
        let monitor = start_monitor(monitor_replicas, &config, &wiring.stop, started);
        let control = ClusterControl::new(Arc::clone(&wiring.stop), Arc::clone(&fabric));
        control.connect(addrs.iter().map(|a| a.clone().recipient()).collect());
        let ended = Arc::new(AtomicBool::new(false));
        let watchers = spawn_watchers(watchers, feeds, &control, &ended)?;
        tracing::info!(
            trainers = wiring.trainers,
            job_trainers = wiring.trainers * fabric.processes(),
            workers = config.workers.max(1),
            algorithm = %config.sync.algorithm,
            group_size = wiring.plan.group_size(),
            "cluster started"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                group_size: wiring.plan.group_size(),
                counters: wiring.counters,
                stop: wiring.stop,
                events: config.events.clone(),
                config,
                fabric,
                server,
                bytes_sent: wiring.bytes_sent,
                started,
                parking,
                replicas: wiring.replicas,
                peers,
                resumed_examples: resumed
                    .map_or(0, |state| state.trainers.iter().map(|t| t.examples).sum()),
                control,
                watchers: Mutex::new(watchers),
                ended,
                running: Mutex::new(Some(Running {
                    trainers: addrs,
                    trainer_exits,
                    shadow_exits,
                    system,
                    system_thread,
                    monitor,
                })),
            }),
        })
    }

    /// Number of trainers.
    pub fn trainers(&self) -> usize {
        self.inner.counters.len()
    }

    /// Every trainer's figures so far.
    pub fn stats(&self) -> Vec<TrainerStats> {
        self.inner.counters.iter().map(|c| c.stats()).collect()
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> Receiver<Event> {
        self.inner.events.subscribe()
    }

    pub(crate) fn control(&self, message: Control) {
        self.inner.control.send(message);
    }

    /// What the trainers can be told, to hand to others.
    pub fn control_handle(&self) -> ClusterControl {
        self.inner.control.clone()
    }

    /// Pauses every trainer (within one chunk of steps).
    pub fn pause(&self) {
        self.control(Control::Pause);
    }

    /// Resumes every trainer.
    pub fn resume(&self) {
        self.control(Control::Resume);
    }

    /// Sets every trainer's learning rate.
    pub fn set_learning_rate(&self, lr: f64) {
        self.control(Control::SetLearningRate(lr));
    }

    /// Ends syncing and asks every trainer to stop; [`Cluster::wait`] then
    /// returns promptly.
    pub fn stop(&self) {
        self.inner.control.stop();
    }

    /// Whether [`Cluster::stop`] (or a monitor's [`ClusterControl::stop`]) was
    /// called.
    pub fn stopped(&self) -> bool {
        self.inner.control.stopped()
    }

    /// Waits for every trainer (and sync loop) to end; returns the learners and
    /// the report. A second call (from another handle) gets an error.
    pub fn wait(&self) -> Result<ClusterOutcome<L>> {
        let running = self
            .inner
            .running
            .lock()
            .map_err(|_| Error::Panicked("cluster's supervisor"))?
            .take()
            .ok_or(Error::AlreadyWaited)?;
        let n = self.trainers();
        let mut learners: Vec<Option<L>> = running.trainers.iter().map(|_| None).collect();
        let mut errors = Vec::new();
        for _ in 0..learners.len() {
            let exit = running
                .trainer_exits
                .recv()
                .map_err(|_| Error::LearnerLost)?;
            if let Some(e) = exit.error {
                errors.push(format!("trainer {}: {e}", exit.trainer));
            }
            if let Some(slot) = learners.get_mut(exit.worker) {
                *slot = Some(exit.learner);
            }
        }
        let seconds = self.inner.started.elapsed().as_secs_f64();
        // Other processes' trainers may still be training: this process's
        // sync loops keep serving them until all are done.
        if let Err(e) = self.inner.fabric.rendezvous() {
            errors.push(format!("waiting for the other processes: {e}"));
        }
        self.inner.stop.store(true, Ordering::Relaxed);
        if self.inner.config.sync.algorithm.is_shadow() {
            errors.extend(shadow_errors(&running.shadow_exits, n));
        }
        let consensus = running
            .monitor
            .and_then(|m| m.join().ok())
            .unwrap_or_default();
        // The centre lives in the server's shard actors: read it before they go.
        let center = self
            .inner
            .server
            .as_ref()
            .map(ServerClient::center)
            .transpose();
        // Other processes may still be reading the shards served here.
        if self.inner.server.is_some() {
            if let Err(e) = self.inner.fabric.rendezvous() {
                errors.push(format!(
                    "waiting for the other processes to read the centre: {e}"
                ));
            }
        }
        running.system.stop();
        let _ = running.system_thread.join();
        errors.extend(self.end_watchers());
        let center = center?;
        let trainer_stats = self.stats();
        let examples: u64 = trainer_stats.iter().map(|s| s.examples).sum();
        let trained_here = examples - self.inner.resumed_examples;
        let learners = learners
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or(Error::LearnerLost)?;
        Ok(ClusterOutcome {
            learners,
            center,
            peers: self.inner.peers.iter().map(read_peer).collect(),
            report: ClusterReport {
                algorithm: self.inner.config.sync.algorithm.clone(),
                trainers: n,
                group_size: self.inner.group_size,
                seconds,
                examples,
                examples_per_sec: trained_here as f64 / seconds.max(1e-9),
                trainer_stats,
                consensus,
                bytes_sent: self
                    .inner
                    .bytes_sent
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .sum(),
                server_cpu_seconds: self
                    .inner
                    .server
                    .as_ref()
                    .map_or(0.0, ServerClient::cpu_seconds),
                errors,
                events_dropped: self.inner.events.dropped(),
            },
        })
    }

    /// Lets the monitors see every event published until now, then waits
    /// for them to end; one error per monitor that panicked.
    fn end_watchers(&self) -> Vec<String> {
        self.inner.ended.store(true, Ordering::SeqCst);
        let watchers = std::mem::take(
            &mut *self
                .inner
                .watchers
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        watchers
            .into_iter()
            .filter_map(|w| w.join().is_err().then(|| "a monitor panicked".to_string()))
            .collect()
    }
}

/// Builds a [`Cluster`]: its learners and configuration, and where its
/// trainers live, the state it resumes from, and the components fed its
/// events, if any.
///
/// ```no_run
/// # use shadowsync_actors::{Cluster, ClusterBuilder, ClusterConfig, Learner};
/// # use shadowsync_actors::monitor::{ClusterControl, Monitor};
/// # use shadowsync_actors::events::Event;
/// /// Stops the run at the first trainer that fails.
/// struct StopOnFailure;
/// impl Monitor for StopOnFailure {
///     fn on_event(&mut self, event: &Event, control: &ClusterControl) {
///         if matches!(event, Event::TrainerFailed { .. }) {
///             control.stop();
///         }
///     }
/// }
/// # fn run<L: Learner>(learners: Vec<L>) -> shadowsync_actors::Result<()> {
/// let cluster = ClusterBuilder::new(ClusterConfig::default(), learners)
///     .monitor(StopOnFailure)
///     .start()?;
/// let outcome = cluster.wait()?;
/// # Ok(()) }
/// ```
pub struct ClusterBuilder<L: Learner> {
    config: ClusterConfig,
    learners: Vec<L>,
    fabric: Arc<dyn Fabric>,
    resumed: Option<ClusterState>,
    watchers: Vec<Watcher>,
}

impl<L: Learner> ClusterBuilder<L> {
    /// A cluster training `learners` under `config` in this process: one
    /// learner per trainer, or with `config.workers = W`, W consecutive
    /// learners per trainer whose dense parameters are one buffer (built with
    /// [`FlatParams::adopt_shared`](crate::FlatParams::adopt_shared)). Every
    /// replica starts from the first one's parameters.
    pub fn new(config: ClusterConfig, learners: Vec<L>) -> Self {
        Self {
            config,
            learners,
            fabric: Arc::new(InProcess),
            resumed: None,
            watchers: Vec::new(),
        }
    }

    /// This process's part of a job spread over `fabric`'s processes: the
    /// learners are its trainers (every process gives as many), numbered
    /// across the job; groups are formed over all the job's trainers. Syncing
    /// ends when every process's trainers are done (for a foreground
    /// algorithm, when the first trainer anywhere is). EASGD's centre shard
    /// `s` is served by process `s mod P`.
    pub fn fabric(mut self, fabric: Arc<dyn Fabric>) -> Self {
        self.fabric = fabric;
        self
    }

    /// Goes on from `state`, saved by [`Cluster::checkpoint`] of a cluster
    /// with the same trainers and workers: each replica, each learner's
    /// state, the trainers' counters, the sync peers' states and EASGD's
    /// centre are restored. (The learners' data must go on from the
    /// positions in `state`.)
    pub fn resume_from(mut self, state: ClusterState) -> Self {
        self.resumed = Some(state);
        self
    }

    /// Runs `monitor` beside the cluster (see [`crate::monitor`]).
    pub fn monitor(mut self, monitor: impl Monitor) -> Self {
        self.watchers.push(Watcher::Monitor(Box::new(monitor)));
        self
    }

    /// Sends every event to `actor` too.
    pub fn actor(mut self, actor: Recipient<Event>) -> Self {
        self.watchers.push(Watcher::Actor(actor));
        self
    }

    /// Starts the cluster.
    pub fn start(self) -> Result<Cluster<L>> {
        Cluster::launch(
            self.fabric,
            self.config,
            self.learners,
            self.resumed.as_ref(),
            self.watchers,
        )
    }
}

/// What a cluster is wired from, checked before any thread starts: the group
/// plan, the starting point, the replicas' aliases, the endpoints and each
/// trainer's sync rule.
struct Wiring {
    /// This process's trainers.
    trainers: usize,
    plan: Arc<dyn GroupSchedule>,
    initial: Vec<f32>,
    counters: Vec<Arc<TrainerCounters>>,
    replicas: Vec<ParamAlias>,
    stop: Arc<AtomicBool>,
    endpoints: Vec<Endpoint>,
    bytes_sent: Vec<Arc<AtomicU64>>,
    rules: Vec<Box<dyn SyncRule>>,
    /// Whether the rule syncs against a centre (EASGD's server shards).
    centre: bool,
}

impl Wiring {
    fn prepare<L: Learner>(
        fabric: &Arc<dyn Fabric>,
        config: &ClusterConfig,
        learners: &mut [L],
        resumed: Option<&ClusterState>,
    ) -> Result<Self> {
        let workers = config.workers.max(1);
        let sync = &config.sync;
        sync.validate()?;
        check_workers(learners, workers, &sync.algorithm)?;
        let trainers = learners.len() / workers;
        let plan = group_plan(config, trainers, trainers * fabric.processes())?;
        let (initial, counters) = starting_point(learners, workers, resumed)?;
        let replicas = learners
            .iter()
            .step_by(workers)
            .map(|l| ParamAlias::new(l.dense_params()))
            .collect::<Result<Vec<_>>>()?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut endpoints = fabric.endpoints(trainers, sync.link, Arc::clone(&stop))?;
        for endpoint in &mut endpoints {
            endpoint.set_timeout(sync.peer_timeout());
        }
        let bytes_sent = endpoints.iter().map(|e| e.bytes_counter()).collect();
        let rules = make_rules(config, &endpoints, &*plan, &initial)?;
        let centre = rules
            .first()
            .is_some_and(|r| matches!(r.exchange(), Exchange::Centre { .. }));
        Ok(Self {
            trainers,
            plan,
            initial,
            counters,
            replicas,
            stop,
            endpoints,
            bytes_sent,
            rules,
            centre,
        })
    }
}

impl Wiring {
    /// The trainers' cores (caught up with a resumed run's furthest one),
    /// their shadow loops and their sync peers (restored when resumed); takes
    /// the endpoints and the rules.
    fn parts<L: Learner>(
        &mut self,
        learners: Vec<L>,
        groups: &CoordinatorClient,
        config: &ClusterConfig,
        server: &Option<ServerClient>,
        resumed: Option<&ClusterState>,
    ) -> Result<Parts<L>> {
        let mut parts = build_parts(
            learners,
            &self.counters,
            std::mem::take(&mut self.endpoints),
            std::mem::take(&mut self.rules),
            groups,
            config,
            &self.initial,
            server,
        )?;
        if let Some(state) = resumed {
            state.restore_peers(&parts.peers, &config.sync.algorithm)?;
        }
        // A resumed foreground algorithm syncs again once every trainer is
        // past the furthest one.
        let catch_up = resumed.map_or(0, ClusterState::furthest_steps);
        parts.cores = std::mem::take(&mut parts.cores)
            .into_iter()
            .map(|core| core.catching_up_to(catch_up))
            .collect();
        Ok(parts)
    }
}

/// Waits for the `n` shadow loops to end; the errors they ended with, each
/// with its causes, for the report.
fn shadow_errors(exits: &Receiver<(usize, Option<Error>)>, n: usize) -> Vec<String> {
    exits
        .iter()
        .take(n)
        .filter_map(|(trainer, error)| {
            error.map(|e| format!("shadow sync of trainer {trainer}: {}", with_causes(&e)))
        })
        .collect()
}

/// Starts each watcher on its thread, fed by its subscription.
fn spawn_watchers(
    watchers: Vec<Watcher>,
    feeds: Vec<Receiver<Event>>,
    control: &ClusterControl,
    ended: &Arc<AtomicBool>,
) -> Result<Vec<JoinHandle<()>>> {
    watchers
        .into_iter()
        .zip(feeds)
        .map(|(watcher, feed)| watcher.spawn(feed, control.clone(), Arc::clone(ended)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|source| Error::Thread {
            thread: "monitor",
            source,
        })
}

/// Where a cluster's training starts: the initial dense parameters (the
/// first replica's, which every replica then takes, or the checkpoint's
/// centre or first replica), and each trainer's counters (resumed ones go on
/// from the checkpoint's).
fn starting_point<L: Learner>(
    learners: &mut [L],
    workers: usize,
    resumed: Option<&ClusterState>,
) -> Result<(Vec<f32>, Vec<Arc<TrainerCounters>>)> {
    let first = learners.first().ok_or_else(|| Error::Config {
        key: "trainers".into(),
        reason: "must be at least 1".into(),
    })?;
    let mut initial = vec![0.0; first.dense_params().numel()];
    let counters = match resumed {
        Some(state) => {
            state.restore(learners, workers)?;
            initial.copy_from_slice(state.center.as_deref().unwrap_or(&state.trainers[0].dense));
            state
                .trainers
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Arc::new(
                        TrainerCounters::with_workers(i, workers).resumed_from(t.steps, t.examples),
                    )
                })
                .collect()
        }
        None => {
            first.dense_params().copy_to(&mut initial)?;
            // Every replica starts from the same point.
            for learner in learners.iter().step_by(workers).skip(1) {
                learner.dense_params().load_from(&initial)?;
            }
            (0..learners.len() / workers)
                .map(|i| Arc::new(TrainerCounters::with_workers(i, workers)))
                .collect()
        }
    };
    Ok((initial, counters))
}

/// The groups of the job's `job_trainers` trainers (`n` in this process):
/// the plan of a built-in `sync.schedule` (whose hierarchical blocks are the
/// processes' trainers unless set), or a registered one's.
fn group_plan(
    config: &ClusterConfig,
    n: usize,
    job_trainers: usize,
) -> Result<Arc<dyn GroupSchedule>> {
    let sync = &config.sync;
    let plan: Arc<dyn GroupSchedule> = match &sync.schedule {
        Schedule::Registered(name) => {
            let context = ScheduleContext {
                trainers: job_trainers,
                per_process: n,
                config: sync,
            };
            config.schedules.make(name, &context)?
        }
        built_in => {
            let group_size = match (built_in, sync.group_size) {
                (Schedule::Hierarchical, 0) => n,
                _ => sync.group_size_for(job_trainers),
            };
            let plan = GroupPlan::new(built_in.clone(), job_trainers, group_size)?;
            Arc::new(plan.with_seed(sync.seed))
        }
    };
    check_partitions(&*plan, 64)?;
    Ok(plan)
}

/// Each of this process's trainers' sync rule (the mean for the algorithms
/// that name none: sync-sgd's gradients are averaged).
fn make_rules(
    config: &ClusterConfig,
    endpoints: &[Endpoint],
    plan: &dyn GroupSchedule,
    initial: &[f32],
) -> Result<Vec<Box<dyn SyncRule>>> {
    endpoints
        .iter()
        .map(|endpoint| match config.sync.algorithm.rule() {
            Some(name) => config.rules.make(
                name,
                &RuleContext {
                    trainer: endpoint.id(),
                    trainers: plan.trainers(),
                    group_size: plan.group_size(),
                    initial,
                    config: &config.sync,
                },
            ),
            None => Ok(Box::new(ModelAveraging) as Box<dyn SyncRule>),
        })
        .collect()
}

/// The thread sampling the replicas' consensus distance every
/// `config.consensus_every_ms` (none for 0).
fn start_monitor(
    replicas: Vec<ParamAlias>,
    config: &ClusterConfig,
    stop: &Arc<AtomicBool>,
    started: Instant,
) -> Option<JoinHandle<Vec<ConsensusPoint>>> {
    (config.consensus_every_ms > 0).then(|| {
        let every = Duration::from_millis(config.consensus_every_ms);
        let stop = Arc::clone(stop);
        std::thread::spawn(move || {
            tch::set_num_threads(1);
            sample_consensus(&replicas, every, &stop, started)
        })
    })
}

/// Where the trainers park for checkpoints: every `checkpoint_every` steps,
/// rounded up to a multiple of a foreground algorithm's sync period, first
/// at the first multiple after the slowest trainer's steps.
fn parking_of(config: &ClusterConfig, counters: &[Arc<TrainerCounters>]) -> Parking {
    let every = match (config.checkpoint_every, &config.sync.algorithm) {
        (0, _) => 0,
        (every, Algorithm::Foreground { every: k, .. }) => every.div_ceil(*k) * k,
        (every, _) => every,
    };
    let slowest = counters.iter().map(|c| c.steps()).min().unwrap_or(0);
    Parking::new(every, slowest)
}

/// The actor system and its services, each on an arbiter of its own: the
/// group coordinator following `plan` and, for a rule that meets a `centre`
/// (EASGD), the parameter server's shards starting from `initial` (behind
/// the simulated link in one process; between processes the network is real).
fn start_services(
    config: &ClusterConfig,
    fabric: &Arc<dyn Fabric>,
    plan: Arc<dyn GroupSchedule>,
    initial: &[f32],
    centre: bool,
) -> Result<(System, JoinHandle<()>, Services)> {
    let sync = &config.sync;
    let shards = sync.server_shards_for(plan.trainers(), fabric.processes());
    let (events, initial) = (config.events.clone(), initial.to_vec());
    let link = match fabric.processes() {
        1 => sync.link,
        _ => LinkModel::default(),
    };
    let faults = config.faults.clone();
    let (coordinator_events, coordinator_faults) = (events.clone(), faults.clone());
    let fabric = Arc::clone(fabric);
    spawn_system("shadowsync-system", move || {
        let coordinator = GroupCoordinator::start_in_arbiter(&Arbiter::new().handle(), move |_| {
            GroupCoordinator::new(plan, coordinator_events).with_faults(&coordinator_faults)
        });
        let server = centre.then(|| {
            ServerClient::start(&initial, shards, &events, &faults, &*fabric)
                .map(|server| server.over_link(link))
        });
        (coordinator, server)
    })
}

/// The group coordinator, and EASGD's server if it has one.
type Services = (Addr<GroupCoordinator>, Option<Result<ServerClient>>);

/// What the trainer and shadow actors are started with.
struct Actors<L: Learner> {
    /// Whether shadow loops sync (else a finished trainer ends syncing).
    shadow: bool,
    chunk: Duration,
    threads: usize,
    pacing: Pacing,
    /// The link of a job of one process, whose shadow rounds one thread may
    /// run ([`ShadowHub`]); `None` for a thread per trainer.
    hub_link: Option<LinkModel>,
    events: EventBus,
    stop: Arc<AtomicBool>,
    parking: Parking,
    fabric: Arc<dyn Fabric>,
    trainer_exits: Sender<TrainerExit<L>>,
    shadow_exits: Sender<(usize, Option<Error>)>,
}

/// Starts a trainer actor per core and the shadow hub, or a shadow actor per
/// loop, each on an arbiter of its own in `system`; the trainers' addresses.
fn start_actors<L: Learner>(
    system: &System,
    cores: Vec<TrainerCore<L>>,
    shadows: Vec<ShadowLoop>,
    actors: Actors<L>,
) -> Result<Vec<Addr<TrainerActor<L>>>> {
    let (ready_tx, ready_rx) = bounded(1);
    let launched = system.arbiter().spawn_fn(move || {
        let Actors {
            shadow,
            chunk,
            threads,
            pacing,
            hub_link,
            events,
            stop,
            parking,
            fabric,
            trainer_exits,
            shadow_exits,
        } = actors;
        // One thread for every trainer's shadow rounds where it can serve them.
        let (hub, shadows) = match hub_link.filter(|_| ShadowHub::serves(&shadows)) {
            Some(_) if shadows.is_empty() => (None, shadows),
            Some(link) => match ShadowHub::new(shadows, pacing, link) {
                Ok(hub) => (Some(hub), Vec::new()),
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            },
            None => (None, shadows),
        };
        let addrs: Vec<_> = cores
            .into_iter()
            .enumerate()
            .map(|(worker, core)| {
                let (exits, events, stop, parking, fabric) = (
                    trainer_exits.clone(),
                    events.clone(),
                    Arc::clone(&stop),
                    parking.clone(),
                    Arc::clone(&fabric),
                );
                let on_finish: Box<dyn Fn() + Send> = if shadow {
                    Box::new(|| {})
                } else {
                    Box::new(move || {
                        stop.store(true, Ordering::Relaxed);
                        fabric.stop_everywhere();
                    })
                };
                TrainerActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
                    // OpenMP teams are per thread: size this one.
                    tch::set_num_threads(threads as i32);
                    TrainerActor::new(worker, core, chunk, parking, exits, events, on_finish)
                })
            })
            .collect();
        match hub {
            Some(hub) => {
                ShadowHubActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
                    ShadowHubActor::new(hub, events, shadow_exits, stop)
                });
            }
            None => start_shadow_actors(shadows, pacing, &events, &shadow_exits, &stop),
        }
        let _ = ready_tx.send(Ok(addrs));
    });
    if !launched {
        return Err(Error::Stopped("actor system"));
    }
    ready_rx
        .recv()
        .map_err(|_| Error::Stopped("actor system"))?
}

/// Starts a shadow actor per loop, each on an arbiter of its own.
fn start_shadow_actors(
    shadows: Vec<ShadowLoop>,
    pacing: Pacing,
    events: &EventBus,
    exits: &Sender<(usize, Option<Error>)>,
    stop: &Arc<AtomicBool>,
) {
    for (trainer, shadow) in shadows.into_iter().enumerate() {
        let (events, exits, stop) = (events.clone(), exits.clone(), Arc::clone(stop));
        ShadowActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
            tch::set_num_threads(1);
            ShadowActor::new(trainer, shadow, pacing, events, exits, stop)
        });
    }
}

/// What runs a cluster's trainers: one core per learner, one shadow loop per
/// trainer (for `shadow-*`), and an alias of each trainer's replica and its
/// sync peer's state.
struct Parts<L: Learner> {
    cores: Vec<TrainerCore<L>>,
    shadows: Vec<ShadowLoop>,
    replicas: Vec<ParamAlias>,
    peers: Vec<SharedPeer>,
}

/// Builds the [`Parts`] of `learners`, `learners.len() / counters.len()` per
/// trainer: the first of a trainer's learners syncs through a peer on its
/// endpoint (and takes the injected faults); the others are its Hogwild
/// workers. A trainer's learners share one recovery point.
#[allow(clippy::too_many_arguments)]
fn build_parts<L: Learner>(
    learners: Vec<L>,
    counters: &[Arc<TrainerCounters>],
    endpoints: Vec<Endpoint>,
    rules: Vec<Box<dyn SyncRule>>,
    groups: &CoordinatorClient,
    config: &ClusterConfig,
    initial: &[f32],
    server: &Option<ServerClient>,
) -> Result<Parts<L>> {
    let sync = &config.sync;
    let workers = learners.len() / counters.len().max(1);
    let mut parts = Parts {
        cores: Vec::with_capacity(learners.len()),
        shadows: Vec::new(),
        replicas: Vec::with_capacity(counters.len()),
        peers: Vec::with_capacity(counters.len()),
    };
    // Only algorithms that never average leave the trainer to keep its own
    // recovery state.
    let keeps_own_state = matches!(sync.algorithm, Algorithm::None | Algorithm::SyncSgd);
    let mut endpoints = endpoints.into_iter().zip(rules);
    let mut recovery = Arc::new(RecoveryPoint::new(initial));
    for (worker, learner) in learners.into_iter().enumerate() {
        let counters = Arc::clone(&counters[worker / workers]);
        if worker % workers != 0 {
            // A Hogwild worker: steps the replica; its trainer's loop syncs it.
            let core = TrainerCore::new(learner, Foreground::Nothing, counters)?
                .with_recovery(Arc::clone(&recovery), false);
            parts.cores.push(core);
            continue;
        }
        recovery = Arc::new(RecoveryPoint::new(initial));
        let (endpoint, rule) = endpoints
            .next()
            .ok_or(Error::Internal("fewer endpoints than trainers"))?;
        parts
            .replicas
            .push(ParamAlias::new(learner.dense_params())?);
        let peer = SyncPeer::new(endpoint, groups.clone(), rule, server.clone())?;
        parts.peers.push(peer.shared_state());
        let foreground = match sync.algorithm {
            Algorithm::None => Foreground::Nothing,
            Algorithm::SyncSgd => Foreground::SyncSgd(peer),
            Algorithm::Foreground { every, .. } => Foreground::Every { every, peer },
            Algorithm::Shadow { .. } => {
                let replica = ParamAlias::new(learner.dense_params())?;
                parts.shadows.push(
                    ShadowLoop::new(
                        replica,
                        peer,
                        sync.write_back,
                        Arc::clone(&counters),
                        Arc::clone(&recovery),
                    )
                    .with_faults(&config.faults),
                );
                Foreground::Nothing
            }
        };
        let core = TrainerCore::new(learner, foreground, counters)?
            .with_recovery(Arc::clone(&recovery), keeps_own_state)
            .with_faults(&config.faults);
        parts.cores.push(core);
    }
    Ok(parts)
}

/// Checks that `learners` make whole trainers of `workers` Hogwild workers
/// sharing one dense buffer, under an algorithm that allows them.
fn check_workers<L: Learner>(learners: &[L], workers: usize, algorithm: &Algorithm) -> Result<()> {
    if workers == 1 {
        return Ok(());
    }
    let bad = |reason: String| {
        Err(Error::Config {
            key: "workers".into(),
            reason,
        })
    };
    if !matches!(algorithm, Algorithm::None | Algorithm::Shadow { .. }) {
        return bad(format!(
            "Hogwild workers run with none or shadow-* (a trainer that syncs in the foreground, as {algorithm} does, is one thread)"
        ));
    }
    if learners.len() % workers != 0 {
        return bad(format!(
            "{} learners do not make whole trainers of {workers} workers",
            learners.len()
        ));
    }
    for trainer in learners.chunks(workers) {
        let owner = trainer[0].dense_params();
        if !trainer[1..]
            .iter()
            .all(|w| w.dense_params().shares_values_with(owner))
        {
            return bad(
                "a trainer's workers must share its dense parameters (FlatParams::adopt_shared)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Samples the consensus distance of `replicas` every `every` until `stop`,
/// and once more when stopped, so that even a short run has its final point.
fn sample_consensus(
    replicas: &[ParamAlias],
    every: Duration,
    stop: &AtomicBool,
    started: Instant,
) -> Vec<ConsensusPoint> {
    let mut points = Vec::new();
    let len = replicas.first().map_or(0, ParamAlias::len);
    let mut snapshots = vec![vec![0f32; len]; replicas.len()];
    let mut stopping = false;
    while !stopping {
        let due = Instant::now() + every;
        while !stopping && Instant::now() < due {
            std::thread::sleep(every.min(Duration::from_millis(10)));
            stopping = stop.load(Ordering::Relaxed);
        }
        if replicas
            .iter()
            .zip(&mut snapshots)
            .any(|(r, s)| r.snapshot_into(s).is_err())
        {
            break;
        }
        points.push(ConsensusPoint {
            seconds: started.elapsed().as_secs_f64(),
            distance: consensus_distance(&snapshots),
        });
    }
    points
}

/// Mean over replicas of ‖wᵢ − w̄‖².
pub fn consensus_distance(replicas: &[Vec<f32>]) -> f64 {
    let n = replicas.len().max(1) as f64;
    let len = replicas.first().map_or(0, Vec::len);
    let mut total = 0.0;
    for j in 0..len {
        let mean = replicas.iter().map(|r| f64::from(r[j])).sum::<f64>() / n;
        total += replicas
            .iter()
            .map(|r| (f64::from(r[j]) - mean).powi(2))
            .sum::<f64>();
    }
    total / n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consensus_distance_golden() {
        // Mean (2, 0); squared distances 1+4=5 and 1+4=5; mean 5.
        assert_eq!(consensus_distance(&[vec![1.0, 2.0], vec![3.0, -2.0]]), 5.0);
        assert_eq!(consensus_distance(&[vec![1.0, 2.0], vec![1.0, 2.0]]), 0.0);
    }
}
