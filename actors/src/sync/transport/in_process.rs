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
//! once their round is over are dropped.
//!
//! A [`LinkModel`] simulates the network a real cluster has: each message is
//! delivered `latency + bytes / bandwidth` after it is sent (messages leaving one
//! endpoint in one phase are serialized, as on one NIC), optionally slower on one
//! trainer's link. The bytes counted are those a real reduce-scatter/all-gather
//! moves: `2 (m − 1) / m` of the vector per member and round. The receiver really waits until delivery time, so the cost
//! lands where a real network would put it.

use crate::sync::{mean_into, Combined, SharedSlice};
use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A reduction, element by element, of a group's contributions into `out`:
/// `reduce(out, contributions)` (see [`SyncRule::reduce`](crate::sync::SyncRule::reduce)).
pub(crate) type Reduce = dyn Fn(&mut [f32], &[&[f32]]);

/// A simulated network link between every pair of trainers.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkModel {
    /// One-way latency per message, in microseconds.
    pub latency_us: f64,
    /// Bandwidth in Gbit/s (0 = unlimited).
    pub bandwidth_gbps: f64,
    /// One trainer whose link is `slow_factor` times slower (both directions);
    /// the EASGD parameter server is trainer [`LinkModel::SERVER`].
    pub slow_trainer: Option<usize>,
    /// How much slower that link is (≥ 1).
    pub slow_factor: f64,
}

impl LinkModel {
    /// The endpoint index of the parameter server in [`LinkModel::wire_time`].
    pub const SERVER: usize = usize::MAX;

    /// Whether the link adds any delay at all.
    pub fn is_ideal(&self) -> bool {
        self.latency_us <= 0.0 && self.bandwidth_gbps <= 0.0
    }

    /// Time on the wire of `bytes` between `from` and `to`.
    pub fn wire_time(&self, from: usize, to: usize, bytes: usize) -> Duration {
        let transfer = if self.bandwidth_gbps > 0.0 {
            bytes as f64 * 8.0 / (self.bandwidth_gbps * 1e9)
        } else {
            0.0
        };
        let mut seconds = self.latency_us * 1e-6 + transfer;
        if self.slow_trainer.is_some_and(|t| t == from || t == to) {
            seconds *= self.slow_factor.max(1.0);
        }
        // A day at most: a link that slow is a link that never delivers.
        Duration::try_from_secs_f64(seconds.min(86_400.0)).unwrap_or(Duration::ZERO)
    }

    /// How long a group mean of `len` values over `group` takes on this link
    /// as [`Endpoint::group_reduce`] moves it: two phases (reduce-scatter,
    /// all-gather), each over when the member whose messages, sent one after
    /// another, take longest has delivered its last.
    pub fn group_round_time(&self, group: &[usize], len: usize) -> Duration {
        let m = group.len();
        let phase = |bytes_to: &dyn Fn(usize, usize) -> usize| {
            let sending = group.iter().enumerate().map(|(i, &from)| {
                let to = group.iter().enumerate().filter(|&(k, _)| k != i);
                to.map(|(k, &to)| self.wire_time(from, to, bytes_to(i, k)))
                    .sum::<Duration>()
            });
            sending.max().unwrap_or(Duration::ZERO)
        };
        let f32s = std::mem::size_of::<f32>();
        // Scatter: member i sends member k its values of k's slice; gather:
        // member i sends everyone its own reduced slice.
        phase(&|_, k| slice(len, m, k).len() * f32s) + phase(&|i, _| slice(len, m, i).len() * f32s)
    }
}

/// A send buffer for parameter vectors, shared with receivers without copying and
/// refilled in place once they have all dropped it.
#[derive(Debug, Clone)]
pub struct Payload(Arc<[f32]>);

impl Payload {
    /// A payload of `len` zeros.
    pub fn zeros(len: usize) -> Self {
        Self(Arc::from(vec![0f32; len]))
    }

    /// Refills the payload through `fill`: in place when no receiver still holds
    /// the previous contents, in a fresh buffer otherwise.
    pub fn refill(&mut self, fill: impl FnOnce(&mut [f32]) -> Result<()>) -> Result<()> {
        self.refill_to(self.0.len(), fill)
    }

