//! The [`Cluster`] handle: start, steer, stop and wait for a running cluster.

use super::actors::{start_actors, Actors};
use super::checkpoint::{read_peer, ClusterState, TrainerState};
use super::config::ClusterConfig;
use super::report::{ClusterOutcome, ClusterReport, ConsensusPoint};
use super::roster::Roster;
use super::wiring::{
    parking_of, shadow_errors, spawn_watchers, start_monitor, start_services, Seat, Wiring,
};
use crate::events::{Event, EventBus};
use crate::monitor::{ClusterControl, Watcher};
use crate::shadow::ShadowExit;
use crate::stats::{TrainerCounters, TrainerStats};
use crate::sync::coordinator::CoordinatorClient;
use crate::sync::{Fabric, ServerClient};
use crate::trainer::{Control, Parking, SaveState, TrainerActor, TrainerExit};
use crate::{Error, Learner, LearnerState, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, Receiver};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The running cluster's actors and threads; trainers join it while it is
/// open.
pub(crate) struct Running<L: Learner> {
    /// Every trainer actor started, by learner.
    pub(crate) trainers: Vec<Addr<TrainerActor<L>>>,
    pub(super) trainer_exits: Receiver<TrainerExit<L>>,
    pub(super) shadow_exits: Receiver<ShadowExit>,
    pub(super) system: System,
    pub(super) system_thread: JoinHandle<()>,
    pub(super) monitor: Option<JoinHandle<Vec<ConsensusPoint>>>,
    /// What a joining trainer's actors start with.
    pub(super) actors: Actors<L>,
    /// The seats left for trainers to join, in order.
    pub(super) spare: VecDeque<Seat>,
    /// Set once every trainer started has ended: none joins any more.
    pub(super) closed: bool,
}

impl<L: Learner> Cluster<L> {
    /// Waits for every trainer's exit, those of trainers that join meanwhile
    /// included: its learner, in its place, and the error it ended with
    /// added to `errors`. The cluster is then closed to joining trainers.
    fn learners_back(&self, errors: &mut Vec<String>) -> Result<Vec<Option<L>>> {
        let exits = self.with_running(|running| Ok(running.trainer_exits.clone()))?;
        let mut learners: Vec<Option<L>> = Vec::new();
        let mut received = 0;
        loop {
            let all_back = self.with_running(|running| {
                running.closed = received == running.trainers.len();
                Ok(running.closed)
            })?;
            if all_back {
                return Ok(learners);
            }
            let exit = exits.recv().map_err(|_| Error::LearnerLost)?;
            received += 1;
            if let Some(e) = exit.error {
                errors.push(format!("trainer {}: {e}", exit.trainer));
            }
            if learners.len() <= exit.worker {
                learners.resize_with(exit.worker + 1, || None);
            }
            learners[exit.worker] = Some(exit.learner);
        }
    }

    /// `work` on the running parts, until the cluster has been waited for.
    pub(super) fn with_running<T>(
        &self,
        work: impl FnOnce(&mut Running<L>) -> Result<T>,
    ) -> Result<T> {
        let mut running =
            (self.inner.running.lock()).map_err(|_| Error::Panicked("cluster's supervisor"))?;
        work(running.as_mut().ok_or(Error::Stopped("cluster"))?)
    }
}

pub(crate) struct Inner<L: Learner> {
    pub(super) config: ClusterConfig,
    /// The group size of the plan the groups follow now.
    pub(super) group_size: AtomicUsize,
    pub(crate) counters: Vec<Arc<TrainerCounters>>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) events: EventBus,
    pub(crate) server: Option<ServerClient>,
    /// Each endpoint's bytes sent: on the wire, and before compression.
    pub(super) bytes_sent: Vec<[Arc<AtomicU64>; 2]>,
    pub(super) started: Instant,
    pub(super) fabric: Arc<dyn Fabric>,
    pub(crate) running: Mutex<Option<Running<L>>>,
    /// Where trainers park for checkpoints.
    pub(crate) parking: Parking,
    /// The trainers started and those that left.
    pub(crate) roster: Arc<Mutex<Roster>>,
    /// Where the sync peers ask for their groups (and the members change).
    pub(super) groups: CoordinatorClient,
    /// Whether [`Cluster::wait`] was called.
    pub(super) waited: AtomicBool,
    /// Examples trained before this cluster started (by the run it resumes).
    pub(super) resumed_examples: u64,
    /// What the trainers are told (by the handle and the monitors).
    pub(super) control: ClusterControl,
    /// The monitors' and actors' threads, and the flag that ends them.
    pub(super) watchers: Mutex<Vec<JoinHandle<()>>>,
    pub(super) ended: Arc<AtomicBool>,
}

