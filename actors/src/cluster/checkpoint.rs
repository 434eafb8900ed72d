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
use crate::{Error, Learner, LearnerState, Result};

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
