//! Sync rules: what a round does with a replica's snapshot.
//!
//! An algorithm is a rule, a timing and a group schedule
//! ([`Algorithm`](crate::sync::Algorithm)): `fr-NAME:K` runs rule `NAME` in
//! the trainer every `K` steps, `shadow-NAME` in a background loop beside it.
//! Whatever the timing, a round goes the same way:
//!
//! 1. the replica's snapshot is combined with the group's snapshots: each
//!    member [`reduces`](SyncRule::reduce) its slice of the vector over the
//!    group's contributions, then the slices are gathered (or, for
//!    [`Exchange::Centre`], the snapshot meets EASGD's centre on the server);
//! 2. the rule turns the combined vector into the replica's
//!    [`target`](SyncRule::target), with whatever memory it keeps, block by
//!    block;
//! 3. the runtime writes each block of the target back into the replica as
//!    it comes (a shadow round never assembles the whole target).
//!
//! A rule of one's own is a type implementing [`SyncRule`], registered by
//! name in [`Rules`] (the cluster's `ClusterConfig::rules`); `sync.algorithm`
//! then names it like a built-in one. Its memory is checkpointed as named
//! arrays ([`RuleState`]) and given back on resume.

use crate::sync::{
    mean_into, BmufParams, DilocoParams, OuterState, OuterStep, Rule, SyncConfig, SyncFile,
};
use crate::{Error, Named, Result};
use std::fmt;
use std::sync::Arc;

/// Where a rule's rounds combine a snapshot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exchange {
    /// With the snapshots of this round's group, through [`SyncRule::reduce`].
    Group,
    /// With the centre copy on the parameter server (EASGD's elastic step,
    /// elasticity `alpha`).
    Centre {
        /// The elasticity α.
        alpha: f32,
    },
}

/// What a sync round does with a replica's snapshot (see the module docs).
pub trait SyncRule: Send + fmt::Debug {
    /// Where its rounds combine a snapshot; [`Exchange::Group`] unless said.
    fn exchange(&self) -> Exchange {
        Exchange::Group
    }

    /// Combines element by element, into `out`, one slice of the group's
    /// contributions (each of `out`'s length; at least one). Every member
    /// reduces its own slice and all of them must reduce alike. The mean
    /// unless said.
    fn reduce(&self, out: &mut [f32], contributions: &[&[f32]]) {
        mean_into(out, contributions);
    }

    /// The replica's target for the combined values at `offset..offset +
    /// combined.len()`: `combined` itself unless said, or values the rule
    /// writes into `scratch` (as long) and returns. A round calls it block
    /// by block, in order over the whole vector, and writes each block back
    /// while it is in cache, so a rule with memory indexes it by `offset`.
    fn target<'a>(
        &mut self,
        _offset: usize,
        combined: &'a [f32],
        _scratch: &'a mut [f32],
    ) -> &'a [f32] {
        combined
    }

    /// Its memory between rounds, as named arrays, for checkpoints; none
    /// unless said.
    fn state(&self) -> RuleState {
        RuleState::default()
    }

    /// Takes back memory saved by [`SyncRule::state`]; an error naming what
    /// does not fit. A rule without memory accepts only none.
    ///
    /// # Errors
    ///
    /// A saved state that does not fit this rule, naming what ([`Error::Config`] naming
    /// `resume`).
    fn restore(&mut self, saved: &RuleState) -> Result<()> {
        match saved.arrays.first() {
            None => Ok(()),
            Some((name, _)) => Err(saved.mismatch(format!("this rule keeps no array {name:?}"))),
        }
    }
}

/// A rule's memory: named arrays of `f32`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleState {
    /// The arrays, by name.
    pub arrays: Vec<(String, Vec<f32>)>,
}

impl RuleState {
    /// The array `name`, which must hold `len` values.
    ///
    /// # Errors
    ///
    /// No array of that name, or one of another length ([`Error::Config`] naming `resume`).
    pub fn array(&self, name: &str, len: usize) -> Result<&[f32]> {
        let (_, values) = self
            .arrays
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| self.mismatch(format!("no array {name:?}")))?;
        if values.len() != len {
            return Err(self.mismatch(format!(
                "array {name:?} has {} values, the model {len}",
                values.len()
            )));
        }
        Ok(values)
    }

    fn mismatch(&self, reason: String) -> Error {
        Error::Config {
            key: "resume".into(),
            reason: format!("the saved sync state does not fit: {reason}"),
        }
    }
}

