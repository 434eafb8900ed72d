//! How a cluster is wired before it starts: the group plan, the starting
//! point, the endpoints, each trainer's rule, the services and each
//! trainer's parts (its actors start in `actors.rs`).

use super::checkpoint::ClusterState;
use super::config::ClusterConfig;
use super::report::{sample_consensus, ConsensusPoint};
use super::roster::Roster;
use crate::events::Event;
use crate::hogwild::ParamAlias;
use crate::monitor::{ClusterControl, Watcher};
use crate::recovery::RecoveryPoint;
use crate::shadow::{ShadowExit, ShadowLoop};
use crate::stats::TrainerCounters;
use crate::sync::coordinator::{CoordinatorClient, GroupCoordinator};
use crate::sync::{
    check_partitions, Algorithm, CentreCodec, Codecs, Endpoint, Exchange, Fabric, GroupPlan,
    GroupSchedule, LinkModel, ModelAveraging, RuleContext, Schedule, ScheduleContext, ServerClient,
    SharedPeer, SyncConfig, SyncPeer, SyncRule,
};
use crate::system::spawn_system;
use crate::trainer::{Foreground, Parking, StalenessBound, TrainerCore};
use crate::{with_causes, Error, Learner, Result};
use actix::prelude::*;
use crossbeam_channel::Receiver;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a cluster is wired from, checked before any thread starts: the group
/// plan, the starting point, and every seat's counters, endpoint and sync
/// rule.
pub(super) struct Wiring {
    /// This process's trainers, as it starts.
    pub(super) trainers: usize,
    pub(super) plan: Arc<dyn GroupSchedule>,
    pub(super) initial: Vec<f32>,
    /// Every seat's counters: the trainers' as it starts, then those of the
    /// trainers an elastic cluster may add.
    pub(super) counters: Vec<Arc<TrainerCounters>>,
    pub(super) stop: Arc<AtomicBool>,
    /// Raised when the cluster is asked to stop ([`ClusterControl::stop`](crate::monitor::ClusterControl::stop)).
    pub(super) stop_requested: Arc<AtomicBool>,
    /// Every seat's endpoint.
    pub(super) endpoints: Vec<Endpoint>,
    /// Each endpoint's bytes sent: on the wire, and before compression.
    pub(super) bytes_sent: Vec<[Arc<AtomicU64>; 2]>,
    pub(super) rules: Vec<Box<dyn SyncRule>>,
    /// Whether the rule syncs against a centre (EASGD's server shards).
    pub(super) centre: bool,
}

impl Wiring {
    pub(super) fn prepare<L: Learner>(
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
        let seats = config.elastic_seats(fabric.processes(), trainers, resumed.is_some())?;
        crate::stragglers::check_all(&config.stragglers, seats)?;
        let plan = group_plan(config, trainers, trainers * fabric.processes())?;
        let (initial, mut counters) = starting_point(learners, workers, resumed)?;
        counters.extend((trainers..seats).map(|t| Arc::new(TrainerCounters::with_workers(t, 1))));
        let stop = Arc::new(AtomicBool::new(false));
        let mut endpoints = fabric.endpoints(seats, sync.link, Arc::clone(&stop))?;
        let codecs_start = codecs_start(fabric, sync, &initial)?;
        for endpoint in &mut endpoints {
            endpoint.set_timeout(sync.peer_timeout());
            endpoint.compress_with(&config.codecs, sync, &codecs_start)?;
        }
        let bytes_sent = endpoints
            .iter()
            .map(|e| [e.bytes_counter(), e.values_counter()])
            .collect();
        let rules = make_rules(config, &endpoints, &*plan, &initial)?;
        let centre = rules
            .first()
            .is_some_and(|r| matches!(r.exchange(), Exchange::Centre { .. }));
        config.check_elastic_rule(centre)?;
        Ok(Self {
            trainers,
            plan,
            initial,
            counters,
            stop,
            stop_requested: Arc::default(),
            endpoints,
            bytes_sent,
            rules,
            centre,
        })
    }
}

