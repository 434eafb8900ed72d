//! [`ServerClient`]: a trainer's line to every shard of the centre, here or
//! in another process, with the simulated links of one process, its steps
//! compressed by a [`CentreCodec`] if it has one.

use crate::events::EventBus;
use crate::faults::{faults_at, Fault, FaultSite};
use crate::stats::CpuAccount;
use crate::sync::rules::TARGET_BLOCK;
use crate::sync::{elastic_into, Combined, Fabric, LinkModel};
use crate::{Error, Result, ShardFault};
use actix::prelude::*;
use crossbeam_channel::{bounded, RecvTimeoutError};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{
    lock, serve, shard_process, shard_ranges, CentreCodec, HostedShard, RemoteShards, ServerShard,
    ServerShardActor, ShardRequest, SharedShard,
};

/// A shard's answer: its index and its values.
type Answer = (usize, Vec<f32>);

/// What an elastic step asks every shard, besides the values.
#[derive(Debug, Clone, Copy)]
struct Step {
    alpha: f32,
    trainer: usize,
    round: u64,
}

impl Step {
    /// The request of the step of `values`, from index `at`, answered with
    /// the replica's move or its target.
    fn request(self, values: Arc<[f32]>, at: usize, answer_move: bool) -> ShardRequest {
        ShardRequest::Elastic {
            values,
            at,
            alpha: self.alpha,
            trainer: self.trainer,
            round: self.round,
            answer_move,
        }
    }
}

/// How long a waiting trainer sleeps between two looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// Where a shard is served.
#[derive(Debug, Clone)]
enum ShardAt {
    /// By an actor of this process.
    Here {
        addr: Addr<ServerShardActor>,
        shard: SharedShard,
    },
    /// By another process.
    There {
        process: usize,
        remote: Arc<dyn RemoteShards>,
    },
}

impl ShardAt {
    /// The shard, if this process serves it.
    fn hosted(&self) -> Result<&SharedShard> {
        match self {
            ShardAt::Here { shard, .. } => Ok(shard),
            ShardAt::There { .. } => Err(Error::Internal(
                "an elastic step made here against a shard of another process",
            )),
        }
    }
}

/// A trainer's line to the server's shards.
#[derive(Debug, Clone)]
pub struct ServerClient {
    shards: Vec<(Range<usize>, ShardAt)>,
    len: usize,
    links: Option<Arc<ShardLinks>>,
    cpu: Arc<CpuAccount>,
    codec: Option<CentreCodec>,
}

/// The simulated links to the shards: when each is free again.
#[derive(Debug)]
struct ShardLinks {
    link: LinkModel,
    /// Bytes a value takes on the wire (4 uncompressed).
    bytes_per_value: f64,
    free_at: Vec<Mutex<Instant>>,
}

impl ShardLinks {
    /// When `trainer`'s elastic step of a vector cut into `ranges` is off the
    /// wire, starting `now`: its own link carries the whole vector out and
    /// back; each shard's carries its slice once the trainers before are done.
    fn done(&self, trainer: usize, ranges: impl Iterator<Item = usize>, now: Instant) -> Instant {
        let wire = |values: usize| {
            let bytes = (values as f64 * self.bytes_per_value).ceil() as usize;
            self.link.wire_time(trainer, LinkModel::SERVER, bytes) * 2
        };
        let mut done = now;
        let mut total = 0;
        for (free_at, values) in self.free_at.iter().zip(ranges) {
            total += values;
            let mut free_at = free_at.lock().unwrap_or_else(|p| p.into_inner());
            *free_at = (*free_at).max(now) + wire(values);
            done = done.max(*free_at);
        }
        done.max(now + wire(total))
    }
}

