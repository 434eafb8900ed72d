//! The settings only some modes read, each the section of its mode:
//! `[sync.easgd]` and `[sync.bmuf]` in the rule's [`Rule`](crate::sync::Rule)
//! (`[sync.diloco]` is [`DilocoParams`]), `[sync.shadow]` in
//! [`Algorithm::Shadow`](crate::sync::Algorithm::Shadow); with their ranges.

use crate::sync::{DilocoParams, WriteBack};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// A day, in milliseconds: longer waits are mistakes (and overflow a clock).
pub(crate) const DAY_MS: f64 = 86_400_000.0;

/// An error naming the setting `key` and what is wrong with it.
pub(crate) fn bad(key: &str, reason: &str) -> Result<()> {
    Err(Error::Config {
        key: key.into(),
        reason: reason.into(),
    })
}

/// EASGD's settings (config section `[sync.easgd]`), read by `*-easgd` only.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct EasgdSettings {
    /// The elasticity α per round (default: see [`SyncConfig::alpha_for`](crate::sync::SyncConfig::alpha_for)).
    pub alpha: Option<f32>,
    /// Shards of the parameter server (default: see
    /// [`SyncConfig::server_shards_for`](crate::sync::SyncConfig::server_shards_for)).
    pub server_shards: Option<usize>,
}

/// BMUF's settings (config section `[sync.bmuf]`), read by `*-bmuf` only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct BmufSettings {
    /// The block momentum η (default: [`BmufParams::SHADOW_ETA`](crate::sync::BmufParams::SHADOW_ETA) for shadow
    /// rounds, the rule of thumb 1 − 1/group size for `fr-bmuf:K`; see
    /// [`SyncConfig::bmuf_for`](crate::sync::SyncConfig::bmuf_for)).
    pub eta: Option<f32>,
    /// The block learning rate ζ.
    pub zeta: f32,
    /// Nesterov's look-ahead.
    pub nesterov: bool,
}

impl Default for BmufSettings {
    fn default() -> Self {
        Self {
            eta: None,
            zeta: 1.0,
            nesterov: false,
        }
    }
}

/// The background loops' settings (config section `[sync.shadow]`), read by
/// `shadow-*` only: how an average is written back, which threads run the
/// rounds, how often they may run, and how stale a replica may grow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ShadowSettings {
    /// How an average is written into a replica that kept training.
    pub write_back: WriteBack,
    /// Which threads run the shadow rounds.
    pub threads: ShadowThreads,
    /// Minimum time between two rounds of a shadow loop, in milliseconds. A
    /// shadow loop must never spin: on one machine without a (simulated) network
    /// to pace it, back-to-back rounds would take the trainers' CPU.
    pub min_interval_ms: f64,
    /// Minimum steps of its trainer between two rounds of a shadow loop: keeps
    /// the sync work a bounded share of the training work when trainers share
    /// cores (a round costs a few passes over the dense parameters).
    pub min_steps: u64,
    /// Most CPU time a shadow loop's rounds may take against its trainer's
    /// steps ([`Self::DEFAULT_MAX_CPU_SHARE`] unless set; 0: no bound): on
    /// shared cores every round's CPU is taken from the trainers, and how much
    /// a round costs grows with the memory traffic of many trainers, which
    /// `min_steps` alone does not follow.
    pub max_cpu_share: f64,
    /// Bounded staleness: a trainer takes a step only while the newest
    /// average applied to its replica is at most this many of its steps old,
    /// and waits for the next one otherwise (none: unbounded, the default).
    /// An average then lands at most `max_staleness + 1` steps after its
    /// snapshot (plus one a Hogwild worker beyond the first), and a shadow
    /// round needs no more than `max_staleness` steps to start.
    pub max_staleness: Option<u64>,
    /// A delay added on purpose to every shadow round between its snapshot
    /// and its write-back, in milliseconds: staleness injected.
    pub delay_ms: f64,
    /// Up to this many milliseconds more, drawn uniformly for each round.
    pub delay_jitter_ms: f64,
}

impl Default for ShadowSettings {
    fn default() -> Self {
        Self {
            write_back: WriteBack::Delta,
            threads: ShadowThreads::PerProcess,
            min_interval_ms: 20.0,
            min_steps: 4,
            max_cpu_share: Self::DEFAULT_MAX_CPU_SHARE,
            max_staleness: None,
            delay_ms: 0.0,
            delay_jitter_ms: 0.0,
        }
    }
}