impl<L: Learner> Inner<L> {
    /// The roster, read.
    pub(crate) fn roster(&self) -> MutexGuard<'_, Roster> {
        self.roster.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoints' bytes sent, counter `which` (0: on the wire, 1:
    /// before compression), summed.
    fn bytes_sent_total(&self, which: usize) -> u64 {
        let counted = self.bytes_sent.iter();
        counted.map(|c| c[which].load(Ordering::Relaxed)).sum()
    }
}

/// A cloneable handle on a running cluster.
#[must_use = "a Cluster trains in the background: keep it and `wait` for its outcome"]
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
    /// Starts the cluster, as [`ClusterBuilder::start`](super::ClusterBuilder::start)
    /// says: wires its parts, starts the services, the actors, the monitor
    /// and the watchers.
    pub(super) fn launch(
        fabric: Arc<dyn Fabric>,
        config: ClusterConfig,
        mut learners: Vec<L>,
        resumed: Option<&ClusterState>,
        watchers: Vec<Watcher>,
    ) -> Result<Self> {
        // Fed from the first step: subscribed before anything starts.
        let feeds: Vec<_> = watchers.iter().map(|_| config.events.subscribe()).collect();
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
        let groups = CoordinatorClient::new(coordinator);
        let (parts, spare) = wiring
            .parts(learners, &groups, &config, &server, resumed)
            .map_err(stop_system)?;
        let (cores, shadows, roster) = parts.with_roster();
        let parking = parking_of(&config, &wiring.counters);
        // Room for the exit of every learner there may be.
        let seats = wiring.counters.len();
        let (trainer_exit_tx, trainer_exits) = bounded(cores.len().max(seats));
        let (shadow_exit_tx, shadow_exits) = bounded(seats);
        let actors = Actors::of(
            &config,
            &fabric,
            (&wiring.stop, &parking),
            (trainer_exit_tx, shadow_exit_tx),
        );
        let addrs =
            start_actors(&system, (cores, 0), shadows, actors.clone()).map_err(stop_system)?;
        let started = Instant::now();
        let monitor = start_monitor(&roster, &config, &wiring.stop, started);
        let control = wiring.control(&fabric);
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
                group_size: AtomicUsize::new(wiring.plan.group_size()),
                counters: wiring.counters,
                stop: wiring.stop,
                events: config.events.clone(),
                config,
                fabric,
                server,
                bytes_sent: wiring.bytes_sent,
                started,
                parking,
                roster,
                groups,
                waited: AtomicBool::new(false),
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
                    actors,
                    spare: spare.into(),
                    closed: false,
                })),
            }),
        })
    }

    /// Number of trainers started (those that left an elastic cluster
    /// included).
    pub fn trainers(&self) -> usize {
        self.inner.roster().started()
    }

    /// Every trainer's figures so far, of every trainer started.
    pub fn stats(&self) -> Vec<TrainerStats> {
        let counters = self.inner.counters.iter().take(self.trainers());
        counters.map(|c| c.stats()).collect()
    }

    /// The trainers training now, in order (all but those that left).
    pub fn active_trainers(&self) -> Vec<usize> {
        self.inner.roster().active()
    }

    /// The dense replicas of the trainers training now, read as they train,
    /// in order.
    ///
    /// # Errors
    ///
    /// A replica that cannot be read.
    pub fn replicas(&self) -> Result<Vec<Vec<f32>>> {
        let roster = self.inner.roster();
        roster
            .active_replicas()
            .map(|replica| {
                let mut dense = vec![0f32; replica.len()];
                replica.snapshot_into(&mut dense)?;
                Ok(dense)
            })
            .collect()
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
    ///
    /// # Errors
    ///
    /// A second wait on the same cluster ([`Error::AlreadyWaited`]), a
    /// trainer that ended without its learner ([`Error::LearnerLost`]), or
    /// EASGD's centre that could not be read. A trainer or sync loop that
    /// failed is not an error here: the report lists it (`errors`).
    pub fn wait(&self) -> Result<ClusterOutcome<L>> {
        if self.inner.waited.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyWaited);
        }
        let mut errors = Vec::new();
        let learners = self.learners_back(&mut errors)?;
        let running = (self.inner.running.lock())
            .map_err(|_| Error::Panicked("cluster's supervisor"))?
            .take()
            .ok_or(Error::AlreadyWaited)?;
        let n = self.trainers();
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
        let (peers, departed) = {
            let roster = self.inner.roster();
            let peers = roster.peers.iter().map(read_peer).collect();
            (peers, roster.departed.iter().copied().collect())
        };
        Ok(ClusterOutcome {
            learners,
            center,
            peers,
            report: ClusterReport {
                algorithm: self.inner.config.sync.algorithm.clone(),
                trainers: n,
                group_size: self.inner.group_size.load(Ordering::Relaxed),
                seconds,
                examples,
                examples_per_sec: trained_here as f64 / seconds.max(1e-9),
                trainer_stats,
                consensus,
                bytes_sent: self.inner.bytes_sent_total(0),
                bytes_before_compression: self.inner.bytes_sent_total(1),
                departed,
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

impl<L: Learner> Cluster<L> {
    /// How long [`Cluster::checkpoint`] waits for the learners' states.
    const SAVE_TIMEOUT: Duration = Duration::from_secs(30);

    /// Whether every trainer still training has parked for a checkpoint (and
    /// at least one is training). A trainer stopped while parked stays
    /// counted, hence `>=`.
    pub fn parked(&self) -> bool {
        let parked = self.inner.parking.parked.load(Ordering::SeqCst);
        let running: usize = self
            .inner
            .counters
            .iter()
            .map(|c| c.running_workers())
            .sum();
        running > 0 && parked >= running
    }

    /// The whole state, once [`Cluster::parked`], and what `while_parked`
    /// reads of the learners' shared state meanwhile; then the trainers go on.
    ///
    /// # Errors
    ///
    /// [`Error::NotParked`] unless every training trainer has parked; a replica that cannot
    /// be read, a learner whose state cannot be saved or that does not answer within 30 s,
    /// or a centre that cannot be read.
    pub fn checkpoint<T>(&self, while_parked: impl FnOnce() -> T) -> Result<(ClusterState, T)> {
        if !self.parked() {
            return Err(Error::NotParked);
        }
        let roster = self.inner.roster();
        let trainers = roster
            .replicas
            .iter()
            .zip(&self.inner.counters)
            .zip(&roster.peers)
            .map(|((replica, counters), peer)| {
                let mut dense = vec![0f32; replica.len()];
                replica.snapshot_into(&mut dense)?;
                let stats = counters.stats();
                Ok(TrainerState {
                    steps: stats.steps,
                    examples: stats.examples,
                    dense,
                    sync: read_peer(peer),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        drop(roster);
        let learners = self.save_learners();
        let center = self.inner.server.as_ref().map(|s| s.center()).transpose();
        let shared = while_parked();
        // Nobody parks again before it is unparked: `parked` counts afresh.
        self.inner.parking.parked.store(0, Ordering::SeqCst);
        self.control(Control::Unpark);
        let state = ClusterState {
            trainers,
            learners: learners?,
            center: center?,
        };
        Ok((state, shared))
    }

    /// Every learner's state; `None` for those whose trainer has finished.
    fn save_learners(&self) -> Result<Vec<Option<LearnerState>>> {
        let (states, total) = self.with_running(|running| {
            let (reply, states) = bounded(running.trainers.len());
            for trainer in &running.trainers {
                trainer.do_send(SaveState(reply.clone()));
            }
            Ok((states, running.trainers.len()))
        })?;
        let mut learners: Vec<Option<LearnerState>> = vec![None; total];
        let deadline = Instant::now() + Self::SAVE_TIMEOUT;
        let expected: usize = self
            .inner
            .counters
            .iter()
            .map(|c| c.running_workers())
            .sum();
        for _ in 0..expected {
            let state = states
                .recv_deadline(deadline)
                .map_err(|_| Error::LearnerLost)?;
            if let Some(slot) = learners.get_mut(state.worker) {
                *slot = Some(state.learner?);
            }
        }
        Ok(learners)
    }
}
