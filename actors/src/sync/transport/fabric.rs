//! Where a cluster's trainers live: all in this process ([`InProcess`]), or
//! spread over the processes of a job ([`MpiNode`](super::mpi::MpiNode), feature
//! `mpi`).
//!
//! A [`Fabric`] numbers the trainers across the job, connects this process's
//! trainers to all of them ([`Endpoint`]s), agrees with the other processes on
//! when syncing ends, serves the EASGD centre's shards across processes, and
//! averages vectors over the processes (the final model, tables that each
//! process keeps a replica of). The cluster and its actors are
//! the same code on any fabric.

use super::{mesh, Codec, Endpoint, LinkModel, RemoteShards, ServerShardActor};
use crate::embedding::{unaccounted, PushCounts, RemoteRows, RowServerActor, Unaccounted};
use crate::Result;
use actix::Addr;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Whether this process was started by `mpirun` (Open MPI sets its rank).
pub fn launched_by_mpirun() -> bool {
    std::env::var_os("OMPI_COMM_WORLD_RANK").is_some()
}

/// The trainers of a job and the connections between them.
pub trait Fabric: Send + Sync + std::fmt::Debug {
    /// Number of processes in the job.
    fn processes(&self) -> usize;

    /// This process's index among them.
    fn process(&self) -> usize;

    /// The trainers this process hosts, numbered across the job, when every
    /// process hosts `local` of them.
    fn local_trainers(&self, local: usize) -> Range<usize> {
        self.process() * local..(self.process() + 1) * local
    }

