//! The state of a whole cluster, taken while it stands still, to resume from
//! (in memory: writing it to disk, with the rest of a run, is the application's;
//! the CTR crate's `checkpoint` module does it).
//!
//! With [`ClusterConfig::checkpoint_every`](crate::ClusterConfig) set, every
//! trainer parks after each multiple of that many steps. Once all of them have
//! ([`Cluster::parked`]), [`Cluster::checkpoint`] reads each replica, asks
//! each learner for its [`LearnerState`] (optimizer state, data position),
//! reads EASGD's centre and each sync peer's [`PeerState`] (its round, its
//! rule's memory: BMUF's global model and block momentum), and lets the
//! trainers go on.
//! [`Cluster::start_from`] starts a cluster from such a [`ClusterState`].
//!
//! The group coordinator needs nothing of its own: its groups are a pure
//! function of the schedule's seed (in the configuration) and the round, and
//! the peers go on from their rounds. (Who was left out after a timeout is not
//! kept: a resumed run starts with everyone in.) While the trainers are parked
//! their shadow loops go on averaging, so a replica read for the checkpoint may
//! already include part of a round.

use crate::sync::{Algorithm, PeerState, SharedPeer};
use crate::trainer::{Control, SaveState};
use crate::{Cluster, ClusterOutcome, Error, Learner, LearnerState, Result};
use crossbeam_channel::bounded;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One trainer's part of a [`ClusterState`].
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerState {
    /// Steps taken.
    pub steps: u64,
    /// Examples trained.
    pub examples: u64,
    /// Its dense replica.
    pub dense: Vec<f32>,
    /// Its sync peer's state.
    pub sync: PeerState,
}

/// Everything needed to resume a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterState {
    /// Per trainer.
    pub trainers: Vec<TrainerState>,
    /// Per learner (a trainer's workers consecutive); `None` for one that had
    /// finished its data.
    pub learners: Vec<Option<LearnerState>>,
    /// EASGD's centre.
    pub center: Option<Vec<f32>>,
}

impl ClusterState {
    /// Puts each trainer's saved sync state in place of `peers` (new, not
    /// synced yet); an error if one does not fit. A foreground algorithm's
    /// trainers catch up to the furthest one's steps without syncing (see
    /// [`Cluster::start_from`]), so they all go on from the furthest one's round.
    pub(crate) fn restore_peers(&self, peers: &[SharedPeer], algorithm: &Algorithm) -> Result<()> {
        // Every peer goes on from one round: a checkpoint catches shadow
        // loops (which run at their own pace) a round apart, and a peer
        // asking for a round its group has left would wait for ever.
        let furthest = self
            .trainers
            .iter()
            .map(|t| t.sync.round)
            .max()
            .unwrap_or(0);
        for (trainer, (peer, saved)) in peers.iter().zip(&self.trainers).enumerate() {
            let mut live = peer.lock().unwrap_or_else(|p| p.into_inner());
            live.restore(&saved.sync, furthest).map_err(|e| match e {
                Error::Config { reason, .. } => Error::Config {
                    key: "resume".into(),
                    reason: format!("trainer {trainer} ({algorithm}): {reason}"),
                },
                other => other,
            })?;
        }
        Ok(())
    }

    /// The most steps any trainer had taken.
    pub(crate) fn furthest_steps(&self) -> u64 {
        self.trainers.iter().map(|t| t.steps).max().unwrap_or(0)
    }

    /// Loads the replicas and learner states into `learners` (`workers` per
    /// trainer); an error if their number or sizes do not match.
    pub(crate) fn restore<L: Learner>(&self, learners: &mut [L], workers: usize) -> Result<()> {
        let mismatch = |reason: String| Error::Config {
            key: "resume".into(),
            reason,
        };
        if learners.len() != self.learners.len() || learners.len() != self.trainers.len() * workers
        {
            return Err(mismatch(format!(
                "the checkpoint has {} trainers of {} learners, the run {} learners of {workers} per trainer",
                self.trainers.len(),
                self.learners.len(),
                learners.len(),
            )));
        }
        for (trainer, state) in self.trainers.iter().enumerate() {
            let params = learners[trainer * workers].dense_params();
            if params.numel() != state.dense.len() {
                return Err(mismatch(format!(
                    "trainer {trainer}'s replica has {} parameters in the checkpoint, {} in the model",
                    state.dense.len(),
                    params.numel()
                )));
            }
            params.load_from(&state.dense)?;
        }
        for (learner, state) in learners.iter_mut().zip(&self.learners) {
            if let Some(state) = state {
                learner.restore_state(state).map_err(Error::learner)?;
            }
        }
        Ok(())
    }
}

/// A copy of a peer's state (poisoning ignored, see [`crate::sync::SyncPeer`]).
pub(crate) fn read_peer(peer: &SharedPeer) -> PeerState {
    peer.lock().unwrap_or_else(|p| p.into_inner()).saved()
}

impl<L: Learner> ClusterOutcome<L> {
    /// The state of the cluster as it ended (`workers` learners per trainer),
    /// to resume from or to keep.
    pub fn state(&self, workers: usize) -> Result<ClusterState> {
        let trainers = self
            .learners
            .iter()
            .step_by(workers.max(1))
            .zip(&self.report.trainer_stats)
            .zip(&self.peers)
            .map(|((learner, stats), sync)| {
                let params = learner.dense_params();
                let mut dense = vec![0f32; params.numel()];
                params.copy_to(&mut dense)?;
                Ok(TrainerState {
                    steps: stats.steps,
                    examples: stats.examples,
                    dense,
                    sync: sync.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let learners = self
            .learners
            .iter()
            .map(|l| l.save_state().map(Some).map_err(Error::learner))
            .collect::<Result<Vec<_>>>()?;
        Ok(ClusterState {
            trainers,
            learners,
            center: self.center.clone(),
        })
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
    pub fn checkpoint<T>(&self, while_parked: impl FnOnce() -> T) -> Result<(ClusterState, T)> {
        if !self.parked() {
            return Err(Error::NotParked);
        }
        let trainers = self
            .inner
            .replicas
            .iter()
            .zip(&self.inner.counters)
            .zip(&self.inner.peers)
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
        let (states, total) = {
            let running = self
                .inner
                .running
                .lock()
                .map_err(|_| Error::Panicked("cluster's supervisor"))?;
            let running = running.as_ref().ok_or(Error::Stopped("cluster"))?;
            let (reply, states) = bounded(running.trainers.len());
            for trainer in &running.trainers {
                trainer.do_send(SaveState(reply.clone()));
            }
            (states, running.trainers.len())
        };
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