impl ShadowSettings {
    /// The CPU budget of a shadow loop by default: 3% of its trainer's CPU
    /// time, less the most a run was seen to overshoot its budget (0.13
    /// points: the rounds a finished trainer's loop still makes, and pacing
    /// that acts on the round after the one it charges). Rules that cost less
    /// than that at `min_steps` (MA, EASGD on E1's setting) are not held back
    /// by it; BMUF at N ≥ 8 is, by a fraction of a step.
    pub const DEFAULT_MAX_CPU_SHARE: f64 = 0.027;

    /// The longest injected delay (fixed plus jitter) under
    /// `max_staleness`, in milliseconds: a bounded trainer stops that long
    /// for each average.
    pub const MAX_BOUNDED_DELAY_MS: f64 = 60_000.0;

    /// Checks the ranges: the pacing, and the injected delays, each at most
    /// a day and together at most [`Self::MAX_BOUNDED_DELAY_MS`] under
    /// `max_staleness`.
    pub(crate) fn validate(&self) -> Result<()> {
        for (key, ms) in [
            ("sync.shadow.delay_ms", self.delay_ms),
            ("sync.shadow.delay_jitter_ms", self.delay_jitter_ms),
        ] {
            if !(0.0..=DAY_MS).contains(&ms) {
                return bad(key, "must be in [0, 86400000] milliseconds (a day)");
            }
        }
        if self.max_staleness.is_some()
            && self.delay_ms + self.delay_jitter_ms > Self::MAX_BOUNDED_DELAY_MS
        {
            return bad(
                "sync.shadow.delay_ms",
                "with sync.shadow.delay_jitter_ms, must be at most 60000 ms (a minute) \
                 under sync.shadow.max_staleness: every trainer would stop that long \
                 for each average",
            );
        }
        if !(0.0..=DAY_MS).contains(&self.min_interval_ms) {
            return bad(
                "sync.shadow.min_interval_ms",
                "must be in [0, 86400000] (a day)",
            );
        }
        if !(0.0..=1.0).contains(&self.max_cpu_share) {
            return bad(
                "sync.shadow.max_cpu_share",
                "must be in [0, 1] (0 = no bound)",
            );
        }
        Ok(())
    }
}

/// Which threads run the shadow rounds (config key `sync.shadow.threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShadowThreads {
    /// One thread serving every trainer of the process, where it can: a job
    /// of one process, a rule that averages a group (MA, BMUF and one's own),
    /// uncompressed;
    /// a thread per trainer otherwise.
    #[default]
    PerProcess,
    /// A thread per trainer, exchanging with its group through the transport.
    PerTrainer,
}

impl EasgdSettings {
    /// Checks α's range (the shards' is the cluster's: [`SyncConfig::validate`](crate::sync::SyncConfig::validate)).
    pub(crate) fn validate(&self) -> Result<()> {
        if self
            .alpha
            .is_some_and(|alpha| !(alpha > 0.0 && alpha <= 1.0))
        {
            return bad("sync.easgd.alpha", "must be in (0, 1]");
        }
        Ok(())
    }
}

impl BmufSettings {
    /// Checks η's and ζ's ranges.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.eta.is_some_and(|eta| !(0.0..1.0).contains(&eta)) {
            return bad("sync.bmuf.eta", "must be in [0, 1)");
        }
        if !(self.zeta > 0.0 && self.zeta.is_finite()) {
            return bad("sync.bmuf.zeta", "must be > 0");
        }
        Ok(())
    }
}

/// DiLoCo's outer optimizer's ranges.
pub(crate) fn validate_diloco(diloco: &DilocoParams) -> Result<()> {
    if !(diloco.outer_lr > 0.0 && (diloco.outer_lr as f32).is_normal()) {
        return bad(
            "sync.diloco.outer_lr",
            "must be a finite number > 0 that f32 holds (the outer step is in f32)",
        );
    }
    if !(0.0..1.0).contains(&diloco.momentum) {
        return bad("sync.diloco.momentum", "must be in [0, 1)");
    }
    Ok(())
}
