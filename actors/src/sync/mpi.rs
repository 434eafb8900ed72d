//! Trainers in many processes: the transport between them through MPI (feature
//! `mpi`, Open MPI via rsmpi).
//!
//! Every process (an MPI *rank*) hosts the same number of trainers, numbered
//! globally: rank `r` of `R`, with `T` trainers each, hosts `r·T .. (r+1)·T`.
//! [`MpiNode::start`] initializes MPI on a thread of its own, the rank's
//! *communication thread*, which makes every MPI call of the process (MPI
//! communicators cannot leave the thread that uses them). [`MpiNode::mesh`] gives
//! the rank's trainers [`Endpoint`]s like the in-process [`mesh`](super::mesh):
//! a message to a trainer of the same rank goes straight into its inbox, one to
//! another rank's trainer goes to the communication thread, which sends it with
//! a non-blocking `MPI_Isend` and puts what arrives (`MPI_Improbe` + matched
//! receive) into the inboxes of its own trainers. The group means, their
//! timeouts and DS-Sync's groups are therefore the same code in one process or
//! many: the endpoints do not know where their peers live, and a slow rank
//! delays only the collectives that wait for it.
//!
//! A message crosses as one buffer of `u32` words: a header (destination,
//! source, round, phase, length) and the `f32` values' bits, bit for bit.
//!
//! The node is the cluster's [`Fabric`] across ranks: besides the endpoints,
//! it tells every rank when one rank comes to a rendezvous (its trainers are
//! done, say) or stops syncing (small control messages), averages or sums vectors over the ranks
//! (`MPI_Iallreduce`) and gathers every rank's words (`MPI_Iallgatherv`). While
//! it waits for a collective, the communication thread keeps sending and
//! delivering trainers' messages; a send or a collective that takes longer than
//! the node's watchdog ends the process, naming the rank and what it waited for.
//!
//! EASGD's centre is sharded over the ranks (shard `s` on rank `s mod R`): a
//! trainer's request to another rank's shard crosses as one message with its
//! slice of the replica and a ticket; the communication thread of the serving
//! rank hands it to its shard actor and sends the answer back, which its own
//! communication thread delivers to the waiting trainer.
//!
//! [`Fabric::finish`] ends the node; every rank calls it once its work is done
//! (it waits on an MPI barrier while still receiving, then finalizes MPI). A
//! rank that fails exits without it, with a non-zero status, and a panic of the
//! communication thread aborts the process: either way `mpirun` ends the whole
//! job rather than leave the other ranks waiting.

use super::transport::{mesh_part, Message, Outgoing, Phase};
use super::{
    serve, Endpoint, Fabric, LinkModel, RemoteShards, ServerShardActor, ShardReply, ShardRequest,
};
use crate::{Error, Result};
use ::mpi::datatype::PartitionMut;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use ::mpi::Count;
use actix::Addr;
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The MPI tag of parameter messages.
const TAG: i32 = 17;
/// The MPI tag of control messages: one word, [`ARRIVED`] or [`STOP`].
const CONTROL_TAG: i32 = 18;
/// The MPI tag of requests to EASGD's centre shards and their answers.
const SERVER_TAG: i32 = 19;
/// Control: the sending rank has come to its next rendezvous.
const ARRIVED: u32 = 0;
/// Control: end syncing now.
const STOP: u32 = 1;
/// Words of a message's header.
const HEADER: usize = 6;
/// How long the communication thread waits for work before looking at MPI again.
const IDLE: Duration = Duration::from_micros(100);

/// What the node asks of its communication thread besides sending.
enum Ask {
    /// Deliver messages for trainers `range` into these inboxes from now on,
    /// and raise `stop` when another rank stops syncing.
    Register {
        range: Range<usize>,
        inboxes: Vec<Sender<Message>>,
        stop: Arc<AtomicBool>,
    },
    /// This rank is at its next rendezvous: tell the others, answer once all are.
    Rendezvous(Sender<()>),
    /// Tell every other rank to stop syncing.
    StopAll,
    /// Sum these values over the ranks (`MPI_Iallreduce`) and answer the sums.
    Sum(Sums, Sender<Sums>),
    /// Gather every rank's words (`MPI_Iallgatherv`) and answer them.
    Gather(Vec<u32>, Sender<Vec<Vec<u32>>>),
    /// Serve these EASGD centre shards (index, actor) to the other ranks.
    HostShards(Vec<(usize, Addr<ServerShardActor>)>),
    /// Send `request` to centre shard `shard` on rank `rank`; answer on `reply`.
    Shard {
        rank: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    },
    /// Wait for every rank to finish, then finalize MPI and end.
    Finish,
}

