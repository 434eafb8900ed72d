//! One trainer's side of synchronization: which group it is in this round (asked
//! of the group coordinator), and how a snapshot becomes a target.
//!
//! What a peer carries from round to round ([`PeerState`]: its round counter,
//! BMUF's memory) sits behind a lock of its own, taken once per round, so that
//! the cluster can read it for a checkpoint while the peer syncs on.

use crate::coordinator::CoordinatorClient;
use crate::sync::{BmufParams, BmufState, Endpoint, Payload, Rule, ServerClient, SyncConfig};
use crate::{Error, Result};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a peer carries from one round to the next.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerState {
    /// The number of its next round.
    pub round: u64,
    /// BMUF's memory, for `*-bmuf`.
    pub bmuf: Option<BmufState>,
}

impl PeerState {
    /// Whether `saved` can take this state's place: both of the same
    /// algorithm (BMUF's memory or none) and parameter count.
    pub fn fits(&self, saved: &PeerState) -> bool {
        match (&self.bmuf, &saved.bmuf) {
            (None, None) => true,
            (Some(now), Some(saved)) => {
                saved.global.len() == now.global.len() && saved.momentum.len() == now.global.len()
            }
            _ => false,
        }
    }
}

/// A peer's state, shared with whoever reads it for checkpoints.
pub type SharedPeerState = Arc<Mutex<PeerState>>;

/// A trainer's synchronization state: its endpoint, its [`PeerState`], and
/// what its rule needs (BMUF's parameters, EASGD's server).
#[derive(Debug)]
pub struct SyncPeer {
    endpoint: Endpoint,
    groups: CoordinatorClient,
    state: SharedPeerState,
    rule: Option<Rule>,
    bmuf: BmufParams,
    server: Option<ServerClient>,
    alpha: f32,
}

impl SyncPeer {
    /// The peer of `endpoint`'s trainer, starting from parameters `initial`.
    pub fn new(
        endpoint: Endpoint,
        groups: CoordinatorClient,
        config: &SyncConfig,
        initial: &[f32],
        server: Option<ServerClient>,
    ) -> Result<Self> {
        let rule = config.algorithm.rule();
        if rule == Some(Rule::Easgd) && server.is_none() {
            return Err(Error::Config {
                key: "sync.algorithm".into(),
                reason: "EASGD needs a parameter server".into(),
            });
        }
        let state = PeerState {
            round: 0,
            bmuf: (rule == Some(Rule::Bmuf)).then(|| BmufState::new(initial)),
        };
        let bmuf = config.bmuf_for(groups.group_size());
        let alpha = config.alpha_for(groups.trainers());
        Ok(Self {
            endpoint,
            groups,
            state: Arc::new(Mutex::new(state)),
            rule,
            bmuf,
            server,
            alpha,
        })
    }

    /// The trainer's index.
    pub fn id(&self) -> usize {
        self.endpoint.id()
    }

    /// Members of each of its groups.
    pub fn group_size(&self) -> usize {
        self.groups.group_size()
    }

    /// True once syncing has stopped for everyone.
    pub fn stopped(&self) -> bool {
        self.endpoint.stopped()
    }

    /// Its state, to read while it syncs on.
    pub fn shared_state(&self) -> SharedPeerState {
        Arc::clone(&self.state)
    }

    fn lock(&self) -> MutexGuard<'_, PeerState> {
        // Poisoning is ignored: the lock guards plain numbers, and nothing
        // that can fail runs while it is held.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of the next round (a peer coming back after it was left
    /// out skips to the round the coordinator names).
    pub fn round(&self) -> u64 {
        self.lock().round
    }

    fn set_round(&self, round: u64) {
        self.lock().round = round;
    }

    /// Mean of the payloads over this round's group; `None` once syncing has
    /// stopped. A peer that does not `contribute` (its values are not finite)
    /// is left out of the mean but receives it. Members that did not answer in
    /// time are reported to the coordinator.
    pub fn group_mean(&mut self, payload: &Payload, contribute: bool) -> Result<Option<Vec<f32>>> {
        let endpoint = &self.endpoint;
        let Some(assignment) = self
            .groups
            .group_of(endpoint.id(), self.round(), || endpoint.stopped())?
        else {
            return Ok(None);
        };
        let round = assignment.round;
        self.set_round(round + 1);
        let Some(outcome) =
            self.endpoint
                .group_mean(round, &assignment.group, payload, contribute)?
        else {
            return Ok(None);
        };
        for &member in &outcome.unresponsive {
            self.groups
                .report_unresponsive(member, round, self.endpoint.id());
        }
        Ok(Some(outcome.mean))
    }

    /// One round of the rule: the target for `snapshot`; `None` once syncing has
    /// stopped. A snapshot that is not finite does not `contribute`: it is left
    /// out of the group's mean (and never sent to EASGD's server:
    /// [`Error::NonFinite`]).
    pub fn target(&mut self, snapshot: &Payload, contribute: bool) -> Result<Option<Vec<f32>>> {
        match self.rule {
            Some(Rule::Ma) => self.group_mean(snapshot, contribute),
            Some(Rule::Bmuf) => {
                let mut average = self.group_mean(snapshot, contribute)?;
                let params = self.bmuf;
                if let (Some(avg), Some(bmuf)) = (average.as_mut(), self.lock().bmuf.as_mut()) {
                    bmuf.round(params, avg);
                }
                Ok(average)
            }
            Some(Rule::Easgd) => {
                if self.endpoint.stopped() {
                    return Ok(None);
                }
                if !contribute {
                    return Err(Error::NonFinite {
                        group: vec![self.id()],
                    });
                }
                let Some(server) = &self.server else {
                    return Ok(None);
                };
                let round = self.round();
                self.set_round(round + 1);
                let endpoint = &self.endpoint;
                server.elastic(snapshot.shared(), self.alpha, self.id(), round, || {
                    endpoint.stopped()
                })
            }
            None => Ok(Some(snapshot.values().to_vec())),
        }
    }
}
