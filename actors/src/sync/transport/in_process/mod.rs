//! Moving parameter payloads between trainers' sync endpoints.
//!
//! [`mesh`] makes one [`Endpoint`] per trainer, connected all-to-all by bounded
//! crossbeam channels. A [`Payload`] is a shared `Arc<[f32]>`: sending it to the
//! `m − 1` other members of a group copies nothing, and once they have all read it
//! its owner refills the same buffer for the next round. [`Endpoint::group_mean`] is a
//! reduce-scatter then all-gather, as a ring all-reduce does: each member averages
//! only its 1/m slice of the vector over the group's payloads and sends the result
//! to the others, so the work per member stays one pass over the vector whatever
//! the group size. Messages of later rounds or phases that arrive early are kept
//! for later; no lock is shared between trainers.
//!
//! A member that does not answer within the endpoint's timeout
//! ([`Endpoint::set_timeout`]) is left out of the round: the others average
//! without its payload and name it in [`GroupMean::unresponsive`]. The slice it
//! owed them they compute from the payloads they hold when those are whole (in
//! one process a message shares its sender's whole buffer), or else keep
//! their own values of it for that round (across processes only each
//! member's slice crosses: a real reduce-scatter). Its messages that arrive
//! once their round is over are dropped, decoded first when compressed: a
//! codec with memory of its link (top-k's error feedback) stays in step with
//! the sender's.
//!
//! A [`LinkModel`] simulates the network a real cluster has: each message is
//! delivered `latency + bytes / bandwidth` after it is sent (messages leaving one
//! endpoint in one phase are serialized, as on one NIC), optionally slower on one
//! trainer's link. The bytes counted are those a real reduce-scatter/all-gather
//! moves: `2 (m − 1) / m` of the vector per member and round. The receiver really waits until delivery time, so the cost

use super::codec::LinkCodecs;
use super::link::slice;
use super::link::{sleep_until, LinkModel, POLL};
use super::message::{Body, Message, Outgoing, Payload, Phase, Reduce};
use super::Codecs;
use crate::sync::{mean_into, Combined, SharedSlice, SyncConfig};
use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a message reaches one trainer.
#[derive(Debug, Clone)]
enum Route {
    /// Into its endpoint's inbox, in this process.
    Local(Sender<Message>),
    /// Through this process's communication thread, to another process.
    Remote(Sender<Outgoing>),
}

/// One trainer's connection to all others.
#[derive(Debug)]
pub struct Endpoint {
    id: usize,
    peers: Vec<Route>,
    inbox: Receiver<Message>,
    early: Vec<Message>,
    link: LinkModel,
    stop: Arc<AtomicBool>,
    bytes_sent: Arc<AtomicU64>,
    /// The bytes sent, counted before compression.
    values_sent: Arc<AtomicU64>,
    /// The codecs of its links (none: uncompressed).
    codecs: Option<LinkCodecs>,
    /// Buffers of the compressed contributions a round decoded, reused.
    decoded: Vec<Vec<f32>>,
    timeout: Option<Duration>,
    /// Results handed back ([`Endpoint::recycle`]), for the next rounds to
    /// fill (a foreground EASGD round fills two: the server's target and
    /// the rule's).
    spares: Vec<Vec<f32>>,
    /// This member's reduced slice of the last round, refilled by the next
    /// once the others have read it.
    reduced: Payload,
}

/// The outcome of [`Endpoint::group_mean`].
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMean {
    /// The mean over the members that contributed in time.
    pub mean: Vec<f32>,
    /// Members that did not answer in time.
    pub unresponsive: Vec<usize>,
}

/// The outcome of [`Endpoint::group_reduce`].
#[derive(Debug, Clone)]
pub struct GroupReduced {
    /// The reduction over the members that contributed in time, as the
    /// members' slices (shared, not assembled).
    pub combined: Combined,
    /// Members that did not answer in time.
    pub unresponsive: Vec<usize>,
}

/// Connects `n` endpoints all-to-all; raising `stop` makes every pending
/// collective return `Ok(None)` promptly.
pub fn mesh(n: usize, link: LinkModel, stop: Arc<AtomicBool>) -> Vec<Endpoint> {
    let (endpoints, _) = mesh_part(n, 0..n, None, link, stop);
    endpoints
}

