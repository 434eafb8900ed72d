//! One trainer's side of synchronization: which group it is in this round (asked
//! of the group coordinator), and how a snapshot becomes a target.
//!
//! What a peer carries from round to round (its round counter and its
//! [`SyncRule`], with the rule's memory) sits behind a lock of its own, taken
//! briefly a few times per round, so that the cluster can read it for a
//! checkpoint ([`PeerState`]) while the peer syncs on.

use crate::sync::coordinator::{Assignment, CoordinatorClient};
use crate::sync::rules::TARGET_BLOCK;
use crate::sync::transport::{sleep_until, Phase};
use crate::sync::{
    mean_into, Combined, Endpoint, Exchange, Payload, Reduce, RuleState, ServerClient, SyncRule,
};
use crate::{Error, Result, SharedGradients};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What a peer carries from one round to the next, as a checkpoint keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerState {
    /// The number of its next round.
    pub round: u64,
    /// Its rule's memory.
    pub rule: RuleState,
}

/// A peer's round counter and rule, shared with whoever reads them for
/// checkpoints.
#[derive(Debug)]
pub(crate) struct LivePeer {
    round: u64,
    rule: Box<dyn SyncRule>,
    /// Where the rule may write a block of its target (one block long):
    /// kept, not zeroed afresh on every call.
    scratch: Vec<f32>,
}

impl LivePeer {
    /// Its state as a checkpoint keeps it.
    pub(crate) fn saved(&self) -> PeerState {
        PeerState {
            round: self.round,
            rule: self.rule.state(),
        }
    }

    /// Takes `saved` back, going on from round `round`.
    pub(crate) fn restore(&mut self, saved: &PeerState, round: u64) -> Result<()> {
        self.rule.restore(&saved.rule)?;
        self.round = round;
        Ok(())
    }
}

/// A peer's live state, shared.
pub(crate) type SharedPeer = Arc<Mutex<LivePeer>>;

/// A trainer's synchronization state: its endpoint, its round, its rule and,
/// for a rule that meets a centre, EASGD's server.
#[derive(Debug)]
pub(crate) struct SyncPeer {
    endpoint: Endpoint,
    groups: CoordinatorClient,
    state: SharedPeer,
    server: Option<ServerClient>,
    /// The round of its last group exchange and the members that answered
    /// in it (`sync-sgd` exchanges its shared gradients among them).
    last: Option<(u64, Vec<usize>)>,
}

impl SyncPeer {
    /// The peer of `endpoint`'s trainer, combining by `rule`.
    ///
    /// # Errors
    ///
    /// A rule the registry cannot make for this trainer (an unknown name, a factory's
    /// error), or a resumed rule state that does not fit.
    pub(crate) fn new(
        endpoint: Endpoint,
        groups: CoordinatorClient,
        rule: Box<dyn SyncRule>,
        server: Option<ServerClient>,
    ) -> Result<Self> {
        if matches!(rule.exchange(), Exchange::Centre { .. }) && server.is_none() {
            return Err(Error::Config {
                key: "sync.algorithm".into(),
                reason: "a rule that meets a centre (EASGD) needs a parameter server".into(),
            });
        }
        Ok(Self {
            endpoint,
            groups,
            state: Arc::new(Mutex::new(LivePeer {
                round: 0,
                rule,
                scratch: vec![0.0; TARGET_BLOCK],
            })),
            server,
            last: None,
        })
    }

    /// The trainer's index.
    pub(crate) fn id(&self) -> usize {
        self.endpoint.id()
    }

    /// True once syncing has stopped for everyone.
    pub(crate) fn stopped(&self) -> bool {
        self.endpoint.stopped()
    }

    /// Its state, to read while it syncs on.
    pub(crate) fn shared_state(&self) -> SharedPeer {
        Arc::clone(&self.state)
    }

    fn lock(&self) -> MutexGuard<'_, LivePeer> {
        // Poisoning is ignored: the rule's methods do not fail, and a panic
        // in one is caught by the loop that runs the round.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of the next round (a peer coming back after it was left
    /// out skips to the round the coordinator names).
    pub(crate) fn round(&self) -> u64 {
        self.lock().round
    }

    fn set_round(&self, round: u64) {
        self.lock().round = round;
    }

