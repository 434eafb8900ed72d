//! Your own components beside a cluster: monitors that see every event from
//! the first step and can steer the run.
//!
//! A [`Monitor`] runs on a thread of its own, fed the cluster's events in the
//! order they were published (from the first step: it is subscribed before
//! the cluster starts), with a [`ClusterControl`] to act on what it sees:
//! stop the run, pause and resume the trainers, set their learning rate.
//! An actix actor can take the events instead, as a `Recipient<Event>`.
//! Both are added with [`ClusterBuilder`](crate::ClusterBuilder).
//!
//! A monitor that falls behind misses events rather than slowing the
//! trainers (see [`EventBus`](crate::events::EventBus)).

use crate::events::Event;
use crate::sync::Fabric;
use crate::trainer::Control;
use actix::Recipient;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Watches a running cluster and may steer it.
pub trait Monitor: Send + 'static {
    /// One event, in the order published.
    fn on_event(&mut self, event: &Event, control: &ClusterControl);

    /// The cluster has ended (every event before this was seen).
    fn on_end(&mut self) {}
}

impl<M: Monitor + ?Sized> Monitor for Box<M> {
    fn on_event(&mut self, event: &Event, control: &ClusterControl) {
        (**self).on_event(event, control);
    }

    fn on_end(&mut self) {
        (**self).on_end();
    }
}

/// What a monitor (or anyone holding it) can do to a running cluster.
#[derive(Clone)]
pub struct ClusterControl {
    /// The cluster's stop flag, which also ends the syncing (a foreground
    /// algorithm's first trainer to finish raises it too).
    stop: Arc<AtomicBool>,
    /// Whether [`ClusterControl::stop`] was called.
    requested: Arc<AtomicBool>,
    fabric: Arc<dyn Fabric>,
    trainers: Arc<RwLock<Vec<Recipient<Control>>>>,
}

impl std::fmt::Debug for ClusterControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterControl")
            .field("stopped", &self.stopped())
            .finish()
    }
}

impl ClusterControl {
    pub(crate) fn new(
        stop: Arc<AtomicBool>,
        requested: Arc<AtomicBool>,
        fabric: Arc<dyn Fabric>,
    ) -> Self {
        Self {
            stop,
            requested,
            fabric,
            trainers: Arc::default(),
        }
    }

    /// The flag that ends syncing, and the one [`ClusterControl::stop`]
    /// raises alone (trainers' sleeps end on it).
    pub(crate) fn stop_flags(&self) -> (&Arc<AtomicBool>, &Arc<AtomicBool>) {
        (&self.stop, &self.requested)
    }

    /// Connects trainers, once started (messages sent before are dropped).
    pub(crate) fn connect(&self, trainers: Vec<Recipient<Control>>) {
        let mut connected = self.trainers.write().unwrap_or_else(|p| p.into_inner());
        connected.extend(trainers);
    }

    pub(crate) fn send(&self, message: Control) {
        let trainers = self.trainers.read().unwrap_or_else(|p| p.into_inner());
        for trainer in trainers.iter() {
            trainer.do_send(message);
        }
    }

    /// Pauses every trainer (within one chunk of steps).
    pub fn pause(&self) {
        self.send(Control::Pause);
    }

    /// Resumes every trainer.
    pub fn resume(&self) {
        self.send(Control::Resume);
    }

    /// Sets every trainer's learning rate.
    pub fn set_learning_rate(&self, lr: f64) {
        self.send(Control::SetLearningRate(lr));
    }

    /// Ends syncing and stops every trainer, keeping what they trained.
    pub fn stop(&self) {
        self.requested.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        self.fabric.stop_everywhere();
        self.send(Control::Stop);
    }

    /// Whether the cluster was stopped ([`ClusterControl::stop`], by a
    /// monitor or whoever runs it). Not when syncing ended because a trainer
    /// finished: the others then train on to the end of their data.
    pub fn stopped(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }
}

/// A component fed the events of a cluster: a [`Monitor`] or an actor.
pub(crate) enum Watcher {
    Monitor(Box<dyn Monitor>),
    Actor(Recipient<Event>),
}

/// How often a watcher's thread looks whether the cluster has ended.
const POLL: Duration = Duration::from_millis(20);

impl Watcher {
    /// Runs on a thread of its own, fed `events` until `ended` is raised and
    /// every event published before is passed on.
    pub(crate) fn spawn(
        self,
        events: Receiver<Event>,
        control: ClusterControl,
        ended: Arc<AtomicBool>,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("shadowsync-monitor".into())
            .spawn(move || {
                let mut watcher = self;
                loop {
                    match events.recv_timeout(POLL) {
                        Ok(event) => watcher.pass(&event, &control),
                        Err(RecvTimeoutError::Timeout) if !ended.load(Ordering::SeqCst) => {}
                        Err(_) => break,
                    }
                }
                if let Watcher::Monitor(monitor) = &mut watcher {
                    monitor.on_end();
                }
            })
    }

    fn pass(&mut self, event: &Event, control: &ClusterControl) {
        match self {
            Watcher::Monitor(monitor) => monitor.on_event(event, control),
            Watcher::Actor(actor) => actor.do_send(event.clone()),
        }
    }
}
