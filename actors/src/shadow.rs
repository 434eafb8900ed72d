//! ShadowSync's background loop: beside each trainer, forever, snapshot the dense
//! parameters → combine with the group (or server) → write back, without ever
//! blocking the trainer.
//!
//! [`ShadowLoop`] is the plain logic (one [`ShadowLoop::round`] at a time);
//! [`ShadowActor`] runs rounds on its own arbiter thread until syncing stops,
//! paced by the transport's own waiting and by [`Pacing`]: a round starts only
//! once its trainer has taken `min_steps` steps since the last snapshot,
//! `min_interval` has passed (so a loop never spins), and the loop's CPU time
//! is within `max_cpu_share` of its trainer's (so the sync work stays a bounded
//! share of the training work, however many trainers share the cores and
//! however slow their memory). A trainer that stops stepping (hung) holds its
//! loop back [`Pacing::STALLED`] at most, so its group never waits on it for
//! longer.
//!
//! A snapshot that is not finite (the trainer diverged) sits the round out: it
//! is left out of the group's mean, and the mean overwrites the replica. The
//! loop hands a group average to the trainer's [`RecoveryPoint`] every
//! [`RecoveryPoint::OFFER_EVERY`] rounds. A round that fails (an error, a
//! panic) is reported and the loop goes on with the next one (its group timed
//! it out of the round meanwhile); [`ShadowActor::MAX_CONSECUTIVE_FAILURES`] in
//! a row end syncing for everyone, loudly.

use crate::events::{Event, EventBus};
use crate::faults::{faults_at, faults_due, Fault, FaultKind, FaultSite};
use crate::hogwild::ParamAlias;
use crate::recovery::{unpanicked, RecoveryPoint};
use crate::stats::TrainerCounters;
use crate::sync::{Payload, SyncPeer, WriteBack};
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One trainer's background synchronization.
#[derive(Debug)]
pub struct ShadowLoop {
    replica: ParamAlias,
    peer: SyncPeer,
    write_back: WriteBack,
    counters: Arc<TrainerCounters>,
    recovery: Arc<RecoveryPoint>,
    snapshot: Payload,
    /// The last target kept whole for the recovery point, refilled the next
    /// time.
    whole_target: Vec<f32>,
    /// When the last snapshot was taken, and the trainer's steps then.
    last_snapshot: (Instant, u64),
    /// Faults injected into this loop, and the round they last hit.
    faults: Vec<Fault>,
    injected_at: Option<u64>,
}

/// What a completed round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundOutcome {
    /// The peer's round number.
    pub round: u64,
    /// Trainer steps between the snapshot and the write-back.
    pub staleness: u64,
    /// Whether the snapshot was finite and went into the average.
    pub contributed: bool,
    /// Whether a target was written back (not when nobody in the group, or
    /// EASGD's lone diverged replica, had finite values).
    pub written_back: bool,
}

impl ShadowLoop {
    /// A loop syncing `replica` (an alias of the trainer's parameters), handing
    /// group averages to the trainer's `recovery` point.
    pub fn new(
        replica: ParamAlias,
        peer: SyncPeer,
        write_back: WriteBack,
        counters: Arc<TrainerCounters>,
        recovery: Arc<RecoveryPoint>,
    ) -> Self {
        let snapshot = Payload::zeros(replica.len());
        let last_snapshot = (Instant::now(), counters.steps());
        Self {
            replica,
            peer,
            write_back,
            counters,
            recovery,
            snapshot,
            whole_target: Vec::new(),
            last_snapshot,
            faults: Vec::new(),
            injected_at: None,
        }
    }

    /// Injects the `sync-*` faults of `faults` that name this loop's trainer.
    pub fn with_faults(mut self, faults: &[Fault]) -> Self {
        let trainer = self.counters.trainer();
        self.faults = faults_at(faults, FaultSite::SyncLoop);
        self.faults.retain(|f| f.trainer == trainer);
        self
    }

    /// The training CPU time its trainer must still spend before this loop
    /// is within `share` of it.
    pub fn cpu_debt(&self, share: f64) -> Duration {
        self.counters.sync_cpu_debt(share)
    }

    /// The number of the next round.
    pub fn next_round(&self) -> u64 {
        self.peer.round()
    }