    /// Takes back a result of [`SyncPeer::group_mean`] or
    /// [`SyncPeer::target`] once it has been read, for a later round to fill
    /// (see [`Endpoint::recycle`]).
    pub(crate) fn recycle(&mut self, result: Vec<f32>) {
        self.endpoint.recycle(result);
    }

    /// Mean of the payloads over this round's group (sync-sgd's gradients);
    /// `None` once syncing has stopped.
    ///
    /// # Errors
    ///
    /// A payload of another length than the group's ([`Error::Layout`]), or
    /// [`Error::NonFinite`] if nobody contributed.
    pub(crate) fn group_mean(
        &mut self,
        payload: &Payload,
        contribute: bool,
    ) -> Result<Option<Vec<f32>>> {
        let combined = self.group_reduce(payload, contribute, &mean_into)?;
        Ok(combined.map(|combined| combined.into_vec(self.endpoint.take_spare())))
    }

    /// The payloads over this round's group, combined element by element by
    /// `reduce`; `None` once syncing has stopped. A peer that does not
    /// `contribute` (its values are not finite) is left out but receives the
    /// result. Members that did not answer in time are reported to the
    /// coordinator.
    fn group_reduce(
        &mut self,
        payload: &Payload,
        contribute: bool,
        reduce: &Reduce,
    ) -> Result<Option<Combined>> {
        let Some(assignment) = self.next_assignment()? else {
            return Ok(None);
        };
        let round = assignment.round;
        self.enter(round);
        let Some(outcome) =
            self.endpoint
                .group_reduce(round, &assignment.group, payload, contribute, reduce)?
        else {
            return Ok(None);
        };
        // The members that answered, for the round's further exchanges.
        let answered = assignment.group.iter().copied();
        let answered = answered.filter(|m| !outcome.unresponsive.contains(m));
        self.last = Some((round, answered.collect()));
        for &member in &outcome.unresponsive {
            self.groups
                .report_unresponsive(member, round, self.endpoint.id());
        }
        Ok(Some(outcome.combined))
    }

    /// `sync-sgd`'s shared gradients in the group of its last
    /// [`SyncPeer::group_mean`]: every member's `mine` combined, each row the
    /// mean over the members that sent theirs; of those rows, the ones this
    /// member applies (see the `shared` module). `None` once stopped, or
    /// before any group mean.
    ///
    /// # Errors
    ///
    /// As [`SyncPeer::group_mean`].
    pub(crate) fn combine_shared(
        &mut self,
        mine: &SharedGradients,
    ) -> Result<Option<SharedGradients>> {
        let Some((round, group)) = self.last.clone() else {
            return Ok(None);
        };
        let place = group.iter().position(|&t| t == self.id()).unwrap_or(0);
        let sent = self
            .endpoint
            .exchange(round, Phase::Shared, &group, mine.encode().into())?;
        let Some((messages, _late)) = sent else {
            return Ok(None);
        };
        let mut all = vec![mine.clone()];
        for message in &messages {
            all.push(SharedGradients::decode(
                message.values(),
                mine.width,
                message.from,
            )?);
        }
        Ok(Some(SharedGradients::combine(&all, place, group.len())))
    }

    /// Returns once every member of the group of its last
    /// [`SyncPeer::combine_shared`] has applied its rows (or the timeout
    /// passed), so that the next step reads them all.
    ///
    /// # Errors
    ///
    /// A peer whose state is poisoned by a panic.
    pub(crate) fn shared_applied(&mut self) -> Result<()> {
        if let Some((round, group)) = self.last.clone() {
            self.endpoint
                .exchange(round, Phase::Applied, &group, Arc::from([]))?;
        }
        Ok(())
    }

