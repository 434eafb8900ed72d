//! ShadowSync's background synchronization: beside the trainers, forever,
//! snapshot the dense parameters → combine with the group (or server) →
//! write back, without ever blocking a trainer.
//!
//! The same rounds run one of two ways:
//! * [`ShadowHub`] on a [`ShadowHubActor`]: one thread serving every trainer
//!   of the process. A group's round is one blocked pass over its members'
//!   snapshots: no message between them, no per-member thread to wake, and
//!   each value read once to average and once to write back. The simulated
//!   link still delays the write-back by the time the round would take on it.
//!   The default when the job is one process and the rule averages a group.
//! * [`ShadowLoop`] on a [`ShadowActor`]: a thread per trainer, exchanging
//!   with its group through the transport. Across processes, for EASGD's
//!   server, and with `sync.shadow.threads = "per-trainer"`.
//!
//! Either way a round starts only as [`Pacing`] allows; a snapshot that is not
//! finite (the trainer diverged) sits the round out: it is left out of the
//! group's mean, and the mean overwrites the replica. Each trainer's
//! [`RecoveryPoint`](crate::recovery::RecoveryPoint) is handed a group average
//! every [`RecoveryPoint::OFFER_EVERY`](crate::recovery::RecoveryPoint::OFFER_EVERY)
//! rounds. A round that fails (an error, a panic) is reported and its trainer
//! goes on with the next one; [`MAX_CONSECUTIVE_FAILURES`] in a row end
//! syncing for everyone, loudly.

mod hub;
mod trainer_loop;

pub(crate) use hub::{ShadowHub, ShadowHubActor};
pub(crate) use trainer_loop::{ShadowActor, ShadowLoop};

use crate::events::{Event, EventBus};
use crate::recovery::unpanicked;
use crate::{with_causes, Error};
use std::time::Duration;

/// How a trainer's shadow loop ended: the trainer, and the error that ended
/// syncing, if one did.
pub(crate) type ShadowExit = (usize, Option<Error>);

/// Failed rounds of one trainer in a row after which syncing ends.
pub(crate) const MAX_CONSECUTIVE_FAILURES: u32 = 5;

/// What a completed round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundOutcome {
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

/// Runs a step of a round with panics caught: its value, or its error (a
/// panic as [`Error::RoundPanicked`]).
fn catching_panics<T>(step: impl FnOnce() -> crate::Result<T>) -> crate::Result<T> {
    unpanicked(step).unwrap_or_else(|panic| Err(Error::RoundPanicked(panic)))
}

/// Publishes what `trainer`'s round `round` came to, counting its failed
/// rounds in a row in `failures`; the error that ends syncing once they are
/// more than [`MAX_CONSECUTIVE_FAILURES`].
fn report(
    events: &EventBus,
    trainer: usize,
    round: u64,
    result: crate::Result<RoundOutcome>,
    failures: &mut u32,
) -> Option<Error> {
    match result {
        Ok(outcome) => {
            *failures = 0;
            if !outcome.contributed {
                events.publish(Event::Abstained {
                    trainer,
                    round: outcome.round,
                });
            }
            if outcome.written_back {
                events.publish(Event::Synced {
                    trainer,
                    round: outcome.round,
                    staleness: outcome.staleness,
                });
            }
            None
        }
        Err(cause) => {
            *failures += 1;
            if *failures > MAX_CONSECUTIVE_FAILURES {
                return Some(Error::SyncFailing {
                    rounds: *failures,
                    last: Box::new(cause),
                });
            }
            events.publish(Event::SyncRecovered {
                trainer,
                round,
                cause: with_causes(&cause),
            });
            None
        }
    }
}

/// When a trainer's next shadow round may start: once the trainer has taken
/// `min_steps` steps since the last snapshot, `min_interval` has passed (so
/// nothing spins), and the rounds' CPU time is within `max_cpu_share` of the
/// trainer's (so the sync work stays a bounded share of the training work,
/// however many trainers share the cores and however slow their memory). A
/// trainer that stops stepping (hung) holds its rounds back
/// [`Pacing::STALLED`] at most, so its group never waits on it for longer.
/// A trainer held back by `max_staleness` waits for the round itself: its
/// round then waits only for `min_interval`, since the steps and CPU time it
/// would otherwise wait for cannot come until the round lands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pacing {
    /// Least time between two snapshots.
    pub min_interval: Duration,
    /// Least trainer steps between two snapshots.
    pub min_steps: u64,
    /// Most CPU time the loop's rounds may take against its trainer's steps
    /// (0: no bound).
    pub max_cpu_share: f64,
    /// Held back on purpose between each round's snapshot and its write-back.
    pub delay: RoundDelay,
    /// The most steps a trainer takes past its newest average
    /// (`sync.shadow.max_staleness`; none: unbounded).
    pub max_staleness: Option<u64>,
}

/// A delay added on purpose to every shadow round between its snapshot and
/// its write-back (`sync.shadow.delay_ms`, `sync.shadow.delay_jitter_ms`): staleness
/// injected.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct RoundDelay {
    /// Every round's.
    pub fixed: Duration,
    /// Up to this much more, drawn uniformly for each round.
    pub jitter: Duration,
}

impl RoundDelay {
    /// No delay (the tests' pacing).
    #[cfg(test)]
    pub(crate) const NONE: RoundDelay = RoundDelay {
        fixed: Duration::ZERO,
        jitter: Duration::ZERO,
    };