/// The endpoints of trainers `local` out of `n`, with the senders into their
/// inboxes; messages to the other trainers go to `remote` (required if there
/// are any).
pub(crate) fn mesh_part(
    n: usize,
    local: std::ops::Range<usize>,
    remote: Option<Sender<Outgoing>>,
    link: LinkModel,
    stop: Arc<AtomicBool>,
) -> (Vec<Endpoint>, Vec<Sender<Message>>) {
    // A round puts at most 2(n − 1) messages in an inbox and a trainer is never
    // more than a round or two ahead of a peer: 8n slots are room for that while
    // still bounding memory.
    let (senders, receivers): (Vec<_>, Vec<_>) =
        local.clone().map(|_| bounded(8 * n.max(1))).unzip();
    let peers: Vec<Route> = (0..n)
        .map(|t| match (local.contains(&t), &remote) {
            (false, Some(outbox)) => Route::Remote(outbox.clone()),
            _ => Route::Local(senders[t.saturating_sub(local.start)].clone()),
        })
        .collect();
    let endpoints = receivers
        .into_iter()
        .zip(local)
        .map(|(inbox, id)| Endpoint {
            id,
            peers: peers.clone(),
            inbox,
            early: Vec::new(),
            link,
            stop: Arc::clone(&stop),
            bytes_sent: Arc::new(AtomicU64::new(0)),
            values_sent: Arc::new(AtomicU64::new(0)),
            codecs: None,
            decoded: Vec::new(),
            timeout: None,
            spares: Vec::new(),
            reduced: Payload::zeros(0),
        })
        .collect();
    (endpoints, senders)
}

