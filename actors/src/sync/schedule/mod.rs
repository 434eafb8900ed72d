//! DS-Sync group schedules: which trainers average together in each round.
//!
//! A schedule is anything implementing [`GroupSchedule`]: from a round
//! number, a partition of the trainers. The built-in ones ([`Schedule`], made
//! into a [`GroupPlan`] for `n` trainers in groups of `m`) derive each
//! partition from `(schedule, n, m, seed, round)` alone; a schedule of one's
//! own is registered by name in [`Schedules`] (`ClusterConfig::schedules`)
//! and chosen as any other, `sync.schedule = "NAME"`.
//!
//! | schedule | groups in round `r` |
//! |---|---|
//! | `global` | one group of all `n` |
//! | `fixed` | consecutive blocks `{0..m}`, `{m..2m}`, ... every round |
//! | `alternating` | blocks of `0, 1, .., n−1` on even rounds, of `1, 2, .., n−1, 0` on odd rounds (the authors' `{0,1},{2,3}` / `{0,3},{1,2}` for n = 4, m = 2) |
//! | `random` | blocks of a permutation drawn from `(seed, r)` |
//! | `hypercube` | trainers whose base-`m` digits differ only in digit `r mod log_m n` (for m = 2: `j` and `j XOR 2^(r mod log2 n)`); exact global mean after `log_m n` rounds |
//! | `hierarchical` | blocks `{0..m}`, `{m..2m}`, ... on even rounds; on odd rounds the `n/m` trainers at the same place in their blocks (`{i, m+i, 2m+i, ...}`); exact global mean after 2 rounds. With a process's trainers as a block: within processes, then across |

mod registry;
#[cfg(test)]
mod tests;

pub use registry::{ScheduleContext, ScheduleFactory, Schedules};

use crate::{Error, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which trainers sync together in each round.
pub trait GroupSchedule: Send + Sync + fmt::Debug {
    /// Trainers in the job.
    fn trainers(&self) -> usize;

    /// Members of a group (of the largest, where sizes vary).
    fn group_size(&self) -> usize;

    /// The partition of round `round`: groups, each sorted, every trainer in
    /// exactly one. The same round must always give the same partition.
    fn groups(&self, round: u64) -> Vec<Vec<usize>>;

    /// The group of `trainer` in round `round`.
    fn group_of(&self, trainer: usize, round: u64) -> Vec<usize> {
        self.groups(round)
            .into_iter()
            .find(|g| g.contains(&trainer))
            .unwrap_or_else(|| vec![trainer])
    }
}

/// An error naming `sync.schedule` unless the first `rounds` rounds of
/// `schedule` are partitions of its trainers into sorted groups.
///
/// # Errors
///
/// A round whose groups are not a partition of the trainers into sorted groups
/// ([`Error::Config`] naming `sync.schedule`).
pub fn check_partitions(schedule: &dyn GroupSchedule, rounds: u64) -> Result<()> {
    let n = schedule.trainers();
    for round in 0..rounds {
        let groups = schedule.groups(round);
        let mut seen = vec![false; n];
        for group in &groups {
            let sorted = group.windows(2).all(|w| w[0] < w[1]);
            for &t in group {
                if t >= n || seen[t] || !sorted {
                    return Err(Error::Config {
                        key: "sync.schedule".into(),
                        reason: format!(
                            "round {round}: {groups:?} is not a partition of the {n} trainers \
                             into sorted groups"
                        ),
                    });
                }
                seen[t] = true;
            }
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!("round {round}: trainer {missing} is in no group of {groups:?}"),
            });
        }
    }
    Ok(())
}

/// Which group schedule runs: a built-in one, or one of one's own by its
/// name in [`Schedules`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// All trainers in one group.
    Global,
    /// The same blocks every round.
    Fixed,
    /// Two partitions, alternating.
    Alternating,
    /// A fresh permutation every round, drawn from the plan's seed.
    Random,
    /// Butterfly over base-`m` digits.
    Hypercube,
    /// Within blocks of `m`, then across them (groups of `n/m` on odd rounds).
    Hierarchical,
    /// A schedule of one's own, made by its factory in [`Schedules`].
    Registered(String),
}

const BUILT_IN: [(&str, Schedule); 6] = [
    ("global", Schedule::Global),
    ("fixed", Schedule::Fixed),
    ("alternating", Schedule::Alternating),
    ("random", Schedule::Random),
    ("hypercube", Schedule::Hypercube),
    ("hierarchical", Schedule::Hierarchical),
];

impl std::str::FromStr for Schedule {
    type Err = Error;