    /// One round's combination of `snapshot` with the group's snapshots (or,
    /// for EASGD, with the server's centre), before the rule turns it into
    /// a target ([`SyncPeer::target_blocks`]); `None` once syncing has
    /// stopped. A snapshot that is not finite does not `contribute`: it is
    /// left out of the group's combination (and never sent to EASGD's
    /// server: [`Error::NonFinite`]).
    ///
    /// # Errors
    ///
    /// As [`SyncPeer::group_mean`]; under EASGD, a server shard that failed or stopped;
    /// [`Error::NonFinite`] if nobody contributed.
    pub(crate) fn combine(
        &mut self,
        snapshot: &Payload,
        contribute: bool,
    ) -> Result<Option<Combined>> {
        let exchange = self.lock().rule.exchange();
        let combined = match exchange {
            Exchange::Group => {
                let state = Arc::clone(&self.state);
                let reduce = move |out: &mut [f32], contributions: &[&[f32]]| {
                    let peer = state.lock().unwrap_or_else(|p| p.into_inner());
                    peer.rule.reduce(out, contributions);
                };
                self.group_reduce(snapshot, contribute, &reduce)?
            }
            Exchange::Centre { alpha } => self.elastic(snapshot, contribute, alpha)?,
        };
        let len = snapshot.values().len();
        match combined {
            Some(combined) if combined.len() != len => Err(Error::Layout(format!(
                "a round combined {} values for a snapshot of {len}",
                combined.len()
            ))),
            combined => Ok(combined),
        }
    }

    /// Turns `combined` into the replica's target through the rule, block by
    /// block in order, handing each block to `write(offset, block)` while it
    /// is in cache (a shadow round writes it back at once).
    ///
    /// # Errors
    ///
    /// A rule that fails on the combined vector (a length it does not expect), or `write`'s
    /// own error.
    pub(crate) fn target_blocks(
        &self,
        combined: &Combined,
        mut write: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        for (offset, part) in combined.parts() {
            self.target_span(offset, part, &mut write)?;
        }
        Ok(())
    }

    /// [`SyncPeer::target_blocks`] for one span of the combined vector, the
    /// values from `offset` on.
    ///
    /// # Errors
    ///
    /// As [`SyncPeer::target_blocks`].
    pub(crate) fn target_span(
        &self,
        offset: usize,
        combined: &[f32],
        mut write: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        let mut peer = self.lock();
        let LivePeer { rule, scratch, .. } = &mut *peer;
        let blocks = (offset..)
            .step_by(TARGET_BLOCK)
            .zip(combined.chunks(TARGET_BLOCK));
        for (at, values) in blocks {
            write(at, rule.target(at, values, &mut scratch[..values.len()]))?;
        }
        Ok(())
    }

    /// Combines `contributions` element by element into `out` as the rule
    /// does (a group's mean, for the rules that average).
    pub(crate) fn reduce(&self, out: &mut [f32], contributions: &[&[f32]]) {
        self.lock().rule.reduce(out, contributions);
    }

    /// Whether its rule combines with the group (not with a centre).
    pub(crate) fn meets_group(&self) -> bool {
        matches!(self.lock().rule.exchange(), Exchange::Group)
    }

    /// Its group in its next round (or, coming back after it was left out,
    /// in a later round); `None` once syncing has stopped. The round is not
    /// entered yet ([`SyncPeer::enter`]).
    pub(crate) fn next_assignment(&self) -> Result<Option<Assignment>> {
        let endpoint = &self.endpoint;
        self.groups
            .group_of(endpoint.id(), self.round(), || endpoint.stopped())
    }

    /// Takes part in `round`: its next round is the one after.
    pub(crate) fn enter(&mut self, round: u64) {
        self.set_round(round + 1);
        self.last = None;
    }

    /// Tells the coordinator that `member` did not take part in `round`.
    pub(crate) fn report_unresponsive(&self, member: usize, round: u64) {
        self.groups
            .report_unresponsive(member, round, self.endpoint.id());
    }

    /// Counts `bytes` as sent by this peer (a round that moved them without
    /// the transport, see the shadow hub).
    pub(crate) fn count_sent(&self, bytes: u64) {
        self.endpoint.count_sent(bytes);
    }

    /// One round of the rule, whole: the target for `snapshot` (see
    /// [`SyncPeer::combine`]), for a foreground round to load.
    ///
    /// # Errors
    ///
    /// As [`SyncPeer::combine`] and [`SyncPeer::target_blocks`].
    pub(crate) fn target(
        &mut self,
        snapshot: &Payload,
        contribute: bool,
    ) -> Result<Option<Vec<f32>>> {
        let Some(combined) = self.combine(snapshot, contribute)? else {
            return Ok(None);
        };
        let mut target = self.endpoint.take_spare();
        target.resize(combined.len(), 0.0);
        self.target_blocks(&combined, |at, block| {
            target[at..at + block.len()].copy_from_slice(block);
            Ok(())
        })?;
        if let Some(spare) = combined.into_spare() {
            self.endpoint.recycle(spare);
        }
        Ok(Some(target))
    }