impl Wiring {
    /// What a monitor can do to the cluster, on its stop flags.
    pub(super) fn control(&self, fabric: &Arc<dyn Fabric>) -> ClusterControl {
        ClusterControl::new(
            Arc::clone(&self.stop),
            Arc::clone(&self.stop_requested),
            Arc::clone(fabric),
        )
    }

    /// The trainers' cores (caught up with a resumed run's furthest one),
    /// their shadow loops and their sync peers (restored when resumed); takes
    /// the endpoints and the rules, and leaves the spare seats' in `spare`.
    pub(super) fn parts<L: Learner>(
        &mut self,
        learners: Vec<L>,
        groups: &CoordinatorClient,
        config: &ClusterConfig,
        server: &Option<ServerClient>,
        resumed: Option<&ClusterState>,
    ) -> Result<(Parts<L>, Vec<Seat>)> {
        let spare_endpoints = self.endpoints.split_off(self.trainers);
        let spare = spare_endpoints
            .into_iter()
            .zip(self.rules.split_off(self.trainers))
            .collect();
        let mut parts = build_parts(
            learners,
            &self.counters[..self.trainers],
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
        let stops = (&self.stop, &self.stop_requested);
        Ok((parts.stopping_with(config, stops), spare))
    }
}

/// A seat for a trainer to join an elastic cluster: its endpoint and rule.
pub(super) type Seat = (Endpoint, Box<dyn SyncRule>);

/// Waits for the `n` shadow loops to end; the errors they ended with, each
/// with its causes, for the report.
pub(super) fn shadow_errors(exits: &Receiver<ShadowExit>, n: usize) -> Vec<String> {
    exits
        .iter()
        .take(n)
        .filter_map(|(trainer, error)| {
            error.map(|e| format!("shadow sync of trainer {trainer}: {}", with_causes(&e)))
        })
        .collect()
}

/// Starts each watcher on its thread, fed by its subscription.
pub(super) fn spawn_watchers(
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
        .map_err(|error| Error::Thread {
            thread: "monitor",
            error,
        })
}

/// Where a cluster's training starts: the initial dense parameters (the
/// first replica's, which every replica then takes, or the checkpoint's
/// centre or first replica), and each trainer's counters (resumed ones go on
/// from the checkpoint's).
pub(super) fn starting_point<L: Learner>(
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
pub(super) fn group_plan(
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

/// What both ends of every link of a compressed sync start from (a codec
/// with memory, `topk`, decodes what it has not sent yet as these values):
/// the starting point, the same in every process (averaged over them: a
/// resumed run's processes restore replicas of their own).
fn codecs_start(fabric: &Arc<dyn Fabric>, sync: &SyncConfig, initial: &[f32]) -> Result<Vec<f32>> {
    let mut start = initial.to_vec();
    if sync.compression != Codecs::NONE && fabric.processes() > 1 {
        fabric.average(&mut start)?;
    }
    Ok(start)
}

/// Each of this process's trainers' sync rule (the mean for the algorithms
/// that name none: sync-sgd's gradients are averaged).
pub(super) fn make_rules(
    config: &ClusterConfig,
    endpoints: &[Endpoint],
    plan: &dyn GroupSchedule,
    initial: &[f32],
) -> Result<Vec<Box<dyn SyncRule>>> {
    config.rules.check_sections(&config.sync)?;
    endpoints
        .iter()
        .map(|endpoint| match config.sync.algorithm.rule_name() {
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

/// The thread sampling the consensus distance of the `roster`'s replicas
/// every `config.consensus_every_ms` (none for 0).
pub(super) fn start_monitor(
    roster: &Arc<Mutex<Roster>>,
    config: &ClusterConfig,
    stop: &Arc<AtomicBool>,
    started: Instant,
) -> Option<JoinHandle<Vec<ConsensusPoint>>> {
    (config.consensus_every_ms > 0).then(|| {
        let every = Duration::from_millis(config.consensus_every_ms);
        let (stop, roster) = (Arc::clone(stop), Arc::clone(roster));
        std::thread::spawn(move || {
            tch::set_num_threads(1);
            sample_consensus(&roster, every, &stop, started)
        })
    })
}

/// Where the trainers park for checkpoints: every `checkpoint_every` steps,
/// rounded up to a multiple of a foreground algorithm's sync period, first
/// at the first multiple after the slowest trainer's steps.
pub(super) fn parking_of(config: &ClusterConfig, counters: &[Arc<TrainerCounters>]) -> Parking {
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
/// the simulated link in one process; between processes the network is
/// real), its steps compressed as `sync.compression` says.
pub(super) fn start_services(
    config: &ClusterConfig,
    fabric: &Arc<dyn Fabric>,
    plan: Arc<dyn GroupSchedule>,
    initial: &[f32],
    centre: bool,
) -> Result<(System, JoinHandle<()>, Services)> {
    let sync = &config.sync;
    let shards = sync.server_shards_for(plan.trainers(), fabric.processes());
    let codec = if centre {
        CentreCodec::new(&config.codecs, sync, initial)?
    } else {
        None
    };
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
            ServerClient::start(&initial, shards, codec, &events, &faults, &*fabric)
                .map(|server| server.over_link(link))
        });
        (coordinator, server)
    })
}

/// The group coordinator, and EASGD's server if it has one.
pub(super) type Services = (Addr<GroupCoordinator>, Option<Result<ServerClient>>);

/// What runs a cluster's trainers: one core per learner, one shadow loop per
/// trainer (for `shadow-*`), and an alias of each trainer's replica and its
/// sync peer's state.
pub(super) struct Parts<L: Learner> {
    pub(super) cores: Vec<TrainerCore<L>>,
    pub(super) shadows: Vec<ShadowLoop>,
    pub(super) replicas: Vec<ParamAlias>,
    pub(super) peers: Vec<SharedPeer>,
}

impl<L: Learner> Parts<L> {
    /// The cores and shadow loops, and the roster of their trainers.
    #[allow(clippy::type_complexity)]
    pub(super) fn with_roster(self) -> (Vec<TrainerCore<L>>, Vec<ShadowLoop>, Arc<Mutex<Roster>>) {
        let roster = Roster {
            replicas: self.replicas,
            peers: self.peers,
            departed: Default::default(),
        };
        (self.cores, self.shadows, Arc::new(Mutex::new(roster)))
    }

    /// The parts with their trainers held back while the newest average in
    /// their replica is more than `sync.shadow.max_staleness` steps old (under
    /// shadow rounds only: foreground rounds are exact) until syncing ends
    /// (`stop`), and their sleeps ended once a stop is requested.
    pub(super) fn stopping_with(
        mut self,
        config: &ClusterConfig,
        (stop, stop_requested): (&Arc<AtomicBool>, &Arc<AtomicBool>),
    ) -> Self {
        let sync = &config.sync;
        let bound = sync.staleness_bound().map(|steps| StalenessBound {
            steps,
            patience: sync.staleness_patience(),
            syncing_ended: Arc::clone(stop),
        });
        self.cores = std::mem::take(&mut self.cores)
            .into_iter()
            .map(|core| {
                core.with_staleness_bound(bound.clone())
                    .waking_on(stop_requested)
            })
            .collect();
        self
    }
}

/// Builds the [`Parts`] of `learners`, `learners.len() / counters.len()` per
/// trainer: the first of a trainer's learners syncs through a peer on its
/// endpoint (and takes the injected faults); the others are its Hogwild
/// workers. A trainer's learners share one recovery point, and a straggler's
/// are all slowed.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_parts<L: Learner>(
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
                .with_recovery(Arc::clone(&recovery), false)
                .with_stragglers(&config.stragglers);
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
            Algorithm::Shadow { loops, .. } => {
                let replica = ParamAlias::new(learner.dense_params())?;
                parts.shadows.push(
                    ShadowLoop::new(
                        replica,
                        peer,
                        loops.write_back,
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
            .with_faults(&config.faults)
            .with_stragglers(&config.stragglers);
        parts.cores.push(core);
    }
    Ok(parts)
}

/// Checks that `learners` make whole trainers of `workers` Hogwild workers
/// sharing one dense buffer, under an algorithm that allows them.
pub(super) fn check_workers<L: Learner>(
    learners: &[L],
    workers: usize,
    algorithm: &Algorithm,
) -> Result<()> {
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
