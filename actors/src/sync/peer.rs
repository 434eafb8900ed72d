//! One trainer's side of synchronization: which group it is in this round (asked
//! of the group coordinator), and how a snapshot becomes a target.

use crate::coordinator::CoordinatorClient;
use crate::sync::{BmufState, Endpoint, LinkModel, Payload, Rule, ServerClient, SyncConfig};
use crate::{Error, Result};

/// A trainer's synchronization state: its endpoint, its round counter, and the
/// state its rule keeps (BMUF's block momentum, EASGD's server).
#[derive(Debug)]
pub struct SyncPeer {
    endpoint: Endpoint,
    groups: CoordinatorClient,
    round: u64,
    rule: Option<Rule>,
    bmuf: Option<BmufState>,
    server: Option<ServerClient>,
    alpha: f32,
    link: LinkModel,
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
        let bmuf = (rule == Some(Rule::Bmuf))
            .then(|| BmufState::new(config.bmuf_for(groups.group_size()), initial));
        let alpha = config.alpha_for(groups.trainers());
        Ok(Self {
            endpoint,
            groups,
            round: 0,
            rule,
            bmuf,
            server,
            alpha,
            link: config.link,
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

    /// The number of the next round (a peer coming back after it was left
    /// out skips to the round the coordinator names).
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Mean of the payloads over this round's group; `None` once syncing has
    /// stopped. A peer that does not `contribute` (its values are not finite)
    /// is left out of the mean but receives it. Members that did not answer in
    /// time are reported to the coordinator.
    pub fn group_mean(&mut self, payload: &Payload, contribute: bool) -> Result<Option<Vec<f32>>> {
        let endpoint = &self.endpoint;
        let Some(assignment) = self
            .groups
            .group_of(endpoint.id(), self.round, || endpoint.stopped())?
        else {
            return Ok(None);
        };
        let round = assignment.round;
        self.round = round + 1;
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
                if let (Some(avg), Some(bmuf)) = (average.as_mut(), self.bmuf.as_mut()) {
                    bmuf.round(avg);
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
                // To the server and back, over the simulated link.
                let bytes = std::mem::size_of_val(snapshot.values());
                std::thread::sleep(self.link.wire_time(self.id(), LinkModel::SERVER, bytes) * 2);
                let endpoint = &self.endpoint;
                let target =
                    server.elastic(snapshot.shared(), self.alpha, || endpoint.stopped())?;
                self.round += 1;
                Ok(target)
            }
            None => Ok(Some(snapshot.values().to_vec())),
        }
    }
}
