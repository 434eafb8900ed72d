//! The cluster's actors, started on its system: a trainer actor per
//! learner, and the shadow hub or a shadow actor per trainer.

use super::config::ClusterConfig;
use crate::events::EventBus;
use crate::shadow::{
    Pacing, RoundDelay, ShadowActor, ShadowExit, ShadowHub, ShadowHubActor, ShadowLoop,
};
use crate::sync::{Algorithm, Codecs, Fabric, LinkModel, ShadowThreads};
use crate::trainer::{Parking, TrainerActor, TrainerCore, TrainerExit};
use crate::{Error, Learner, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the trainer and shadow actors are started with (at the start, and
/// for each trainer joining an elastic cluster).
pub(super) struct Actors<L: Learner> {
    /// Whether a trainer that finishes ends syncing (a foreground
    /// algorithm's: the others could no longer complete a round).
    pub(super) finish_ends_sync: bool,
    pub(super) chunk: Duration,
    pub(super) threads: usize,
    pub(super) pacing: Pacing,
    /// The link of a job of one process, whose shadow rounds one thread may
    /// run ([`ShadowHub`]); `None` for a thread per trainer.
    pub(super) hub_link: Option<LinkModel>,
    pub(super) events: EventBus,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) parking: Parking,
    pub(super) fabric: Arc<dyn Fabric>,
    pub(super) trainer_exits: Sender<TrainerExit<L>>,
    pub(super) shadow_exits: Sender<ShadowExit>,
}

impl<L: Learner> Actors<L> {
    /// What the actors of `config` start with, on `fabric`: ended by `stop`,
    /// parking at `parking`, reporting their ends on `exits`.
    pub(super) fn of(
        config: &ClusterConfig,
        fabric: &Arc<dyn Fabric>,
        (stop, parking): (&Arc<AtomicBool>, &Parking),
        (trainer_exits, shadow_exits): (Sender<TrainerExit<L>>, Sender<ShadowExit>),
    ) -> Self {
        let sync = &config.sync;
        // The pacing of shadow loops (at their defaults, unread, otherwise).
        let shadow = sync.algorithm.loops().copied().unwrap_or_default();
        Self {
            finish_ends_sync: matches!(
                sync.algorithm,
                Algorithm::SyncSgd | Algorithm::Foreground { .. }
            ),
            chunk: Duration::from_millis(config.chunk_ms.max(1)),
            threads: config.intra_op_threads.max(1),
            pacing: Pacing {
                min_interval: Duration::from_secs_f64(shadow.min_interval_ms / 1000.0),
                // A trainer waiting for a fresher average takes no more steps.
                min_steps: shadow
                    .min_steps
                    .min(shadow.max_staleness.unwrap_or(u64::MAX)),
                max_cpu_share: shadow.max_cpu_share,
                delay: RoundDelay {
                    fixed: Duration::from_secs_f64(shadow.delay_ms / 1000.0),
                    jitter: Duration::from_secs_f64(shadow.delay_jitter_ms / 1000.0),
                },
                max_staleness: sync.staleness_bound(),
            },
            hub_link: (shadow.threads == ShadowThreads::PerProcess
                && fabric.processes() == 1
                && sync.compression == Codecs::NONE
                && config.elastic_capacity == 0)
                .then_some(sync.link),
            events: config.events.clone(),
            stop: Arc::clone(stop),
            parking: parking.clone(),
            fabric: Arc::clone(fabric),
            trainer_exits,
            shadow_exits,
        }
    }
}

impl<L: Learner> Clone for Actors<L> {
    fn clone(&self) -> Self {
        Self {
            events: self.events.clone(),
            stop: Arc::clone(&self.stop),
            parking: self.parking.clone(),
            fabric: Arc::clone(&self.fabric),
            trainer_exits: self.trainer_exits.clone(),
            shadow_exits: self.shadow_exits.clone(),
            ..*self
        }
    }
}

/// Starts a trainer actor per core (learners `first_worker..` of the
/// cluster) and the shadow hub, or a shadow actor per loop, each on an
/// arbiter of its own in `system`; the trainers' addresses.
pub(super) fn start_actors<L: Learner>(
    system: &System,
    (cores, first_worker): (Vec<TrainerCore<L>>, usize),
    shadows: Vec<ShadowLoop>,
    actors: Actors<L>,
) -> Result<Vec<Addr<TrainerActor<L>>>> {
    let (ready_tx, ready_rx) = bounded(1);
    let launched = system.arbiter().spawn_fn(move || {
        let Actors {
            finish_ends_sync,
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
                    // One answer into a queue of one: it fails only when
                    // the launcher stopped waiting, and then nobody asks.
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            },
            None => (None, shadows),
        };
        let addrs: Vec<_> = cores
            .into_iter()
            .zip(first_worker..)
            .map(|(core, worker)| {
                let (exits, events, stop, parking, fabric) = (
                    trainer_exits.clone(),
                    events.clone(),
                    Arc::clone(&stop),
                    parking.clone(),
                    Arc::clone(&fabric),
                );
                let on_finish: Box<dyn Fn() + Send> = if finish_ends_sync {
                    Box::new(move || {
                        stop.store(true, Ordering::Relaxed);
                        fabric.stop_everywhere();
                    })
                } else {
                    Box::new(|| {})
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
        // As above: the queue holds this one answer.
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
pub(super) fn start_shadow_actors(
    shadows: Vec<ShadowLoop>,
    pacing: Pacing,
    events: &EventBus,
    exits: &Sender<ShadowExit>,
    stop: &Arc<AtomicBool>,
) {
    for shadow in shadows {
        let trainer = shadow.counters().trainer();
        let (events, exits, stop) = (events.clone(), exits.clone(), Arc::clone(stop));
        ShadowActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
            tch::set_num_threads(1);
            ShadowActor::new(trainer, shadow, pacing, events, exits, stop)
        });
    }
}
