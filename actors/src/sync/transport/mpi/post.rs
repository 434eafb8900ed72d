//! The post office of a rank: it sends this rank's trainers' messages,
//! delivers those that arrive into their inboxes (keeping what cannot be
//! delivered yet, in order), keeps what the control words said, and watches how
//! long the rank waits.

use super::wire::{
    decode, encode, u64_of, words_of, Envelope, AGREED, ARRIVED, CONTROL_TAG, DEAL, DEALT,
    ROWS_TAG, SERVER_TAG, STOP, TAG, WITHDRAWN,
};
use crate::embedding::RowServerActor;
use crate::sync::transport::{Message, Outgoing};
use crate::sync::{Codec, ServerShardActor};
use crate::system::ShardReply;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use actix::Addr;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request of another rank being served here: who asked, its ticket, the
/// shard (or, for rows, this rank), the MPI tag of the answer, whether the
/// answer crosses encoded (by the tag's codec), the answer to come.
pub(super) struct Serving {
    pub(super) rank: usize,
    pub(super) ticket: u64,
    pub(super) shard: usize,
    pub(super) tag: i32,
    pub(super) coded: bool,
    pub(super) answer: Receiver<ShardReply>,
}

/// Sends this rank's trainers' messages, delivers the messages that arrive to
/// them, keeps what the control messages said, and watches how long the rank
/// waits.
pub(super) struct PostOffice {
    pub(super) rank: usize,
    /// Messages of this rank's trainers for other ranks' trainers.
    pub(super) outgoing: Receiver<Outgoing>,
    pub(super) bytes_sent: Arc<AtomicU64>,
    /// Bytes of embedding rows' requests and answers, counted apart.
    pub(super) row_bytes_sent: Arc<AtomicU64>,
    /// How long a send or a collective may take.
    pub(super) watchdog: Option<Duration>,
    pub(super) local: Range<usize>,
    pub(super) per_rank: usize,
    pub(super) inboxes: Vec<Sender<Message>>,
    /// Messages of this rank's trainers read before its mesh was registered.
    pub(super) unrouted: VecDeque<Outgoing>,
    /// Messages whose inbox was full or not registered yet, delivered first
    /// next time.
    pub(super) waiting: VecDeque<(usize, Message)>,
    /// Raised when another rank stops syncing.
    pub(super) stop: Option<Arc<AtomicBool>>,
    /// A stop that arrived before `stop` was registered.
    pub(super) stop_asked: bool,
    /// How many rendezvous each rank has come to.
    pub(super) arrived: Vec<u32>,
    /// The furthest point each rank has agreed to come to.
    pub(super) agreed: Vec<u64>,
    /// Which ranks come to no further points.
    pub(super) withdrawn: Vec<bool>,
    /// The centre shards served here, once registered.
    pub(super) hosted: Option<HashMap<usize, Addr<ServerShardActor>>>,
    /// The codec of compressed steps against the centre (none: as `f32`).
    pub(super) centre_codec: Option<Box<dyn Codec>>,
    /// The server of this rank's embedding rows, once registered.
    pub(super) rows: Option<Addr<RowServerActor>>,
    /// The codec of rows and gradients crossing (none: as `f32`).
    pub(super) row_codec: Option<Box<dyn Codec>>,
    /// Requests to shards or rows (sender, MPI tag, words) that arrived
    /// before their service and its codec were registered, kept as they
    /// came.
    pub(super) early: Vec<(usize, i32, Vec<u32>)>,
    /// Requests being served here.
    pub(super) serving: Vec<Serving>,
    /// Answers to other ranks' requests, to send.
    pub(super) answers: Vec<Envelope>,
    /// This rank's requests to other ranks' shards, by ticket.
    pub(super) tickets: HashMap<u64, Sender<ShardReply>>,
    pub(super) next_ticket: u64,
    /// On rank 0, the first chunk of the pass not dealt yet.
    pub(super) undealt: u64,
    /// This rank's requests for chunks, by ticket.
    pub(super) deals: HashMap<u32, Sender<u64>>,
    pub(super) next_deal: u32,
}

impl PostOffice {
    pub(super) fn new(
        rank: usize,
        ranks: usize,
        watchdog: Option<Duration>,
        outgoing: Receiver<Outgoing>,
        [bytes_sent, row_bytes_sent]: [Arc<AtomicU64>; 2],
    ) -> Self {
        Self {
            rank,
            outgoing,
            bytes_sent,
            row_bytes_sent,
            watchdog,
            local: 0..0,
            per_rank: 0,
            inboxes: Vec::new(),
            unrouted: VecDeque::new(),
            waiting: VecDeque::new(),
            stop: None,
            stop_asked: false,
            arrived: vec![0; ranks],
            agreed: vec![0; ranks],
            withdrawn: vec![false; ranks],
            hosted: None,
            centre_codec: None,
            rows: None,
            row_codec: None,
            early: Vec::new(),
            serving: Vec::new(),
            answers: Vec::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
            undealt: 0,
            deals: HashMap::new(),
            next_deal: 0,
        }
    }