    /// EASGD's elastic step of `snapshot` against the server's centre.
    fn elastic(
        &mut self,
        snapshot: &Payload,
        contribute: bool,
        alpha: f32,
    ) -> Result<Option<Combined>> {
        if !self.centre_ready(contribute)? {
            return Ok(None);
        }
        let round = self.round();
        self.set_round(round + 1);
        let (Some(server), endpoint) = (&self.server, &self.endpoint) else {
            return Ok(None);
        };
        let stopped = || endpoint.stopped();
        if !sleep_until(server.simulated_arrival(self.id()), stopped) {
            return Ok(None);
        }
        let step = server.elastic(snapshot.shared(), alpha, self.id(), round, stopped);
        self.counting_centre_step(step, snapshot.values().len())
    }

    /// The target of `step`, with the bytes it sent the centre counted as
    /// sent (and its replica of `len` values, 4 bytes a value, before
    /// compression).
    fn counting_centre_step(
        &self,
        step: Result<Option<(Combined, u64)>>,
        len: usize,
    ) -> Result<Option<Combined>> {
        let Some((target, sent)) = step? else {
            return Ok(None);
        };
        // Both ways, as a group round's phases: the replica to the centre,
        // and the answer (the target, or its move encoded as the replica was).
        self.endpoint
            .count_sent_encoded(2 * sent, 2 * 4 * len as u64);
        Ok(Some(target))
    }

    /// Counts an elastic step of `len` values made here: the replica to the
    /// centre and the target back.
    pub(crate) fn count_centre_step(&self, len: usize) {
        self.count_sent(2 * 4 * len as u64);
    }

    /// Whether a round against the centre goes ahead: not once stopped;
    /// [`Error::NonFinite`] for a snapshot that does not `contribute` (never
    /// sent to the server).
    pub(crate) fn centre_ready(&self, contribute: bool) -> Result<bool> {
        if self.endpoint.stopped() {
            return Ok(false);
        }
        if !contribute {
            return Err(Error::NonFinite {
                group: vec![self.id()],
            });
        }
        Ok(true)
    }

    /// For a rule that meets a centre whose every shard this process
    /// serves, uncompressed: the server and the elasticity, to make its
    /// steps here ([`ServerClient::elastic_on_this_thread`]).
    pub(crate) fn centre_here(&self) -> Option<(ServerClient, f32)> {
        let Exchange::Centre { alpha } = self.lock().rule.exchange() else {
            return None;
        };
        let server = self
            .server
            .as_ref()
            .filter(|s| s.all_here() && !s.compressed())?;
        Some((server.clone(), alpha))
    }

    /// For a rule that meets a centre: when its elastic step, sent now, is
    /// off the simulated wire (the server's links are reserved meanwhile).
    pub(crate) fn centre_due(&self) -> Instant {
        match &self.server {
            Some(server) => server.simulated_arrival(self.id()),
            None => Instant::now(),
        }
    }

    /// [`SyncPeer::combine`] for a rule that meets a centre, in `round`,
    /// once the elastic step is off the wire ([`SyncPeer::centre_due`]).
    pub(crate) fn centre_step(
        &mut self,
        snapshot: &Payload,
        contribute: bool,
        round: u64,
    ) -> Result<Option<Combined>> {
        let Exchange::Centre { alpha } = self.lock().rule.exchange() else {
            return Err(Error::Internal(
                "a centre step of a rule that averages a group",
            ));
        };
        if !self.centre_ready(contribute)? {
            return Ok(None);
        }
        let (Some(server), endpoint) = (&self.server, &self.endpoint) else {
            return Ok(None);
        };
        let stopped = || endpoint.stopped();
        let step = server.elastic(snapshot.shared(), alpha, self.id(), round, stopped);
        self.counting_centre_step(step, snapshot.values().len())
    }
}