    /// This round's delay.
    pub(crate) fn draw(&self) -> Duration {
        if self.jitter.is_zero() {
            self.fixed
        } else {
            self.fixed + self.jitter.mul_f64(rand::random::<f64>())
        }
    }
}

impl Pacing {
    /// Whether a trainer whose newest average is `average_age` steps old is
    /// held back by the staleness bound, waiting for the next round.
    pub(crate) fn holds(&self, average_age: u64) -> bool {
        self.max_staleness.is_some_and(|bound| average_age > bound)
    }

    /// How long to wait before the round a held trainer waits for,
    /// `elapsed` after the last snapshot: the interval only.
    pub(crate) fn wait_held(&self, elapsed: Duration) -> Duration {
        self.min_interval.saturating_sub(elapsed)
    }

    /// The longest a loop under a staleness bound waits before it looks again
    /// whether its trainer is held (a held trainer waits for the look).
    pub(crate) fn recheck(&self) -> Duration {
        match self.max_staleness {
            Some(_) => Self::HELD_RECHECK,
            None => Self::RECHECK,
        }
    }

    /// How often a loop under a staleness bound looks whether its trainer is
    /// held.
    const HELD_RECHECK: Duration = Duration::from_millis(1);

    /// Longest wait before looking again at a trainer that has not stepped.
    const RECHECK: Duration = Duration::from_millis(50);
    /// How long a loop waits for missing steps at most: a trainer that has not
    /// taken them by then is stalled (or hung), and its group goes on syncing
    /// its parameters as they are rather than wait for it.
    pub(crate) const STALLED: Duration = Duration::from_secs(1);

    /// How long to wait before the next round, `elapsed` and `steps` after the
    /// last snapshot, with the trainer owing `cpu_debt` of training CPU time
    /// ([`TrainerCounters::sync_cpu_debt`](crate::stats::TrainerCounters::sync_cpu_debt)); zero means now. Missing steps are waited for
    /// at the pace the trainer has kept since the snapshot; owed CPU time at
    /// least as long (a trainer's CPU time grows no faster than the clock).
    /// Once the trainer has finished (`steps` is `None`) its final parameters
    /// are still averaged with the group, every recheck period at most.
    pub(crate) fn wait(
        &self,
        elapsed: Duration,
        steps: Option<u64>,
        cpu_debt: Duration,
    ) -> Duration {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ShardFault;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_error_that_ends_syncing_keeps_the_last_failures_kind_and_source() {
        let panicked = catching_panics::<()>(|| panic!("a bad step"));
        assert!(matches!(&panicked, Err(Error::RoundPanicked(m)) if m == "a bad step"));
        let (events, mut failures) = (EventBus::default(), 0);
        let fail = |message: &str| {
            Err(Error::ShardFailed {
                shard: 2,
                fault: ShardFault::Panicked {
                    trainer: 1,
                    round: 0,
                    message: message.into(),
                },
            })
        };
        for round in 0..u64::from(MAX_CONSECUTIVE_FAILURES) {
            assert!(report(&events, 1, round, fail("early"), &mut failures).is_none());
        }
        let ended = report(&events, 1, 9, fail("the last"), &mut failures).unwrap();
        let Error::SyncFailing { last, .. } = &ended else {
            panic!("{ended:?}");
        };
        assert!(
            matches!(**last, Error::ShardFailed { shard: 2, .. }),
            "{last:?}"
        );
        // Said once: the message has the cause, and no source repeats it.
        assert_eq!(
            with_causes(&ended),
            "6 rounds failed in a row; the last: server shard 2: \
             serving trainer 1's round 0: the last"
        );
    }

    #[test]
    fn pacing_waits_for_the_interval_and_for_the_missing_steps_at_the_trainers_pace() {
        let pacing = Pacing {
            min_interval: 20 * MS,
            min_steps: 4,
            max_cpu_share: 0.0,
            delay: RoundDelay::NONE,
            max_staleness: None,
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
            delay: RoundDelay::NONE,
            max_staleness: None,
        };
        assert_eq!(steps_only.wait(Duration::ZERO, Some(0), Duration::ZERO), MS);
        let unpaced = Pacing {
            min_interval: Duration::ZERO,
            min_steps: 0,
            max_cpu_share: 0.0,
            delay: RoundDelay::NONE,
            max_staleness: None,
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
    fn a_trainer_held_by_the_staleness_bound_waits_only_for_the_interval() {
        let bounded = Pacing {
            min_interval: 20 * MS,
            min_steps: 0,
            max_cpu_share: 0.03,
            delay: RoundDelay::NONE,
            max_staleness: Some(0),
        };
        assert!(!bounded.holds(0));
        assert!(bounded.holds(1));
        assert!(!Pacing {
            max_staleness: None,
            ..bounded
        }
        .holds(u64::MAX));
        // Owing CPU it cannot pay while held, the round would wait for a
        // stall (a second) every step; held, it waits for the interval only.
        assert_eq!(bounded.wait(5 * MS, Some(1), 900 * MS), Pacing::RECHECK);
        assert_eq!(bounded.wait_held(5 * MS), 15 * MS);
        assert_eq!(bounded.wait_held(30 * MS), Duration::ZERO);
    }

    #[test]
    fn pacing_waits_until_the_trainer_has_paid_for_the_loops_cpu() {
        let unpaced = Pacing {
            min_interval: Duration::ZERO,
            min_steps: 0,
            max_cpu_share: 0.03,
            delay: RoundDelay::NONE,
            max_staleness: None,
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