    pub(super) fn register(
        &mut self,
        range: Range<usize>,
        inboxes: Vec<Sender<Message>>,
        stop: Arc<AtomicBool>,
    ) {
        self.per_rank = range.len();
        self.local = range;
        self.inboxes = inboxes;
        if self.stop_asked {
            stop.store(true, Ordering::Relaxed);
        }
        self.stop = Some(stop);
        self.deliver_waiting();
    }

    /// Deals `count` chunks, the first at or after `from` (rank 0 only):
    /// the first dealt.
    fn deal(&mut self, from: u64, count: u64) -> u64 {
        let first = self.undealt.max(from);
        self.undealt = first.saturating_add(count);
        first
    }

    /// Asks for `count` chunks, the first at or after `from`: answered at
    /// once on rank 0, else a request to it (returned, to send).
    pub(super) fn ask_deal(
        &mut self,
        from: u64,
        count: u64,
        answer: Sender<u64>,
    ) -> Option<Envelope> {
        if self.rank == 0 {
            // Into its own queue of one: it fails only when the asker is gone.
            let _ = answer.send(self.deal(from, count));
            return None;
        }
        let ticket = self.next_deal;
        self.next_deal = self.next_deal.wrapping_add(1);
        self.deals.insert(ticket, answer);
        let ([from_low, from_high], [count_low, count_high]) = (words_of(from), words_of(count));
        let words = [DEAL, ticket, from_low, from_high, count_low, count_high];
        Some(Envelope::control(0, &words))
    }

    /// Ends the process if `what`, waited for since `started`, has taken
    /// longer than the watchdog allows: a job must fail loudly, not hang.
    pub(super) fn watch(&self, started: Instant, what: impl FnOnce() -> String) {
        if let Some(limit) = self.watchdog.filter(|&limit| started.elapsed() > limit) {
            eprintln!(
                "shadowsync: rank {}: {} did not complete within {limit:?} (MPI watchdog); ending the job",
                self.rank,
                what()
            );
            std::process::exit(1);
        }
    }

    /// Sends `batch`, the shards' answers and every message queued meanwhile.
    pub(super) fn send(&mut self, world: &SimpleCommunicator, mut batch: Vec<Envelope>) {
        self.collect_answers();
        batch.append(&mut self.answers);
        let queued: Vec<Outgoing> = self.outgoing.try_iter().collect();
        for out in queued {
            self.route(out, &mut batch);
        }
        send_all(world, &batch, self);
    }

    /// Adds the envelope of a trainer's message, to its trainer's rank, to
    /// `batch`, in order. Before this rank's mesh is registered (its
    /// registration may be read a turn after a message of its endpoints)
    /// the message waits, never dropped.
    pub(super) fn route(&mut self, out: Outgoing, batch: &mut Vec<Envelope>) {
        self.unrouted.push_back(out);
        if self.per_rank == 0 {
            return;
        }
        for out in self.unrouted.drain(..) {
            batch.push(Envelope {
                rank: (out.to / self.per_rank) as i32,
                tag: TAG,
                words: encode(&out),
            });
        }
    }

    /// Receives every message that has arrived and delivers it.
    pub(super) fn receive(&mut self, world: &SimpleCommunicator) {
        self.deliver_waiting();
        while let Some(probed) = world.any_process().immediate_matched_probe_with_tag(TAG) {
            let (words, status) = probed.matched_receive_vec::<u32>();
            match decode(&words) {
                Ok((to, message)) => self.deliver(to, message),
                Err(reason) => tracing::error!(
                    from_rank = status.source_rank(),
                    "dropped a malformed MPI message: {reason}"
                ),
            }
        }
        for tag in [SERVER_TAG, ROWS_TAG] {
            while let Some(probed) = world.any_process().immediate_matched_probe_with_tag(tag) {
                let (words, status) = probed.matched_receive_vec::<u32>();
                self.on_shard_message(status.source_rank() as usize, tag, &words);
            }
        }
        while let Some(probed) = world
            .any_process()
            .immediate_matched_probe_with_tag(CONTROL_TAG)
        {
            let (words, status) = probed.matched_receive_vec::<u32>();
            let from = status.source_rank() as usize;
            match words[..] {
                [ARRIVED] if from < self.arrived.len() => self.arrived[from] += 1,
                [AGREED, low, high] if from < self.agreed.len() => {
                    self.agreed[from] = u64_of(low, high);
                }
                [WITHDRAWN] if from < self.withdrawn.len() => self.withdrawn[from] = true,
                [DEAL, ticket, from_low, from_high, count_low, count_high] if self.rank == 0 => {
                    let first =
                        self.deal(u64_of(from_low, from_high), u64_of(count_low, count_high));
                    let [low, high] = words_of(first);
                    self.answers
                        .push(Envelope::control(from, &[DEALT, ticket, low, high]));
                }
                [DEALT, ticket, low, high] => match self.deals.remove(&ticket) {
                    Some(answer) => {
                        // Into its own queue of one, sent once: it fails only
                        // when the asker is gone, and then nobody needs it.
                        let _ = answer.send(u64_of(low, high));
                    }
                    None => {
                        tracing::error!(from_rank = from, ticket, "chunks dealt for no request")
                    }
                },
                [STOP] => {
                    self.stop_asked = true;
                    if let Some(stop) = &self.stop {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                _ => tracing::error!(from_rank = from, ?words, "an unknown MPI control message"),
            }
        }
    }

    /// Whether every rank has come to `point` (`Some(true)`) or one withdrew
    /// short of it (`Some(false)`); `None` while that is not known yet. Every
    /// rank comes to the same answer: a rank's point arrives before its
    /// withdrawal (messages of one tag between two ranks keep their order).
    pub(super) fn agreement(&self, point: u64) -> Option<bool> {
        let mut short = (0..self.agreed.len()).filter(|&r| self.agreed[r] < point);
        match short.clone().next() {
            None => Some(true),
            Some(_) if short.any(|r| self.withdrawn[r]) => Some(false),
            Some(_) => None,
        }
    }

    fn deliver(&mut self, to: usize, message: Message) {
        // Other ranks may start sending before this one's trainers are here;
        // and what arrives after a full inbox waits behind it, in order.
        if self.inboxes.is_empty() || !self.waiting.is_empty() {
            self.waiting.push_back((to, message));
            return;
        }
        let Some(inbox) = to
            .checked_sub(self.local.start)
            .and_then(|i| self.inboxes.get(i))
        else {
            tracing::error!(to, local = ?self.local, "an MPI message for a trainer not here");
            return;
        };
        match inbox.try_send(message) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(message)) => self.waiting.push_back((to, message)),
        }
    }

