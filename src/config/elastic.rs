//! `[[elastic]]`: trainers that join and leave a run while it trains.
//!
//! Each step of the plan fires once the trainers have taken `at_step` steps
//! in all (batches trained by every trainer together): `add = k` starts k
//! trainers, numbered on from the last one started; `remove = t` stops
//! trainer t. A run with a plan deals its batches from one queue that every
//! trainer takes from, so a trainer that leaves leaves its unread batches to
//! the others and every example is trained once.

use super::Config;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::sync::{Algorithm, GroupPlan, Schedule};

/// One change of the trainers (`[[elastic]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElasticStep {
    /// The trainers' steps in all after which it happens.
    pub at_step: u64,
    /// Trainers that join.
    #[serde(default)]
    pub add: usize,
    /// The trainer that leaves.
    #[serde(default)]
    pub remove: Option<usize>,
}

impl Config {
    /// The most trainers the run ever has: those it starts with and every
    /// one its `[[elastic]]` plan adds (0 without a plan: a fixed run).
    pub fn elastic_capacity(&self) -> usize {
        if self.elastic.is_empty() {
            0
        } else {
            (self.elastic.iter()).fold(self.train.trainers, |n, s| n.saturating_add(s.add))
        }
    }

    /// Checks the `[[elastic]]` plan: each step adds or removes, in the
    /// order of its steps, never removes a trainer that is not training nor
    /// the last one, and every number of trainers it comes to has groups
    /// under `sync.schedule`; in a run that can change its trainers (one
    /// process, one worker each, `none` or `shadow-*` averaging groups, no
    /// checkpoints).
    pub(super) fn validate_elastic(&self, processes: usize) -> Result<()> {
        if self.elastic.is_empty() {
            return Ok(());
        }
        self.validate_elastic_run(processes)?;
        let counts = self.elastic_counts()?;
        let sync = &self.sync;
        if let Schedule::Registered(_) = sync.schedule {
            return Ok(()); // its factory decides, at the change
        }
        for n in counts {
            GroupPlan::new(sync.schedule.clone(), n, sync.group_size_for(n)).map_err(|e| {
                Error::config("elastic", format!("it comes to {n} trainers, but {e}"))
            })?;
        }
        Ok(())
    }

    /// Whether this run can change its trainers at all.
    fn validate_elastic_run(&self, processes: usize) -> Result<()> {
        let refuse = |reason: String| Err(Error::config("elastic", reason));
        let sync = &self.sync;
        if processes > 1 {
            return refuse(format!(
                "trainers join and leave a run of one process (this one has {processes})"
            ));
        }
        if self.train.workers > 1 {
            return refuse(
                "a trainer that joins or leaves is one worker (train.workers = 1)".into(),
            );
        }
        if self.checkpoint.dir.is_some() {
            return refuse("a checkpoint holds a fixed set of trainers: an elastic run takes none (checkpoint.dir)".into());
        }
        match &sync.algorithm {
            Algorithm::SyncSgd | Algorithm::Foreground { .. } => {
                return refuse(format!(
                    "{} syncs in the foreground, in lockstep; use none or shadow-*",
                    sync.algorithm
                ))
            }
            a if a.rule_name() == Some("easgd") => {
                return refuse(format!(
                    "{a} meets a centre sized for the trainers it starts with; use a rule that averages groups"
                ))
            }
            _ => {}
        }
        if self.elastic_capacity() > Self::MAX_LEARNERS {
            return refuse(format!(
                "the plan starts {} trainers in all, more than the {} one process runs",
                self.elastic_capacity(),
                Self::MAX_LEARNERS
            ));
        }
        Ok(())
    }

    /// The number of trainers at the start and after each step of the plan,
    /// checked step by step.
    fn elastic_counts(&self) -> Result<Vec<usize>> {
        let mut members: Vec<usize> = (0..self.train.trainers).collect();
        let mut counts = vec![members.len()];
        let mut at = self.elastic.first().map_or(0, |s| s.at_step);
        for (i, step) in self.elastic.iter().enumerate() {
            let key = format!("elastic[{i}]");
            let bad = |reason: String| Err(Error::config(&key, reason));
            if step.at_step < at {
                return bad(format!(
                    "at_step {} comes before the step above it ({at}): list the steps in order",
                    step.at_step
                ));
            }
            at = step.at_step;
            match (step.add, step.remove) {
                (0, None) | (1.., Some(_)) => {
                    return bad("says either add = k (k ≥ 1) or remove = t".into())
                }
                (k, None) => {
                    let next = self.started(i);
                    members.extend(next..next + k);
                }
                (_, Some(t)) => {
                    let Some(place) = members.iter().position(|&m| m == t) else {
                        return bad(format!(
                            "remove = {t}: trainer {t} is not training then (trainers {members:?})"
                        ));
                    };
                    if members.len() == 1 {
                        return bad(format!("remove = {t}: the last trainer cannot leave"));
                    }
                    members.remove(place);
                }
            }
            counts.push(members.len());
        }
        Ok(counts)
    }