    /// Refills the payload with `len` values through `fill`: in place when no
    /// receiver still holds the previous contents and they were as many, in a
    /// fresh buffer otherwise.
    pub fn refill_to(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<()> {
        if let Some(values) = Arc::get_mut(&mut self.0).filter(|v| v.len() == len) {
            return fill(values);
        }
        let mut fresh = vec![0f32; len];
        fill(&mut fresh)?;
        self.0 = Arc::from(fresh);
        Ok(())
    }

    /// The values.
    pub fn values(&self) -> &[f32] {
        &self.0
    }

    /// The values, shared (no copy).
    pub fn shared(&self) -> Arc<[f32]> {
        Arc::clone(&self.0)
    }
}

impl From<Vec<f32>> for Payload {
    fn from(values: Vec<f32>) -> Self {
        Self(Arc::from(values))
    }
}

/// The two phases of a group mean (reduce-scatter, then all-gather).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A member's values of the receiver's slice.
    Scatter,
    /// A member's reduced slice: the group mean over its part of the vector.
    Gather,
    /// `sync-sgd`: a member's shared gradients (rows of a shared table).
    Shared,
    /// `sync-sgd`: a member has applied its rows of the group's shared
    /// gradients.
    Applied,
}

/// A payload in flight: the values `data[span]` (in one process `data` is the
/// sender's whole buffer, shared; across processes only the span crosses).
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) round: u64,
    pub(crate) phase: Phase,
    pub(crate) from: usize,
    pub(crate) data: Arc<[f32]>,
    pub(crate) span: std::ops::Range<usize>,
    pub(crate) deliver_at: Instant,
}

impl Message {
    /// The values sent.
    pub(crate) fn values(&self) -> &[f32] {
        self.data.get(self.span.clone()).unwrap_or_default()
    }
}

/// A message for a trainer in another process, handed to the process's
/// communication thread (see the `mpi` module, the only reader of its fields).
#[derive(Debug)]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct Outgoing {
    pub(crate) to: usize,
    pub(crate) message: Message,
}

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
            timeout: None,
            spares: Vec::new(),
            reduced: Payload::zeros(0),
        })
        .collect();
    (endpoints, senders)
}

const POLL: Duration = Duration::from_millis(20);