    fn deliver_waiting(&mut self) {
        if self.inboxes.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.waiting);
        for (to, message) in waiting {
            self.deliver(to, message);
        }
    }
}

/// Sends every envelope of `batch` without blocking, receiving meanwhile (two
/// ranks sending each other large messages must both be receiving).
fn send_all(world: &SimpleCommunicator, batch: &[Envelope], post: &mut PostOffice) {
    if batch.is_empty() {
        return;
    }
    ::mpi::request::scope(|scope| {
        let mut pending: Vec<_> = batch
            .iter()
            .map(|envelope| {
                let counter = match envelope.tag {
                    ROWS_TAG => &post.row_bytes_sent,
                    _ => &post.bytes_sent,
                };
                counter.fetch_add(4 * envelope.words.len() as u64, Ordering::Relaxed);
                world
                    .process_at_rank(envelope.rank)
                    .immediate_send_with_tag(scope, &envelope.words[..], envelope.tag)
            })
            .collect();
        let started = Instant::now();
        while !pending.is_empty() {
            pending = pending
                .into_iter()
                .filter_map(|request| request.test().err())
                .collect();
            post.receive(world);
            if !pending.is_empty() {
                post.watch(started, || format!("{} sends to other ranks", batch.len()));
                std::thread::yield_now();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(ranks: usize) -> PostOffice {
        let (_, outgoing) = crossbeam_channel::unbounded();
        PostOffice::new(0, ranks, None, outgoing, Default::default())
    }

    #[test]
    fn messages_read_before_the_mesh_is_registered_wait_and_keep_their_order() {
        use crate::sync::transport::Phase;
        let mut post = post(2);
        let message = |round: u64| Outgoing {
            to: 3,
            message: Message {
                round,
                phase: Phase::Scatter,
                from: 0,
                body: crate::sync::transport::Body::whole(Arc::from(vec![1.0f32])),
                deliver_at: Instant::now(),
            },
        };
        let mut batch = Vec::new();
        post.route(message(1), &mut batch);
        assert!(batch.is_empty(), "nowhere to route it yet");
        let (inbox, _) = crossbeam_channel::unbounded();
        post.register(0..2, vec![inbox.clone(), inbox], Arc::default());
        post.route(message(2), &mut batch);
        let rounds: Vec<(i32, u32)> = batch.iter().map(|e| (e.rank, e.words[2])).collect();
        assert_eq!(rounds, [(1, 1), (1, 2)], "trainer 3 lives on rank 1");
    }

    #[test]
    fn a_point_is_agreed_once_every_rank_came_to_it_and_refused_once_one_withdrew_short() {
        let mut post = post(3);
        post.agreed = vec![4, 4, 2];
        assert_eq!(post.agreement(4), None, "rank 2 may still come to 4");
        post.agreed[2] = 4;
        assert_eq!(post.agreement(4), Some(true));
        // A rank that came to a point and then withdrew is not short of it.
        post.withdrawn[1] = true;
        assert_eq!(post.agreement(4), Some(true));
        post.agreed = vec![6, 4, 6];
        assert_eq!(post.agreement(6), Some(false));
        assert_eq!(post.agreement(5), Some(false));
        post.withdrawn[1] = false;
        assert_eq!(post.agreement(6), None);
    }
}