    /// Trainers started before step `i` of the plan.
    fn started(&self, i: usize) -> usize {
        self.train.trainers + self.elastic[..i].iter().map(|s| s.add).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at_step: u64, add: usize, remove: Option<usize>) -> ElasticStep {
        ElasticStep {
            at_step,
            add,
            remove,
        }
    }

    fn with(plan: Vec<ElasticStep>) -> Config {
        let mut c = Config::default();
        c.train.trainers = 2;
        c.sync.algorithm = "shadow-ma".parse().unwrap();
        c.elastic = plan;
        c
    }

    fn refused(c: &Config) -> (String, String) {
        match c.validate_elastic(1) {
            Err(Error::Config { key, reason }) => (key, reason),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plan_counts_its_seats_and_numbers_joiners_on_from_the_last_started() {
        let c = with(vec![
            step(10, 2, None),
            step(20, 0, Some(3)),
            step(30, 1, None),
        ]);
        c.validate_elastic(1).unwrap();
        assert_eq!(c.elastic_capacity(), 5);
        assert_eq!(with(Vec::new()).elastic_capacity(), 0, "a fixed run");
        // Trainer 4 is the third joiner: it can leave once it joined.
        let late = with(vec![
            step(10, 2, None),
            step(20, 1, None),
            step(30, 0, Some(4)),
        ]);
        late.validate_elastic(1).unwrap();
    }

    #[test]
    fn a_plan_that_cannot_happen_is_refused_naming_its_step() {
        let cases = [
            (vec![step(10, 0, None)], "elastic[0]", "either add"),
            (vec![step(10, 1, Some(0))], "elastic[0]", "either add"),
            (
                vec![step(20, 1, None), step(10, 1, None)],
                "elastic[1]",
                "in order",
            ),
            (vec![step(10, 0, Some(2))], "elastic[0]", "not training"),
            (
                vec![step(10, 0, Some(0)), step(20, 0, Some(0))],
                "elastic[1]",
                "not training",
            ),
            (
                vec![step(10, 0, Some(0)), step(20, 0, Some(1))],
                "elastic[1]",
                "last trainer",
            ),
        ];
        for (plan, key, reason) in cases {
            let (k, r) = refused(&with(plan.clone()));
            assert_eq!(k, key, "{plan:?}");
            assert!(r.contains(reason), "{plan:?}: {r}");
        }
    }

    #[test]
    fn a_run_that_cannot_change_its_trainers_is_refused() {
        let plan = || vec![step(10, 1, None)];
        let mut c = with(plan());
        c.sync.algorithm = "fr-ma:4".parse().unwrap();
        assert!(refused(&c).1.contains("foreground"));
        c.sync.algorithm = "shadow-easgd".parse().unwrap();
        assert!(refused(&c).1.contains("centre"));
        let mut c = with(plan());
        c.train.workers = 2;
        assert!(refused(&c).1.contains("workers"));
        let c = with(plan());
        assert!(c
            .validate_elastic(2)
            .unwrap_err()
            .to_string()
            .contains("one process"));
        // No more trainers than one process runs, however many are added,
        // before anything is allocated.
        for add in [1023, 10_000, usize::MAX] {
            let c = with(vec![step(10, add, None)]);
            let (key, reason) = refused(&c);
            assert_eq!(key, "elastic");
            assert!(reason.contains("more than the 1024"), "{add}: {reason}");
        }
        // Fixed pairs have no groups for 3 trainers.
        let mut c = with(plan());
        c.sync.schedule = Schedule::Fixed;
        c.sync.group_size = 2;
        let (key, reason) = refused(&c);
        assert_eq!(key, "elastic");
        assert!(reason.contains("3 trainers"), "{reason}");
    }
}