impl Endpoint {
    /// This trainer's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// A shared counter of the payload bytes this endpoint sends.
    pub fn bytes_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.bytes_sent)
    }

    /// A shared counter of the payload bytes this endpoint sends, counted
    /// before compression (as `f32`).
    pub fn values_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.values_sent)
    }

    /// Counts `bytes` as sent (a round that moved them without this
    /// endpoint's messages; uncompressed).
    pub fn count_sent(&self, bytes: u64) {
        self.count_sent_encoded(bytes, bytes);
    }

    /// Counts `wire` bytes as sent, `values` bytes before compression (a
    /// round that moved them without this endpoint's messages).
    pub fn count_sent_encoded(&self, wire: u64, values: u64) {
        self.bytes_sent.fetch_add(wire, Ordering::Relaxed);
        self.values_sent.fetch_add(values, Ordering::Relaxed);
    }

    /// Compresses the values of its group rounds with the codec
    /// `config.compression` names (an instance for each end of each link in
    /// each phase, starting from `initial`, the parameters every replica
    /// starts from), and decodes its peers' with it.
    ///
    /// # Errors
    ///
    /// As [`Codecs::make`].
    pub fn compress_with(
        &mut self,
        codecs: &Codecs,
        config: &SyncConfig,
        initial: &[f32],
    ) -> Result<()> {
        self.codecs = LinkCodecs::new(codecs, config, initial)?;
        Ok(())
    }

    /// The bodies of the messages carrying `data[span_of(k)]` to the `k`-th
    /// member of `group` (none to this one), the values at `offset(span)`
    /// of the synced vector: encoded if compressing.
    fn bodies(
        &mut self,
        phase: Phase,
        group: &[usize],
        data: &Arc<[f32]>,
        span_of: impl Fn(usize) -> std::ops::Range<usize>,
        offset: impl Fn(&std::ops::Range<usize>) -> usize,
    ) -> Result<Vec<Body>> {
        let Some(codecs) = &mut self.codecs else {
            let body = |k| Body::Values {
                data: Arc::clone(data),
                span: span_of(k),
            };
            return Ok((0..group.len()).map(body).collect());
        };
        let mut once: Option<(std::ops::Range<usize>, Body)> = None;
        let mut bodies = Vec::with_capacity(group.len());
        for (k, &peer) in group.iter().enumerate() {
            let span = span_of(k);
            if peer == self.id || span.is_empty() {
                bodies.push(Body::whole(Arc::from([])));
                continue;
            }
            // A stateless codec encodes a span sent to many peers once.
            let body = match &once {
                Some((sent, body)) if *sent == span => body.clone(),
                _ => codecs.encode(peer, phase, offset(&span), &data[span.clone()])?,
            };
            if codecs.stateless() {
                once = Some((span, body.clone()));
            }
            bodies.push(body);
        }
        Ok(bodies)
    }

    /// Waits for each phase of a round at most `timeout` (`None`: for ever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// True once the mesh was stopped: no more rounds will complete.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Mean of the payloads over `group` (which must contain this endpoint) in
    /// round `round`; `Ok(None)` if the mesh was stopped while waiting. See
    /// [`Endpoint::group_reduce`].
    ///
    /// # Errors
    ///
    /// As [`Endpoint::group_reduce`].
    pub fn group_mean(
        &mut self,
        round: u64,
        group: &[usize],
        payload: &Payload,
        contribute: bool,
    ) -> Result<Option<GroupMean>> {
        let reduced = self.group_reduce(round, group, payload, contribute, &mean_into)?;
        Ok(reduced.map(
            |GroupReduced {
                 combined,
                 unresponsive,
             }| GroupMean {
                mean: combined.into_vec(self.take_spare()),
                unresponsive,
            },
        ))
    }

    /// Takes back a mean this endpoint returned, once read: the next round
    /// fills it instead of a fresh vector (a fresh 1.9 MB one may come from
    /// the kernel, ~475 pages to fault in, once per round).
    pub fn recycle(&mut self, mean: Vec<f32>) {
        const KEPT: usize = 2;
        if self.spares.len() == KEPT {
            self.spares.remove(0);
        }
        self.spares.push(mean);
    }

    /// A buffer handed back by [`Endpoint::recycle`], for a result of this
    /// round to fill (empty if none was).
    pub(crate) fn take_spare(&mut self) -> Vec<f32> {
        self.spares.pop().unwrap_or_default()
    }

    /// The payloads over `group` in round `round`, combined element by element
    /// by `reduce` (`reduce(out, contributions)`: each member reduces its own
    /// slice), as the members' reduced slices; `Ok(None)` if the mesh was
    /// stopped while waiting.
    ///
    /// A member that does not `contribute` (its parameters diverged) still takes
    /// part in the round and receives the mean of the others, but its payload is
    /// left out of it; [`Error::NonFinite`] if nobody contributed. A member that
    /// does not answer within the timeout is left out too, and named.
    ///
    /// # Errors
    ///
    /// A group without this endpoint or a payload of another length ([`Error::Layout`]), or
    /// [`Error::NonFinite`] if nobody contributed. (A member that does not answer in time
    /// is left out and named, not an error.)
    pub fn group_reduce(
        &mut self,
        round: u64,
        group: &[usize],
        payload: &Payload,
        contribute: bool,
        reduce: &Reduce,
    ) -> Result<Option<GroupReduced>> {
        let Some(me) = group.iter().position(|&t| t == self.id) else {
            return Err(Error::Layout(format!(
                "trainer {} is not in its group {group:?}",
                self.id
            )));
        };
        if self.stopped() {
            return Ok(None);
        }
        let len = payload.values().len();
        if len == 0 {
            return Ok(Some(GroupReduced {
                combined: Combined::whole(Vec::new()),
                unresponsive: Vec::new(),
            }));
        }
        let round = Round {
            round,
            group,
            me,
            payload,
            contribute,
        };
        let Some(Scattered {
            payloads,
            mut unresponsive,
            reduced,
        }) = self.scatter_reduce(&round, reduce)?
        else {
            return Ok(None);
        };
        let Some((mut parts, late)) = self.all_gather(&round, reduced)? else {
            return Ok(None);
        };
        for member in late {
            parts.push(round.slice_of(member, &payloads, reduce));
            if !unresponsive.contains(&member) {
                unresponsive.push(member);
            }
        }
        Ok(Some(GroupReduced {
            combined: Combined::tiled(len, parts)?,
            unresponsive,
        }))
    }

    /// Reduce-scatter: every member gets the others' values of its own slice
    /// (in one process the whole payload, shared, not copied; none from a
    /// member that abstains) and reduces only that slice. Returns the
    /// messages received, the members that sent none, and this member's
    /// reduced slice; `Ok(None)` once stopped.
    fn scatter_reduce(&mut self, round: &Round, reduce: &Reduce) -> Result<Option<Scattered>> {
        let (group, len, m) = (round.group, round.len(), round.group.len());
        let sent = round.payload.shared();
        let span_of = |k: usize| {
            if round.contribute {
                slice(len, m, k)
            } else {
                0..0
            }
        };
        let bodies = self.bodies(Phase::Scatter, group, &sent, span_of, |s| s.start)?;
        if !self.broadcast(round.round, Phase::Scatter, group, bodies)? {
            return Ok(None);
        }
        let Some((payloads, unresponsive)) = self.collect(round.round, Phase::Scatter, group)?
        else {
            return Ok(None);
        };
        let mine = slice(len, m, round.me);
        let own = &round.payload.values()[mine.clone()];
        // Compressed contributions, decoded into the buffers of the last
        // round (every value is written).
        let mut decoded = std::mem::take(&mut self.decoded);
        let encoded = payloads
            .iter()
            .filter(|m| m.len() > 0 && m.values().is_empty());
        decoded.resize_with(encoded.clone().count(), Vec::new);
        for (values, message) in decoded.iter_mut().zip(encoded) {
            values.resize(own.len(), 0.0);
            decode_into(self.codecs.as_mut(), message, mine.start, values)?;
        }
        // The contributors' values of this member's slice, its own first.
        let mut contributions: Vec<&[f32]> = Vec::with_capacity(m);
        if round.contribute {
            contributions.push(own);
        }
        for message in payloads.iter().filter(|m| !m.values().is_empty()) {
            if message.values().len() != mine.len() {
                return Err(Error::Layout(format!(
                    "trainer {} sent {} values of trainer {}'s slice of {}",
                    message.from,
                    message.values().len(),
                    self.id,
                    mine.len()
                )));
            }
            contributions.push(message.values());
        }
        contributions.extend(decoded.iter().map(Vec::as_slice));
        // Every member that heard from the same members counts the same
        // contributors: all or none of the slices are known.
        if contributions.is_empty() {
            return Err(Error::NonFinite {
                group: group.to_vec(),
            });
        }
        self.reduced.refill_to(mine.len(), |out| {
            reduce(out, &contributions);
            Ok(())
        })?;
        self.decoded = decoded;
        Ok(Some(Scattered {
            payloads,
            unresponsive,
            reduced: self.reduced.shared(),
        }))
    }

    /// All-gather: every member sends its reduced slice to the others and
    /// receives theirs. Returns the slices as parts of the whole vector
    /// (offset, shared values, their span), and the members whose slice did
    /// not come; `Ok(None)` once stopped.
    fn all_gather(&mut self, round: &Round, reduced: Arc<[f32]>) -> Result<Option<Gathered>> {
        let (group, len, m) = (round.group, round.len(), round.group.len());
        let whole = 0..reduced.len();
        let offset = slice(len, m, round.me).start;
        let bodies = self.bodies(
            Phase::Gather,
            group,
            &reduced,
            |_| whole.clone(),
            |_| offset,
        )?;
        if !self.broadcast(round.round, Phase::Gather, group, bodies)? {
            return Ok(None);
        }
        let Some((slices, late)) = self.collect(round.round, Phase::Gather, group)? else {
            return Ok(None);
        };
        let mut parts = Vec::with_capacity(m);
        parts.push((slice(len, m, round.me).start, reduced, whole));
        for message in slices {
            let k = group
                .iter()
                .position(|&t| t == message.from)
                .unwrap_or(round.me);
            let range = slice(len, m, k);
            if message.len() != range.len() {
                return Err(Error::Layout(format!(
                    "trainer {} sent a slice of the wrong length",
                    message.from
                )));
            }
            match message.body {
                Body::Values { data, span } => parts.push((range.start, data, span)),
                Body::Encoded { .. } => {
                    let mut values = vec![0.0; range.len()];
                    decode_into(self.codecs.as_mut(), &message, range.start, &mut values)?;
                    parts.push((range.start, values.into(), 0..range.len()));
                }
            }
        }
        Ok(Some((parts, late)))
    }

    /// Sends every other member of `group` the whole `payload` (of any
    /// length) in `phase` of `round`, and returns theirs, with the members
    /// that sent none in time; `Ok(None)` once stopped.
    pub(crate) fn exchange(
        &mut self,
        round: u64,
        phase: Phase,
        group: &[usize],
        payload: Arc<[f32]>,
    ) -> Result<Option<(Vec<Message>, Vec<usize>)>> {
        let bodies = vec![Body::whole(payload); group.len()];
        if !self.broadcast(round, phase, group, bodies)? {
            return Ok(None);
        }
        self.collect(round, phase, group)
    }

    /// Sends `bodies[k]` to the `k`-th member of `group` (each but this
    /// one): in one process a body of values shares the whole payload and
    /// its span marks the values meant, across processes only they cross;
    /// the simulated link carries them. `Ok(false)` once stopped.
    fn broadcast(
        &self,
        round: u64,
        phase: Phase,
        group: &[usize],
        bodies: Vec<Body>,
    ) -> Result<bool> {
        let mut clock = Instant::now();
        let to = group.iter().zip(bodies).filter(|&(&p, _)| p != self.id);
        for (&peer, body) in to {
            let bytes = body.bytes();
            // Messages leaving one endpoint go out one after another.
            clock += self.link.wire_time(self.id, peer, bytes);
            let message = Message {
                round,
                phase,
                from: self.id,
                body,
                deliver_at: clock,
            };
            let values = message.len() * std::mem::size_of::<f32>();
            if !self.send(peer, message)? {
                return Ok(false);
            }
            self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
            self.values_sent.fetch_add(values as u64, Ordering::Relaxed);
        }
        Ok(true)
    }

    fn send(&self, peer: usize, message: Message) -> Result<bool> {
        match self.peers.get(peer) {
            Some(Route::Local(inbox)) => Ok(self.send_on(inbox, message)),
            Some(Route::Remote(outbox)) => Ok(self.send_on(outbox, Outgoing { to: peer, message })),
            None => Err(Error::Layout(format!(
                "no trainer {peer} in a mesh of {}",
                self.peers.len()
            ))),
        }
    }

    /// Sends on a bounded channel, waiting for room unless stopped; false once
    /// stopped or the receiver is gone.
    fn send_on<T>(&self, tx: &Sender<T>, mut item: T) -> bool {
        loop {
            match tx.send_timeout(item, POLL) {
                Ok(()) => return true,
                Err(SendTimeoutError::Timeout(back)) if !self.stopped() => item = back,
                Err(_) => return false,
            }
        }
    }

    /// Decodes `message`, of a round already over, into nothing: a codec
    /// with memory of its link (top-k's error feedback) then stays in step
    /// with the sender's, which encoded it.
    fn absorb_late(&mut self, message: &Message) {
        let Body::Encoded { len, offset, .. } = message.body else {
            return;
        };
        let mut values = vec![0.0; len];
        if let Err(e) = decode_into(self.codecs.as_mut(), message, offset, &mut values) {
            tracing::warn!(
                trainer = self.id,
                from = message.from,
                "a late message does not decode: {e}"
            );
        }
    }

    /// Waits for the `phase` messages of `round` from every other member of
    /// `group`, until their simulated delivery time, or until the timeout:
    /// returns the messages and the members that did not send theirs.
    fn collect(
        &mut self,
        round: u64,
        phase: Phase,
        group: &[usize],
    ) -> Result<Option<(Vec<Message>, Vec<usize>)>> {
        let wanted = group.len() - 1;
        let fits = |m: &Message| m.round == round && m.phase == phase && group.contains(&m.from);
        let deadline = self.timeout.map(|t| Instant::now() + t);
        // Messages of rounds already over (from members timed out of them).
        let (mut late, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|m| m.round < round);
        self.early = kept;
        late.sort_by_key(|m| m.round);
        for message in &late {
            self.absorb_late(message);
        }
        let mut received = Vec::with_capacity(wanted);
        let mut i = 0;
        while i < self.early.len() {
            if fits(&self.early[i]) {
                received.push(self.early.swap_remove(i));
            } else {
                i += 1;
            }
        }
        while received.len() < wanted {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            match self.inbox.recv_timeout(POLL) {
                Ok(m) if fits(&m) => received.push(m),
                Ok(m) if m.round >= round => self.early.push(m),
                // A round already over: its sender was timed out of it.
                Ok(m) => self.absorb_late(&m),
                Err(RecvTimeoutError::Timeout) if !self.stopped() => {}
                Err(_) => return Ok(None),
            }
        }
        let missing = group
            .iter()
            .filter(|&&t| t != self.id && !received.iter().any(|m| m.from == t))
            .copied()
            .collect();
        // The simulated link delivers at `deliver_at`; a stop ends the wait.
        if let Some(latest) = received.iter().map(|m| m.deliver_at).max() {
            if !sleep_until(latest, || self.stopped()) {
                return Ok(None);
            }
        }
        Ok(Some((received, missing)))
    }
}

