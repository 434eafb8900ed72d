//! [`TrainerCore`]: one step at a time, with the in-line sync and recovery.

use crate::faults::{faults_due, Fault, FaultKind};
use crate::recovery::{unpanicked, RecoveryPoint};
use crate::stats::TrainerCounters;
use crate::stragglers::{straggler_of, Straggler};
use crate::sync::transport::sleep_until;
use crate::sync::{Payload, SyncPeer};
use crate::{Error, Learner, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the trainer itself does to synchronize.
#[derive(Debug)]
pub(crate) enum Foreground {
    /// Nothing (no sync, or a shadow loop does it).
    Nothing,
    /// All-reduce the gradients with the group before every update.
    SyncSgd(SyncPeer),
    /// Run the peer's rule every `every` steps, waiting for it.
    Every {
        /// Steps between syncs.
        every: u64,
        /// The trainer's sync state.
        peer: SyncPeer,
    },
}

/// How far a trainer may run past the newest average applied to its replica
/// (`sync.shadow.max_staleness`), and how long it waits for the next one.
#[derive(Debug, Clone)]
pub(crate) struct StalenessBound {
    /// The most steps past the newest average.
    pub steps: u64,
    /// The longest wait for an average: then the trainer fails, naming the
    /// bound ([`Error::StalenessWait`]).
    pub patience: Duration,
    /// Raised once syncing has ended: the bound holds no more.
    pub syncing_ended: Arc<AtomicBool>,
}

impl StalenessBound {
    /// Whether `trainer`, its newest average `average_age` steps old, is held
    /// back, keeping since when in `held_since`; an error once it has been
    /// for longer than the patience.
    fn holds(
        &self,
        trainer: usize,
        average_age: u64,
        held_since: &mut Option<Instant>,
    ) -> Result<bool> {
        if average_age <= self.steps || self.syncing_ended.load(Ordering::Relaxed) {
            *held_since = None;
            return Ok(false);
        }
        let waited = held_since.get_or_insert_with(Instant::now).elapsed();
        if waited > self.patience {
            return Err(Error::StalenessWait {
                trainer,
                bound: self.steps,
                waited,
            });
        }
        Ok(true)
    }
}

/// What one [`TrainerCore::step`] did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stepped {
    /// A step was taken.
    Trained,
    /// The data is exhausted.
    Exhausted,
    /// No step was taken: the newest average applied to the replica is more
    /// than `sync.shadow.max_staleness` steps old, and the next one is awaited.
    Waiting,
    /// The step failed or diverged; the replica was reloaded from its recovery
    /// point.
    Recovered {
        /// What went wrong.
        cause: String,
    },
}

/// Why an attempted step did not count.
enum Failure {
    /// The trainer can recover from it.
    Recoverable(String),
    /// It ends the trainer.
    Fatal(Error),
}

