//! Slow trainers on purpose, for experiments on stragglers.
//!
//! A [`Straggler`] names a trainer and how it lags: every step of its takes
//! `slowdown` times as long as it would (the trainer sleeps for the rest after
//! computing and applying the step: `(slowdown − 1)` × the step's own time),
//! and it pauses `pause_ms` milliseconds before each step of `pause_at_steps`.
//! The lag is the trainer's own: background sync goes on beside it, while
//! `sync-sgd` and `fr-*` rounds wait for it as they would for a slow machine.
//! Nothing is slowed unless a cluster is configured with stragglers
//! (`ClusterConfig::stragglers`, `[[stragglers]]` in a CTR run's config).

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One slow trainer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    /// The trainer it slows (its index in its process, as a fault's).
    pub trainer: usize,
    /// How many times as long each step takes (1: its own pace).
    #[serde(default = "one")]
    pub slowdown: f64,
    /// A pause before each step of `pause_at_steps`, in milliseconds.
    #[serde(default)]
    pub pause_ms: u64,
    /// The steps (counted from 0) before which it pauses.
    #[serde(default)]
    pub pause_at_steps: Vec<u64>,
}

fn one() -> f64 {
    1.0
}

impl Straggler {
    /// The largest slowdown: a trainer 1000× slower is as good as stopped.
    pub const MAX_SLOWDOWN: f64 = 1000.0;
    /// The longest pause, a day in milliseconds.
    pub const MAX_PAUSE_MS: u64 = 86_400_000;

    /// An error naming `stragglers.…` unless it slows one of a process's
    /// `trainers` trainers by a factor in [1, 1000], pausing at most a day.
    ///
    /// # Errors
    ///
    /// A trainer outside the job, a slowdown outside [1, 1000] or a pause
    /// over a day ([`Error::Config`]).
    pub fn check(&self, trainers: usize) -> Result<()> {
        if self.trainer >= trainers {
            return Err(Error::Config {
                key: "stragglers.trainer".into(),
                reason: format!(
                    "trainer {} does not exist (trainers 0..{trainers})",
                    self.trainer
                ),
            });
        }
        if !(1.0..=Self::MAX_SLOWDOWN).contains(&self.slowdown) {
            return Err(Error::Config {
                key: "stragglers.slowdown".into(),
                reason: format!(
                    "{} is not a factor in [1, {}]",
                    self.slowdown,
                    Self::MAX_SLOWDOWN
                ),
            });
        }
        if (self.pause_ms == 0) != self.pause_at_steps.is_empty() {
            let (key, reason) = match self.pause_ms {
                0 => ("stragglers.pause_at_steps", "is set, but pause_ms is 0"),
                _ => ("stragglers.pause_ms", "is set, but pause_at_steps is empty"),
            };
            return Err(Error::Config {
                key: key.into(),
                reason: format!("{reason}: trainer {} would never pause", self.trainer),
            });
        }
        if self.pause_ms > Self::MAX_PAUSE_MS {
            return Err(Error::Config {
                key: "stragglers.pause_ms".into(),
                reason: format!(
                    "{} ms is more than a day ({} ms)",
                    self.pause_ms,
                    Self::MAX_PAUSE_MS
                ),
            });
        }
        Ok(())
    }

    /// How long to sleep after a step that took `took` to compute and apply:
    /// the rest of `slowdown` × `took`.
    pub fn lag(&self, took: Duration) -> Duration {
        took.mul_f64(self.slowdown - 1.0)
    }

    /// How long to pause before step `step`.
    pub fn pause_before(&self, step: u64) -> Duration {
        if self.pause_at_steps.contains(&step) {
            Duration::from_millis(self.pause_ms)
        } else {
            Duration::ZERO
        }
    }
}

/// An error naming `stragglers.…` unless each of `stragglers` passes
/// [`Straggler::check`] and names a trainer no other one does.
///
/// # Errors
///
/// As [`Straggler::check`], or a trainer named twice ([`Error::Config`]).
pub fn check_all(stragglers: &[Straggler], trainers: usize) -> Result<()> {
    for (i, straggler) in stragglers.iter().enumerate() {
        straggler.check(trainers)?;
        if stragglers[..i]
            .iter()
            .any(|s| s.trainer == straggler.trainer)
        {
            return Err(Error::Config {
                key: "stragglers.trainer".into(),
                reason: format!(
                    "trainer {} is named by two [[stragglers]] entries; give it one",
                    straggler.trainer
                ),
            });
        }
    }
    Ok(())
}

/// The straggler of `trainer` among `stragglers`, if any.
pub(crate) fn straggler_of(stragglers: &[Straggler], trainer: usize) -> Option<Straggler> {
    stragglers.iter().rfind(|s| s.trainer == trainer).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_straggler_lags_by_the_rest_of_its_factor_and_pauses_where_told() {
        let straggler = Straggler {
            trainer: 1,
            slowdown: 4.0,
            pause_ms: 30,
            pause_at_steps: vec![0, 7],
        };
        assert_eq!(
            straggler.lag(Duration::from_millis(10)),
            Duration::from_millis(30)
        );
        assert_eq!(straggler.pause_before(7), Duration::from_millis(30));
        assert_eq!(straggler.pause_before(6), Duration::ZERO);
        let own_pace = Straggler {
            slowdown: 1.0,
            ..straggler.clone()
        };
        assert_eq!(own_pace.lag(Duration::from_millis(10)), Duration::ZERO);
        assert!(straggler.check(2).is_ok());
        let e = straggler.check(1).unwrap_err().to_string();
        assert!(e.contains("stragglers.trainer"), "{e}");
        for slowdown in [0.5, f64::NAN, f64::INFINITY, 1e9] {
            let e = Straggler {
                slowdown,
                ..straggler.clone()
            }
            .check(2)
            .unwrap_err();
            assert!(e.to_string().contains("stragglers.slowdown"), "{e}");
        }
        let e = Straggler {
            pause_ms: u64::MAX,
            ..straggler.clone()
        }
        .check(2)
        .unwrap_err();
        assert!(e.to_string().contains("stragglers.pause_ms"), "{e}");
        let parsed: Straggler = toml::from_str("trainer = 3").unwrap();
        assert_eq!((parsed.slowdown, parsed.pause_ms), (1.0, 0));
        assert!(toml::from_str::<Straggler>("trainer = 3\nslow = 2.0").is_err());
    }

    #[test]
    fn settings_that_would_do_nothing_are_refused_naming_the_key() {
        let pausing = Straggler {
            trainer: 0,
            slowdown: 1.0,
            pause_ms: 30,
            pause_at_steps: vec![5],
        };
        let without_steps = Straggler {
            pause_at_steps: vec![],
            ..pausing.clone()
        };
        let e = without_steps.check(2).unwrap_err().to_string();
        assert!(
            e.contains("stragglers.pause_ms") && e.contains("never pause"),
            "{e}"
        );
        let without_pause = Straggler {
            pause_ms: 0,
            ..pausing.clone()
        };
        let e = without_pause.check(2).unwrap_err().to_string();
        assert!(e.contains("stragglers.pause_at_steps"), "{e}");
        let twice = [
            pausing.clone(),
            Straggler {
                trainer: 1,
                ..pausing.clone()
            },
            pausing,
        ];
        assert!(check_all(&twice[..2], 2).is_ok());
        let e = check_all(&twice, 2).unwrap_err().to_string();
        assert!(e.contains("trainer 0 is named by two"), "{e}");
    }
}