/// The slices of a combined vector a member has after the all-gather phase,
/// and the members whose slice is missing.
type Gathered = (Vec<SharedSlice>, Vec<usize>);

/// What a member has after the reduce-scatter phase of a round.
struct Scattered {
    /// The messages received (in one process, the senders' whole payloads).
    payloads: Vec<Message>,
    /// The members that sent nothing.
    unresponsive: Vec<usize>,
    /// This member's slice, reduced over the group.
    reduced: Arc<[f32]>,
}

/// One member's part in one round of [`Endpoint::group_reduce`].
struct Round<'a> {
    round: u64,
    group: &'a [usize],
    /// This member's place in `group`.
    me: usize,
    payload: &'a Payload,
    contribute: bool,
}

impl Round<'_> {
    fn len(&self) -> usize {
        self.payload.values().len()
    }

    /// The slice of `member`, who did not send its reduced slice, as a part
    /// of the combined vector: reduced from the contributors' whole payloads
    /// when this process holds them (the senders are in this process), else
    /// this member's own values.
    fn slice_of(&self, member: usize, payloads: &[Message], reduce: &Reduce) -> SharedSlice {
        let (len, m) = (self.len(), self.group.len());
        let data = self.payload.values();
        let k = self
            .group
            .iter()
            .position(|&t| t == member)
            .unwrap_or(self.me);
        let range = slice(len, m, k);
        let mut all_whole = true;
        let mut everyone: Vec<&[f32]> = Vec::with_capacity(payloads.len() + 1);
        for message in payloads.iter().filter(|m| m.len() > 0) {
            match &message.body {
                Body::Values { data, .. } if data.len() == len => everyone.push(data),
                _ => all_whole = false,
            }
        }
        if self.contribute {
            everyone.insert(0, data);
        }
        let values: Arc<[f32]> = if all_whole && !everyone.is_empty() {
            slice_reduce(&everyone, range.clone(), reduce).into()
        } else {
            data[range.clone()].into()
        };
        let whole = 0..values.len();
        (range.start, values, whole)
    }
}

