//! Which synchronization algorithm runs, with the settings only it reads.
//!
//! An algorithm is a timing and, for the averaging ones, a sync rule
//! ([`Rules`](crate::sync::Rules): `ma`, `easgd`, `bmuf`, `diloco`, or one's
//! own):
//!
//! | name | who syncs | what |
//! |---|---|---|
//! | `none` | nobody | independent local SGD |
//! | `sync-sgd` | the trainer, every step, waiting | gradient all-reduce within the group (as PyTorch DDP); shared rows (`Learner::take_shared_gradients`) combined and applied once each |
//! | `fr-RULE:k` | the trainer, every `k` steps, waiting | a round of the rule |
//! | `shadow-RULE` | a background loop beside each trainer | rounds of the rule, back to back |
//!
//! The settings one mode reads travel inside it: a rule's section
//! (`[sync.easgd]`, `[sync.bmuf]`, `[sync.diloco]`) in its [`Rule`], the
//! background loops' (`[sync.shadow]`) in [`Algorithm::Shadow`]. So a
//! setting no part of the run reads cannot be expressed; the flat form of
//! the config file, where any section can be written, is
//! [`SyncFile`](crate::sync::SyncFile).

use crate::sync::rules::settings::{BmufSettings, EasgdSettings, ShadowSettings};
use crate::sync::DilocoParams;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A synchronization algorithm: a timing and, for the averaging ones, a sync
/// rule; each with the settings it reads. Parsed from its name (`"shadow-ma"`)
/// with every setting at its default; serialized as its name alone (the
/// settings are [`SyncConfig`](crate::sync::SyncConfig)'s sections).
#[derive(Debug, Clone, PartialEq)]
pub enum Algorithm {
    /// No synchronization.
    None,
    /// Gradient all-reduce every step.
    SyncSgd,
    /// The trainer runs `rule` every `every` steps and waits for it.
    Foreground {
        /// The sync rule.
        rule: Rule,
        /// Steps between syncs.
        every: u64,
    },
    /// A background loop runs `rule` continuously.
    Shadow {
        /// The sync rule.
        rule: Rule,
        /// The background loops' settings (`[sync.shadow]`).
        loops: ShadowSettings,
    },
}

/// A sync rule, with its settings where it has a section of its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// Model averaging (`ma`): the target is the group's mean.
    Ma,
    /// EASGD (`easgd`), with `[sync.easgd]`.
    Easgd(EasgdSettings),
    /// BMUF (`bmuf`), with `[sync.bmuf]`.
    Bmuf(BmufSettings),
    /// DiLoCo's outer step (`diloco`), with `[sync.diloco]`.
    Diloco(DilocoParams),
    /// A rule of one's own, by its registered name; it reads `[sync.NAME]`
    /// ([`SyncConfig::section`](crate::sync::SyncConfig::section)).
    Own(String),
}

impl Rule {
    /// The rule called `name`, its settings at their defaults.
    pub fn named(name: &str) -> Self {
        match name {
            "ma" => Rule::Ma,
            "easgd" => Rule::Easgd(EasgdSettings::default()),
            "bmuf" => Rule::Bmuf(BmufSettings::default()),
            "diloco" => Rule::Diloco(DilocoParams::default()),
            own => Rule::Own(own.to_string()),
        }
    }

    /// The rule's name (the one [`Rules`](crate::sync::Rules) makes it by).
    pub fn name(&self) -> &str {
        match self {
            Rule::Ma => "ma",
            Rule::Easgd(_) => "easgd",
            Rule::Bmuf(_) => "bmuf",
            Rule::Diloco(_) => "diloco",
            Rule::Own(name) => name,
        }
    }
}

impl Algorithm {
    /// The sync rule, if the algorithm averages parameters.
    pub fn rule(&self) -> Option<&Rule> {
        match self {
            Algorithm::Foreground { rule, .. } | Algorithm::Shadow { rule, .. } => Some(rule),
            Algorithm::None | Algorithm::SyncSgd => None,
        }
    }

    /// The sync rule, to change its settings.
    pub fn rule_mut(&mut self) -> Option<&mut Rule> {
        match self {
            Algorithm::Foreground { rule, .. } | Algorithm::Shadow { rule, .. } => Some(rule),
            Algorithm::None | Algorithm::SyncSgd => None,
        }
    }

    /// The name of the sync rule, if the algorithm averages parameters.
    pub fn rule_name(&self) -> Option<&str> {
        self.rule().map(Rule::name)
    }

    /// The background loops' settings, under `shadow-*`.
    pub fn loops(&self) -> Option<&ShadowSettings> {
        match self {
            Algorithm::Shadow { loops, .. } => Some(loops),
            _ => None,
        }
    }

    /// The background loops' settings, to change them, under `shadow-*`.
    pub fn loops_mut(&mut self) -> Option<&mut ShadowSettings> {
        match self {
            Algorithm::Shadow { loops, .. } => Some(loops),
            _ => None,
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
            valid.then(|| Rule::named(name)).ok_or_else(bad)
        };
        match s {
            "none" => Ok(Algorithm::None),
            "sync-sgd" => Ok(Algorithm::SyncSgd),
            _ => {
                if let Some(name) = s.strip_prefix("shadow-") {
                    return Ok(Algorithm::Shadow {
                        rule: rule(name)?,
                        loops: ShadowSettings::default(),
                    });
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
            Algorithm::Foreground { rule, every } => write!(f, "fr-{}:{every}", rule.name()),
            Algorithm::Shadow { rule, .. } => write!(f, "shadow-{}", rule.name()),
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
            let known = |a: Algorithm| match a.rule_name() {
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
