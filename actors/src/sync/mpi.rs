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
//! it tells every rank when one rank's trainers are done or when one rank stops
//! syncing (small control messages), averages or sums vectors over the ranks
//! (`MPI_Iallreduce`) and gathers every rank's words (`MPI_Iallgatherv`). While
//! it waits for a collective, the communication thread keeps sending and
//! delivering trainers' messages; a send or a collective that takes longer than
//! the node's watchdog ends the process, naming the rank and what it waited for.
//!
//! [`Fabric::finish`] ends the node; every rank calls it once its work is done
//! (it waits on an MPI barrier while still receiving, then finalizes MPI). A
//! rank that fails exits without it, with a non-zero status, and a panic of the
//! communication thread aborts the process: either way `mpirun` ends the whole
//! job rather than leave the other ranks waiting.

use super::transport::{mesh_part, Message, Outgoing, Phase};
use super::{Endpoint, Fabric, LinkModel};
use crate::{Error, Result};
use ::mpi::datatype::PartitionMut;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use ::mpi::Count;
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The MPI tag of parameter messages.
const TAG: i32 = 17;
/// The MPI tag of control messages: one word, [`DONE`] or [`STOP`].
const CONTROL_TAG: i32 = 18;
/// Control: the sending rank's trainers have all finished.
const DONE: u32 = 0;
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
    /// This rank's trainers are done: tell the others, answer once all are.
    Done(Sender<()>),
    /// Tell every other rank to stop syncing.
    StopAll,
    /// Sum these values over the ranks (`MPI_Iallreduce`) and answer the sums.
    Sum(Sums, Sender<Sums>),
    /// Gather every rank's words (`MPI_Iallgatherv`) and answer them.
    Gather(Vec<u32>, Sender<Vec<Vec<u32>>>),
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
            Ask::Done(_) => write!(f, "Done"),
            Ask::StopAll => write!(f, "StopAll"),
            Ask::Sum(_, _) => write!(f, "Sum"),
            Ask::Gather(words, _) => write!(f, "Gather({} words)", words.len()),
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

    fn trainers_done(&self) -> Result<()> {
        let (done_tx, done) = bounded(1);
        self.ask(Ask::Done(done_tx))?;
        done.recv()
            .map_err(|_| Error::System("the MPI thread ended waiting for the other ranks".into()))
    }

    fn stop_everywhere(&self) {
        // Only fails once the communication thread is gone: nobody to tell.
        let _ = self.ask(Ask::StopAll);
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
    let mut done_waiters: Vec<Sender<()>> = Vec::new();
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
                Ask::Done(waiter) => {
                    post.done[rank] = true;
                    done_waiters.push(waiter);
                    batch.extend(others().map(|r| Envelope::control(r, DONE)));
                }
                Ask::StopAll => batch.extend(others().map(|r| Envelope::control(r, STOP))),
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
        if !done_waiters.is_empty() && post.done.iter().all(|&d| d) {
            done_waiters.drain(..).for_each(|waiter| {
                let _ = waiter.send(());
            });
        }
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
    /// Which ranks' trainers are done.
    done: Vec<bool>,
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
            done: vec![false; ranks],
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

    /// Sends `batch` and every message queued meanwhile.
    fn send(&mut self, world: &SimpleCommunicator, mut batch: Vec<Envelope>) {
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
            .immediate_matched_probe_with_tag(CONTROL_TAG)
        {
            let (words, status) = probed.matched_receive_vec::<u32>();
            let from = status.source_rank() as usize;
            match words[..] {
                [DONE] if from < self.done.len() => self.done[from] = true,
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
}
