//! A trainer's side of the sharded rows: fetch a batch's rows from their
//! owners, push their gradients back, and keep the batches in flight within
//! the staleness bound.

use super::server::{locked, SharedStore};
use super::{PushCounts, Pushes, RemoteRows, RowRequest, RowServer, RowSharding};
use crate::stats::{histogram_bucket, HISTOGRAM_BUCKETS};
use crate::system::ShardReply;
use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the clients of a process have moved and waited, shared by them.
#[derive(Debug, Default)]
pub struct RowStats {
    fetched_bytes: AtomicU64,
    pushed_bytes: AtomicU64,
    fetches: AtomicU64,
    wait_micros: AtomicU64,
    staleness: [AtomicU64; HISTOGRAM_BUCKETS],
    /// The pushes sent, by owner (this process's own included).
    sent: Mutex<PushCounts>,
}

/// A snapshot of [`RowStats`], with what this process's shard applied.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RowTraffic {
    /// Bytes of rows fetched from other processes (ids and values).
    pub fetched_bytes: u64,
    /// Bytes of gradients pushed to other processes (ids and values).
    pub pushed_bytes: u64,
    /// Batches fetched.
    pub fetches: u64,
    /// Seconds trainers waited for rows or for their pushes to be applied.
    pub wait_seconds: f64,
    /// Staleness seen by each fetch: how many of the trainer's earlier
    /// batches it could not see (fetched but not yet applied), bucketed as the
    /// dense sync's (see [`histogram_bucket`]).
    pub staleness_histogram: [u64; HISTOGRAM_BUCKETS],
    /// The pushes this process's trainers sent, by owner.
    #[serde(default)]
    pub pushes_sent: PushCounts,
    /// The pushes this process's shard applied, by sender.
    #[serde(default)]
    pub pushes_applied: PushCounts,
}

impl RowStats {
    /// What was counted so far (`pushes_applied` is the shard's: see
    /// [`RowClient::traffic`]).
    pub fn traffic(&self) -> RowTraffic {
        RowTraffic {
            fetched_bytes: self.fetched_bytes.load(Relaxed),
            pushed_bytes: self.pushed_bytes.load(Relaxed),
            fetches: self.fetches.load(Relaxed),
            wait_seconds: self.wait_micros.load(Relaxed) as f64 * 1e-6,
            staleness_histogram: std::array::from_fn(|k| self.staleness[k].load(Relaxed)),
            pushes_sent: self.sent().clone(),
            pushes_applied: PushCounts::default(),
        }
    }

    fn sent(&self) -> std::sync::MutexGuard<'_, PushCounts> {
        // Counting does not panic: a poisoned lock holds whole counts.
        self.sent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One owner's part of a fetch: where its rows go and their answer to come.
#[derive(Debug)]
struct Part {
    owner: usize,
    positions: Vec<usize>,
    ids: Vec<u64>,
    answer: Option<Receiver<ShardReply>>,
}

/// A fetch under way: [`RowClient::finish`] gives its rows.
#[derive(Debug)]
pub struct Fetch {
    rows: usize,
    parts: Vec<Part>,
}

/// A trainer's line to every shard of a table.
#[derive(Debug)]
pub struct RowClient {
    sharding: RowSharding,
    rank: usize,
    width: usize,
    local: SharedStore,
    remote: Option<Arc<dyn RemoteRows>>,
    timeout: Duration,
    max_in_flight: usize,
    /// Batches fetched and not pushed yet.
    fetched: usize,
    /// Pushed batches whose application elsewhere is not confirmed yet.
    unapplied: VecDeque<Vec<(usize, Receiver<ShardReply>)>>,
    stats: Arc<RowStats>,
}

impl RowClient {
    /// A client of the table `sharding` describes: this process's shard is
    /// `server`'s, the others' are reached through `remote` (`None` in one
    /// process). At most `max_in_flight` (≥ 1) batches are fetched and not
    /// yet applied everywhere; an answer that takes longer than `timeout` is
    /// an error.
    ///
    /// # Errors
    ///
    /// `max_in_flight` of 0 ([`Error::Layout`]).
    pub fn new(
        sharding: RowSharding,
        server: &RowServer,
        remote: Option<Arc<dyn RemoteRows>>,
        max_in_flight: usize,
        timeout: Duration,
        stats: Arc<RowStats>,
    ) -> Result<Self> {
        if max_in_flight == 0 {
            return Err(Error::Layout(
                "a row client needs at least one batch in flight".into(),
            ));
        }
        let width = server.with_store(|store| store.width());
        Ok(Self {
            sharding,
            rank: server.rank(),
            width,
            local: Arc::clone(server.store()),
            remote,
            timeout,
            max_in_flight,
            fetched: 0,
            unapplied: VecDeque::new(),
            stats,
        })
    }