impl Endpoint {
    /// This trainer's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// A shared counter of the payload bytes this endpoint sends.
    pub fn bytes_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.bytes_sent)
    }

    /// Counts `bytes` as sent (a round that moved them without this
    /// endpoint's messages).
    pub fn count_sent(&self, bytes: u64) {
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
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
        let sent = match round.contribute {
            true => round.payload.shared(),
            false => Arc::from([]),
        };
        let span_of = |k: usize| match round.contribute {
            true => slice(len, m, k),
            false => 0..0,
        };
        if !self.broadcast(round.round, Phase::Scatter, group, &sent, span_of)? {
            return Ok(None);
        }
        let Some((payloads, unresponsive)) = self.collect(round.round, Phase::Scatter, group)?
        else {
            return Ok(None);
        };
        let mine = slice(len, m, round.me);
        // The contributors' values of this member's slice, its own first.
        let mut contributions: Vec<&[f32]> = Vec::with_capacity(m);
        if round.contribute {
            contributions.push(&round.payload.values()[mine.clone()]);
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
        if !self.broadcast(round.round, Phase::Gather, group, &reduced, |_| {
            whole.clone()
        })? {
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
            if message.values().len() != range.len() {
                return Err(Error::Layout(format!(
                    "trainer {} sent a slice of the wrong length",
                    message.from
                )));
            }
            parts.push((range.start, message.data, message.span));
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
        let whole = 0..payload.len();
        if !self.broadcast(round, phase, group, &payload, |_| whole.clone())? {
            return Ok(None);
        }
        self.collect(round, phase, group)
    }

    /// Sends `payload[span_of(k)]` to the `k`-th member of `group` (each but
    /// this one): in one process the whole payload is shared and the span
    /// marks the values meant, across processes only they cross; the simulated
    /// link carries them. `Ok(false)` once stopped.
    fn broadcast(
        &self,
        round: u64,
        phase: Phase,
        group: &[usize],
        payload: &Arc<[f32]>,
        span_of: impl Fn(usize) -> std::ops::Range<usize>,
    ) -> Result<bool> {
        let mut clock = Instant::now();
        for (k, &peer) in group.iter().enumerate().filter(|&(_, &p)| p != self.id) {
            let span = span_of(k);
            let bytes = span.len() * std::mem::size_of::<f32>();
            // Messages leaving one endpoint go out one after another.
            clock += self.link.wire_time(self.id, peer, bytes);
            let message = Message {
                round,
                phase,
                from: self.id,
                data: Arc::clone(payload),
                span,
                deliver_at: clock,
            };
            if !self.send(peer, message)? {
                return Ok(false);
            }
            self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
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
        self.early.retain(|m| m.round >= round);
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
                Ok(_) => {} // a round already over: its sender was timed out of it
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

/// Sleeps until `deadline` (a simulated delivery); false if `stopped()`
/// turns true first.
pub(crate) fn sleep_until(deadline: Instant, stopped: impl Fn() -> bool) -> bool {
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if stopped() {
            return false;
        }
        std::thread::sleep(left.min(POLL));
    }
    true
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
        let mut everyone: Vec<&[f32]> = payloads
            .iter()
            .filter(|m| !m.values().is_empty())
            .map(|m| &m.data[..])
            .collect();
        let all_whole = everyone.iter().all(|p| p.len() == len);
        if self.contribute {
            everyone.insert(0, data);
        }
        let values: Arc<[f32]> = match all_whole && !everyone.is_empty() {
            true => slice_reduce(&everyone, range.clone(), reduce).into(),
            false => data[range.clone()].into(),
        };
        let whole = 0..values.len();
        (range.start, values, whole)
    }
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

/// The `k`-th of `m` near-equal contiguous slices of `0..len`.
fn slice(len: usize, m: usize, k: usize) -> std::ops::Range<usize> {
    let per = len.div_ceil(m.max(1));
    (k * per).min(len)..((k + 1) * per).min(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Schedule;
    use crate::sync::{GroupPlan, GroupSchedule};

    #[test]
    fn group_means_over_several_rounds_with_peers_running_ahead() {
        let n = 4;
        let plan = GroupPlan::new(Schedule::Random, n, 2).unwrap().with_seed(3);
        let endpoints = mesh(n, LinkModel::default(), Arc::new(AtomicBool::new(false)));
        let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    let plan = &plan;
                    s.spawn(move || {
                        (0..20u64)
                            .map(|round| {
                                let value = (ep.id() as f32 + 1.0) * (round as f32 + 1.0);
                                let group = plan.group_of(ep.id(), round);
                                ep.group_mean(round, &group, &vec![value, -value].into(), true)
                                    .unwrap()
                                    .unwrap()
                                    .mean
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (trainer, rounds) in results.iter().enumerate() {
            for (round, mean) in rounds.iter().enumerate() {
                let group = plan.group_of(trainer, round as u64);
                let expected: f32 = group
                    .iter()
                    .map(|&t| (t as f32 + 1.0) * (round as f32 + 1.0))
                    .sum::<f32>()
                    / group.len() as f32;
                assert_eq!(
                    mean,
                    &vec![expected, -expected],
                    "trainer {trainer} round {round}"
                );
            }
        }
    }

    /// Runs one round of `group_mean` over a mesh of `values.len()` members,
    /// member `i` contributing `values[i]` unless `abstain[i]`.
    fn one_round(values: &[Vec<f32>], abstain: &[bool]) -> Vec<Result<Option<Vec<f32>>>> {
        let endpoints = mesh(
            values.len(),
            LinkModel::default(),
            Arc::new(AtomicBool::new(false)),
        );
        let group: Vec<usize> = (0..values.len()).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    let group = group.clone();
                    let payload: Payload = values[ep.id()].clone().into();
                    let contribute = !abstain[ep.id()];
                    s.spawn(move || {
                        ep.group_mean(0, &group, &payload, contribute)
                            .map(|mean| mean.map(|m| m.mean))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_member_that_abstains_is_left_out_of_the_mean_but_receives_it() {
        let values = vec![
            vec![1.0, 2.0, 3.0],
            vec![f32::NAN, f32::INFINITY, 0.0],
            vec![3.0, 6.0, 9.0],
            vec![5.0, 1.0, 0.0],
        ];
        let means = one_round(&values, &[false, true, false, false]);
        for mean in means {
            assert_eq!(mean.unwrap().unwrap(), vec![3.0, 3.0, 4.0]);
        }
        let nobody = one_round(&values[..2], &[true, true]);
        for mean in nobody {
            assert!(matches!(mean, Err(Error::NonFinite { ref group }) if group == &[0, 1]));
        }
    }

    #[test]
    fn uneven_and_empty_slices_assemble_the_exact_mean() {
        for (n, len) in [(3usize, 7usize), (4, 2), (5, 13)] {
            let endpoints = mesh(n, LinkModel::default(), Arc::new(AtomicBool::new(false)));
            let group: Vec<usize> = (0..n).collect();
            let means: Vec<Vec<f32>> = std::thread::scope(|s| {
                let handles: Vec<_> = endpoints
                    .into_iter()
                    .map(|mut ep| {
                        let group = group.clone();
                        s.spawn(move || {
                            let data: Vec<f32> =
                                (0..len).map(|j| (ep.id() * 100 + j) as f32).collect();
                            ep.group_mean(0, &group, &data.into(), true)
                                .unwrap()
                                .unwrap()
                                .mean
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let expected: Vec<f32> = (0..len)
                .map(|j| (0..n).map(|i| (i * 100 + j) as f32).sum::<f32>() / n as f32)
                .collect();
            for mean in means {
                assert_eq!(mean, expected, "n={n} len={len}");
            }
        }
        assert_eq!(slice(7, 3, 2), 6..7);
        assert_eq!(slice(2, 4, 3), 2..2);
    }

    #[test]
    fn a_group_round_takes_two_phases_of_the_slowest_senders_messages() {
        // 1 ms per message, and 1 byte/ns: 1,000 values (4,000 bytes) take 4 µs.
        let link = LinkModel {
            latency_us: 1000.0,
            bandwidth_gbps: 8.0,
            ..LinkModel::default()
        };
        let message = Duration::from_micros(1004);
        // Three members, slices of 1,000: each phase is two messages a sender.
        assert_eq!(link.group_round_time(&[0, 1, 2], 3000), 4 * message);
        // Trainer 1's link three times slower: it sends two slow messages a
        // phase, the others one slow and one not.
        let slow = LinkModel {
            slow_trainer: Some(1),
            slow_factor: 3.0,
            ..link
        };
        assert_eq!(slow.group_round_time(&[0, 1, 2], 3000), 12 * message);
        assert_eq!(link.group_round_time(&[4], 3000), Duration::ZERO);
    }

    #[test]
    fn the_simulated_link_really_delays_delivery() {
        let link = LinkModel {
            latency_us: 20_000.0,
            bandwidth_gbps: 0.0,
            ..LinkModel::default()
        };
        assert_eq!(link.wire_time(0, 1, 1 << 20), Duration::from_millis(20));
        let gbit = LinkModel {
            bandwidth_gbps: 1.0,
            ..LinkModel::default()
        };
        assert_eq!(gbit.wire_time(0, 1, 125_000), Duration::from_millis(1));
        let slow = LinkModel {
            slow_trainer: Some(1),
            slow_factor: 10.0,
            ..link
        };
        assert_eq!(slow.wire_time(1, 0, 0), Duration::from_millis(200));
        assert_eq!(slow.wire_time(0, 2, 0), Duration::from_millis(20));

        let endpoints = mesh(2, link, Arc::new(AtomicBool::new(false)));
        let start = Instant::now();
        std::thread::scope(|s| {
            for mut ep in endpoints {
                s.spawn(move || {
                    ep.group_mean(0, &[0, 1], &vec![1.0].into(), true)
                        .unwrap()
                        .unwrap()
                });
            }
        });
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_silent_member_is_timed_out_and_named_and_its_late_messages_are_dropped_in_recycled_buffers(
    ) {
        let mut endpoints = mesh(3, LinkModel::default(), Arc::new(AtomicBool::new(false)));
        for ep in &mut endpoints {
            ep.set_timeout(Some(Duration::from_millis(100)));
        }
        let group = [0, 1, 2];
        let value = |id: usize, round: u64| vec![id as f32 + 10.0 * round as f32; 5];
        let run = |endpoints: Vec<Endpoint>, round: u64| -> Vec<(Endpoint, GroupMean)> {
            std::thread::scope(|s| {
                let handles: Vec<_> = endpoints
                    .into_iter()
                    .map(|mut ep| {
                        s.spawn(move || {
                            // A recycled buffer, filled with garbage: every
                            // slice must be written, the late member's too.
                            let spare = vec![f32::NAN; 5];
                            let reused = spare.as_ptr();
                            ep.recycle(spare);
                            let payload = value(ep.id(), round).into();
                            let mean = ep.group_mean(round, &group, &payload, true);
                            let mean = mean.unwrap().unwrap();
                            assert_eq!(mean.mean.as_ptr(), reused);
                            (ep, mean)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        let silent = endpoints.pop().unwrap();
        // Round 0 without member 2: the others average over themselves.
        let started = Instant::now();
        let mut done = run(endpoints, 0);
        assert!(started.elapsed() >= Duration::from_millis(100));
        for (_, outcome) in &done {
            assert_eq!(outcome.mean, vec![0.5; 5]);
            assert_eq!(outcome.unresponsive, [2]);
        }
        // Member 2 comes back: its round 0 finds the others' messages at once.
        let started = Instant::now();
        let (silent, late) = run(vec![silent], 0).pop().unwrap();
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(late.unresponsive.is_empty());
        // Round 1 with everyone: member 2's round-0 messages are dropped.
        let mut all: Vec<Endpoint> = done.drain(..).map(|(ep, _)| ep).collect();
        all.push(silent);
        for (_, outcome) in run(all, 1) {
            assert_eq!(outcome.mean, vec![11.0; 5]);
            assert!(outcome.unresponsive.is_empty());
        }
    }

    #[test]
    fn stop_releases_a_trainer_waiting_for_a_silent_peer() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut endpoints = mesh(2, LinkModel::default(), Arc::clone(&stop));
        let mut lonely = endpoints.remove(0);
        let waiter =
            std::thread::spawn(move || lonely.group_mean(0, &[0, 1], &vec![1.0].into(), true));
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        assert_eq!(waiter.join().unwrap().unwrap(), None);
    }
}