/// What a rule is made for: one trainer of a job.
#[derive(Debug, Clone, Copy)]
pub struct RuleContext<'a> {
    /// The trainer, numbered across the job.
    pub trainer: usize,
    /// Trainers in the job.
    pub trainers: usize,
    /// Members of its groups.
    pub group_size: usize,
    /// The dense parameters every replica starts from.
    pub initial: &'a [f32],
    /// The `[sync]` settings.
    pub config: &'a SyncConfig,
}

/// Makes a trainer's rule.
pub type RuleFactory = Arc<dyn Fn(&RuleContext<'_>) -> Result<Box<dyn SyncRule>> + Send + Sync>;

/// Sync rules by the name `sync.algorithm` gives them: `ma`, `easgd`,
/// `bmuf` and `diloco`, and those added with [`Rules::with`].
#[derive(Clone, Debug)]
pub struct Rules(Named<RuleFactory>);

impl Default for Rules {
    fn default() -> Self {
        Self(Named::new("sync.algorithm", "sync rule"))
            .with("ma", |_| Ok(Box::new(ModelAveraging)))
            .with("easgd", |c| {
                Ok(Box::new(Elastic {
                    alpha: c.config.alpha_for(c.trainers),
                }))
            })
            .with("bmuf", |c| {
                Ok(Box::new(BlockMomentum {
                    params: c.config.bmuf_for(c.group_size),
                    state: OuterState::new(c.initial),
                }))
            })
            .with("diloco", |c| {
                Ok(Box::new(Diloco {
                    params: c.config.diloco(),
                    state: OuterState::new(c.initial),
                }))
            })
    }
}

impl Rules {
    /// These rules and `name`, made by `make` (in place of a rule of that name).
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&RuleContext<'_>) -> Result<Box<dyn SyncRule>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// Whether a rule is called `name`.
    pub fn knows(&self, name: &str) -> bool {
        self.0.knows(name)
    }

    /// An error naming `sync.algorithm` unless a rule is called `name`.
    ///
    /// # Errors
    ///
    /// An unknown name, with the known ones.
    pub fn check(&self, name: &str) -> Result<()> {
        self.0.get(name).map(drop)
    }

    /// An error unless every section of `config.registered` is that of the
    /// rule `config.algorithm` names: a misspelt key of `[sync]`, or the
    /// section of another rule, is refused naming it; so is a rule of one's
    /// own named after a key of `[sync]` (`shadow`, `link`: its section would
    /// be that key).
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) naming the section's key.
    pub fn check_sections(&self, config: &SyncConfig) -> Result<()> {
        if let Some(Rule::Own(name)) = config.algorithm.rule() {
            if SyncFile::KEYS.contains(&name.as_str()) {
                return Err(Error::Config {
                    key: "sync.algorithm".into(),
                    reason: format!(
                        "a rule of one's own cannot be called {name}: sync.{name} is a key of \
                         [sync], not the rule's section; register it under another name"
                    ),
                });
            }
        }
        let choice = format!("sync.algorithm is {}", config.algorithm);
        let chosen = config.algorithm.rule_name();
        self.0.check_sections(&config.registered, chosen, &choice)
    }

    /// The rule `name` for `context`'s trainer.
    ///
    /// # Errors
    ///
    /// A name registered nowhere ([`Error::Config`] naming `sync.algorithm`, with the known
    /// ones), or the factory's own error.
    pub fn make(&self, name: &str, context: &RuleContext<'_>) -> Result<Box<dyn SyncRule>> {
        (self.0.get(name)?)(context)
    }
}

/// Model averaging: the target is the group's mean.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelAveraging;

impl SyncRule for ModelAveraging {}

/// EASGD: an elastic step against the centre on the parameter server.
#[derive(Debug, Clone, Copy)]
pub struct Elastic {
    /// The elasticity α.
    pub alpha: f32,
}

impl SyncRule for Elastic {
    fn exchange(&self) -> Exchange {
        Exchange::Centre { alpha: self.alpha }
    }
}

/// A rule whose rounds hand the group's mean to an outer optimizer `P`,
/// which steps the replica's outer model (kept between rounds with its
/// momentum, and checkpointed) and makes it the target.
#[derive(Debug, Clone)]
pub struct Outer<P> {
    /// The outer optimizer's settings.
    pub params: P,
    /// The outer model and its momentum.
    pub state: OuterState,
}

/// BMUF: the group's mean, filtered by block momentum against the replica's
/// global model.
pub type BlockMomentum = Outer<BmufParams>;

/// DiLoCo's outer step (Douillard et al., 2023): the group's mean is the
/// round's inner result, and the replica's outer model takes a Nesterov SGD
/// step on the pseudo-gradient (outer model − mean).
pub type Diloco = Outer<DilocoParams>;