/// This process's place among the ranks and its communication thread.
#[derive(Debug)]
pub struct MpiNode {
    rank: usize,
    ranks: usize,
    outbox: Sender<Outgoing>,
    asks: Sender<Ask>,
    bytes_sent: Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ask::Register { range, .. } => write!(f, "Register({range:?})"),
            Ask::Rendezvous(_) => write!(f, "Rendezvous"),
            Ask::StopAll => write!(f, "StopAll"),
            Ask::Sum(_, _) => write!(f, "Sum"),
            Ask::Gather(words, _) => write!(f, "Gather({} words)", words.len()),
            Ask::HostShards(hosted) => write!(f, "HostShards({})", hosted.len()),
            Ask::Shard { rank, shard, .. } => write!(f, "Shard({shard} on rank {rank})"),
            Ask::Finish => write!(f, "Finish"),
        }
    }
}

impl MpiNode {
    /// Initializes MPI on a new communication thread; fails if MPI cannot be
    /// initialized (or already was, in this process). A send or a collective
    /// that does not complete within `watchdog` ends the process (and so the
    /// job), naming the rank and what it waited for.
    pub fn start(watchdog: Option<Duration>) -> Result<Self> {
        // Not bounded by capacity but by the protocols that fill them: a
        // trainer's sync round sends at most 2 (m − 1) messages and one request
        // per server shard, then waits for the answers before the next round;
        // the other asks wait for their answer too. A bounded queue here could
        // only block a sender for a communication thread that is still sending.
        let (outbox, outgoing) = unbounded::<Outgoing>();
        let (asks, asked) = unbounded();
        let (started_tx, started) = bounded(1);
        let bytes_sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&bytes_sent);
        let thread = std::thread::Builder::new()
            .name("shadowsync-mpi".into())
            .spawn(move || {
                let run = || communicate(outgoing, asked, counter, started_tx, watchdog);
                if let Err(what) = crate::recovery::unpanicked(run) {
                    eprintln!("shadowsync: the MPI communication thread panicked: {what}");
                    std::process::abort();
                }
            })
            .map_err(|e| Error::System(format!("cannot start the MPI thread: {e}")))?;
        match started.recv() {
            Ok(Ok((rank, ranks))) => Ok(Self {
                rank,
                ranks,
                outbox,
                asks,
                bytes_sent,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(Error::System("the MPI thread ended at start".into())),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Endpoints for this rank's `per_rank` trainers, connected to all
    /// `ranks · per_rank` trainers of the job. The simulated `link` delays
    /// messages within this rank only; between ranks the network is real.
    pub fn mesh(
        &self,
        per_rank: usize,
        link: LinkModel,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<Endpoint>> {
        let local = self.local_trainers(per_rank);
        let (endpoints, inboxes) = mesh_part(
            self.ranks * per_rank,
            local.clone(),
            Some(self.outbox.clone()),
            link,
            Arc::clone(&stop),
        );
        self.ask(Ask::Register {
            range: local,
            inboxes,
            stop,
        })?;
        Ok(endpoints)
    }

    fn sum_over_ranks(&self, values: Sums) -> Result<Sums> {
        let (sums_tx, sums) = bounded(1);
        self.ask(Ask::Sum(values, sums_tx))?;
        sums.recv()
            .map_err(|_| Error::System("the MPI thread ended in a collective".into()))
    }

    fn ask(&self, ask: Ask) -> Result<()> {
        self.asks
            .send(ask)
            .map_err(|_| Error::System("the MPI communication thread has ended".into()))
    }
}

impl Fabric for MpiNode {
    fn processes(&self) -> usize {
        self.ranks()
    }

    fn process(&self) -> usize {
        self.rank()
    }

    fn endpoints(
        &self,
        local: usize,
        link: LinkModel,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<Endpoint>> {
        self.mesh(local, link, stop)
    }

    fn rendezvous(&self) -> Result<()> {
        let (done_tx, done) = bounded(1);
        self.ask(Ask::Rendezvous(done_tx))?;
        done.recv()
            .map_err(|_| Error::System("the MPI thread ended waiting for the other ranks".into()))
    }

    fn stop_everywhere(&self) {
        // Only fails once the communication thread is gone: nobody to tell.
        let _ = self.ask(Ask::StopAll);
    }

    fn serve_shards(
        &self,
        hosted: Vec<(usize, Addr<ServerShardActor>)>,
    ) -> Result<Option<Arc<dyn RemoteShards>>> {
        self.ask(Ask::HostShards(hosted))?;
        Ok(Some(Arc::new(ShardsOnRanks {
            asks: self.asks.clone(),
        })))
    }

    fn average(&self, values: &mut [f32]) -> Result<()> {
        let Sums::Values(sums) = self.sum_over_ranks(Sums::Values(values.to_vec()))? else {
            return Err(Error::System("the MPI thread summed something else".into()));
        };
        let scale = 1.0 / self.ranks as f32;
        values
            .iter_mut()
            .zip(sums)
            .for_each(|(value, sum)| *value = sum * scale);
        Ok(())
    }

    fn gather(&self, words: Vec<u32>) -> Result<Vec<Vec<u32>>> {
        let (all_tx, all) = bounded(1);
        self.ask(Ask::Gather(words, all_tx))?;
        all.recv()
            .map_err(|_| Error::System("the MPI thread ended in a collective".into()))
    }

    fn sum(&self, counts: &mut [u64]) -> Result<()> {
        let Sums::Counts(sums) = self.sum_over_ranks(Sums::Counts(counts.to_vec()))? else {
            return Err(Error::System("the MPI thread summed something else".into()));
        };
        counts.copy_from_slice(&sums);
        Ok(())
    }

    /// Point-to-point bytes (headers included; collectives are not counted).
    fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Waits for every rank to finish, then finalizes MPI.
    fn finish(&self) -> Result<()> {
        let thread = self
            .thread
            .lock()
            .map_err(|_| Error::System("the MPI node's state is poisoned".into()))?
            .take();
        let Some(thread) = thread else {
            return Ok(()); // finished already
        };
        self.ask(Ask::Finish)?;
        thread
            .join()
            .map_err(|_| Error::System("the MPI thread panicked".into()))
    }
}

/// The centre shards of other ranks, reached through the communication thread.
#[derive(Debug)]
struct ShardsOnRanks {
    asks: Sender<Ask>,
}

impl RemoteShards for ShardsOnRanks {
    fn send(
        &self,
        process: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    ) -> Result<()> {
        self.asks
            .send(Ask::Shard {
                rank: process,
                shard,
                request,
                reply,
            })
            .map_err(|_| Error::System("the MPI communication thread has ended".into()))
    }
}

/// The communication thread: initializes MPI, then sends, receives and
/// delivers until asked to finish.
fn communicate(
    outgoing: Receiver<Outgoing>,
    asks: Receiver<Ask>,
    bytes_sent: Arc<AtomicU64>,
    started: Sender<Result<(usize, usize)>>,
    watchdog: Option<Duration>,
) {
    let Some(universe) = ::mpi::initialize() else {
        let _ = started.send(Err(Error::System(
            "MPI could not be initialized (it already was in this process)".into(),
        )));
        return;
    };
    let world = universe.world();
    let (rank, ranks) = (world.rank() as usize, world.size() as usize);
    if started.send(Ok((rank, ranks))).is_err() {
        return;
    }
    let mut post = PostOffice::new(rank, ranks, watchdog, outgoing, bytes_sent);
    // Who waits for which rendezvous (counted from 1).
    let mut rendezvous_waiters: Vec<(u32, Sender<()>)> = Vec::new();
    let mut finishing = false;
    let others = || (0..ranks).filter(move |&r| r != rank);
    loop {
        let first = match post.outgoing.recv_timeout(IDLE) {
            Ok(message) => Some(message),
            Err(RecvTimeoutError::Timeout) => None,
            // The node is gone without finishing: nothing more to send.
            Err(RecvTimeoutError::Disconnected) => {
                finishing = true;
                None
            }
        };
        let mut batch: Vec<Envelope> = Vec::new();
        let mut collectives = Vec::new();
        // After the message, so that the registration of its sender's mesh
        // (asked before any endpoint could send) is seen before it is routed.
        for ask in asks.try_iter() {
            match ask {
                Ask::Register {
                    range,
                    inboxes,
                    stop,
                } => post.register(range, inboxes, stop),
                Ask::Rendezvous(waiter) => {
                    post.arrived[rank] += 1;
                    rendezvous_waiters.push((post.arrived[rank], waiter));
                    batch.extend(others().map(|r| Envelope::control(r, ARRIVED)));
                }
                Ask::StopAll => batch.extend(others().map(|r| Envelope::control(r, STOP))),
                Ask::HostShards(hosted) => post.host(hosted),
                Ask::Shard {
                    rank,
                    shard,
                    request,
                    reply,
                } => batch.push(post.ask_shard(rank, shard, request, reply)),
                Ask::Finish => finishing = true,
                collective => collectives.push(collective),
            }
        }
        batch.extend(first.and_then(|out| post.envelope(out)));
        post.send(&world, batch);
        // After what was queued before them: a rank whose trainers are done
        // may enter one while another's still wait for its messages.
        for collective in collectives {
            match collective {
                Ask::Sum(Sums::Values(v), answer) => {
                    let _ = answer.send(Sums::Values(sum_over_ranks(&world, &v, &mut post)));
                }
                Ask::Sum(Sums::Counts(c), answer) => {
                    let _ = answer.send(Sums::Counts(sum_over_ranks(&world, &c, &mut post)));
                }
                Ask::Gather(words, answer) => {
                    let _ = answer.send(gather_from_ranks(&world, &words, &mut post));
                }
                _ => {}
            }
        }
        post.receive(&world);
        let everyone = post.arrived.iter().copied().min().unwrap_or(0);
        rendezvous_waiters.retain(|(point, waiter)| {
            let waiting = *point > everyone;
            if !waiting {
                let _ = waiter.send(());
            }
            waiting
        });
        if finishing && post.outgoing.is_empty() {
            barrier(&world, &mut post);
            return; // `universe` is dropped here: MPI_Finalize
        }
    }
}

/// One buffer for one rank.
struct Envelope {
    rank: i32,
    tag: i32,
    words: Vec<u32>,
}

impl Envelope {
    fn control(rank: usize, what: u32) -> Self {
        Self {
            rank: rank as i32,
            tag: CONTROL_TAG,
            words: vec![what],
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
                post.bytes_sent
                    .fetch_add(4 * envelope.words.len() as u64, Ordering::Relaxed);
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

/// What [`Ask::Sum`] sums.
enum Sums {
    Values(Vec<f32>),
    Counts(Vec<u64>),
}

/// The sums of `values` over all ranks, receiving meanwhile.
fn sum_over_ranks<T: Equivalence + Default + Clone>(
    world: &SimpleCommunicator,
    values: &[T],
    post: &mut PostOffice,
) -> Vec<T> {
    let mut sums = vec![T::default(); values.len()];
    ::mpi::request::scope(|scope| {
        let request = world.immediate_all_reduce_into(
            scope,
            values,
            &mut sums[..],
            ::mpi::collective::SystemOperation::sum(),
        );
        wait_receiving(request, world, post, "an all-reduce");
    });
    sums
}

/// Every rank's `words`, in rank order, receiving meanwhile.
fn gather_from_ranks(
    world: &SimpleCommunicator,
    words: &[u32],
    post: &mut PostOffice,
) -> Vec<Vec<u32>> {
    let mut counts: Vec<Count> = vec![0; world.size() as usize];
    let mine = [words.len() as Count];
    ::mpi::request::scope(|scope| {
        let request = world.immediate_all_gather_into(scope, &mine[..], &mut counts[..]);
        wait_receiving(request, world, post, "an all-gather of lengths");
    });
    let displacements: Vec<Count> = counts
        .iter()
        .scan(0, |next, &count| {
            let at = *next;
            *next += count;
            Some(at)
        })
        .collect();
    let mut all = vec![0u32; counts.iter().map(|&c| c as usize).sum()];
    let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displacements[..]);
    ::mpi::request::scope(|scope| {
        let request = world.immediate_all_gather_varcount_into(scope, words, &mut partition);
        wait_receiving(request, world, post, "an all-gather");
    });
    let mut rest = &all[..];
    counts
        .iter()
        .map(|&count| {
            let (first, after) = rest.split_at(count as usize);
            rest = after;
            first.to_vec()
        })
        .collect()
}

/// A barrier over all ranks that keeps receiving while it waits.
fn barrier(world: &SimpleCommunicator, post: &mut PostOffice) {
    wait_receiving(world.immediate_barrier(), world, post, "the final barrier");
}

/// Waits for `request` to complete, delivering what arrives meanwhile (a rank
/// waiting on a collective must still receive: another rank's sends to it
/// may be what holds the others back).
fn wait_receiving<'a, R: ?Sized, S: ::mpi::request::Scope<'a>>(
    mut request: ::mpi::request::Request<'a, R, S>,
    world: &SimpleCommunicator,
    post: &mut PostOffice,
    what: &str,
) {
    let started = Instant::now();
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        post.receive(world);
        post.send(world, Vec::new());
        post.watch(started, || what.to_string());
        std::thread::yield_now();
    }
}

/// Sends this rank's trainers' messages, delivers the messages that arrive to
/// them, keeps what the control messages said, and watches how long the rank
/// waits.
struct PostOffice {
    rank: usize,
    /// Messages of this rank's trainers for other ranks' trainers.
    outgoing: Receiver<Outgoing>,
    bytes_sent: Arc<AtomicU64>,
    /// How long a send or a collective may take.
    watchdog: Option<Duration>,
    local: Range<usize>,
    per_rank: usize,
    inboxes: Vec<Sender<Message>>,
    /// Messages whose inbox was full or not registered yet, delivered first
    /// next time.
    waiting: VecDeque<(usize, Message)>,
    /// Raised when another rank stops syncing.
    stop: Option<Arc<AtomicBool>>,
    /// A stop that arrived before `stop` was registered.
    stop_asked: bool,
    /// How many rendezvous each rank has come to.
    arrived: Vec<u32>,
    /// The centre shards served here, once registered.
    hosted: Option<HashMap<usize, Addr<ServerShardActor>>>,
    /// Requests to shards that arrived before they were registered.
    early_requests: Vec<(usize, u64, usize, ShardRequest)>,
    /// Requests being served here: asking rank, ticket, shard, answer to come.
    serving: Vec<(usize, u64, usize, Receiver<ShardReply>)>,
    /// Answers to other ranks' requests, to send.
    answers: Vec<Envelope>,
    /// This rank's requests to other ranks' shards, by ticket.
    tickets: HashMap<u64, Sender<ShardReply>>,
    next_ticket: u64,
}

impl PostOffice {
    fn new(
        rank: usize,
        ranks: usize,
        watchdog: Option<Duration>,
        outgoing: Receiver<Outgoing>,
        bytes_sent: Arc<AtomicU64>,
    ) -> Self {
        Self {
            rank,
            outgoing,
            bytes_sent,
            watchdog,
            local: 0..0,
            per_rank: 0,
            inboxes: Vec::new(),
            waiting: VecDeque::new(),
            stop: None,
            stop_asked: false,
            arrived: vec![0; ranks],
            hosted: None,
            early_requests: Vec::new(),
            serving: Vec::new(),
            answers: Vec::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// Serves `hosted` from now on, starting with the requests that came early.
    fn host(&mut self, hosted: Vec<(usize, Addr<ServerShardActor>)>) {
        self.hosted = Some(hosted.into_iter().collect());
        for (rank, ticket, shard, request) in std::mem::take(&mut self.early_requests) {
            self.serve(rank, ticket, shard, request);
        }
    }

    /// The envelope of this rank's `request` to `shard` on `rank`, whose
    /// answer will go to `reply`.
    fn ask_shard(
        &mut self,
        rank: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    ) -> Envelope {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.insert(ticket, reply);
        Envelope {
            rank: rank as i32,
            tag: SERVER_TAG,
            words: ShardWire::Request {
                ticket,
                shard,
                request,
            }
            .encode(),
        }
    }

    /// Hands `rank`'s request to the shard actor (or keeps it until the
    /// shards are registered).
    fn serve(&mut self, rank: usize, ticket: u64, shard: usize, request: ShardRequest) {
        let Some(hosted) = &self.hosted else {
            self.early_requests.push((rank, ticket, shard, request));
            return;
        };
        let (reply, answer) = bounded(1);
        let served = match hosted.get(&shard) {
            Some(addr) => serve(addr, request, reply),
            None => Err(Error::System(format!(
                "server shard {shard} is not served by rank {}",
                self.rank
            ))),
        };
        match served {
            Ok(()) => self.serving.push((rank, ticket, shard, answer)),
            Err(e) => self.answer(rank, ticket, shard, Err(e)),
        }
    }

    /// Queues the answer to `rank`'s request `ticket`.
    fn answer(&mut self, rank: usize, ticket: u64, shard: usize, answer: Result<Vec<f32>>) {
        let answer = answer.map_err(|e| format!("rank {}: {e}", self.rank));
        self.answers.push(Envelope {
            rank: rank as i32,
            tag: SERVER_TAG,
            words: ShardWire::Answer {
                ticket,
                shard,
                answer,
            }
            .encode(),
        });
    }

    /// Queues the answers the shard actors have given.
    fn collect_answers(&mut self) {
        let serving = std::mem::take(&mut self.serving);
        for (rank, ticket, shard, answer) in serving {
            match answer.try_recv() {
                Ok((_, result)) => self.answer(rank, ticket, shard, result),
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    self.serving.push((rank, ticket, shard, answer))
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => self.answer(
                    rank,
                    ticket,
                    shard,
                    Err(Error::System(format!("server shard {shard} stopped"))),
                ),
            }
        }
    }

    /// Takes a message of [`SERVER_TAG`] from `from`.
    fn on_shard_message(&mut self, from: usize, words: &[u32]) {
        match ShardWire::decode(words) {
            Ok(ShardWire::Request {
                ticket,
                shard,
                request,
            }) => self.serve(from, ticket, shard, request),
            Ok(ShardWire::Answer {
                ticket,
                shard,
                answer,
            }) => match self.tickets.remove(&ticket) {
                // The asker may have stopped waiting.
                Some(reply) => {
                    let _ = reply.try_send((shard, answer.map_err(Error::System)));
                }
                None => tracing::error!(ticket, from_rank = from, "an answer to no request"),
            },
            Err(reason) => tracing::error!(
                from_rank = from,
                "dropped a malformed MPI shard message: {reason}"
            ),
        }
    }

    fn register(
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

    /// Ends the process if `what`, waited for since `started`, has taken
    /// longer than the watchdog allows: a job must fail loudly, not hang.
    fn watch(&self, started: Instant, what: impl FnOnce() -> String) {
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
    fn send(&mut self, world: &SimpleCommunicator, mut batch: Vec<Envelope>) {
        self.collect_answers();
        batch.append(&mut self.answers);
        let queued: Vec<Outgoing> = self.outgoing.try_iter().collect();
        batch.extend(queued.into_iter().filter_map(|out| self.envelope(out)));
        send_all(world, &batch, self);
    }

    /// The envelope of a trainer's message, to its trainer's rank.
    fn envelope(&self, out: Outgoing) -> Option<Envelope> {
        if self.per_rank == 0 {
            tracing::error!(to = out.to, "an MPI message sent before any mesh");
            return None;
        }
        Some(Envelope {
            rank: (out.to / self.per_rank) as i32,
            tag: TAG,
            words: encode(&out),
        })
    }

    /// Receives every message that has arrived and delivers it.
    fn receive(&mut self, world: &SimpleCommunicator) {
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
        while let Some(probed) = world
            .any_process()
            .immediate_matched_probe_with_tag(SERVER_TAG)
        {
            let (words, status) = probed.matched_receive_vec::<u32>();
            self.on_shard_message(status.source_rank() as usize, &words);
        }
        while let Some(probed) = world
            .any_process()
            .immediate_matched_probe_with_tag(CONTROL_TAG)
        {
            let (words, status) = probed.matched_receive_vec::<u32>();
            let from = status.source_rank() as usize;
            match words[..] {
                [ARRIVED] if from < self.arrived.len() => self.arrived[from] += 1,
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

/// `[to, from, round low, round high, phase, values]` then the values' bits.
fn encode(out: &Outgoing) -> Vec<u32> {
    let message = &out.message;
    let mut words = Vec::with_capacity(HEADER + message.data.len());
    words.extend([
        out.to as u32,
        message.from as u32,
        message.round as u32,
        (message.round >> 32) as u32,
        match message.phase {
            Phase::Scatter => 0,
            Phase::Gather => 1,
        },
        message.data.len() as u32,
    ]);
    words.extend(message.data.iter().map(|x| x.to_bits()));
    words
}

/// The destination and the message of `words` (delivered now: the network
/// between ranks is real, not simulated).
fn decode(words: &[u32]) -> std::result::Result<(usize, Message), String> {
    let Some(&[to, from, low, high, phase, len]) = words.get(..HEADER) else {
        return Err(format!("{} words, shorter than a header", words.len()));
    };
    let values = &words[HEADER..];
    if values.len() != len as usize {
        return Err(format!("{} values, the header says {len}", values.len()));
    }
    let phase = match phase {
        0 => Phase::Scatter,
        1 => Phase::Gather,
        other => return Err(format!("unknown phase {other}")),
    };
    let data: Arc<[f32]> = values.iter().map(|&w| f32::from_bits(w)).collect();
    Ok((
        to as usize,
        Message {
            round: u64::from(low) | (u64::from(high) << 32),
            phase,
            from: from as usize,
            data,
            deliver_at: Instant::now(),
        },
    ))
}

/// What crosses between ranks for EASGD's centre shards.
#[derive(Debug, Clone, PartialEq)]
enum ShardWire {
    Request {
        ticket: u64,
        shard: usize,
        request: ShardRequest,
    },
    Answer {
        ticket: u64,
        shard: usize,
        answer: std::result::Result<Vec<f32>, String>,
    },
}

/// [`ShardWire`]'s kinds, its first word.
const ELASTIC: u32 = 0;
const CENTER: u32 = 1;
const ANSWER: u32 = 2;
const FAILED: u32 = 3;

impl ShardWire {
    /// `[kind, ticket low, ticket high, shard]`, then for an elastic step
    /// `[trainer, round low, round high, α, at]` and the values' bits; for an
    /// answer the values' bits, or the error's UTF-8 bytes one per word.
    fn encode(&self) -> Vec<u32> {
        let head = |kind: u32, ticket: u64, shard: usize| {
            vec![kind, ticket as u32, (ticket >> 32) as u32, shard as u32]
        };
        match self {
            Self::Request {
                ticket,
                shard,
                request: ShardRequest::Center,
            } => head(CENTER, *ticket, *shard),
            Self::Request {
                ticket,
                shard,
                request:
                    ShardRequest::Elastic {
                        values,
                        at,
                        alpha,
                        trainer,
                        round,
                    },
            } => {
                let mut words = head(ELASTIC, *ticket, *shard);
                words.extend([
                    *trainer as u32,
                    *round as u32,
                    (*round >> 32) as u32,
                    alpha.to_bits(),
                    *at as u32,
                ]);
                words.extend(values.iter().map(|x| x.to_bits()));
                words
            }
            Self::Answer {
                ticket,
                shard,
                answer: Ok(values),
            } => {
                let mut words = head(ANSWER, *ticket, *shard);
                words.extend(values.iter().map(|x| x.to_bits()));
                words
            }
            Self::Answer {
                ticket,
                shard,
                answer: Err(error),
            } => {
                let mut words = head(FAILED, *ticket, *shard);
                words.extend(error.bytes().map(u32::from));
                words
            }
        }
    }

    fn decode(words: &[u32]) -> std::result::Result<Self, String> {
        let Some(&[kind, low, high, shard]) = words.get(..4) else {
            return Err(format!("{} words, shorter than a header", words.len()));
        };
        let (ticket, shard, rest) = (
            u64::from(low) | (u64::from(high) << 32),
            shard as usize,
            &words[4..],
        );
        let floats = |words: &[u32]| {
            words
                .iter()
                .map(|&w| f32::from_bits(w))
                .collect::<Vec<f32>>()
        };
        Ok(match kind {
            CENTER => Self::Request {
                ticket,
                shard,
                request: ShardRequest::Center,
            },
            ELASTIC => {
                let Some(&[trainer, low, high, alpha, at]) = rest.get(..5) else {
                    return Err("an elastic request without its fields".into());
                };
                Self::Request {
                    ticket,
                    shard,
                    request: ShardRequest::Elastic {
                        values: floats(&rest[5..]).into(),
                        at: at as usize,
                        alpha: f32::from_bits(alpha),
                        trainer: trainer as usize,
                        round: u64::from(low) | (u64::from(high) << 32),
                    },
                }
            }
            ANSWER => Self::Answer {
                ticket,
                shard,
                answer: Ok(floats(rest)),
            },
            FAILED => {
                let bytes = rest
                    .iter()
                    .map(|&w| u8::try_from(w).map_err(|_| format!("{w} is not a byte")))
                    .collect::<std::result::Result<Vec<u8>, String>>()?;
                Self::Answer {
                    ticket,
                    shard,
                    answer: Err(String::from_utf8_lossy(&bytes).into_owned()),
                }
            }
            other => return Err(format!("unknown kind {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_crosses_bit_for_bit() {
        let data: Arc<[f32]> = Arc::from(vec![1.5, -0.0, f32::NAN, f32::MAX, 3e-39]);
        let out = Outgoing {
            to: 7,
            message: Message {
                round: (5u64 << 32) + 9,
                phase: Phase::Gather,
                from: 3,
                data: Arc::clone(&data),
                deliver_at: Instant::now(),
            },
        };
        let (to, back) = decode(&encode(&out)).unwrap();
        assert_eq!((to, back.from, back.round), (7, 3, (5u64 << 32) + 9));
        assert_eq!(back.phase, Phase::Gather);
        let bits = |d: &[f32]| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.data), bits(&data));
    }

    #[test]
    fn malformed_messages_are_refused_not_trusted() {
        assert!(decode(&[1, 2, 3])
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(decode(&[0, 1, 0, 0, 0, 3, 7])
            .unwrap_err()
            .contains("header says 3"));
        assert!(decode(&[0, 1, 0, 0, 9, 0])
            .unwrap_err()
            .contains("unknown phase 9"));
    }

    #[test]
    fn shard_requests_and_answers_cross_intact() {
        let elastic = ShardRequest::Elastic {
            values: Arc::from(vec![0.25, -1.0, 3e-39]),
            at: 40,
            alpha: 0.3,
            trainer: 5,
            round: (2u64 << 32) + 1,
        };
        let big = (7u64 << 32) + 3;
        for wire in [
            ShardWire::Request {
                ticket: big,
                shard: 3,
                request: elastic,
            },
            ShardWire::Request {
                ticket: 0,
                shard: 1,
                request: ShardRequest::Center,
            },
            ShardWire::Answer {
                ticket: big,
                shard: 2,
                answer: Ok(vec![1.5, -0.0]),
            },
            ShardWire::Answer {
                ticket: 1,
                shard: 0,
                answer: Err("rank 1: server shard 0 failed — «panic»".into()),
            },
        ] {
            assert_eq!(ShardWire::decode(&wire.encode()).unwrap(), wire);
        }
        assert!(ShardWire::decode(&[0, 1])
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(ShardWire::decode(&[ELASTIC, 1, 0, 0, 5])
            .unwrap_err()
            .contains("without its fields"));
        assert!(ShardWire::decode(&[FAILED, 1, 0, 0, 300])
            .unwrap_err()
            .contains("not a byte"));
        assert!(ShardWire::decode(&[9, 1, 0, 0])
            .unwrap_err()
            .contains("unknown kind 9"));
    }
}
