//! The EASGD centre variable on a parameter server, sharded.
//!
//! The flat parameter vector is cut into `S` contiguous [`shard_ranges`]; each
//! [`ServerShard`] (plain logic: the elastic step on its slice) runs as a
//! [`ServerShardActor`] on its own thread, as on `S` real servers. An elastic
//! update is atomic per shard (an actor handles one message at a time), and
//! trainers updating different shards never wait on each other. A trainer talks
//! to the shards through a [`ServerClient`]: one request per shard, all in
//! flight at once, the answers assembled into the replica's target.
//!
//! A shard that fails on a request (a panic) answers it with an error and
//! serves on from its centre as it was ([`Event::ServiceRecovered`]): the
//! centre changes only in the elastic step's arithmetic, which cannot fail. The
//! trainer's sync round fails and it goes on with the next one.

use crate::events::{Event, EventBus};
use crate::faults::{faults_at, faults_due, Fault, FaultSite};
use crate::recovery::unpanicked;
use crate::sync::elastic;
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// `shards` (≥ 1) near-equal contiguous ranges covering `0..len`.
pub fn shard_ranges(len: usize, shards: usize) -> Result<Vec<Range<usize>>> {
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

    /// The elastic step (see [`elastic`]) of a replica's whole `snapshot` on
    /// this shard; returns the target for the shard's range.
    pub fn elastic(&mut self, snapshot: &[f32], alpha: f32) -> Result<Vec<f32>> {
        let slice = snapshot.get(self.range.clone()).ok_or_else(|| {
            Error::Layout(format!(
                "snapshot of {} values has no shard {:?}",
                snapshot.len(),
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
type Reply = (usize, Result<Vec<f32>>);

/// An elastic step of `trainer`'s `snapshot` (whole vector) in its `round`,
/// on one shard.
#[derive(Message)]
#[rtype(result = "()")]
struct Elastic {
    snapshot: Arc<[f32]>,
    alpha: f32,
    trainer: usize,
    round: u64,
    reply: Sender<Reply>,
}

/// A copy of one shard's values.
#[derive(Message)]
#[rtype(result = "()")]
struct Center {
    reply: Sender<Reply>,
}

/// The actor serving one [`ServerShard`].
pub struct ServerShardActor {
    index: usize,
    shard: ServerShard,
    events: EventBus,
    /// Injected `server-panic` faults.
    faults: Vec<Fault>,
}

impl Actor for ServerShardActor {
    type Context = Context<Self>;
}

impl Handler<Elastic> for ServerShardActor {
    type Result = ();

    fn handle(&mut self, request: Elastic, _: &mut Context<Self>) {
        let (trainer, round, index) = (request.trainer, request.round, self.index);
        let (faults, shard) = (&self.faults, &mut self.shard);
        let attempt = unpanicked(|| {
            if faults_due(faults, trainer, round).next().is_some() {
                panic!("injected server panic");
            }
            shard.elastic(&request.snapshot, request.alpha)
        });
        let target = attempt.unwrap_or_else(|panic| {
            let cause = format!("serving trainer {trainer}'s round {round}: {panic}");
            self.events.publish(Event::ServiceRecovered {
                service: format!("server shard {index}"),
                cause: cause.clone(),
            });
            Err(Error::System(format!(
                "server shard {index} failed {cause}"
            )))
        });
        let _ = request.reply.send((index, target));
    }
}

impl Handler<Center> for ServerShardActor {
    type Result = ();

    fn handle(&mut self, request: Center, _: &mut Context<Self>) {
        let _ = request
            .reply
            .send((self.index, Ok(self.shard.center().to_vec())));
    }
}

/// How long a waiting trainer sleeps between two looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// A trainer's line to the server's shards.
#[derive(Debug, Clone)]
pub struct ServerClient {
    shards: Vec<(Range<usize>, Addr<ServerShardActor>)>,
    len: usize,
}

impl ServerClient {
    /// Starts one actor per shard of `initial` (each on its own arbiter of the
    /// running actix system), reporting on `events` and injecting the
    /// `server-panic` faults of `faults`, and returns their client.
    pub fn start(
        initial: &[f32],
        shards: usize,
        events: &EventBus,
        faults: &[Fault],
    ) -> Result<Self> {
        let faults = faults_at(faults, FaultSite::Server);
        let shards = shard_ranges(initial.len(), shards)?
            .into_iter()
            .enumerate()
            .map(|(index, range)| {
                let shard = ServerShard::new(initial, range.clone())?;
                let (events, faults) = (events.clone(), faults.clone());
                let addr =
                    ServerShardActor::start_in_arbiter(&Arbiter::new().handle(), move |_| {
                        ServerShardActor {
                            index,
                            shard,
                            events,
                            faults,
                        }
                    });
                Ok((range, addr))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            shards,
            len: initial.len(),
        })
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The elastic step of `trainer`'s `snapshot` in its `round` on every
    /// shard at once; returns the replica's target, or `None` if `stopped()`
    /// turns true while waiting.
    pub fn elastic(
        &self,
        snapshot: Arc<[f32]>,
        alpha: f32,
        trainer: usize,
        round: u64,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Vec<f32>>> {
        if snapshot.len() != self.len {
            return Err(Error::Layout(format!(
                "snapshot has {} values, the centre {}",
                snapshot.len(),
                self.len
            )));
        }
        self.gather(
            |reply| Elastic {
                snapshot: Arc::clone(&snapshot),
                alpha,
                trainer,
                round,
                reply,
            },
            stopped,
        )
    }

    /// A copy of the whole centre.
    pub fn center(&self) -> Result<Vec<f32>> {
        self.gather(|reply| Center { reply }, || false)?
            .ok_or_else(|| Error::System("the parameter server did not answer".into()))
    }

    /// Sends `request` to every shard and assembles their answers in shard order.
    fn gather<M>(
        &self,
        request: impl Fn(Sender<Reply>) -> M,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Vec<f32>>>
    where
        M: Message<Result = ()> + Send + 'static,
        ServerShardActor: Handler<M>,
    {
        let (reply, answers) = bounded(self.shards.len());
        for (_, addr) in &self.shards {
            addr.try_send(request(reply.clone())).map_err(|e| {
                Error::System(format!("a parameter server shard is unreachable: {e}"))
            })?;
        }
        drop(reply);
        let mut out = vec![0f32; self.len];
        let mut received = 0;
        while received < self.shards.len() {
            match answers.recv_timeout(POLL) {
                Ok((index, part)) => {
                    let part = part?;
                    let range = self.shards.get(index).map(|(r, _)| r.clone());
                    match range {
                        Some(range) if range.len() == part.len() => {
                            out[range].copy_from_slice(&part);
                        }
                        _ => {
                            return Err(Error::Layout(format!(
                                "server shard {index} answered {} values",
                                part.len()
                            )))
                        }
                    }
                    received += 1;
                }
                Err(RecvTimeoutError::Timeout) if !stopped() => {}
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::System(
                        "a parameter server shard stopped before answering".into(),
                    ))
                }
            }
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                move || ServerClient::start(&initial, shards, &EventBus::default(), &[])
            };
            let (system, thread, server) = spawn_system("server-test", start).unwrap();
            let server = server.unwrap();
            assert_eq!(server.shard_count(), shards);
            let target = server.elastic(Arc::clone(&snapshot), 0.5, 0, 0, || false);
            assert_eq!(target.unwrap(), Some(expected.clone()), "{shards} shards");
            assert_eq!(server.center().unwrap(), expected_center);
            let short: Arc<[f32]> = Arc::from(vec![0f32; 3]);
            assert!(server.elastic(short, 0.5, 0, 1, || false).is_err());
            system.stop();
            thread.join().unwrap();
            // With the system gone, a request fails instead of hanging.
            assert!(server.center().is_err());
        }
        assert!(shard_ranges(10, 0).is_err());
    }

    #[test]
    fn shard_ranges_cover_the_vector_in_order() {
        let ranges = shard_ranges(10, 3).unwrap();
        assert_eq!(ranges, vec![0..4, 4..8, 8..10]);
        assert_eq!(shard_ranges(2, 4).unwrap(), vec![0..1, 1..2, 2..2, 2..2]);
    }
}
