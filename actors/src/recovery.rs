//! Containing a failed trainer: what it restarts from.
//!
//! A trainer's step can fail (an error, a panic) or leave its replica diverged
//! (NaN or infinite parameters). The trainer then reloads its dense parameters
//! from its [`RecoveryPoint`], resets its dense optimizer state and goes on; the
//! cluster keeps running and an [`crate::events::Event::TrainerRecovered`] reports
//! it. The recovery point holds the newest **group average** the trainer's sync
//! handed it (its shadow loop, or its foreground rounds, offer one every
//! [`RecoveryPoint::OFFER_EVERY`] rounds) or, when its algorithm never averages
//! (`none`, `sync-sgd`), its own last good parameters, taken every
//! [`RecoveryPoint::SELF_EVERY`] steps. Only finite values are ever accepted.
//!
//! The other half of the guard is in the transport: a member whose snapshot is
//! not finite abstains from its group's mean, so a diverged replica is never
//! averaged into anyone else.
//!
//! Every piece of work that may fail this way — a step, a shadow-sync round, a
//! request to the group coordinator or to a server shard — runs through
//! [`unpanicked`]: a panic never reaches actix (whose arbiter thread it would
//! end), it becomes an error the actor recovers from.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Runs `work`, turning a panic into its message. Whoever calls it restores
/// what the work may have left half-done.
pub fn unpanicked<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "(no message)".into())
    })
}

/// The newest good state a trainer can restart from.
#[derive(Debug)]
pub struct RecoveryPoint {
    latest: Mutex<Arc<[f32]>>,
}

/// Whether every value is finite.
pub fn all_finite(values: &[f32]) -> bool {
    values.iter().all(|x| x.is_finite())
}

impl RecoveryPoint {
    /// Sync rounds between two group averages offered to the recovery point.
    pub const OFFER_EVERY: u64 = 8;
    /// Trainer steps between two copies of its own parameters, for algorithms
    /// that never average.
    pub const SELF_EVERY: u64 = 100;

    /// Starts from the initial parameters.
    pub fn new(initial: &[f32]) -> Self {
        Self {
            latest: Mutex::new(Arc::from(initial)),
        }
    }

    /// Offers `values` as the newest good state; refused (false) unless every
    /// value is finite.
    pub fn offer(&self, values: &[f32]) -> bool {
        if !all_finite(values) {
            return false;
        }
        let values: Arc<[f32]> = Arc::from(values);
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = values;
        true
    }

    /// The newest good state.
    pub fn latest(&self) -> Arc<[f32]> {
        Arc::clone(&self.latest.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finite_states_are_kept() {
        let point = RecoveryPoint::new(&[1.0, 2.0]);
        assert!(!point.offer(&[f32::NAN, 0.0]));
        assert!(!point.offer(&[0.0, f32::INFINITY]));
        assert_eq!(&*point.latest(), &[1.0, 2.0]);
        assert!(point.offer(&[3.0, -4.0]));
        assert_eq!(&*point.latest(), &[3.0, -4.0]);
        assert!(all_finite(&[]));
        assert!(!all_finite(&[f32::NEG_INFINITY]));
    }
}