    /// Another client of the same table (for another trainer), nothing in flight.
    pub fn share(&self) -> Self {
        Self {
            local: Arc::clone(&self.local),
            remote: self.remote.clone(),
            stats: Arc::clone(&self.stats),
            fetched: 0,
            unapplied: VecDeque::new(),
            ..*self
        }
    }

    /// Width of a row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The most batches in flight.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// The counters this client shares with the others of its process.
    pub fn stats(&self) -> &Arc<RowStats> {
        &self.stats
    }

    /// Batches fetched and not yet applied everywhere.
    pub fn in_flight(&self) -> usize {
        self.fetched + self.unapplied.len()
    }

    /// Starts fetching the rows `ids` (each once) of a batch whose gradients
    /// will be pushed: waits first, if the bound on batches in flight says
    /// so, for the oldest pushes to be applied.
    ///
    /// # Errors
    ///
    /// An owner that failed a push, stopped, or did not answer within the timeout
    /// ([`Error::EmbeddingShard`]).
    pub fn begin(&mut self, ids: &[u64]) -> Result<Fetch> {
        self.settle(self.max_in_flight - 1)?;
        self.stats.staleness[histogram_bucket(self.in_flight() as u64)].fetch_add(1, Relaxed);
        self.stats.fetches.fetch_add(1, Relaxed);
        let fetch = self.request(ids)?;
        self.fetched += 1;
        Ok(fetch)
    }

    /// Asks every other owner for its part of `ids`.
    fn request(&self, ids: &[u64]) -> Result<Fetch> {
        let mut parts = self.split(ids);
        for part in parts.iter_mut().filter(|p| p.owner != self.rank) {
            let (reply, answer) = bounded(1);
            let request = RowRequest::Fetch {
                ids: part.ids.clone(),
            };
            self.stats
                .fetched_bytes
                .fetch_add((8 + 4 * self.width as u64) * part.ids.len() as u64, Relaxed);
            self.remote()?.send(part.owner, request, reply)?;
            part.answer = Some(answer);
        }
        Ok(Fetch {
            rows: ids.len(),
            parts,
        })
    }

    /// The rows of `fetch`, one after another in the order of its ids: this
    /// process's read now, the others' as answered.
    ///
    /// # Errors
    ///
    /// An owner that answered with an error, stopped, or did not answer within the timeout
    /// ([`Error::EmbeddingShard`]).
    pub fn finish(&self, fetch: Fetch) -> Result<Vec<f32>> {
        let w = self.width;
        let mut rows = vec![0f32; fetch.rows * w];
        let mut part_rows = Vec::new();
        for part in fetch.parts {
            part_rows.resize(part.ids.len() * w, 0.0);
            match part.answer {
                None => locked(&self.local).read(&part.ids, &mut part_rows)?,
                Some(answer) => {
                    let values = self.wait(&answer, part.owner, "rows")?;
                    if values.len() != part_rows.len() {
                        return Err(Error::EmbeddingShard {
                            rank: part.owner,
                            reason: format!(
                                "answered {} values for {} rows of {w}",
                                values.len(),
                                part.ids.len()
                            ),
                        });
                    }
                    part_rows.copy_from_slice(&values);
                }
            }
            for (&at, row) in part.positions.iter().zip(part_rows.chunks(w)) {
                rows[at * w..(at + 1) * w].copy_from_slice(row);
            }
        }
        Ok(rows)
    }

    /// The rows `ids` now, for a read that pushes nothing back (evaluation).
    ///
    /// # Errors
    ///
    /// As [`RowClient::finish`].
    pub fn fetch(&self, ids: &[u64]) -> Result<Vec<f32>> {
        let fetch = self.request(ids)?;
        self.finish(fetch)
    }

    /// The pushes this process's clients sent and its shard applied.
    pub fn pushes(&self) -> Pushes {
        Pushes {
            sent: self.stats.sent().clone(),
            applied: locked(&self.local).applied().clone(),
        }
    }

    /// Goes on counting from `pushes` (a resumed run's, see [`Pushes`]).
    pub fn resume_pushes(&self, pushes: Pushes) {
        *self.stats.sent() = pushes.sent;
        locked(&self.local).resume_applied(pushes.applied);
    }

