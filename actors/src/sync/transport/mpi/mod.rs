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
//! Rank 0 deals the chunks of a shared pass ([`Fabric::deal`]): another
//! rank's reader asks it with a control message and a ticket, and the
//! answer (the first chunk dealt) comes back the same way.
//!
//! EASGD's centre is sharded over the ranks (shard `s` on rank `s mod R`): a
//! trainer's request to another rank's shard crosses as one message with its
//! slice of the replica and a ticket; the communication thread of the serving
//! rank hands it to its shard actor and sends the answer back, which its own
//! communication thread delivers to the waiting trainer. Requests to a sharded
//! embedding table's rows (fetches, pushes of gradients) go the same way, to
//! the serving rank's embedding server.
//!
//! [`Fabric::finish`] ends the node; every rank calls it once its work is done
//! (it waits on an MPI barrier while still receiving, then finalizes MPI). A
//! rank that fails exits without it, with a non-zero status, and a panic of the
//! communication thread aborts the process: either way `mpirun` ends the whole
//! job rather than leave the other ranks waiting.
//!
//! The module's files follow those parts: this one the node and its
//! [`Fabric`]; `thread` the communication thread and its collectives; `post`
//! the delivery of trainers' messages and control words; `ask` what the node
//! asks of that thread; `shards` the centre
//! shards and embedding rows served to and asked of other ranks; `wire` how each crosses as words.

mod ask;
mod post;
mod shards;
mod thread;
mod wire;

use super::{mesh_part, Outgoing};
use super::{Codec, Endpoint, Fabric, LinkModel, RemoteShards, ServerShardActor};
use crate::embedding::{RemoteRows, RowServerActor};
use crate::{Error, Result};
use actix::Addr;
use ask::{Ask, Sums};
use crossbeam_channel::{bounded, unbounded, Sender};
use shards::{RowsOnRanks, ShardsOnRanks};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use thread::communicate;

/// This process's place among the ranks and its communication thread.
#[derive(Debug)]
pub struct MpiNode {
    rank: usize,
    ranks: usize,
    outbox: Sender<Outgoing>,
    asks: Sender<Ask>,
    bytes_sent: Arc<AtomicU64>,
    row_bytes_sent: Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl MpiNode {
    /// Initializes MPI on a new communication thread; fails if MPI cannot be
    /// initialized (or already was, in this process). A send or a collective
    /// that does not complete within `watchdog` ends the process (and so the
    /// job), naming the rank and what it waited for.
    ///
    /// # Errors
    ///
    /// MPI that cannot be initialized with the thread support the node needs, or a
    /// communication thread that cannot start.
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
        let row_bytes_sent = Arc::new(AtomicU64::new(0));
        let counters = [Arc::clone(&bytes_sent), Arc::clone(&row_bytes_sent)];
        let thread = std::thread::Builder::new()
            .name("shadowsync-mpi".into())
            .spawn(move || {
                let run = || communicate(outgoing, asked, counters, started_tx, watchdog);
                if let Err(what) = crate::recovery::unpanicked(run) {
                    eprintln!("shadowsync: the MPI communication thread panicked: {what}");
                    std::process::abort();
                }
            })
            .map_err(|error| Error::Thread {
                thread: "MPI communication",
                error,
            })?;
        match started.recv() {
            Ok(Ok((rank, ranks))) => Ok(Self {
                rank,
                ranks,
                outbox,
                asks,
                bytes_sent,
                row_bytes_sent,
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(Error::Stopped("MPI communication thread")),
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
    ///
    /// # Errors
    ///
    /// `per_rank` of 0, or a communication thread that stopped.
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
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }

    fn ask(&self, ask: Ask) -> Result<()> {
        self.asks
            .send(ask)
            .map_err(|_| Error::Stopped("MPI communication thread"))
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
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }

    fn stop_everywhere(&self) {
        // Only fails once the communication thread is gone: nobody to tell.
        let _ = self.ask(Ask::StopAll);
    }

    fn agree(&self, point: u64) -> Result<bool> {
        let (answer, everyone) = bounded(1);
        self.ask(Ask::Agree(point, answer))?;
        everyone
            .recv()
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }

    fn withdraw(&self) {
        // Only fails once the communication thread is gone: nobody to tell.
        let _ = self.ask(Ask::Withdraw);
    }

    fn deal(&self, from: u64, count: u64) -> Result<Range<u64>> {
        let (answer, dealt) = bounded(1);
        self.ask(Ask::Deal {
            from,
            count,
            answer,
        })?;
        let first = dealt
            .recv()
            .map_err(|_| Error::Stopped("MPI communication thread"))?;
        Ok(first..first.saturating_add(count))
    }

    fn serve_shards(
        &self,
        hosted: Vec<(usize, Addr<ServerShardActor>)>,
        codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteShards>>> {
        self.ask(Ask::HostShards(hosted, codec))?;
        Ok(Some(Arc::new(ShardsOnRanks {
            asks: self.asks.clone(),
        })))
    }

    fn serve_rows(
        &self,
        server: Addr<RowServerActor>,
        codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteRows>>> {
        self.ask(Ask::HostRows(server, codec))?;
        Ok(Some(Arc::new(RowsOnRanks {
            asks: self.asks.clone(),
        })))
    }

    fn average(&self, values: &mut [f32]) -> Result<()> {
        let Sums::Values(sums) = self.sum_over_ranks(Sums::Values(values.to_vec()))? else {
            return Err(Error::Internal("the MPI thread summed something else"));
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
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }

    fn sum(&self, counts: &mut [u64]) -> Result<()> {
        let Sums::Counts(sums) = self.sum_over_ranks(Sums::Counts(counts.to_vec()))? else {
            return Err(Error::Internal("the MPI thread summed something else"));
        };
        counts.copy_from_slice(&sums);
        Ok(())
    }

    /// Point-to-point bytes (headers included; collectives are not counted).
    fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    fn row_bytes_sent(&self) -> u64 {
        self.row_bytes_sent.load(Ordering::Relaxed)
    }

    /// Waits for every rank to finish, then finalizes MPI.
    fn finish(&self) -> Result<()> {
        let thread = self
            .thread
            .lock()
            .map_err(|_| Error::Panicked("MPI communication thread"))?
            .take();
        let Some(thread) = thread else {
            return Ok(()); // finished already
        };
        self.ask(Ask::Finish)?;
        thread
            .join()
            .map_err(|_| Error::Panicked("MPI communication thread"))
    }
}