    /// Injects the faults due at the next round (each round's once).
    fn inject(&mut self) {
        let round = self.peer.round();
        if self.injected_at == Some(round) {
            return;
        }
        self.injected_at = Some(round);
        for fault in faults_due(&self.faults, self.counters.trainer(), round) {
            match fault.kind {
                FaultKind::SyncPanic => panic!("injected sync panic at round {round}"),
                _ => std::thread::sleep(fault.hang()),
            }
        }
    }

    /// Time and trainer steps since the last snapshot (or since the loop
    /// began); no steps once the trainer has finished.
    pub fn since_snapshot(&self) -> (Duration, Option<u64>) {
        let (at, steps) = self.last_snapshot;
        let stepped =
            (!self.counters.is_finished()).then(|| self.counters.steps().saturating_sub(steps));
        (at.elapsed(), stepped)
    }

    /// True once syncing has stopped for everyone.
    pub fn stopped(&self) -> bool {
        self.peer.stopped()
    }

    /// One round; `Ok(None)` once syncing has stopped.
    pub fn round(&mut self) -> Result<Option<RoundOutcome>> {
        let counters = Arc::clone(&self.counters);
        let _cpu = counters.charge_sync();
        self.inject();
        let steps_at_snapshot = self.counters.steps();
        self.last_snapshot = (Instant::now(), steps_at_snapshot);
        let replica = &self.replica;
        let mut contributed = false;
        self.snapshot.refill(|out| {
            contributed = replica.snapshot_into(out)?;
            Ok(())
        })?;
        if !contributed {
            self.counters.record_abstention();
        }
        let combined = self.peer.combine(&self.snapshot, contributed);
        // The round just taken (the coordinator may have moved the peer on).
        let round = self.peer.round().saturating_sub(1);
        let mut outcome = RoundOutcome {
            round,
            staleness: 0,
            contributed,
            written_back: false,
        };
        let combined = match combined {
            Ok(Some(combined)) => combined,
            Ok(None) => return Ok(None),
            Err(Error::NonFinite { .. }) => return Ok(Some(outcome)),
            Err(e) => return Err(e),
        };
        // Now and then the target is kept whole too, for the recovery point.
        let offer = contributed && round % RecoveryPoint::OFFER_EVERY == 0;
        let mut whole = offer.then(|| {
            let mut whole = std::mem::take(&mut self.whole_target);
            whole.resize(combined.len(), 0.0);
            whole
        });
        // A diverged replica takes the group's values outright.
        let write_back = if contributed {
            self.write_back
        } else {
            WriteBack::Overwrite
        };
        // The target, block by block, written back as the rule makes it.
        let peer = &self.peer;
        self.replica
            .write_back_blocks(write_back, self.snapshot.values(), |write| {
                peer.target_blocks(&combined, |at, block| {
                    let kept = whole.as_mut().and_then(|w| w.get_mut(at..at + block.len()));
                    if let Some(kept) = kept {
                        kept.copy_from_slice(block);
                    }
                    write(at, block)
                })
            })?;
        if let Some(whole) = whole {
            self.recovery.offer(&whole);
            self.whole_target = whole;
        }
        if let Some(spare) = combined.into_spare() {
            self.peer.recycle(spare);
        }
        outcome.staleness = self.counters.steps().saturating_sub(steps_at_snapshot);
        outcome.written_back = true;
        self.counters.record_sync(outcome.staleness);
        Ok(Some(outcome))
    }
}

/// When a shadow loop may start its next round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    /// Least time between two snapshots.
    pub min_interval: Duration,
    /// Least trainer steps between two snapshots.
    pub min_steps: u64,
    /// Most CPU time the loop's rounds may take against its trainer's steps
    /// (0: no bound).
    pub max_cpu_share: f64,
}

impl Pacing {
    /// Longest wait before looking again at a trainer that has not stepped.
    const RECHECK: Duration = Duration::from_millis(50);
    /// How long a loop waits for missing steps at most: a trainer that has not
    /// taken them by then is stalled (or hung), and its group goes on syncing
    /// its parameters as they are rather than wait for it.
    pub const STALLED: Duration = Duration::from_secs(1);