    /// A built-in schedule's name, or any other name of letters, digits,
    /// `-` and `_` (which [`Schedules`] knows is checked where the cluster
    /// starts).
    fn from_str(s: &str) -> Result<Self> {
        if let Some((_, schedule)) = BUILT_IN.iter().find(|(name, _)| *name == s) {
            return Ok(schedule.clone());
        }
        let valid = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if valid {
            Ok(Schedule::Registered(s.to_string()))
        } else {
            Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!(
                    "{s:?} is not a schedule name: global, fixed, alternating, random, \
                 hypercube, hierarchical, or a registered one (letters, digits, - and _)"
                ),
            })
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Registered(name) => f.write_str(name),
            built_in => {
                let name = BUILT_IN.iter().find(|(_, s)| s == built_in);
                f.write_str(name.map_or("?", |(name, _)| name))
            }
        }
    }
}

impl Serialize for Schedule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A validated built-in schedule for `n` trainers in groups of `m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    schedule: Schedule,
    seed: u64,
    trainers: usize,
    group_size: usize,
    /// `log_m n` for the hypercube.
    digits: u32,
}

impl GroupPlan {
    /// Checks that `schedule` can split `trainers` into groups of `group_size`.
    ///
    /// # Errors
    ///
    /// A schedule that cannot (naming `trainers` or `sync.group_size`), or
    /// one of one's own (made by [`Schedules::make`], not planned here).
    pub fn new(schedule: Schedule, trainers: usize, group_size: usize) -> Result<Self> {
        if let Schedule::Registered(name) = &schedule {
            return Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!("{name:?} is not a built-in schedule"),
            });
        }
        let bad = |reason: String| {
            Err(Error::Config {
                key: "sync.group_size".into(),
                reason,
            })
        };
        if trainers == 0 {
            return Err(Error::Config {
                key: "trainers".into(),
                reason: "must be at least 1".into(),
            });
        }
        let group_size = if schedule == Schedule::Global {
            trainers
        } else {
            group_size
        };
        if group_size == 0 || group_size > trainers {
            return bad(format!(
                "{group_size} must be between 1 and the number of trainers ({trainers})"
            ));
        }
        if trainers % group_size != 0 {
            return bad(format!(
                "{group_size} must divide the number of trainers ({trainers})"
            ));
        }
        let mut digits = 0;
        if schedule == Schedule::Hypercube && group_size > 1 {
            let mut rest = trainers;
            while rest % group_size == 0 && rest > 1 {
                rest /= group_size;
                digits += 1;
            }
            if rest != 1 {
                return bad(format!(
                    "hypercube needs the number of trainers ({trainers}) to be a power of the group size ({group_size})"
                ));
            }
        }
        Ok(Self {
            schedule,
            seed: 0,
            trainers,
            group_size,
            digits,
        })
    }

    /// The seed of the `random` schedule (shared by all trainers).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    fn hypercube(&self, round: u64) -> Vec<Vec<usize>> {
        let (n, m) = (self.trainers, self.group_size);
        if self.digits == 0 {
            return (0..n).map(|i| vec![i]).collect();
        }
        let stride = m.pow((round % u64::from(self.digits)) as u32);
        // Trainers sharing every base-m digit but the current one form a group.
        (0..n)
            .filter(|i| (i / stride) % m == 0)
            .map(|base| (0..m).map(|k| base + k * stride).collect())
            .collect()
    }

    /// Rounds after which the hypercube has mixed everyone (`log_m n`).
    pub fn mixing_rounds(&self) -> u32 {
        self.digits
    }
}

impl GroupSchedule for GroupPlan {
    fn trainers(&self) -> usize {
        self.trainers
    }

    /// For `hierarchical`, of the even rounds (`n / m` on odd ones).
    fn group_size(&self) -> usize {
        self.group_size
    }

    fn groups(&self, round: u64) -> Vec<Vec<usize>> {
        let (n, m) = (self.trainers, self.group_size);
        let order: Vec<usize> = match &self.schedule {
            // Never `Registered`: `GroupPlan::new` refuses it.
            Schedule::Global | Schedule::Fixed | Schedule::Registered(_) => (0..n).collect(),
            Schedule::Alternating if round % 2 == 1 => (1..=n).map(|i| i % n).collect(),
            Schedule::Alternating => (0..n).collect(),
            Schedule::Random => {
                let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                rng.set_stream(round);
                let mut order: Vec<usize> = (0..n).collect();
                order.shuffle(&mut rng);
                order
            }
            Schedule::Hypercube => return self.hypercube(round),
            Schedule::Hierarchical if round % 2 == 1 => {
                return (0..m).map(|i| (i..n).step_by(m).collect()).collect()
            }
            Schedule::Hierarchical => (0..n).collect(),
        };
        order
            .chunks(m)
            .map(|chunk| {
                let mut group = chunk.to_vec();
                group.sort_unstable();
                group
            })
            .collect()
    }
}
