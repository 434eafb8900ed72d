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
pub(crate) fn unpanicked<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| {
                panic
                    .downcast_ref::<crate::faults::InjectedPanic>()
                    .map(|p| p.0.clone())
            })
            .unwrap_or_else(|| "(no message)".into())
    })
}

/// The newest good state a trainer can restart from.
#[derive(Debug)]
pub(crate) struct RecoveryPoint {
    latest: Mutex<Arc<[f32]>>,
}

/// Whether every value is finite. Each block is checked without branches (an
/// exponent of all ones is NaN or infinite), which vectorizes: 4× faster than
/// `iter().all(is_finite)`, whose early exit keeps it scalar. A non-finite
/// value still ends the scan at its block.
pub(crate) fn all_finite(values: &[f32]) -> bool {
    values
        .chunks(FINITE_BLOCK)
        .all(|block| !block.iter().fold(false, |bad, &x| bad | not_finite(x)))
}

/// Values checked at a time, without branches, by [`all_finite`].
const FINITE_BLOCK: usize = 4096;

/// NaN or infinite: an exponent of all ones.
fn not_finite(x: f32) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    x.to_bits() & EXPONENT == EXPONENT
}

impl RecoveryPoint {
    /// Sync rounds between two group averages offered to the recovery point.
    pub(crate) const OFFER_EVERY: u64 = 8;
    /// Trainer steps between two copies of its own parameters, for algorithms
    /// that never average.
    pub(crate) const SELF_EVERY: u64 = 100;

    /// Starts from the initial parameters.
    pub(crate) fn new(initial: &[f32]) -> Self {
        Self {
            latest: Mutex::new(Arc::from(initial)),
        }
    }

    /// Offers `values` as the newest good state; refused (false) unless every
    /// value is finite.
    pub(crate) fn offer(&self, values: &[f32]) -> bool {
        if !all_finite(values) {
            return false;
        }
        let mut latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        // Refilled in place unless a restart still reads it: a fresh 1.9 MB
        // buffer is ~475 pages to fault in, every few rounds.
        match Arc::get_mut(&mut latest).filter(|kept| kept.len() == values.len()) {
            Some(kept) => kept.copy_from_slice(values),
            None => *latest = Arc::from(values),
        }
        true
    }

    /// The newest good state.
    pub(crate) fn latest(&self) -> Arc<[f32]> {
        Arc::clone(&self.latest.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finite_checks_agree_with_the_scalar_definition_wherever_a_value_sits() {
        let special = [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45, // subnormal
            -0.0,
        ];
        for len in [1, 4095, 4096, 4097, 10_000, 70_000] {
            for at in [0, len / 2, len - 1] {
                for value in special {
                    let mut values: Vec<f32> = (0..len).map(|i| (i as f32).sin()).collect();
                    values[at] = value;
                    let scalar = values.iter().all(|x| x.is_finite());
                    assert_eq!(all_finite(&values), scalar, "{value} at {at} of {len}");
                    let mut source = values.clone();
                    let shared = crate::SharedValues::of(&mut source);
                    let mut copy = vec![7.0; len];
                    assert_eq!(shared.read_finite_into(&mut copy), scalar);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&copy), bits(&values), "{value} at {at} of {len}");
                    // Into a shorter buffer: as many values as it holds.
                    let mut short = vec![7.0; len / 2];
                    let finite = shared.read_finite_into(&mut short);
                    assert_eq!(finite, all_finite(&values[..len / 2]));
                    assert_eq!(bits(&short), bits(&values[..len / 2]));
                }
            }
        }
    }

    #[test]
    fn only_finite_states_are_kept() {
        let point = RecoveryPoint::new(&[1.0, 2.0]);
        assert!(!point.offer(&[f32::NAN, 0.0]));
        assert!(!point.offer(&[0.0, f32::INFINITY]));
        assert_eq!(&*point.latest(), &[1.0, 2.0]);
        assert!(point.offer(&[3.0, -4.0]));
        assert_eq!(&*point.latest(), &[3.0, -4.0]);
        // Refilled in place when nobody reads it; a reader keeps what it read.
        let at = point.latest().as_ptr();
        assert!(point.offer(&[5.0, 6.0]));
        let read = point.latest();
        assert_eq!((read.as_ptr(), &*read), (at, &[5.0, 6.0][..]));
        assert!(point.offer(&[7.0, 8.0]));
        assert_eq!(&*read, &[5.0, 6.0]);
        assert_eq!(&*point.latest(), &[7.0, 8.0]);
        assert!(all_finite(&[]));
        assert!(!all_finite(&[f32::NEG_INFINITY]));
    }
}