impl ServerClient {
    /// Starts one actor per shard of `initial` that this process serves on
    /// `fabric` (all of them in one process; each on its own arbiter of the
    /// running actix system), reporting on `events` and injecting the
    /// `server-panic` faults of `faults`, and returns the client of every
    /// shard of the job, its steps compressed by `codec` if given (every
    /// process must give the same).
    ///
    /// # Errors
    ///
    /// No shards ([`Error::Config`] naming `sync.easgd.server_shards`), a shard that no process
    /// serves ([`Error::ShardFailed`]), a codec its factory fails to make,
    /// or a fabric that cannot serve them.
    pub fn start(
        initial: &[f32],
        shards: usize,
        codec: Option<CentreCodec>,
        events: &EventBus,
        faults: &[Fault],
        fabric: &dyn Fabric,
    ) -> Result<Self> {
        let faults = faults_at(faults, FaultSite::Server);
        let ranges = shard_ranges(initial.len(), shards)?;
        let mut hosted = Vec::new();
        let cpu = Arc::new(CpuAccount::default());
        for (index, range) in ranges.iter().enumerate() {
            if shard_process(index, fabric.processes()) != fabric.process() {
                continue;
            }
            let shard = Arc::new(Mutex::new(HostedShard {
                index,
                shard: ServerShard::new(initial, range.clone())?,
                events: events.clone(),
                faults: faults.clone(),
            }));
            let actor = ServerShardActor {
                shard: Arc::clone(&shard),
                cpu: Arc::clone(&cpu),
            };
            let addr = ServerShardActor::start_in_arbiter(&Arbiter::new().handle(), |_| actor);
            hosted.push((index, addr, shard));
        }
        let addrs = hosted.iter().map(|(index, addr, _)| (*index, addr.clone()));
        let wire_codec = codec.as_ref().map(CentreCodec::instance).transpose()?;
        let remote = fabric.serve_shards(addrs.collect(), wire_codec)?;
        let mut hosted = hosted.into_iter().peekable();
        let shards = ranges
            .into_iter()
            .enumerate()
            .map(|(index, range)| {
                if let Some((_, addr, shard)) = hosted.next_if(|(at, ..)| *at == index) {
                    return Ok((range, ShardAt::Here { addr, shard }));
                }
                let remote = remote.clone().ok_or_else(|| Error::ShardFailed {
                    shard: index,
                    fault: ShardFault::Unserved,
                })?;
                let process = shard_process(index, fabric.processes());
                Ok((range, ShardAt::There { process, remote }))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            shards,
            len: initial.len(),
            links: None,
            cpu,
            codec,
        })
    }

    /// The CPU seconds this process's shards have spent serving.
    pub fn cpu_seconds(&self) -> f64 {
        self.cpu.seconds()
    }