impl Failure {
    /// A foreground sync round that failed (a peer, the coordinator or a
    /// server shard): the trainer goes on and syncs again next time.
    fn sync(e: Error) -> Self {
        Failure::Recoverable(format!("the sync round failed: {e}"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Fatal(e)
    }
}

/// A learner plus its in-line synchronization, counters and recovery.
#[derive(Debug)]
pub(crate) struct TrainerCore<L> {
    learner: L,
    foreground: Foreground,
    counters: Arc<TrainerCounters>,
    buffer: Payload,
    recovery: Arc<RecoveryPoint>,
    /// Whether the core itself refreshes the recovery point with its own good
    /// parameters (when no sync hands it group averages).
    keeps_own_state: bool,
    faults: Vec<Fault>,
    /// How this trainer is slowed on purpose, if it is.
    straggler: Option<Straggler>,
    /// The most steps past its newest average the replica may take.
    staleness_bound: Option<StalenessBound>,
    /// Since when the bound has held the trainer back.
    held_since: Option<Instant>,
    /// Raised when the cluster is asked to stop: the trainer's sleeps (a
    /// straggler's lag and pauses, an injected hang) end at once.
    stop_requested: Arc<AtomicBool>,
    /// Attempts that failed, all told: a fault's `at_step` counts attempts
    /// (steps taken plus failed attempts), so a retry is a new attempt and a
    /// fault hitting every attempt fails every retry too.
    failed_attempts: u64,
    /// Steps up to which the foreground algorithms do not sync (see
    /// [`TrainerCore::catching_up_to`]).
    catch_up: u64,
    consecutive_faults: u32,
}

impl<L: Learner> TrainerCore<L> {
    /// Failures in a row after which a trainer is given up.
    pub(crate) const MAX_CONSECUTIVE_FAULTS: u32 = 5;

    /// A trainer around `learner`, recovering from its current parameters.
    pub(crate) fn new(
        learner: L,
        foreground: Foreground,
        counters: Arc<TrainerCounters>,
    ) -> Result<Self> {
        let params = learner.dense_params();
        let mut initial = vec![0f32; params.numel()];
        params.copy_to(&mut initial)?;
        let keeps_own_state = !matches!(foreground, Foreground::Every { .. });
        Ok(Self {
            buffer: Payload::zeros(initial.len()),
            recovery: Arc::new(RecoveryPoint::new(&initial)),
            learner,
            foreground,
            counters,
            keeps_own_state,
            faults: Vec::new(),
            straggler: None,
            staleness_bound: None,
            held_since: None,
            stop_requested: Arc::default(),
            failed_attempts: 0,
            catch_up: 0,
            consecutive_faults: 0,
        })
    }

    /// Recovers from `recovery`, which a sync loop beside the trainer keeps
    /// refreshed with group averages (`keeps_own_state`: the core refreshes it
    /// with its own parameters too).
    pub(crate) fn with_recovery(
        mut self,
        recovery: Arc<RecoveryPoint>,
        keeps_own_state: bool,
    ) -> Self {
        self.recovery = recovery;
        self.keeps_own_state = keeps_own_state;
        self
    }

    /// Takes the steps up to `steps` without foreground syncs. A resumed
    /// cluster's trainers may have stopped a few steps apart (an interrupted
    /// run stops each between two of its chunks); the foreground rounds pair
    /// trainers by count, so they start once all of them are past the furthest
    /// one, at the same step counts for everyone, and none waits for a round
    /// another has already taken.
    pub(crate) fn catching_up_to(mut self, steps: u64) -> Self {
        self.catch_up = steps;
        self
    }

    /// Injects `faults` (those naming this trainer).
    pub(crate) fn with_faults(mut self, faults: &[Fault]) -> Self {
        let trainer = self.counters.trainer();
        self.faults = faults
            .iter()
            .filter(|f| f.trainer == trainer)
            .copied()
            .collect();
        self
    }

    /// Slows this trainer as the straggler of `stragglers` naming it says.
    pub(crate) fn with_stragglers(mut self, stragglers: &[Straggler]) -> Self {
        self.straggler = straggler_of(stragglers, self.counters.trainer());
        self
    }

    /// Takes a step only while the newest average applied to the replica is
    /// at most `bound` steps old (none: always).
    pub(crate) fn with_staleness_bound(mut self, bound: Option<StalenessBound>) -> Self {
        self.staleness_bound = bound;
        self
    }

    /// Ends the trainer's sleeps once `stop_requested` is raised.
    pub(crate) fn waking_on(mut self, stop_requested: &Arc<AtomicBool>) -> Self {
        self.stop_requested = Arc::clone(stop_requested);
        self
    }

    /// Sleeps for `duration`, or until the cluster is asked to stop.
    fn sleep(&self, duration: Duration) {
        if !duration.is_zero() {
            let deadline = Instant::now() + duration;
            sleep_until(deadline, || self.stop_requested.load(Ordering::Relaxed));
        }
    }

    /// Whether the staleness bound holds the trainer back now; an error once
    /// it has for longer than the bound's patience.
    fn held(&mut self) -> Result<bool> {
        let Some(bound) = &self.staleness_bound else {
            return Ok(false);
        };
        let (trainer, age) = (self.counters.trainer(), self.counters.average_age());
        bound.holds(trainer, age, &mut self.held_since)
    }

    /// The learner.
    pub(crate) fn learner(&self) -> &L {
        &self.learner
    }

    /// Mutable access to the learner (learning rate changes).
    pub(crate) fn learner_mut(&mut self) -> &mut L {
        &mut self.learner
    }

    /// Gives the learner back.
    pub(crate) fn into_learner(self) -> L {
        self.learner
    }

    /// The counters.
    pub(crate) fn counters(&self) -> &Arc<TrainerCounters> {
        &self.counters
    }

    /// One step (plus any in-line sync), recovering from a failed or diverged
    /// one; an error only when the trainer cannot go on.
    pub(crate) fn step(&mut self) -> Result<Stepped> {
        if self.held()? {
            return Ok(Stepped::Waiting);
        }
        let attempt = unpanicked(|| self.try_step());
        let cause = match attempt {
            Ok(Ok(false)) => return Ok(Stepped::Exhausted),
            Ok(Ok(true)) if self.learner.dense_params().all_finite()? => {
                self.consecutive_faults = 0;
                let steps = self.counters.steps();
                if self.keeps_own_state && steps % RecoveryPoint::SELF_EVERY == 0 {
                    self.buffer
                        .refill(|b| self.learner.dense_params().copy_to(b))?;
                    self.recovery.offer(self.buffer.values());
                }
                return Ok(Stepped::Trained);
            }
            Ok(Ok(true)) => "the dense parameters diverged (NaN or infinite)".to_string(),
            Ok(Err(Failure::Fatal(e))) => return Err(e),
            Ok(Err(Failure::Recoverable(cause))) => cause,
            Err(panic) => format!("the step panicked: {panic}"),
        };
        self.recover(cause)
    }

    /// Reloads the replica from the recovery point after a failure.
    fn recover(&mut self, cause: String) -> Result<Stepped> {
        self.consecutive_faults += 1;
        self.failed_attempts += 1;
        if self.consecutive_faults >= Self::MAX_CONSECUTIVE_FAULTS {
            return Err(Error::Faulty {
                trainer: self.counters.trainer(),
                faults: self.consecutive_faults,
                last: cause,
            });
        }
        // Finite parameters are the last good state (the step failed before
        // or without harming them); others are reloaded.
        if !self.learner.dense_params().all_finite()? {
            self.learner
                .dense_params()
                .load_from(&self.recovery.latest())?;
            self.learner.reset_optimizer().map_err(Error::learner)?;
        }
        self.learner.dense_params().zero_grad()?;
        self.counters.record_recovery();
        Ok(Stepped::Recovered { cause })
    }

    /// Injects the faults due at this attempt; an injected error as a
    /// failure. Returns those that hit later in the step (`Diverge`,
    /// `LosePush`).
    fn inject(&mut self) -> std::result::Result<Vec<FaultKind>, Failure> {
        let step = self.counters.steps() + self.failed_attempts;
        let mut later = Vec::new();
        for fault in faults_due(&self.faults, self.counters.trainer(), step) {
            match fault.kind {
                FaultKind::Error => {
                    return Err(Failure::Recoverable(format!(
                        "injected error at step {step}"
                    )))
                }
                FaultKind::Panic => {
                    crate::faults::inject_panic(format!("injected panic at step {step}"))
                }
                FaultKind::Hang { .. } => self.sleep(fault.hang()),
                FaultKind::Diverge | FaultKind::LosePush => later.push(fault.kind),
                // They hit elsewhere (FaultKind::site).
                FaultKind::SyncPanic
                | FaultKind::SyncHang { .. }
                | FaultKind::CoordinatorPanic
                | FaultKind::ServerPanic => {}
            }
        }
        Ok(later)
    }

    /// `sync-sgd`: the group's mean of the dense gradients replaces this
    /// trainer's, and the group's shared gradients are combined and applied,
    /// each row once (see [`Learner::take_shared_gradients`]); returns once
    /// every member has applied its rows. `false` once syncing has stopped
    /// (another trainer's data ran out): then nothing is applied and the
    /// trainer ends its pass, as DDP's `drop_last` does, since a step of its
    /// own would be no step of the m×-batch trainer sync-sgd stands for (and
    /// under Adagrad a lone step moves rarely-seen weights far).
    fn all_reduce_gradients(&mut self) -> std::result::Result<bool, Failure> {
        let shared = match self.learner.take_shared_gradients() {
            Ok(shared) => shared,
            Err(e) => return Err(self.learner_failure(e)),
        };
        let Foreground::SyncSgd(peer) = &mut self.foreground else {
            return Ok(true);
        };
        let params = self.learner.dense_params();
        let mut contribute = false;
        self.buffer.refill(|b| {
            contribute = params.copy_finite_grad_to(b)?;
            Ok(())
        })?;
        match peer.group_mean(&self.buffer, contribute) {
            Ok(Some(mean)) => {
                params.load_grad_from(&mean)?;
                peer.recycle(mean);
                self.counters.record_sync_since(self.counters.steps());
            }
            Ok(None) => return Ok(false),
            Err(Error::NonFinite { group }) => {
                return Err(Failure::Recoverable(format!(
                    "every gradient of group {group:?} is non-finite"
                )))
            }
            Err(e) => return Err(Failure::sync(e)),
        }
        let Some(mine) = shared else {
            return Ok(true);
        };
        let Some(rows) = peer.combine_shared(&mine).map_err(Failure::sync)? else {
            return Ok(false);
        };
        if let Err(e) = self.learner.apply_shared_gradients(&rows) {
            return Err(self.learner_failure(e));
        }
        if let Foreground::SyncSgd(peer) = &mut self.foreground {
            peer.shared_applied().map_err(Failure::sync)?;
        }
        Ok(true)
    }

    /// Attempts one step; `Ok(false)` once the data is exhausted.
    fn try_step(&mut self) -> std::result::Result<bool, Failure> {
        let later = self.inject()?;
        if let Some(straggler) = &self.straggler {
            self.sleep(straggler.pause_before(self.counters.steps()));
        }
        let started = Instant::now();
        let outcome = match self.learner.compute_gradients() {
            Ok(Some(outcome)) => outcome,
            Ok(None) => return Ok(false),
            Err(e) => return Err(self.learner_failure(e)),
        };
        if !outcome.loss.is_finite() {
            // Its gradients must not reach anything shared.
            return Err(Failure::Recoverable(format!(
                "the loss is {} (the replica diverged)",
                outcome.loss
            )));
        }
        let mut took = started.elapsed();
        let catching_up = self.counters.steps() < self.catch_up;
        let sync_sgd = matches!(self.foreground, Foreground::SyncSgd(_)) && !catching_up;
        if sync_sgd && !self.all_reduce_gradients()? {
            self.counters.record_dropped(outcome.examples);
            return Ok(false);
        }
        let applying = Instant::now();
        if later.contains(&FaultKind::LosePush) {
            self.learner
                .lose_shared_update()
                .map_err(|e| self.learner_failure(e))?;
        }
        if let Err(e) = self.learner.apply_gradients() {
            return Err(self.learner_failure(e));
        }
        took += applying.elapsed();
        if let Some(straggler) = &self.straggler {
            // The step's own time (not sync-sgd's wait for the others), stretched.
            self.sleep(straggler.lag(took));
        }
        if later.contains(&FaultKind::Diverge) {
            // An infinite learning rate for this step's dense update.
            let params = self.learner.dense_params();
            let infinite = params
                .grad()
                .f_mul_scalar(f64::INFINITY)
                .map_err(Error::from)?;
            tch::no_grad(|| params.values().shallow_clone().f_sub_(&infinite))
                .map(drop)
                .map_err(Error::from)?;
        }
        self.counters.record_step(outcome.examples);
        if let (Foreground::Every { every, peer }, false) = (&mut self.foreground, catching_up) {
            if self.counters.steps() % *every == 0 {
                let params = self.learner.dense_params();
                let mut contribute = false;
                self.buffer.refill(|b| {
                    contribute = params.copy_finite_to(b)?;
                    Ok(())
                })?;
                match peer.target(&self.buffer, contribute) {
                    Ok(Some(target)) => {
                        let round = peer.round().saturating_sub(1);
                        if round % RecoveryPoint::OFFER_EVERY == 0 {
                            self.recovery.offer(&target);
                        }
                        params.load_from(&target)?;
                        peer.recycle(target);
                        self.counters.record_sync_since(self.counters.steps());
                    }
                    Ok(None) | Err(Error::NonFinite { .. }) => {}
                    Err(e) => return Err(Failure::sync(e)),
                }
            }
        }
        Ok(true)
    }

    /// A learner's error, recoverable or not as the learner says.
    fn learner_failure(&self, e: L::Error) -> Failure {
        if L::is_recoverable(&e) {
            Failure::Recoverable(e.to_string())
        } else {
            Failure::Fatal(Error::learner(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_trainer_fails_naming_the_bound_once_no_average_comes_in_its_patience() {
        let bound = StalenessBound {
            steps: 4,
            patience: Duration::from_millis(20),
            syncing_ended: Arc::default(),
        };
        let mut since = None;
        assert!(!bound.holds(1, 4, &mut since).unwrap());
        assert!(bound.holds(1, 5, &mut since).unwrap());
        // A fresh average lets it go, and its wait starts again.
        std::thread::sleep(Duration::from_millis(15));
        assert!(!bound.holds(1, 0, &mut since).unwrap());
        assert!(bound.holds(1, 5, &mut since).unwrap());
        std::thread::sleep(Duration::from_millis(15));
        assert!(bound.holds(1, 5, &mut since).unwrap());
        std::thread::sleep(Duration::from_millis(15));
        let e = bound.holds(1, 5, &mut since).unwrap_err().to_string();
        assert!(e.starts_with("trainer 1 waited 0 s"), "{e}");
        assert!(e.contains("sync.shadow.max_staleness = 4"), "{e}");
        // Once syncing has ended, nothing holds it.
        bound.syncing_ended.store(true, Ordering::Relaxed);
        assert!(!bound.holds(1, 99, &mut since).unwrap());
    }
}