    /// How long to wait before the next round, `elapsed` and `steps` after the
    /// last snapshot, with the trainer owing `cpu_debt` of training CPU time
    /// ([`ShadowLoop::cpu_debt`]); zero means now. Missing steps are waited for
    /// at the pace the trainer has kept since the snapshot; owed CPU time at
    /// least as long (a trainer's CPU time grows no faster than the clock).
    /// Once the trainer has finished (`steps` is `None`) its final parameters
    /// are still averaged with the group, every recheck period at most.
    pub fn wait(&self, elapsed: Duration, steps: Option<u64>, cpu_debt: Duration) -> Duration {
        let for_interval = self.min_interval.saturating_sub(elapsed);
        let Some(steps) = steps else {
            return for_interval.max(Self::RECHECK.saturating_sub(elapsed));
        };
        if elapsed >= Self::STALLED {
            return for_interval;
        }
        let missing = self.min_steps.saturating_sub(steps);
        let per_step = match steps {
            0 => elapsed,
            _ => elapsed / u32::try_from(steps).unwrap_or(u32::MAX),
        };
        let for_steps = (missing > 0)
            .then(|| per_step.saturating_mul(u32::try_from(missing).unwrap_or(u32::MAX)));
        let for_cpu = (!cpu_debt.is_zero()).then_some(cpu_debt);
        [for_steps, for_cpu]
            .into_iter()
            .flatten()
            .map(|wait| {
                wait.clamp(Duration::from_millis(1), Self::RECHECK)
                    .min(Self::STALLED - elapsed)
            })
            .fold(for_interval, Duration::max)
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Round;

/// The actor running a [`ShadowLoop`].
pub struct ShadowActor {
    shadow: ShadowLoop,
    pacing: Pacing,
    events: EventBus,
    exits: Sender<(usize, Option<String>)>,
    trainer: usize,
    /// Raised when this loop fails, so that no peer waits for it.
    stop: Arc<AtomicBool>,
    consecutive_failures: u32,
}

impl ShadowActor {
    /// Failed rounds in a row after which syncing ends.
    pub const MAX_CONSECUTIVE_FAILURES: u32 = 5;

    /// An actor looping `shadow` for `trainer` as `pacing` allows; reports its
    /// end on `exits` and, if it fails, ends syncing for everyone through `stop`.
    pub fn new(
        trainer: usize,
        shadow: ShadowLoop,
        pacing: Pacing,
        events: EventBus,
        exits: Sender<(usize, Option<String>)>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            shadow,
            pacing,
            events,
            exits,
            trainer,
            stop,
            consecutive_failures: 0,
        }
    }

    fn end(&mut self, ctx: &mut Context<Self>, error: Option<String>) {
        if let Some(error) = &error {
            tracing::warn!(trainer = self.trainer, %error, "shadow sync failed; syncing ends");
            self.stop.store(true, Ordering::Relaxed);
        }
        let _ = self.exits.send((self.trainer, error));
        ctx.stop();
    }
}

impl Actor for ShadowActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Round);
    }
}

impl Handler<Round> for ShadowActor {
    type Result = ();