/// Writes the values `message` carries, at `offset` of the synced vector,
/// into `out` (as long): decoded by `codecs` if encoded.
fn decode_into(
    codecs: Option<&mut LinkCodecs>,
    message: &Message,
    offset: usize,
    out: &mut [f32],
) -> Result<()> {
    if message.len() != out.len() {
        return Err(Error::Layout(format!(
            "trainer {} sent {} values where {} were due",
            message.from,
            message.len(),
            out.len()
        )));
    }
    match (&message.body, codecs) {
        (Body::Values { .. }, _) => out.copy_from_slice(message.values()),
        (Body::Encoded { wire, .. }, Some(codecs)) => {
            codecs.decode(message.from, message.phase, offset, wire, out)?
        }
        (Body::Encoded { .. }, None) => {
            return Err(Error::Layout(format!(
                "trainer {} sent compressed values, and sync.compression is \"none\" here",
                message.from
            )))
        }
    }
    Ok(())
}

/// `contributions` over `range`, combined by `reduce`.
fn slice_reduce(
    contributions: &[&[f32]],
    range: std::ops::Range<usize>,
    reduce: &Reduce,
) -> Vec<f32> {
    let slices: Vec<&[f32]> = contributions.iter().map(|c| &c[range.clone()]).collect();
    let mut out = vec![0f32; range.len()];
    reduce(&mut out, &slices);
    out
}

#[cfg(test)]
mod tests;