    /// What this process's clients have moved and waited, and what its shard
    /// applied.
    pub fn traffic(&self) -> RowTraffic {
        RowTraffic {
            pushes_applied: locked(&self.local).applied().clone(),
            ..self.stats.traffic()
        }
    }

    /// Pushes the gradients `grads` (a row per id, each id once) of the
    /// oldest fetched batch to the rows' owners: applied here at once, sent to
    /// the others without waiting for them to be applied.
    ///
    /// # Errors
    ///
    /// Gradients that are not a row per id ([`Error::Layout`]), or an owner that has
    /// stopped ([`Error::EmbeddingShard`]).
    pub fn push(&mut self, ids: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let w = self.width;
        if grads.len() != ids.len() * w {
            return Err(Error::Layout(format!(
                "{} gradient values for {} rows of {w}",
                grads.len(),
                ids.len()
            )));
        }
        self.fetched = self.fetched.saturating_sub(1);
        let mut acks = Vec::new();
        for part in self.split(ids) {
            let part_grads: Vec<f32> = part
                .positions
                .iter()
                .flat_map(|&at| &grads[at * w..(at + 1) * w])
                .copied()
                .collect();
            // Counted before it goes: one that fails on the way shows as
            // sent and not applied.
            self.stats.sent().record(part.owner, part.ids.len());
            if part.owner == self.rank {
                locked(&self.local).apply(self.rank, &part.ids, &part_grads, lr)?;
                continue;
            }
            self.stats
                .pushed_bytes
                .fetch_add((8 + 4 * w as u64) * part.ids.len() as u64, Relaxed);
            let (reply, ack) = bounded(1);
            let request = RowRequest::Push {
                ids: part.ids,
                grads: part_grads,
                lr,
            };
            self.remote()?.send(part.owner, request, reply)?;
            acks.push((part.owner, ack));
        }
        if !acks.is_empty() {
            self.unapplied.push_back(acks);
        }
        self.settle(usize::MAX)
    }

    /// Waits until every push of this client has been applied.
    ///
    /// # Errors
    ///
    /// As [`RowClient::begin`].
    pub fn flush(&mut self) -> Result<()> {
        self.settle(0)
    }

    /// Takes the confirmations that have come, waiting for the oldest ones
    /// until at most `most` batches are in flight.
    fn settle(&mut self, most: usize) -> Result<()> {
        loop {
            let must_wait = self.in_flight() > most;
            let Some(acks) = self.unapplied.pop_front() else {
                return Ok(());
            };
            if !must_wait && acks.iter().any(|(_, ack)| ack.is_empty()) {
                self.unapplied.push_front(acks);
                return Ok(());
            }
            for (owner, ack) in acks {
                self.wait(&ack, owner, "the application of pushed gradients")?;
            }
        }
    }

    /// The values `owner` answers on `answer`, or an error naming it once
    /// the timeout has passed.
    fn wait(&self, answer: &Receiver<ShardReply>, owner: usize, what: &str) -> Result<Vec<f32>> {
        let started = Instant::now();
        let result = answer.recv_timeout(self.timeout);
        self.stats
            .wait_micros
            .fetch_add(started.elapsed().as_micros() as u64, Relaxed);
        match result {
            Ok((_, answer)) => answer,
            Err(RecvTimeoutError::Timeout) => Err(Error::EmbeddingShard {
                rank: owner,
                reason: format!("no answer for {what} within {:?}", self.timeout),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(Error::EmbeddingShard {
                rank: owner,
                reason: format!("stopped before answering for {what}"),
            }),
        }
    }

    /// `ids` grouped by owner: this process's part first.
    fn split(&self, ids: &[u64]) -> Vec<Part> {
        let ranks = self.sharding.ranks();
        let mut parts: Vec<Part> = (0..ranks)
            .map(|owner| Part {
                owner,
                positions: Vec::new(),
                ids: Vec::new(),
                answer: None,
            })
            .collect();
        for (at, &id) in ids.iter().enumerate() {
            let part = &mut parts[self.sharding.owner(id)];
            part.positions.push(at);
            part.ids.push(id);
        }
        parts.retain(|p| !p.ids.is_empty());
        parts.sort_by_key(|p| p.owner != self.rank);
        parts
    }

    fn remote(&self) -> Result<&Arc<dyn RemoteRows>> {
        self.remote.as_ref().ok_or(Error::EmbeddingShard {
            rank: self.rank,
            reason: "rows owned by another process, and no fabric to reach it".into(),
        })
    }
}