    fn handle(&mut self, _: Round, ctx: &mut Context<Self>) {
        if self.shadow.stopped() {
            return self.end(ctx, None);
        }
        let (elapsed, steps) = self.shadow.since_snapshot();
        let cpu_debt = self.shadow.cpu_debt(self.pacing.max_cpu_share);
        let wait = self.pacing.wait(elapsed, steps, cpu_debt);
        if !wait.is_zero() {
            ctx.run_later(wait, |_, ctx| ctx.notify(Round));
            return;
        }
        let round = self.shadow.next_round();
        let attempt = unpanicked(|| self.shadow.round());
        let failure = match attempt {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(e)) => Err(e.to_string()),
            Err(panic) => Err(format!("the round panicked: {panic}")),
        };
        if failure.is_ok() {
            self.consecutive_failures = 0;
        }
        match failure {
            Ok(Some(outcome)) => {
                if !outcome.contributed {
                    self.events.publish(Event::Abstained {
                        trainer: self.trainer,
                        round: outcome.round,
                    });
                }
                if outcome.written_back {
                    self.events.publish(Event::Synced {
                        trainer: self.trainer,
                        round: outcome.round,
                        staleness: outcome.staleness,
                    });
                }
                ctx.notify(Round);
            }
            Ok(None) => self.end(ctx, None),
            Err(cause) => {
                self.consecutive_failures += 1;
                if self.consecutive_failures > Self::MAX_CONSECUTIVE_FAILURES {
                    return self.end(
                        ctx,
                        Some(format!(
                            "{} rounds failed in a row, the last: {cause}",
                            self.consecutive_failures
                        )),
                    );
                }
                self.events.publish(Event::SyncRecovered {
                    trainer: self.trainer,
                    round,
                    cause,
                });
                ctx.notify(Round);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pacing_waits_for_the_interval_and_for_the_missing_steps_at_the_trainers_pace() {
        let pacing = Pacing {
            min_interval: 20 * MS,
            min_steps: 4,
            max_cpu_share: 0.0,
        };
        // Enough steps: only the interval is left.
        assert_eq!(pacing.wait(5 * MS, Some(4), Duration::ZERO), 15 * MS);
        assert_eq!(
            pacing.wait(30 * MS, Some(9), Duration::ZERO),
            Duration::ZERO
        );
        // One step in 30 ms, three missing: 90 ms, but never more than a recheck.
        assert_eq!(
            pacing.wait(30 * MS, Some(1), Duration::ZERO),
            Pacing::RECHECK
        );
        // Two steps in 30 ms, two missing: 30 ms.
        assert_eq!(pacing.wait(30 * MS, Some(2), Duration::ZERO), 30 * MS);
        // No step yet: look again soon, then back off up to the recheck period.
        assert_eq!(
            pacing.wait(40 * MS, Some(0), Duration::ZERO),
            Pacing::RECHECK
        );
        let steps_only = Pacing {
            min_interval: Duration::ZERO,
            min_steps: 4,
            max_cpu_share: 0.0,
        };
        assert_eq!(steps_only.wait(Duration::ZERO, Some(0), Duration::ZERO), MS);
        let unpaced = Pacing {
            min_interval: Duration::ZERO,
            min_steps: 0,
            max_cpu_share: 0.0,
        };
        assert_eq!(
            unpaced.wait(Duration::ZERO, Some(0), Duration::ZERO),
            Duration::ZERO
        );
        // A stalled trainer: the loop stops waiting for its steps.
        assert_eq!(
            pacing.wait(Pacing::STALLED - 10 * MS, Some(1), Duration::ZERO),
            10 * MS
        );
        assert_eq!(
            pacing.wait(Pacing::STALLED, Some(1), Duration::ZERO),
            Duration::ZERO
        );
        // A finished trainer: its loop keeps going, at the recheck period.
        assert_eq!(
            unpaced.wait(10 * MS, None, Duration::ZERO),
            Pacing::RECHECK - 10 * MS
        );
        assert_eq!(pacing.wait(60 * MS, None, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn pacing_waits_until_the_trainer_has_paid_for_the_loops_cpu() {
        let unpaced = Pacing {
            min_interval: Duration::ZERO,
            min_steps: 0,
            max_cpu_share: 0.03,
        };
        // The trainer owes 3 ms of CPU time: at least 3 ms of the clock.
        assert_eq!(unpaced.wait(Duration::ZERO, Some(9), 3 * MS), 3 * MS);
        // Owing more: look again after a recheck period.
        assert_eq!(
            unpaced.wait(Duration::ZERO, Some(9), 900 * MS),
            Pacing::RECHECK
        );
        // Steps and CPU both missing: the longer wait.
        let pacing = Pacing {
            min_steps: 4,
            ..unpaced
        };
        assert_eq!(pacing.wait(30 * MS, Some(2), 10 * MS), 30 * MS);
        assert_eq!(pacing.wait(30 * MS, Some(2), 40 * MS), 40 * MS);
        // A stalled or finished trainer owes nothing more.
        assert_eq!(
            pacing.wait(Pacing::STALLED, Some(9), 40 * MS),
            Duration::ZERO
        );
        assert_eq!(
            pacing.wait(Pacing::STALLED - 5 * MS, Some(9), 40 * MS),
            5 * MS
        );
        assert_eq!(pacing.wait(60 * MS, None, 40 * MS), Duration::ZERO);
    }
}
