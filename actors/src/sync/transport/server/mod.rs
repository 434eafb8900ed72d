//! The EASGD centre variable on a parameter server, sharded.
//!
//! The flat parameter vector is cut into `S` contiguous [`shard_ranges`]; each
//! [`ServerShard`] (plain logic: the elastic step on its slice) runs as a
//! [`ServerShardActor`] on its own thread, as on `S` real servers. An elastic
//! update is atomic per shard (an actor handles one message at a time), and
//! trainers updating different shards never wait on each other. A trainer talks
//! to the shards through a [`ServerClient`]: one request per shard, all in
//! flight at once, the answers the parts of the replica's target.
//!
//! A shard that fails on a request (a panic) answers it with an error and
//! serves on from its centre as it was ([`Event::ServiceRecovered`]): the
//! centre changes only in the elastic step's arithmetic, which cannot fail. The
//! trainer's sync round fails and it goes on with the next one.
//!
//! In a job of one process, the shadow hub makes its trainers' elastic steps
//! itself ([`ServerClient::elastic_on_this_thread`]): against each shard's centre under
//! its lock, block by block, each block of the target written back into the
//! replica while it is in cache. That is 5 passes over the vector a round
//! instead of 8 (the shard's read of the snapshot, its answer written and
//! read back), and its CPU is the hub's, charged to the trainers' sync. The
//! actors serve every other request: foreground rounds, a thread per
//! trainer, copies of the centre.
//!
//! In one process, a simulated link ([`ServerClient::over_link`]) delays each
//! elastic step as a network would: the trainer's link carries the whole
//! vector out and back, and each shard's link (its server's) carries its slice
//! for one trainer at a time, so requests to a busy shard queue — what more
//! shards relieve. Across processes the network is real.
//!
//! Across processes the centre is sharded over them: shard `s` is served by
//! process `s mod P` ([`shard_process`]), and a trainer reaches the shards of
//! the other processes through the fabric ([`RemoteShards`]), sending each only
//! its slice of the replica.
//!
//! With `sync.compression` a step crosses compressed both ways
//! ([`CentreCodec`]): the shard answers the replica's move, not its target.

mod client;
mod coded;
#[cfg(test)]
mod tests;

use crate::events::{Event, EventBus};
use crate::faults::{faults_due, Fault};
use crate::recovery::unpanicked;
use crate::stats::CpuAccount;
use crate::sync::{elastic, elastic_pull};
use crate::system::{deliver, ShardReply};
use crate::{Error, Result, ShardFault};
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::ops::Range;
use std::sync::{Arc, Mutex};

pub use client::ServerClient;
pub use coded::CentreCodec;

/// `shards` (≥ 1) near-equal contiguous ranges covering `0..len`.
pub(crate) fn shard_ranges(len: usize, shards: usize) -> Result<Vec<Range<usize>>> {
    if shards == 0 {
        return Err(Error::Config {
            key: "sync.easgd.server_shards".into(),
            reason: "must be at least 1".into(),
        });
    }
    let per_shard = len.div_ceil(shards).max(1);
    Ok((0..shards)
        .map(|s| (s * per_shard).min(len)..((s + 1) * per_shard).min(len))
        .collect())
}

/// The process serving shard `shard` of the centre among `processes`.
pub(crate) fn shard_process(shard: usize, processes: usize) -> usize {
    shard % processes.max(1)
}

/// One shard of the centre copy `c`: the values of `range`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerShard {
    range: Range<usize>,
    center: Vec<f32>,
}

impl ServerShard {
    /// The shard of `initial` over `range`.
    ///
    /// # Errors
    ///
    /// A range outside `initial` ([`Error::Layout`]).
    pub fn new(initial: &[f32], range: Range<usize>) -> Result<Self> {
        let center = initial
            .get(range.clone())
            .ok_or_else(|| Error::Layout(format!("shard {range:?} outside {}", initial.len())))?
            .to_vec();
        Ok(Self { range, center })
    }

    /// The elastic step (see [`elastic`]) of a replica's `values`, which start
    /// at index `at` of the whole vector, on this shard; returns the target
    /// for the shard's range.
    ///
    /// # Errors
    ///
    /// Values that do not cover the shard's range from `at` ([`Error::Layout`]).
    pub fn elastic(&mut self, values: &[f32], at: usize, alpha: f32) -> Result<Vec<f32>> {
        Ok(elastic(self.slice_of(values, at)?, &mut self.center, alpha))
    }

    /// [`ServerShard::elastic`] answering the replica's move (its target
    /// minus its values) for the shard's range, as a compressed step asks.
    ///
    /// # Errors
    ///
    /// As [`ServerShard::elastic`].
    pub fn pull(&mut self, values: &[f32], at: usize, alpha: f32) -> Result<Vec<f32>> {
        Ok(elastic_pull(
            self.slice_of(values, at)?,
            &mut self.center,
            alpha,
        ))
    }

