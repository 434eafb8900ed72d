//! Which synchronization algorithm runs (its settings: [`SyncConfig`](crate::sync::SyncConfig)).
//!
//! An algorithm is a timing and, for the averaging ones, a sync rule by name
//! ([`Rules`](crate::sync::Rules): `ma`, `easgd`, `bmuf`, or one's own):
//!
//! | name | who syncs | what |
//! |---|---|---|
//! | `none` | nobody | independent local SGD |
//! | `sync-sgd` | the trainer, every step, waiting | gradient all-reduce within the group (as PyTorch DDP); shared rows (`Learner::take_shared_gradients`) combined and applied once each |
//! | `fr-RULE:k` | the trainer, every `k` steps, waiting | a round of the rule |
//! | `shadow-RULE` | a background loop beside each trainer | rounds of the rule, back to back |

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A synchronization algorithm: a timing and, for the averaging ones, the
/// name of a sync rule ([`Rules`](crate::sync::Rules)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Algorithm {
    /// No synchronization.
    None,
    /// Gradient all-reduce every step.
    SyncSgd,
    /// The trainer runs `rule` every `every` steps and waits for it.
    Foreground {
        /// The sync rule's name.
        rule: String,
        /// Steps between syncs.
        every: u64,
    },
    /// A background loop runs `rule` continuously.
    Shadow {
        /// The sync rule's name.
        rule: String,
    },
}

impl Algorithm {
    /// The sync rule's name, if the algorithm averages parameters.
    pub fn rule(&self) -> Option<&str> {
        match self {
            Algorithm::Foreground { rule, .. } | Algorithm::Shadow { rule } => Some(rule),
            Algorithm::None | Algorithm::SyncSgd => None,
        }
    }

    /// Whether a background loop syncs (else the trainer does, if anyone).
    pub fn is_shadow(&self) -> bool {
        matches!(self, Algorithm::Shadow { .. })
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// `none`, `sync-sgd`, `fr-RULE:K` or `shadow-RULE`, where `RULE` is a
    /// name of letters, digits, `-` and `_` (which rules exist is checked
    /// against [`Rules`](crate::sync::Rules) where the cluster starts).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Config {
            key: "sync.algorithm".into(),
            reason: format!(
                "unknown algorithm {s:?}; expected none, sync-sgd, fr-RULE:K or shadow-RULE \
                 (built-in rules: ma, easgd, bmuf, diloco)"
            ),
        };
        let rule = |name: &str| {
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            valid.then(|| name.to_string()).ok_or_else(bad)
        };
        match s {
            "none" => Ok(Algorithm::None),
            "sync-sgd" => Ok(Algorithm::SyncSgd),
            _ => {
                if let Some(name) = s.strip_prefix("shadow-") {
                    return Ok(Algorithm::Shadow { rule: rule(name)? });
                }
                let rest = s.strip_prefix("fr-").ok_or_else(bad)?;
                let (name, every) = rest.split_once(':').ok_or_else(bad)?;
                let every = every.parse::<u64>().ok().filter(|&k| k >= 1);
                let Some(every) = every else {
                    return Err(Error::Config {
                        key: "sync.algorithm".into(),
                        reason: format!(
                            "{s}: the sync period k must be a whole number of steps from 1 \
                             to {}",
                            u64::MAX
                        ),
                    });
                };
                Ok(Algorithm::Foreground {
                    rule: rule(name)?,
                    every,
                })
            }
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::None => write!(f, "none"),
            Algorithm::SyncSgd => write!(f, "sync-sgd"),
            Algorithm::Foreground { rule, every } => write!(f, "fr-{rule}:{every}"),
            Algorithm::Shadow { rule } => write!(f, "shadow-{rule}"),
        }
    }
}

impl Serialize for Algorithm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "none",
            "sync-sgd",
            "fr-ma:1",
            "fr-easgd:50",
            "fr-bmuf:5",
            "shadow-ma",
            "shadow-easgd",
            "shadow-bmuf",
        ] {
            let algorithm: Algorithm = name.parse().unwrap();
            assert_eq!(algorithm.to_string(), name);
        }
        for bad in [
            "shadow", "shadow-", "fr-ma", "fr-ma:0", "fr-sgd:3", "fr-a b:2", "async",
        ] {
            let known = |a: Algorithm| match a.rule() {
                Some(rule) => crate::sync::Rules::default().check(rule),
                None => Ok(()),
            };
            let e = bad
                .parse::<Algorithm>()
                .and_then(known)
                .unwrap_err()
                .to_string();
            assert!(e.contains("sync.algorithm"), "{bad}: {e}");
        }
        // A period out of range is named as such, not as an unknown algorithm.
        for bad in ["fr-ma:-1", "fr-ma:0", "fr-ma:18446744073709551616"] {
            let e = bad.parse::<Algorithm>().unwrap_err().to_string();
            assert!(e.contains("the sync period k must be"), "{bad}: {e}");
        }
        let e = "async".parse::<Algorithm>().unwrap_err().to_string();
        assert!(e.contains("diloco"), "{e}");
    }
}