    /// Endpoints for this process's `local` trainers, connected to all
    /// `processes() · local` trainers of the job; raising `stop` (here, or in
    /// another process through [`Fabric::stop_everywhere`]) ends their
    /// collectives.
    ///
    /// # Errors
    ///
    /// A mesh that cannot be built (a communication thread that stopped).
    fn endpoints(
        &self,
        local: usize,
        link: LinkModel,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<Endpoint>>;

    /// Returns once every process has called it as many times as this one.
    /// Not a collective (small messages): it may run while another thread is
    /// in one. A cluster passes one when this process's trainers are done (its
    /// sync loops serve the others' until every process's are) and, under
    /// EASGD, one once it has read the centre (its shards serve until then).
    ///
    /// # Errors
    ///
    /// A communication thread that stopped before every process came.
    fn rendezvous(&self) -> Result<()>;

    /// Raises the endpoints' stop flag in every other process.
    fn stop_everywhere(&self);

    /// Whether every process has come to `point` (points rise from one call
    /// to the next): waits until each has (`true`), or until one has
    /// [`withdrawn`](Fabric::withdraw) short of it (`false`); every process
    /// gets the same answer. A checkpoint's barrier: the processes' trainers parked at
    /// one step, with nothing of theirs in flight, before any process saves
    /// its rows; and all saved before any goes on. Not a collective (small
    /// messages), like [`Fabric::rendezvous`].
    ///
    /// # Errors
    ///
    /// A communication thread that stopped before every process answered.
    fn agree(&self, point: u64) -> Result<bool>;

    /// This process comes to no further points (its trainers are done or
    /// stopping): the others' [`Fabric::agree`] on a later one says `false`.
    fn withdraw(&self);

    /// The next `count` chunks of the job's pass for this process, the first
    /// at or after `from`: one process (rank 0) deals the pass's chunk
    /// numbers in rising order to whichever process asks, so that a slow
    /// process reads and trains fewer. Every process asks with the same
    /// `from` at first (where its resumed pass starts), and then with the
    /// end of what it was dealt last. Not a collective (small messages),
    /// like [`Fabric::rendezvous`].
    ///
    /// # Errors
    ///
    /// A communication thread that stopped.
    fn deal(&self, from: u64, count: u64) -> Result<Range<u64>>;

    /// Serves this process's shards of the EASGD centre (`hosted`: each
    /// shard's index and actor) to the other processes' trainers, and returns
    /// how to reach the shards the others serve (`None` in one process).
    /// With a `codec` (stateless), the values of compressed steps (those
    /// answered with the replica's move) cross encoded both ways (every
    /// process must give the same).
    ///
    /// # Errors
    ///
    /// A communication thread that stopped.
    fn serve_shards(
        &self,
        hosted: Vec<(usize, Addr<ServerShardActor>)>,
        codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteShards>>>;

    /// Hands the other processes' requests for this process's rows of a
    /// sharded embedding table to its server, and returns how to reach the
    /// others' shards (`None` in one process). With a `codec` (stateless),
    /// rows and gradients cross encoded both ways (every process must give
    /// the same).
    ///
    /// # Errors
    ///
    /// A communication thread that stopped.
    fn serve_rows(
        &self,
        server: Addr<RowServerActor>,
        codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteRows>>>;

    /// Replaces `values` by their mean over the processes. A collective: every
    /// process calls it, the same number of times, with vectors of one length
    /// (and in the same order as [`Fabric::sum`]).
    ///
    /// # Errors
    ///
    /// A communication thread that stopped, or vectors of different lengths.
    fn average(&self, values: &mut [f32]) -> Result<()>;

    /// Replaces `counts` by their sums over the processes (a collective, as
    /// [`Fabric::average`]).
    ///
    /// # Errors
    ///
    /// As [`Fabric::average`].
    fn sum(&self, counts: &mut [u64]) -> Result<()>;

    /// Every process's `words` (of any length), in process order (a
    /// collective, as [`Fabric::average`]).
    ///
    /// # Errors
    ///
    /// As [`Fabric::average`].
    fn gather(&self, words: Vec<u32>) -> Result<Vec<Vec<u32>>>;

    /// Bytes this process has sent to the others syncing dense parameters
    /// (not counting [`Fabric::row_bytes_sent`]).
    fn bytes_sent(&self) -> u64;

    /// Bytes this process has sent to the others for sharded embedding rows:
    /// fetches, the rows it answered with, and pushed gradients.
    fn row_bytes_sent(&self) -> u64 {
        0
    }

    /// Ends this process's part in the job once every process has called it
    /// (a process that fails exits without it, which ends the job).
    ///
    /// # Errors
    ///
    /// A process that cannot reach the others, or a communication thread that panicked.
    fn finish(&self) -> Result<()>;
}

/// Every trainer in this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

impl Fabric for InProcess {
    fn processes(&self) -> usize {
        1
    }

    fn process(&self) -> usize {
        0
    }

    fn endpoints(
        &self,
        local: usize,
        link: LinkModel,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<Endpoint>> {
        Ok(mesh(local, link, stop))
    }

    fn rendezvous(&self) -> Result<()> {
        Ok(())
    }

    fn stop_everywhere(&self) {}

    fn agree(&self, _point: u64) -> Result<bool> {
        Ok(true)
    }

    fn withdraw(&self) {}

    fn deal(&self, from: u64, count: u64) -> Result<Range<u64>> {
        Ok(from..from.saturating_add(count))
    }

    fn serve_shards(
        &self,
        _hosted: Vec<(usize, Addr<ServerShardActor>)>,
        _codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteShards>>> {
        Ok(None)
    }

    fn serve_rows(
        &self,
        _server: Addr<RowServerActor>,
        _codec: Option<Box<dyn Codec>>,
    ) -> Result<Option<Arc<dyn RemoteRows>>> {
        Ok(None)
    }

    fn average(&self, _values: &mut [f32]) -> Result<()> {
        Ok(())
    }

    fn sum(&self, _counts: &mut [u64]) -> Result<()> {
        Ok(())
    }

    fn gather(&self, words: Vec<u32>) -> Result<Vec<Vec<u32>>> {
        Ok(vec![words])
    }

    fn bytes_sent(&self) -> u64 {
        0
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }
}

/// The ledger's [`unaccounted`] over the whole job, on every process (a collective):
/// `sent` and `applied` are this process's counts.
///
/// # Errors
///
/// As [`Fabric::sum`].
pub fn unaccounted_in_job(
    fabric: &dyn Fabric,
    sent: &PushCounts,
    applied: &PushCounts,
) -> Result<Vec<Unaccounted>> {
    let (n, me) = (fabric.processes(), fabric.process());
    // Two n × n tables of (pushes, rows) by [sender][owner], summed over the
    // processes: each fills its own row of the sent one and its own column
    // of the applied one.
    let at = |table: usize, sender: usize, owner: usize| ((table * n + sender) * n + owner) * 2;
    let mut tables = vec![0u64; 4 * n * n];
    for other in 0..n {
        let (pushes, rows) = sent.of(other);
        tables[at(0, me, other)..][..2].copy_from_slice(&[pushes, rows]);
        let (pushes, rows) = applied.of(other);
        tables[at(1, other, me)..][..2].copy_from_slice(&[pushes, rows]);
    }
    fabric.sum(&mut tables)?;
    let counts = |table: usize, process: usize, by_owner: bool| {
        let mut counts = PushCounts::default();
        for other in 0..n {
            let (sender, owner) = if by_owner {
                (process, other)
            } else {
                (other, process)
            };
            let cell = at(table, sender, owner);
            counts.pushes.push(tables[cell]);
            counts.rows.push(tables[cell + 1]);
        }
        counts
    };
    let sent: Vec<PushCounts> = (0..n).map(|s| counts(0, s, true)).collect();
    let applied: Vec<PushCounts> = (0..n).map(|o| counts(1, o, false)).collect();
    Ok(unaccounted(&sent, &applied))
}
