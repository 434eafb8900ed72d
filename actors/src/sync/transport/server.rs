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

use crate::events::{Event, EventBus};
use crate::faults::{faults_at, faults_due, Fault, FaultSite};
use crate::recovery::unpanicked;
use crate::stats::CpuAccount;
use crate::sync::peer::TARGET_BLOCK;
use crate::sync::{elastic, elastic_into, Combined, Fabric, LinkModel};
use crate::system::deliver;
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `shards` (≥ 1) near-equal contiguous ranges covering `0..len`.
pub(crate) fn shard_ranges(len: usize, shards: usize) -> Result<Vec<Range<usize>>> {
    if shards == 0 {
        return Err(Error::Config {
            key: "sync.server_shards".into(),
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
    pub fn elastic(&mut self, values: &[f32], at: usize, alpha: f32) -> Result<Vec<f32>> {
        let slice = self
            .range
            .start
            .checked_sub(at)
            .and_then(|from| values.get(from..from + self.range.len()))
            .ok_or_else(|| {
                Error::Layout(format!(
                    "{} values from index {at} do not hold shard {:?}",
                    values.len(),
                    self.range
                ))
            })?;
        Ok(elastic(slice, &mut self.center, alpha))
    }

    /// The shard's values.
    pub fn center(&self) -> &[f32] {
        &self.center
    }
}

/// What a shard answers: its index and its part of the result.
pub(crate) type ShardReply = (usize, Result<Vec<f32>>);

/// What a shard is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum ShardRequest {
    /// The elastic step of `trainer`'s replica in its `round`: `values` are
    /// the replica's from index `at` (the whole vector, or the shard's slice).
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
            let cause = format!("serving trainer {trainer}'s round {round}: {panic}");
            self.events.publish(Event::ServiceRecovered {
                service: format!("server shard {}", self.index),
                cause: cause.clone(),
            });
            Err(Error::ShardFailed {
                shard: self.index,
                reason: cause,
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
            } => hosted.serve(trainer, round, |shard| shard.elastic(&values, at, alpha)),
        };
        let _ = serve.reply.send((hosted.index, answer));
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
}

/// The simulated links to the shards: when each is free again.
#[derive(Debug)]
struct ShardLinks {
    link: LinkModel,
    free_at: Vec<Mutex<Instant>>,
}

impl ShardLinks {
    /// When `trainer`'s elastic step of a vector cut into `ranges` is off the
    /// wire, starting `now`: its own link carries the whole vector out and
    /// back; each shard's carries its slice once the trainers before are done.
    fn done(&self, trainer: usize, ranges: impl Iterator<Item = usize>, now: Instant) -> Instant {
        let wire = |values: usize| self.link.wire_time(trainer, LinkModel::SERVER, 4 * values) * 2;
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
    /// shard of the job.
    pub fn start(
        initial: &[f32],
        shards: usize,
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
        let remote = fabric.serve_shards(addrs.collect())?;
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
                    reason: "no process serves it".into(),
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
    /// returns the replica's target, in the shards' parts, or `None` if
    /// `stopped()` turns true while waiting for their answers.
    pub fn elastic(
        &self,
        snapshot: Arc<[f32]>,
        alpha: f32,
        trainer: usize,
        round: u64,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Combined>> {
        self.fits(&snapshot)?;
        self.gather(
            |range, here| {
                // Another process gets only its shard's slice.
                let (values, at) = match here {
                    true => (Arc::clone(&snapshot), 0),
                    false => (Arc::from(&snapshot[range.clone()]), range.start),
                };
                ShardRequest::Elastic {
                    values,
                    at,
                    alpha,
                    trainer,
                    round,
                }
            },
            stopped,
        )
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
    pub fn center(&self) -> Result<Vec<f32>> {
        let centre = self.gather(|_, _| ShardRequest::Center, || false)?;
        let centre = centre.ok_or(Error::Stopped("parameter server"))?;
        Ok(centre.into_vec(Vec::new()))
    }

    /// Sends every shard its `request` (given its range and whether it is
    /// served here) and hands over their answers as they came, each at its
    /// range (no copy into one vector).
    fn gather(
        &self,
        request: impl Fn(&Range<usize>, bool) -> ShardRequest,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Combined>> {
        let (reply, answers) = bounded(self.shards.len());
        for (index, (range, at)) in self.shards.iter().enumerate() {
            match at {
                ShardAt::Here { addr, .. } => serve(addr, request(range, true), reply.clone())?,
                ShardAt::There { process, remote } => {
                    remote.send(*process, index, request(range, false), reply.clone())?
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
                        Some((range, _)) if range.len() == part.len() => {
                            parts.push((range.start, part));
                        }
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
        Combined::owned(self.len, parts).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::InProcess;
    use crate::system::spawn_system;

    #[test]
    fn sharded_elastic_step_equals_the_unsharded_one() {
        let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let snapshot: Arc<[f32]> = (0..10).map(|i| 2.0 * i as f32 + 1.0).collect();
        let mut expected_center = initial.clone();
        let expected = elastic(&snapshot, &mut expected_center, 0.5);
        for shards in [1, 3, 4, 10, 16] {
            let start = {
                let initial = initial.clone();
                move || ServerClient::start(&initial, shards, &EventBus::default(), &[], &InProcess)
            };
            let (system, thread, server) = spawn_system("server-test", start).unwrap();
            let server = server.unwrap();
            assert_eq!(server.shard_count(), shards);
            let target = server.elastic(Arc::clone(&snapshot), 0.5, 0, 0, || false);
            let target = target.unwrap().unwrap();
            assert_eq!(target.parts().count(), shards, "one part a shard");
            assert_eq!(target.into_vec(Vec::new()), expected, "{shards} shards");
            assert_eq!(server.center().unwrap(), expected_center);
            let short: Arc<[f32]> = Arc::from(vec![0f32; 3]);
            assert!(server.elastic(short, 0.5, 0, 1, || false).is_err());
            system.stop();
            thread.join().unwrap();
            // With the system gone, a request fails instead of hanging. The
            // shards' arbiters stop on their own threads a moment after the
            // system's, so a request may still be answered meanwhile.
            let deadline = Instant::now() + Duration::from_secs(10);
            while server.center().is_ok() {
                assert!(Instant::now() < deadline, "the shards outlived the system");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert!(shard_ranges(10, 0).is_err());
    }

    #[test]
    fn an_elastic_step_made_here_is_the_requested_one_and_a_fault_moves_no_centre() {
        use crate::faults::FaultKind;
        // Longer than a block of the step made here, cut at shard edges inside blocks.
        let len = 5000;
        let initial: Vec<f32> = (0..len).map(|i| (i % 13) as f32).collect();
        let snapshot: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 2.0).collect();
        // Two steps worked out on one vector: the first asked of the shards,
        // the second made here.
        let mut expected_center = initial.clone();
        let _ = elastic(&snapshot, &mut expected_center, 0.25);
        let expected = elastic(&snapshot, &mut expected_center, 0.25);
        let fault = Fault {
            trainer: 1,
            kind: FaultKind::ServerPanic,
            at_step: 2,
            every: 0,
        };
        for shards in [1, 3, 4] {
            let start = {
                let initial = initial.clone();
                let events = EventBus::default();
                move || ServerClient::start(&initial, shards, &events, &[fault], &InProcess)
            };
            let (system, thread, server) = spawn_system("server-test", start).unwrap();
            let server = server.unwrap();
            assert!(server.all_here());
            let asked = server.elastic(Arc::from(&snapshot[..]), 0.25, 1, 1, || false);
            assert!(asked.unwrap().is_some());
            let mut target = vec![f32::NAN; len];
            server
                .elastic_on_this_thread(&snapshot, 0.25, 1, 3, |at, block| {
                    target[at..at + block.len()].copy_from_slice(block);
                    Ok(())
                })
                .unwrap();
            assert_eq!(target, expected, "{shards} shards");
            assert_eq!(server.center().unwrap(), expected_center);
            // Trainer 1's round 2 fails on every shard, and nothing moves.
            let mut written = 0;
            let e = server
                .elastic_on_this_thread(&snapshot, 0.25, 1, 2, |_, block| {
                    written += block.len();
                    Ok(())
                })
                .unwrap_err();
            assert!(matches!(e, Error::ShardFailed { shard: 0, .. }), "{e}");
            assert_eq!(written, 0);
            assert_eq!(server.center().unwrap(), expected_center);
            let short = server.elastic_on_this_thread(&snapshot[..3], 0.25, 1, 4, |_, _| Ok(()));
            assert!(short.is_err());
            system.stop();
            thread.join().unwrap();
        }
    }

    #[test]
    fn requests_to_a_busy_shard_queue_and_more_shards_share_the_load() {
        let link = LinkModel {
            bandwidth_gbps: 1.0,
            ..LinkModel::default()
        };
        let now = Instant::now();
        let links = |shards: usize| ShardLinks {
            link,
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

    #[test]
    fn a_shard_steps_the_same_from_its_slice_as_from_the_whole_vector() {
        let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let snapshot: Vec<f32> = (0..10).map(|i| 3.0 - i as f32).collect();
        let mut whole = ServerShard::new(&initial, 4..8).unwrap();
        let mut sliced = whole.clone();
        let from_whole = whole.elastic(&snapshot, 0, 0.25).unwrap();
        let from_slice = sliced.elastic(&snapshot[4..8], 4, 0.25).unwrap();
        assert_eq!(from_whole, from_slice);
        assert_eq!(whole, sliced);
        // A slice that does not hold the shard is refused, not misread.
        assert!(sliced.elastic(&snapshot[5..8], 5, 0.25).is_err());
        assert!(sliced.elastic(&snapshot[4..7], 4, 0.25).is_err());
    }

    #[test]
    fn shard_ranges_cover_the_vector_in_order() {
        let ranges = shard_ranges(10, 3).unwrap();
        assert_eq!(ranges, vec![0..4, 4..8, 8..10]);
        assert_eq!(shard_ranges(2, 4).unwrap(), vec![0..1, 1..2, 2..2, 2..2]);
    }
}
