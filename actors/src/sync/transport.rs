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
//! A [`LinkModel`] simulates the network a real cluster has: each message is
//! delivered `latency + bytes / bandwidth` after it is sent (messages leaving one
//! endpoint in one phase are serialized, as on one NIC), optionally slower on one
//! trainer's link. The bytes counted are those a real reduce-scatter/all-gather
//! moves: `2 (m − 1) / m` of the vector per member and round. The receiver really waits until delivery time, so the cost
//! lands where a real network would put it.

use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        Duration::from_secs_f64(seconds)
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
        if let Some(values) = Arc::get_mut(&mut self.0) {
            return fill(values);
        }
        let mut fresh = vec![0f32; self.0.len()];
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
enum Phase {
    /// A member's whole payload; each receiver reads only its own slice of it.
    Scatter,
    /// A member's reduced slice: the group mean over its part of the vector.
    Gather,
}

/// A payload in flight.
#[derive(Debug, Clone)]
struct Message {
    round: u64,
    phase: Phase,
    from: usize,
    data: Arc<[f32]>,
    deliver_at: Instant,
}

/// One trainer's connection to all others.
#[derive(Debug)]
pub struct Endpoint {
    id: usize,
    peers: Vec<Sender<Message>>,
    inbox: Receiver<Message>,
    early: Vec<Message>,
    link: LinkModel,
    stop: Arc<AtomicBool>,
    bytes_sent: Arc<AtomicU64>,
}

/// Connects `n` endpoints all-to-all; raising `stop` makes every pending
/// collective return `Ok(None)` promptly.
pub fn mesh(n: usize, link: LinkModel, stop: Arc<AtomicBool>) -> Vec<Endpoint> {
    // A round puts at most 2(n − 1) messages in an inbox and a trainer is never
    // more than a round or two ahead of a peer: 8n slots are room for that while
    // still bounding memory.
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| bounded(8 * n.max(1))).unzip();
    receivers
        .into_iter()
        .enumerate()
        .map(|(id, inbox)| Endpoint {
            id,
            peers: senders.clone(),
            inbox,
            early: Vec::new(),
            link,
            stop: Arc::clone(&stop),
            bytes_sent: Arc::new(AtomicU64::new(0)),
        })
        .collect()
}

const POLL: Duration = Duration::from_millis(20);

