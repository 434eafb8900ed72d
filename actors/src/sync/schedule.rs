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

use crate::{Error, Named, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

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
        match valid {
            true => Ok(Schedule::Registered(s.to_string())),
            false => Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!(
                    "{s:?} is not a schedule name: global, fixed, alternating, random, \
                     hypercube, hierarchical, or a registered one (letters, digits, - and _)"
                ),
            }),
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

/// What a schedule of one's own is made for.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleContext<'a> {
    /// Trainers in the job (every process's).
    pub trainers: usize,
    /// Trainers in each process.
    pub per_process: usize,
    /// The `[sync]` settings (`group_size`, `seed`, ...).
    pub config: &'a crate::sync::SyncConfig,
}

/// Makes a schedule of one's own.
pub type ScheduleFactory =
    Arc<dyn Fn(&ScheduleContext<'_>) -> Result<Arc<dyn GroupSchedule>> + Send + Sync>;

/// Group schedules of one's own, by the name `sync.schedule` gives them
/// (the built-in ones are [`Schedule`]'s other variants).
#[derive(Clone, Debug)]
pub struct Schedules(Named<ScheduleFactory>);

impl Default for Schedules {
    fn default() -> Self {
        let built_in = BUILT_IN.iter().map(|(name, _)| *name);
        Self(Named::new("sync.schedule", "schedule").also_taking(built_in))
    }
}

impl Schedules {
    /// These schedules and `name`, made by `make`.
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&ScheduleContext<'_>) -> Result<Arc<dyn GroupSchedule>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// An error naming `sync.schedule` unless `schedule` is built in or
    /// registered here.
    ///
    /// # Errors
    ///
    /// A name registered nowhere, with the known ones.
    pub fn check(&self, schedule: &Schedule) -> Result<()> {
        match schedule {
            Schedule::Registered(name) => self.0.get(name).map(drop),
            _ => Ok(()),
        }
    }

    /// The schedule of one's own called `name`, for `context`'s trainers.
    ///
    /// # Errors
    ///
    /// An unknown name, a factory's error, or a schedule for another number
    /// of trainers.
    pub fn make(
        &self,
        name: &str,
        context: &ScheduleContext<'_>,
    ) -> Result<Arc<dyn GroupSchedule>> {
        let schedule = (self.0.get(name)?)(context)?;
        if schedule.trainers() != context.trainers {
            return Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!(
                    "the schedule {name:?} is for {} trainers, the job has {}",
                    schedule.trainers(),
                    context.trainers
                ),
            });
        }
        Ok(schedule)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn alternating_reproduces_the_authors_four_rank_partitions() {
        let plan = GroupPlan::new(Schedule::Alternating, 4, 2).unwrap();
        assert_eq!(plan.groups(0), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(plan.groups(1), vec![vec![1, 2], vec![0, 3]]);
        assert_eq!(plan.groups(2), plan.groups(0));
    }

    #[test]
    fn hierarchical_groups_within_blocks_then_across() {
        let plan = GroupPlan::new(Schedule::Hierarchical, 6, 2).unwrap();
        assert_eq!(plan.groups(0), vec![vec![0, 1], vec![2, 3], vec![4, 5]]);
        assert_eq!(plan.groups(1), vec![vec![0, 2, 4], vec![1, 3, 5]]);
        assert_eq!(plan.groups(2), plan.groups(0));
        assert_eq!(plan.group_of(3, 1), vec![1, 3, 5]);
    }

    #[test]
    fn hypercube_pairs_by_xor() {
        let plan = GroupPlan::new(Schedule::Hypercube, 8, 2).unwrap();
        for round in 0..6u64 {
            let bit = 1 << (round % 3);
            for j in 0..8 {
                assert_eq!(plan.group_of(j, round), {
                    let mut g = vec![j, j ^ bit];
                    g.sort();
                    g
                });
            }
        }
    }

    #[test]
    fn invalid_sizes_are_rejected_naming_the_key() {
        for (schedule, n, m) in [
            (Schedule::Fixed, 4, 3),
            (Schedule::Fixed, 4, 5),
            (Schedule::Random, 4, 0),
            (Schedule::Hypercube, 6, 2),
        ] {
            let e = GroupPlan::new(schedule, n, m).unwrap_err().to_string();
            assert!(e.contains("sync.group_size"), "{e}");
        }
        assert!(GroupPlan::new(Schedule::Global, 0, 1).is_err());
        assert_eq!(
            GroupPlan::new(Schedule::Global, 6, 2).unwrap().group_size(),
            6
        );
    }

    fn schedules() -> impl Strategy<Value = Schedule> {
        prop_oneof![
            Just(Schedule::Global),
            Just(Schedule::Fixed),
            Just(Schedule::Alternating),
            Just(Schedule::Random),
            Just(Schedule::Hypercube),
            Just(Schedule::Hierarchical),
        ]
    }

    #[test]
    fn names_parse_to_built_in_or_registered_schedules_and_back() {
        for (name, _) in BUILT_IN {
            assert_eq!(name.parse::<Schedule>().unwrap().to_string(), name);
        }
        let ring: Schedule = "ring-3".parse().unwrap();
        assert_eq!(ring, Schedule::Registered("ring-3".into()));
        assert!("ring of 3".parse::<Schedule>().is_err());
        let e = Schedules::default().check(&ring).unwrap_err().to_string();
        assert!(
            e.contains("sync.schedule") && e.contains("\"ring-3\""),
            "{e}"
        );
        assert!(GroupPlan::new(ring, 4, 2).is_err());
    }

    /// `(n, m)` with m dividing n; powers for the hypercube.
    fn sizes(schedule: Schedule) -> BoxedStrategy<(usize, usize)> {
        match schedule {
            Schedule::Hypercube => (1usize..=4, 1u32..=4)
                .prop_map(|(m, k)| (m.max(2).pow(k), m.max(2)))
                .boxed(),
            _ => (1usize..=8, 1usize..=8)
                .prop_map(|(m, q)| (m * q, m))
                .boxed(),
        }
    }

    proptest! {
        #[test]
        fn every_round_partitions_the_trainers_into_groups_of_m(
            (schedule, (n, m)) in schedules().prop_flat_map(|s| (Just(s.clone()), sizes(s))),
            round in 0u64..1000,
        ) {
            let plan = GroupPlan::new(schedule.clone(), n, m).unwrap();
            let groups = plan.groups(round);
            let size = match schedule {
                Schedule::Hierarchical if round % 2 == 1 => n / m,
                _ => plan.group_size(),
            };
            let mut seen = vec![false; n];
            for group in &groups {
                prop_assert_eq!(group.len(), size);
                for &t in group {
                    prop_assert!(!seen[t], "trainer {} twice", t);
                    seen[t] = true;
                }
            }
            prop_assert!(seen.iter().all(|&s| s));
        }

        #[test]
        fn random_is_reproducible_and_every_trainer_agrees(
            seed in any::<u64>(), round in 0u64..10_000, m in 1usize..5, q in 1usize..5,
        ) {
            let n = m * q;
            let plan = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed);
            let again = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed);
            let other = GroupPlan::new(Schedule::Random, n, m).unwrap().with_seed(seed ^ 1);
            if n >= 6 {
                // Another seed gives another sequence of partitions (over a few rounds).
                prop_assert!((round..round + 8).any(|r| plan.groups(r) != other.groups(r)));
            }
            prop_assert_eq!(plan.groups(round), again.groups(round));
            // Each trainer, deriving its own group, agrees with every member of it.
            for t in 0..n {
                let mine = plan.group_of(t, round);
                for &peer in &mine {
                    prop_assert_eq!(&again.group_of(peer, round), &mine);
                }
            }
        }

        #[test]
        fn hypercube_reaches_the_exact_global_mean_in_log_m_n_rounds(
            (n, m) in sizes(Schedule::Hypercube),
            values in prop::collection::vec(-1000i32..1000, 256),
        ) {
            let plan = GroupPlan::new(Schedule::Hypercube, n, m).unwrap();
            prop_assert!(mixes_exactly(&plan, u64::from(plan.mixing_rounds()), &values[..n]));
        }

        #[test]
        fn hierarchical_reaches_the_exact_global_mean_in_two_rounds(
            (n, m) in sizes(Schedule::Hierarchical),
            values in prop::collection::vec(-1000i32..1000, 64),
        ) {
            let plan = GroupPlan::new(Schedule::Hierarchical, n, m).unwrap();
            prop_assert!(mixes_exactly(&plan, 2, &values[..n]));
        }
    }

    /// Whether averaging `values` within the groups of `rounds` rounds of
    /// `plan` leaves every trainer with their global mean.
    fn mixes_exactly(plan: &GroupPlan, rounds: u64, values: &[i32]) -> bool {
        let n = values.len();
        let mut x: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        let mean = x.iter().sum::<f64>() / n as f64;
        for round in 0..rounds {
            let mut next = x.clone();
            for group in plan.groups(round) {
                let avg = group.iter().map(|&t| x[t]).sum::<f64>() / group.len() as f64;
                for &t in &group {
                    next[t] = avg;
                }
            }
            x = next;
        }
        x.iter()
            .all(|v| (v - mean).abs() < 1e-9 * mean.abs().max(1.0))
    }
}
