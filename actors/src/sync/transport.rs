//! Moving parameter payloads between trainers' sync endpoints.
//!
//! [`mesh`] makes one [`Endpoint`] per trainer, connected all-to-all by bounded
//! crossbeam channels. A payload is an `Arc<[f32]>`: sending it to the `m − 1`
//! other members of a group copies nothing. [`Endpoint::group_mean`] sends this
//! trainer's payload to its group, waits for the others' payloads of the same
//! round, and returns the mean. Payloads of later rounds that arrive early are
//! kept for later; no lock is shared between trainers.
//!
//! A [`LinkModel`] simulates the network a real cluster has: each message is
//! delivered `latency + bytes / bandwidth` after it is sent (messages leaving one
//! endpoint in one round are serialized, as on one NIC), optionally slower on one
//! trainer's link. The receiver really waits until delivery time, so the cost
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

/// A payload in flight.
#[derive(Debug, Clone)]
struct Message {
    round: u64,
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
    // A trainer is never more than a few rounds ahead of a peer; n·4 slots are
    // room for that while still bounding memory.
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| bounded(4 * n.max(1))).unzip();
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

    /// Mean of `data` over `group` (which must contain this endpoint) in round
    /// `round`; `Ok(None)` if the mesh was stopped while waiting.
    pub fn group_mean(
        &mut self,
        round: u64,
        group: &[usize],
        data: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        if !group.contains(&self.id) {
            return Err(Error::Layout(format!(
                "trainer {} is not in its group {group:?}",
                self.id
            )));
        }
        if self.stopped() {
            return Ok(None);
        }
        let payload: Arc<[f32]> = Arc::from(data);
        let bytes = std::mem::size_of_val(data);
        let mut clock = Instant::now();
        for &peer in group.iter().filter(|&&p| p != self.id) {
            // Messages leaving one endpoint go out one after another.
            clock += self.link.wire_time(self.id, peer, bytes);
            let message = Message {
                round,
                from: self.id,
                data: Arc::clone(&payload),
                deliver_at: clock,
            };
            if !self.send(peer, message)? {
                return Ok(None);
            }
            self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        let Some(received) = self.collect(round, group)? else {
            return Ok(None);
        };
        if let Some(latest) = received.iter().map(|m| m.deliver_at).max() {
            let now = Instant::now();
            if latest > now {
                std::thread::sleep(latest - now);
            }
        }
        let mut mean: Vec<f32> = data.to_vec();
        for message in &received {
            if message.data.len() != mean.len() {
                return Err(Error::Layout(format!(
                    "trainer {} sent {} values, trainer {} has {}",
                    message.from,
                    message.data.len(),
                    self.id,
                    mean.len()
                )));
            }
            mean.iter_mut()
                .zip(message.data.iter())
                .for_each(|(m, x)| *m += x);
        }
        let scale = 1.0 / group.len() as f32;
        mean.iter_mut().for_each(|m| *m *= scale);
        Ok(Some(mean))
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

    /// Waits for the payloads of `round` from every other member of `group`.
    fn collect(&mut self, round: u64, group: &[usize]) -> Result<Option<Vec<Message>>> {
        let wanted = group.len() - 1;
        let mut received = Vec::with_capacity(wanted);
        let mut i = 0;
        while i < self.early.len() {
            if self.early[i].round == round && group.contains(&self.early[i].from) {
                received.push(self.early.swap_remove(i));
            } else {
                i += 1;
            }
        }
        while received.len() < wanted {
            match self.inbox.recv_timeout(POLL) {
                Ok(m) if m.round == round && group.contains(&m.from) => received.push(m),
                Ok(m) if m.round > round => self.early.push(m),
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
        Ok(Some(received))
    }
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
                                ep.group_mean(round, &group, &[value, -value])
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
                s.spawn(move || ep.group_mean(0, &[0, 1], &[1.0]).unwrap().unwrap());
            }
        });
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn stop_releases_a_trainer_waiting_for_a_silent_peer() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut endpoints = mesh(2, LinkModel::default(), Arc::clone(&stop));
        let mut lonely = endpoints.remove(0);
        let waiter = std::thread::spawn(move || lonely.group_mean(0, &[0, 1], &[1.0]));
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        assert_eq!(waiter.join().unwrap().unwrap(), None);
    }
}
