//! The communication thread: it makes every MPI call of the process, sending
//! what the trainers queued and delivering what arrives, also while it waits
//! on a collective.

use super::ask::{Ask, Sums};
use super::post::PostOffice;
use super::wire::{words_of, Envelope, AGREED, ARRIVED, STOP, WITHDRAWN};
use crate::sync::transport::Outgoing;
use crate::{Error, Result};
use ::mpi::datatype::PartitionMut;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use ::mpi::Count;
use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the communication thread waits for work before looking at MPI again.
const IDLE: Duration = Duration::from_micros(100);

/// The communication thread: initializes MPI, then sends, receives and
/// delivers until asked to finish.
pub(super) fn communicate(
    outgoing: Receiver<Outgoing>,
    asks: Receiver<Ask>,
    bytes_sent: [Arc<AtomicU64>; 2],
    started: Sender<Result<(usize, usize)>>,
    watchdog: Option<Duration>,
) {
    let Some(universe) = ::mpi::initialize() else {
        let _ = started.send(Err(Error::MpiInit));
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
    // Who waits for which point to be agreed.
    let mut agreement_waiters: Vec<(u64, Sender<bool>)> = Vec::new();
    let mut finishing = false;
    loop {
        // Up to IDLE for a trainer's message or an ask (a fetch of rows
        // goes out as soon as it is asked).
        let mut ready = Select::new();
        ready.recv(&post.outgoing);
        ready.recv(&asks);
        let _ = ready.ready_timeout(IDLE);
        let first = match post.outgoing.try_recv() {
            Ok(message) => Some(message),
            Err(TryRecvError::Empty) => None,
            // The node is gone without finishing: nothing more to send.
            Err(TryRecvError::Disconnected) => {
                finishing = true;
                None
            }
        };
        // After the message, so that the registration of its sender's mesh
        // (asked before any endpoint could send) is seen before it is routed.
        let mut asked = Asked::default();
        for ask in asks.try_iter() {
            asked.take(ask, &mut post);
        }
        finishing |= asked.finish;
        let (mut batch, collectives) = (asked.batch, asked.collectives);
        rendezvous_waiters.extend(asked.rendezvous);
        agreement_waiters.extend(asked.agreements);
        if let Some(out) = first {
            post.route(out, &mut batch);
        }
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
        agreement_waiters.retain(|(point, waiter)| match post.agreement(*point) {
            Some(everyone) => {
                // Into its own queue of one, sent once: it fails only when
                // the asker is gone, and then nobody needs the answer.
                let _ = waiter.send(everyone);
                false
            }
            None => true,
        });
        if finishing && post.outgoing.is_empty() {
            barrier(&world, &mut post);
            return; // `universe` is dropped here: MPI_Finalize
        }
    }
}

/// What the asks of one turn of the loop call for: envelopes to send,
/// collectives to run after them, rendezvous to wait for, the end.
#[derive(Default)]
struct Asked {
    batch: Vec<Envelope>,
    collectives: Vec<Ask>,
    rendezvous: Vec<(u32, Sender<()>)>,
    agreements: Vec<(u64, Sender<bool>)>,
    finish: bool,
}

impl Asked {
    fn take(&mut self, ask: Ask, post: &mut PostOffice) {
        let (rank, ranks) = (post.rank, post.arrived.len());
        let others = (0..ranks).filter(move |&r| r != rank);
        match ask {
            Ask::Register {
                range,
                inboxes,
                stop,
            } => post.register(range, inboxes, stop),
            Ask::Rendezvous(waiter) => {
                post.arrived[rank] += 1;
                self.rendezvous.push((post.arrived[rank], waiter));
                self.batch
                    .extend(others.map(|r| Envelope::control(r, &[ARRIVED])));
            }
            Ask::Agree(point, waiter) => {
                post.agreed[rank] = point;
                self.agreements.push((point, waiter));
                let [low, high] = words_of(point);
                let words = [AGREED, low, high];
                self.batch
                    .extend(others.map(|r| Envelope::control(r, &words)));
            }
            Ask::Withdraw => {
                post.withdrawn[rank] = true;
                self.batch
                    .extend(others.map(|r| Envelope::control(r, &[WITHDRAWN])));
            }
            Ask::StopAll => self
                .batch
                .extend(others.map(|r| Envelope::control(r, &[STOP]))),
            Ask::Deal {
                from,
                count,
                answer,
            } => self.batch.extend(post.ask_deal(from, count, answer)),
            Ask::HostShards(hosted, codec) => post.host(hosted, codec),
            Ask::Shard {
                rank,
                shard,
                request,
                reply,
            } => self.batch.push(post.ask_shard(rank, shard, request, reply)),
            Ask::HostRows(server, codec) => post.host_rows(server, codec),
            Ask::Rows {
                rank,
                request,
                reply,
            } => self.batch.push(post.ask_rows(rank, request, reply)),
            Ask::Finish => self.finish = true,
            collective => self.collectives.push(collective),
        }
    }
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