    /// The same client with elastic steps delayed by `link` as the simulated
    /// network would (see the module's documentation).
    pub fn over_link(mut self, link: LinkModel) -> Self {
        self.links = (!link.is_ideal()).then(|| {
            Arc::new(ShardLinks {
                link,
                bytes_per_value: self
                    .codec
                    .as_ref()
                    .map_or(4.0, CentreCodec::bytes_per_value),
                free_at: self
                    .shards
                    .iter()
                    .map(|_| Mutex::new(Instant::now()))
                    .collect(),
            })
        });
        self
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// When `trainer`'s elastic step, sent now, is off the simulated wire
    /// (now on an ideal link); reserves the shards' links meanwhile.
    pub fn simulated_arrival(&self, trainer: usize) -> Instant {
        let now = Instant::now();
        match &self.links {
            Some(links) => {
                let ranges = self.shards.iter().map(|(range, _)| range.len());
                links.done(trainer, ranges, now)
            }
            None => now,
        }
    }

    /// The elastic step of `trainer`'s `snapshot` in its `round` on every
    /// shard at once, once it is off the wire ([`ServerClient::simulated_arrival`]);
    /// returns the replica's target, in the shards' parts, and the bytes
    /// the step sent (the replica, encoded when compressed), or `None` if
    /// `stopped()` turns true while waiting for their answers.
    ///
    /// # Errors
    ///
    /// A snapshot of another length than the centre ([`Error::Layout`]), a
    /// codec that fails, or a shard that failed, stopped or cannot be
    /// reached ([`Error::ShardFailed`], [`Error::Stopped`]).
    pub fn elastic(
        &self,
        snapshot: Arc<[f32]>,
        alpha: f32,
        trainer: usize,
        round: u64,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<(Combined, u64)>> {
        self.fits(&snapshot)?;
        let step = Step {
            alpha,
            trainer,
            round,
        };
        match &self.codec {
            None => self.plain_step(&snapshot, step, stopped),
            Some(codec) => self.coded_step(codec, &snapshot, step, stopped),
        }
    }

    /// [`ServerClient::elastic`] uncompressed: each shard answers the
    /// replica's target.
    fn plain_step(
        &self,
        snapshot: &Arc<[f32]>,
        step: Step,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<(Combined, u64)>> {
        let request = |_, range: &Range<usize>, here| {
            // Another process gets only its shard's slice.
            let (values, at) = if here {
                (Arc::clone(snapshot), 0)
            } else {
                (Arc::from(&snapshot[range.clone()]), range.start)
            };
            step.request(values, at, false)
        };
        let Some(targets) = self.gather(request, stopped)? else {
            return Ok(None);
        };
        Ok(Some((self.combined(targets)?, 4 * self.len as u64)))
    }

    /// [`ServerClient::elastic`] compressed by `codec`: each shard reads its
    /// slice as it crossed and answers the replica's move, which is added
    /// to the snapshot.
    fn coded_step(
        &self,
        codec: &CentreCodec,
        snapshot: &[f32],
        step: Step,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<(Combined, u64)>> {
        let mut sent = 0;
        let crossed = self.shards.iter().map(|(range, _)| {
            let (values, bytes) = codec.crossed(range.start, &snapshot[range.clone()])?;
            sent += bytes as u64;
            Ok(Arc::<[f32]>::from(values))
        });
        let crossed = crossed.collect::<Result<Vec<_>>>()?;
        let request = |index: usize, range: &Range<usize>, _| {
            step.request(Arc::clone(&crossed[index]), range.start, true)
        };
        let Some(moves) = self.gather(request, stopped)? else {
            return Ok(None);
        };
        let targets = moves.into_iter().map(|(index, moved)| {
            let (range, at) = &self.shards[index];
            // Another process's answer crossed encoded; one made here is
            // rounded as it would have been.
            let mut target = match at {
                ShardAt::Here { .. } => codec.crossed(range.start, &moved)?.0,
                ShardAt::There { .. } => moved,
            };
            let own = &snapshot[range.clone()];
            target.iter_mut().zip(own).for_each(|(t, x)| *t += x);
            Ok((index, target))
        });
        let targets = targets.collect::<Result<Vec<_>>>()?;
        Ok(Some((self.combined(targets)?, sent)))
    }

    /// Whether its steps are compressed (see [`CentreCodec`]).
    pub fn compressed(&self) -> bool {
        self.codec.is_some()
    }

    /// An error unless `snapshot` is as long as the centre.
    fn fits(&self, snapshot: &[f32]) -> Result<()> {
        if snapshot.len() != self.len {
            return Err(Error::Layout(format!(
                "snapshot has {} values, the centre {}",
                snapshot.len(),
                self.len
            )));
        }
        Ok(())
    }

    /// Whether this process serves every shard (then
    /// [`ServerClient::elastic_on_this_thread`] can make the elastic steps).
    pub fn all_here(&self) -> bool {
        self.shards
            .iter()
            .all(|(_, at)| matches!(at, ShardAt::Here { .. }))
    }

    /// [`ServerClient::elastic`] made on this thread, once off the wire:
    /// against each shard's centre in turn, under its lock, block by block,
    /// handing `write(offset, target)` each block of the replica's target
    /// while it is in cache (no answer assembled, no message). Every shard
    /// must be served here ([`ServerClient::all_here`]); an injected
    /// `server-panic` fails the step on every shard, as it fails requests.
    ///
    /// # Errors
    ///
    /// A shard served by another process, an injected `server-panic`, a snapshot of another
    /// length, or `write`'s own error.
    pub fn elastic_on_this_thread(
        &self,
        snapshot: &[f32],
        alpha: f32,
        trainer: usize,
        round: u64,
        mut write: impl FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<()> {
        self.fits(snapshot)?;
        // An injected fault fails the step on every shard, as it fails their
        // requests, before any centre moves.
        let checked: Vec<Result<()>> = self
            .shards
            .iter()
            .map(|(_, at)| lock(at.hosted()?).serve(trainer, round, |_| Ok(())))
            .collect();
        checked.into_iter().collect::<Result<()>>()?;
        let mut target = [0f32; TARGET_BLOCK];
        for (range, at) in &self.shards {
            let centre = &mut lock(at.hosted()?).shard.center;
            let blocks = snapshot[range.clone()]
                .chunks(TARGET_BLOCK)
                .zip(centre.chunks_mut(TARGET_BLOCK));
            for (offset, (values, centre)) in (range.start..).step_by(TARGET_BLOCK).zip(blocks) {
                let target = &mut target[..values.len()];
                elastic_into(values, centre, alpha, target);
                write(offset, target)?;
            }
        }
        Ok(())
    }

    /// A copy of the whole centre.
    ///
    /// # Errors
    ///
    /// A shard that failed, stopped or cannot be reached.
    pub fn center(&self) -> Result<Vec<f32>> {
        let parts = self.gather(|_, _, _| ShardRequest::Center, || false)?;
        let parts = parts.ok_or(Error::Stopped("parameter server"))?;
        Ok(self.combined(parts)?.into_vec(Vec::new()))
    }

    /// The shards' answers (each shard's index and values) as one vector,
    /// each at its range (no copy into one vector).
    fn combined(&self, answers: Vec<Answer>) -> Result<Combined> {
        let at = |index: usize| self.shards.get(index).map_or(0, |(range, _)| range.start);
        let parts = answers.into_iter().map(|(index, part)| (at(index), part));
        Combined::owned(self.len, parts)
    }

    /// Sends every shard its `request` (given its index, its range and
    /// whether it is served here) and hands over their answers as they
    /// came, each with its shard's index, as long as its range.
    fn gather(
        &self,
        request: impl Fn(usize, &Range<usize>, bool) -> ShardRequest,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Vec<Answer>>> {
        let (reply, answers) = bounded(self.shards.len());
        for (index, (range, at)) in self.shards.iter().enumerate() {
            match at {
                ShardAt::Here { addr, .. } => {
                    serve(addr, request(index, range, true), reply.clone())?
                }
                ShardAt::There { process, remote } => {
                    let request = request(index, range, false);
                    remote.send(*process, index, request, reply.clone())?
                }
            }
        }
        drop(reply);
        let mut parts = Vec::with_capacity(self.shards.len());
        while parts.len() < self.shards.len() {
            match answers.recv_timeout(POLL) {
                Ok((index, part)) => {
                    let part = part?;
                    match self.shards.get(index) {
                        Some((range, _)) if range.len() == part.len() => parts.push((index, part)),
                        _ => {
                            return Err(Error::Layout(format!(
                                "server shard {index} answered {} values",
                                part.len()
                            )))
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) if !stopped() => {}
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Stopped("parameter server shard"))
                }
            }
        }
        Ok(Some(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_to_a_busy_shard_queue_and_more_shards_share_the_load() {
        let link = LinkModel {
            bandwidth_gbps: 1.0,
            ..LinkModel::default()
        };
        let now = Instant::now();
        let links = |shards: usize| ShardLinks {
            link,
            bytes_per_value: 4.0,
            free_at: (0..shards).map(|_| Mutex::new(now)).collect(),
        };
        let close = |a: Instant, b: Instant| {
            let gap = a.max(b) - a.min(b);
            assert!(gap < Duration::from_micros(1), "{gap:?}");
        };
        // 1,000,000 values at 1 Gbit/s: 32 ms each way.
        let values = 1_000_000;
        let trip = Duration::from_millis(64);
        let one = links(1);
        close(one.done(0, [values].into_iter(), now), now + trip);
        // The second trainer at the same moment waits for the first.
        close(one.done(1, [values].into_iter(), now), now + 2 * trip);
        // Two shards: each carries half, one after the other for the two
        // trainers; the second is done when its own link is, the first later
        // once the shards' links are free.
        let two = links(2);
        let half = [values / 2, values / 2];
        close(two.done(0, half.into_iter(), now), now + trip);
        close(two.done(1, half.into_iter(), now), now + trip);
        close(two.done(2, half.into_iter(), now), now + trip * 3 / 2);
    }
}