    /// The shard's range of `values`, which start at index `at` of the
    /// whole vector.
    fn slice_of<'a>(&self, values: &'a [f32], at: usize) -> Result<&'a [f32]> {
        self.range
            .start
            .checked_sub(at)
            .and_then(|from| values.get(from..from + self.range.len()))
            .ok_or_else(|| {
                Error::Layout(format!(
                    "{} values from index {at} do not hold shard {:?}",
                    values.len(),
                    self.range
                ))
            })
    }

    /// The shard's values.
    pub fn center(&self) -> &[f32] {
        &self.center
    }
}

/// What a shard is asked.
#[derive(Debug, Clone, PartialEq)]
// Sealed: `RemoteShards` is public because `Fabric` is, but only the runtime's
// transports implement it, so its request stays the runtime's own.
#[allow(unnameable_types)]
pub enum ShardRequest {
    /// The elastic step of `trainer`'s replica in its `round`: `values` are
    /// the replica's from index `at` (the whole vector, or the shard's
    /// slice). Answered with the replica's target, or its move.
    Elastic {
        /// The replica's values from index `at`.
        values: Arc<[f32]>,
        /// Where `values` start in the whole vector.
        at: usize,
        /// EASGD's elasticity.
        alpha: f32,
        /// The trainer whose replica it is.
        trainer: usize,
        /// The trainer's sync round.
        round: u64,
        /// Whether to answer the replica's move ([`ServerShard::pull`]), as
        /// a compressed step asks, not its target.
        answer_move: bool,
    },
    /// A copy of the shard's values.
    Center,
}

/// A request to one shard and where to answer it.
#[derive(Message)]
#[rtype(result = "()")]
struct Serve {
    request: ShardRequest,
    reply: Sender<ShardReply>,
}

/// Asks the shard actor `shard` to serve `request`, answering on `reply`.
pub(crate) fn serve(
    shard: &Addr<ServerShardActor>,
    request: ShardRequest,
    reply: Sender<ShardReply>,
) -> Result<()> {
    deliver(shard, Serve { request, reply }, "parameter server shard")
}

/// The shards that other processes serve, reached through the fabric.
pub trait RemoteShards: Send + Sync + std::fmt::Debug {
    /// Sends `request` to shard `shard`, served by process `process`; the
    /// answer comes on `reply`.
    ///
    /// # Errors
    ///
    /// The fabric has stopped or cannot reach `process`.
    fn send(
        &self,
        process: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    ) -> Result<()>;
}

/// A shard this process serves: its centre and the `server-panic` faults
/// injected into it. Its actor serves requests on it; in a job of one process
/// the shadow hub makes elastic steps against it directly
/// ([`ServerClient::elastic_on_this_thread`]).
#[derive(Debug)]
struct HostedShard {
    index: usize,
    shard: ServerShard,
    events: EventBus,
    faults: Vec<Fault>,
}

/// A hosted shard, shared by its actor and whoever steps against it here.
type SharedShard = Arc<Mutex<HostedShard>>;

impl HostedShard {
    /// Serves `trainer`'s `round` with `step`: an injected `server-panic`,
    /// or a panic in `step`, fails it (reported as the shard's recovery) and
    /// leaves the centre as the step left it.
    fn serve<T>(
        &mut self,
        trainer: usize,
        round: u64,
        step: impl FnOnce(&mut ServerShard) -> Result<T>,
    ) -> Result<T> {
        let (faults, shard) = (&self.faults, &mut self.shard);
        let attempt = unpanicked(|| {
            if faults_due(faults, trainer, round).next().is_some() {
                crate::faults::inject_panic("injected server panic".into());
            }
            step(shard)
        });
        attempt.unwrap_or_else(|panic| {
            let fault = ShardFault::Panicked {
                trainer,
                round,
                message: panic,
            };
            self.events.publish(Event::ServiceRecovered {
                service: format!("server shard {}", self.index),
                cause: fault.to_string(),
            });
            Err(Error::ShardFailed {
                shard: self.index,
                fault,
            })
        })
    }
}

/// Locks a hosted shard (poisoning ignored: a step's panic is caught inside).
fn lock(shard: &SharedShard) -> std::sync::MutexGuard<'_, HostedShard> {
    shard.lock().unwrap_or_else(|p| p.into_inner())
}

/// The actor serving one [`ServerShard`].
pub struct ServerShardActor {
    shard: SharedShard,
    /// The CPU time all of this process's shards spend serving.
    cpu: Arc<CpuAccount>,
}

impl Actor for ServerShardActor {
    type Context = Context<Self>;
}

impl Handler<Serve> for ServerShardActor {
    type Result = ();

    fn handle(&mut self, serve: Serve, _: &mut Context<Self>) {
        let cpu = Arc::clone(&self.cpu);
        let _cpu = cpu.charge();
        let mut hosted = lock(&self.shard);
        let answer = match serve.request {
            ShardRequest::Center => Ok(hosted.shard.center().to_vec()),
            ShardRequest::Elastic {
                values,
                at,
                alpha,
                trainer,
                round,
                answer_move,
            } => hosted.serve(trainer, round, |shard| {
                if answer_move {
                    shard.pull(&values, at, alpha)
                } else {
                    shard.elastic(&values, at, alpha)
                }
            }),
        };
        // The asker's queue has room for every shard's one answer: a send
        // fails only when it stopped waiting (syncing ended), with nobody to tell.
        let _ = serve.reply.send((hosted.index, answer));
    }
}
