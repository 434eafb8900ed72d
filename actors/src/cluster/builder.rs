//! [`ClusterBuilder`]: a cluster's learners, configuration, fabric, resumed
//! state and monitors, before it starts.

use super::checkpoint::ClusterState;
use super::config::ClusterConfig;
use super::handle::Cluster;
use crate::events::Event;
use crate::monitor::{Monitor, Watcher};
use crate::sync::{Fabric, InProcess};
use crate::{Learner, Result};
use actix::prelude::*;
use std::sync::Arc;

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
#[must_use = "a ClusterBuilder does nothing until `start` is called"]
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
    ///
    /// # Errors
    ///
    /// A configuration that cannot run (an error naming its key: an
    /// unknown rule or schedule, groups that do not divide the trainers, a
    /// schedule that is no partition), learners whose layouts differ, a
    /// resumed state that does not fit, or a thread that cannot start.
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

/// The shorthand of [`ClusterBuilder`].
impl<L: Learner> Cluster<L> {
    /// Starts training `learners` under `config`: one per trainer, or with
    /// `config.workers = W`, W consecutive learners per trainer whose dense
    /// parameters are one buffer (built with [`FlatParams::adopt_shared`](crate::FlatParams::adopt_shared)).
    /// Every replica starts from the first one's parameters. (The shorthand
    /// of [`ClusterBuilder`] with nothing else.)
    ///
    /// # Errors
    ///
    /// As [`ClusterBuilder::start`].
    pub fn start(config: ClusterConfig, learners: Vec<L>) -> Result<Self> {
        ClusterBuilder::new(config, learners).start()
    }
}