impl<P: OuterStep> SyncRule for Outer<P> {
    fn target<'a>(
        &mut self,
        offset: usize,
        combined: &'a [f32],
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        self.params.step(&mut self.state, offset, combined, scratch);
        scratch
    }

    fn state(&self) -> RuleState {
        self.state.saved()
    }

    fn restore(&mut self, saved: &RuleState) -> Result<()> {
        self.state.restore(saved)
    }
}

impl OuterState {
    /// As a rule's memory: the arrays `global` and `momentum`.
    fn saved(&self) -> RuleState {
        RuleState {
            arrays: vec![
                ("global".into(), self.global.clone()),
                ("momentum".into(), self.momentum.clone()),
            ],
        }
    }

    /// Takes back what [`OuterState::saved`] gave.
    fn restore(&mut self, saved: &RuleState) -> Result<()> {
        let len = self.global.len();
        let global = saved.array("global", len)?.to_vec();
        let momentum = saved.array("momentum", len)?.to_vec();
        *self = OuterState { global, momentum };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{Algorithm, ShadowSettings};

    fn context(config: &SyncConfig) -> RuleContext<'_> {
        RuleContext {
            trainer: 0,
            trainers: 4,
            group_size: 2,
            initial: &[1.0, 2.0],
            config,
        }
    }

    #[test]
    fn a_rule_of_ones_own_named_after_a_key_of_sync_is_refused() {
        let rules = Rules::default().with("shadow", |_| Ok(Box::new(ModelAveraging)));
        let named = |algorithm: &str| SyncConfig {
            algorithm: algorithm.parse().unwrap(),
            ..SyncConfig::default()
        };
        let e = rules.check_sections(&named("shadow-shadow")).unwrap_err();
        assert!(e.to_string().contains("cannot be called shadow"), "{e}");
        assert!(rules.check_sections(&named("shadow-ma")).is_ok());
    }

    #[test]
    fn the_built_in_rules_are_made_by_name_and_others_refused() {
        let config = SyncConfig::default();
        let rules = Rules::default();
        let ma = rules.make("ma", &context(&config)).unwrap();
        assert_eq!(ma.exchange(), Exchange::Group);
        let easgd = rules.make("easgd", &context(&config)).unwrap();
        assert_eq!(easgd.exchange(), Exchange::Centre { alpha: 0.5 });
        let e = rules
            .make("sgd", &context(&config))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sync.algorithm") && e.contains("bmuf, diloco, easgd, ma"),
            "{e}"
        );
    }

    #[test]
    fn bmuf_memory_round_trips_and_a_partial_one_is_refused() {
        let config = SyncConfig::default();
        let mut bmuf = Rules::default().make("bmuf", &context(&config)).unwrap();
        let mut scratch = [0.0; 2];
        // η = 1 − 1/2: G = (3,0) − (1,2); Δ = (1 − η) G = (1,−1); w_g = (2,1).
        assert_eq!(bmuf.target(0, &[3.0, 0.0], &mut scratch), [2.0, 1.0]);
        let saved = bmuf.state();
        let mut fresh = Rules::default().make("bmuf", &context(&config)).unwrap();
        fresh.restore(&saved).unwrap();
        assert_eq!(fresh.state(), saved);
        let partial = RuleState {
            arrays: saved.arrays[..1].to_vec(),
        };
        let e = fresh.restore(&partial).unwrap_err().to_string();
        assert!(e.contains("\"momentum\""), "{e}");
        let mut ma = Rules::default().make("ma", &context(&config)).unwrap();
        assert!(ma.restore(&saved).is_err());
        assert!(ma.restore(&RuleState::default()).is_ok());
    }

    #[test]
    fn diloco_steps_from_the_configured_params_and_its_memory_round_trips() {
        let config = SyncConfig {
            algorithm: Algorithm::Shadow {
                rule: Rule::Diloco(DilocoParams {
                    outer_lr: 0.5,
                    momentum: 0.0,
                    nesterov: false,
                }),
                loops: ShadowSettings::default(),
            },
            ..SyncConfig::default()
        };
        let mut diloco = Rules::default().make("diloco", &context(&config)).unwrap();
        let mut scratch = [0.0; 2];
        // G = (1,2) − (3,0) = (−2,2); w_g = (1,2) − 0.5 G = (2,1).
        assert_eq!(diloco.target(0, &[3.0, 0.0], &mut scratch), [2.0, 1.0]);
        let saved = diloco.state();
        let mut fresh = Rules::default().make("diloco", &context(&config)).unwrap();
        fresh.restore(&saved).unwrap();
        assert_eq!(fresh.state(), saved);
        assert_eq!(fresh.target(0, &[2.0, 1.0], &mut scratch), [2.0, 1.0]);
    }
}