impl Endpoint {
    /// This trainer's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Payload bytes this endpoint has sent.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// A shared counter of the payload bytes this endpoint sends.
    pub fn bytes_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.bytes_sent)
    }

    /// True once the mesh was stopped: no more rounds will complete.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Mean of the payloads over `group` (which must contain this endpoint) in
    /// round `round`; `Ok(None)` if the mesh was stopped while waiting.
    ///
    /// A member that does not `contribute` (its parameters diverged) still takes
    /// part in the round and receives the mean of the others, but its payload is
    /// left out of it; [`Error::NonFinite`] if nobody contributed.
    pub fn group_mean(
        &mut self,
        round: u64,
        group: &[usize],
        payload: &Payload,
        contribute: bool,
    ) -> Result<Option<Vec<f32>>> {
        let Some(me) = group.iter().position(|&t| t == self.id) else {
            return Err(Error::Layout(format!(
                "trainer {} is not in its group {group:?}",
                self.id
            )));
        };
        if self.stopped() {
            return Ok(None);
        }
        let m = group.len();
        let data = payload.values();
        let len = data.len();
        if len == 0 {
            return Ok(Some(Vec::new()));
        }
        // Reduce-scatter: every member gets every payload (shared, not copied;
        // empty from a member that abstains) and averages only its own slice ...
        let sent = if contribute {
            Arc::clone(&payload.0)
        } else {
            Arc::from([])
        };
        if !self.broadcast(round, Phase::Scatter, group, &sent, |k| {
            slice(len, m, k).len()
        })? {
            return Ok(None);
        }
        let Some(payloads) = self.collect(round, Phase::Scatter, group)? else {
            return Ok(None);
        };
        let mine = slice(len, m, me);
        let mut reduced: Vec<f32> = if contribute {
            data[mine.clone()].to_vec()
        } else {
            vec![0.0; mine.len()]
        };
        let mut contributors = usize::from(contribute);
        for message in payloads.iter().filter(|m| !m.data.is_empty()) {
            contributors += 1;
            let theirs = message
                .data
                .get(mine.clone())
                .filter(|_| message.data.len() == len);
            let Some(theirs) = theirs else {
                return Err(Error::Layout(format!(
                    "trainer {} sent {} values, trainer {} has {len}",
                    message.from,
                    message.data.len(),
                    self.id
                )));
            };
            reduced.iter_mut().zip(theirs).for_each(|(r, x)| *r += x);
        }
        // Every member counts the same contributors: all or none of the slices
        // are known.
        if contributors == 0 {
            return Err(Error::NonFinite {
                group: group.to_vec(),
            });
        }
        let scale = 1.0 / contributors as f32;
        reduced.iter_mut().for_each(|r| *r *= scale);
        // ... then all-gather: every member sends its reduced slice to the others.
        let reduced: Arc<[f32]> = Arc::from(reduced);
        let reduced_len = reduced.len();
        if !self.broadcast(round, Phase::Gather, group, &reduced, |_| reduced_len)? {
            return Ok(None);
        }
        let Some(slices) = self.collect(round, Phase::Gather, group)? else {
            return Ok(None);
        };
        let mut mean = vec![0f32; len];
        mean[mine].copy_from_slice(&reduced);
        for message in &slices {
            let k = group.iter().position(|&t| t == message.from).unwrap_or(me);
            let range = slice(len, m, k);
            if message.data.len() != range.len() {
                return Err(Error::Layout(format!(
                    "trainer {} sent a slice of the wrong length",
                    message.from
                )));
            }
            mean[range].copy_from_slice(&message.data);
        }
        Ok(Some(mean))
    }

    /// Sends `payload` to every other member of `group`; the simulated link
    /// carries `wire_values(k)` values to the `k`-th member (what a real
    /// reduce-scatter / all-gather would send). `Ok(false)` once stopped.
    fn broadcast(
        &self,
        round: u64,
        phase: Phase,
        group: &[usize],
        payload: &Arc<[f32]>,
        wire_values: impl Fn(usize) -> usize,
    ) -> Result<bool> {
        let mut clock = Instant::now();
        for (k, &peer) in group.iter().enumerate().filter(|&(_, &p)| p != self.id) {
            let bytes = wire_values(k) * std::mem::size_of::<f32>();
            // Messages leaving one endpoint go out one after another.
            clock += self.link.wire_time(self.id, peer, bytes);
            let message = Message {
                round,
                phase,
                from: self.id,
                data: Arc::clone(payload),
                deliver_at: clock,
            };
            if !self.send(peer, message)? {
                return Ok(false);
            }
            self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        Ok(true)
    }

    fn send(&self, peer: usize, mut message: Message) -> Result<bool> {
        let Some(tx) = self.peers.get(peer) else {
            return Err(Error::Layout(format!(
                "no trainer {peer} in a mesh of {}",
                self.peers.len()
            )));
        };
        loop {
            match tx.send_timeout(message, POLL) {
                Ok(()) => return Ok(true),
                Err(SendTimeoutError::Timeout(back)) if !self.stopped() => message = back,
                Err(_) => return Ok(false),
            }
        }
    }

    /// Waits for the `phase` messages of `round` from every other member of
    /// `group`, until their simulated delivery time.
    fn collect(
        &mut self,
        round: u64,
        phase: Phase,
        group: &[usize],
    ) -> Result<Option<Vec<Message>>> {
        let wanted = group.len() - 1;
        let fits = |m: &Message| m.round == round && m.phase == phase && group.contains(&m.from);
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
            match self.inbox.recv_timeout(POLL) {
                Ok(m) if fits(&m) => received.push(m),
                Ok(m) if m.round >= round => self.early.push(m),
                Ok(m) => {
                    return Err(Error::Layout(format!(
                        "trainer {} got a round-{} payload from trainer {} while in round {round}",
                        self.id, m.round, m.from
                    )))
                }
                Err(RecvTimeoutError::Timeout) if !self.stopped() => {}
                Err(_) => return Ok(None),
            }
        }
        if let Some(latest) = received.iter().map(|m| m.deliver_at).max() {
            let now = Instant::now();
            if latest > now {
                std::thread::sleep(latest - now);
            }
        }
        Ok(Some(received))
    }
}

/// The `k`-th of `m` near-equal contiguous slices of `0..len`.
fn slice(len: usize, m: usize, k: usize) -> std::ops::Range<usize> {
    let per = len.div_ceil(m.max(1));
    (k * per).min(len)..((k + 1) * per).min(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::GroupPlan;
    use crate::sync::Schedule;

    #[test]
    fn group_means_over_several_rounds_with_peers_running_ahead() {
        let n = 4;
        let plan = GroupPlan::new(Schedule::Random, n, 2).unwrap().with_seed(3);
        let endpoints = mesh(n, LinkModel::default(), Arc::new(AtomicBool::new(false)));
        let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    s.spawn(move || {
                        (0..20u64)
                            .map(|round| {
                                let value = (ep.id() as f32 + 1.0) * (round as f32 + 1.0);
                                let group = plan.group_of(ep.id(), round);
                                ep.group_mean(round, &group, &vec![value, -value].into(), true)
                                    .unwrap()
                                    .unwrap()
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
                    s.spawn(move || ep.group_mean(0, &group, &payload, contribute))
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
