//! The settings of a cluster's synchronization (config section `[sync]`):
//! the algorithm, the group schedule, the simulated link and the codec at
//! the top; what only some algorithms read in a section of its own,
//! `[sync.shadow]` (the background loops), `[sync.easgd]`, `[sync.bmuf]` and
//! `[sync.diloco]` (each rule's), and `[sync.NAME]` for a rule of one's own.
//!
//! In Rust a mode's settings live inside the [`Algorithm`] that reads them,
//! so another mode's cannot be expressed. The file's flat form, where every
//! section can be written, is [`SyncFile`]: a [`SyncConfig`] is read through
//! it, keeping the sections its algorithm reads and refusing one it would
//! ignore that is set away from its defaults (a results file of an earlier
//! release holds every section at its defaults: those are dropped).

use crate::sync::rules::{bad, validate_diloco, DAY_MS};
use crate::sync::{
    Algorithm, BmufParams, BmufSettings, DilocoParams, EasgdSettings, LinkModel, Rule, Schedule,
    ShadowSettings,
};
use crate::{Error, Result, Sections};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Settings of the synchronization of a cluster (config section `[sync]`).
/// A rule of one's own reads its settings from `[sync.NAME]`
/// ([`SyncConfig::section`]); a key that is neither a setting here nor a
/// registered rule's section is refused by [`Rules::check_sections`](crate::sync::Rules::check_sections)
/// when a cluster starts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "SyncFile")]
#[non_exhaustive]
pub struct SyncConfig {
    /// The algorithm, with the settings only it reads.
    pub algorithm: Algorithm,
    /// Trainers per group (DS-Sync); 0 = all trainers.
    pub group_size: usize,
    /// How groups are formed each round.
    pub schedule: Schedule,
    /// Seed of the `random` schedule.
    pub seed: u64,
    /// How long a group member is waited for in a round, in milliseconds,
    /// before the round completes without it and the coordinator leaves it out
    /// of the groups until it asks again (0 = for ever).
    pub peer_timeout_ms: f64,
    /// The simulated network.
    pub link: LinkModel,
    /// How the values of group rounds and of EASGD's steps against its
    /// centre cross: `none` (as `f32`), `fp16`, `int8`, `topk` (group rounds
    /// only) or a codec of one's own (see [`Codecs`](crate::sync::Codecs),
    /// [`CentreCodec`](crate::sync::CentreCodec)). Compressed shadow rounds
    /// run on a thread per trainer.
    pub compression: String,
    /// The share of each message's values `topk` sends.
    pub topk_ratio: f64,
    /// The sections of registered rules, by name (`[sync.NAME]`), as read.
    pub registered: Sections,
}

/// `[sync]` as a file writes it: every mode's section, whatever the
/// algorithm. [`SyncConfig::try_from`] puts the algorithm's own sections into
/// it and refuses another's set away from its defaults; a [`SyncConfig`]
/// writes its algorithm's settings and the others' defaults (so a file lists
/// every key). Command-line flags and grids edit a config in this form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SyncFile {
    /// The algorithm, by name (its settings are the sections below).
    pub algorithm: Algorithm,
    /// See [`SyncConfig::group_size`].
    pub group_size: usize,
    /// See [`SyncConfig::schedule`].
    pub schedule: Schedule,
    /// See [`SyncConfig::seed`].
    pub seed: u64,
    /// `[sync.easgd]`, read by `*-easgd`.
    pub easgd: EasgdSettings,
    /// `[sync.bmuf]`, read by `*-bmuf`.
    pub bmuf: BmufSettings,
    /// `[sync.diloco]`, read by `*-diloco`.
    pub diloco: DilocoParams,
    /// `[sync.shadow]`, read by `shadow-*`.
    pub shadow: ShadowSettings,
    /// See [`SyncConfig::peer_timeout_ms`].
    pub peer_timeout_ms: f64,
    /// See [`SyncConfig::link`].
    pub link: LinkModel,
    /// See [`SyncConfig::compression`].
    pub compression: String,
    /// See [`SyncConfig::topk_ratio`].
    pub topk_ratio: f64,
    /// See [`SyncConfig::registered`].
    #[serde(flatten)]
    pub registered: Sections,
}

impl SyncFile {
    /// The sections of modes (`shadow`, `easgd`, `bmuf`, `diloco`).
    pub const MODE_SECTIONS: [&'static str; 4] = ["shadow", "easgd", "bmuf", "diloco"];

    /// Every key of `[sync]` (so no registered rule's `[sync.NAME]`).
    pub const KEYS: [&'static str; 12] = [
        "algorithm",
        "group_size",
        "schedule",
        "seed",
        "easgd",
        "bmuf",
        "diloco",
        "shadow",
        "peer_timeout_ms",
        "link",
        "compression",
        "topk_ratio",
    ];

    /// The sections set away from their defaults that the algorithm would
    /// not read, each with why (`sync.shadow` under `none`, say).
    pub fn unread(&self) -> Vec<(&'static str, String)> {
        let algorithm = &self.algorithm;
        let rule = |name: &str, what: &str| {
            (algorithm.rule_name() != Some(name)).then(|| {
                format!("it is {what}; {algorithm} has none (use shadow-{name} or fr-{name}:K)")
            })
        };
        let why = [
            (
                "sync.shadow",
                self.shadow != ShadowSettings::default(),
                (!algorithm.is_shadow()).then(|| {
                    format!("it paces the background loops of shadow-*; {algorithm} has none")
                }),
            ),
            (
                "sync.easgd",
                self.easgd != EasgdSettings::default(),
                rule("easgd", "EASGD's settings"),
            ),
            (
                "sync.bmuf",
                self.bmuf != BmufSettings::default(),
                rule("bmuf", "BMUF's settings"),
            ),
            (
                "sync.diloco",
                self.diloco != DilocoParams::default(),
                rule("diloco", "DiLoCo's outer optimizer"),
            ),
        ];
        why.into_iter()
            .filter(|(_, set, _)| *set)
            .filter_map(|(key, _, why)| why.map(|why| (key, why)))
            .collect()
    }
}

impl Default for SyncFile {
    fn default() -> Self {
        SyncConfig::default().into()
    }
}

impl TryFrom<SyncFile> for SyncConfig {
    type Error = Error;

    /// The algorithm with its sections; a section it would not read, set
    /// away from its defaults, is refused ([`Error::Config`] naming it).
    fn try_from(file: SyncFile) -> Result<Self> {
        if let Some((key, why)) = file.unread().into_iter().next() {
            return Err(Error::Config {
                key: key.into(),
                reason: format!("is set, but this run would ignore it: {why}"),
            });
        }
        let mut algorithm = file.algorithm;
        if let Some(loops) = algorithm.loops_mut() {
            *loops = file.shadow;
        }
        match algorithm.rule_mut() {
            Some(Rule::Easgd(easgd)) => *easgd = file.easgd,
            Some(Rule::Bmuf(bmuf)) => *bmuf = file.bmuf,
            Some(Rule::Diloco(diloco)) => *diloco = file.diloco,
            Some(Rule::Ma | Rule::Own(_)) | None => {}
        }
        Ok(SyncConfig {
            algorithm,
            group_size: file.group_size,
            schedule: file.schedule,
            seed: file.seed,
            peer_timeout_ms: file.peer_timeout_ms,
            link: file.link,
            compression: file.compression,
            topk_ratio: file.topk_ratio,
            registered: file.registered,
        })
    }
}

impl<'de> Deserialize<'de> for SyncConfig {
    /// Through [`SyncFile`]; a section the algorithm would not read is
    /// refused as `KEY is set, but …`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        SyncConfig::try_from(SyncFile::deserialize(d)?).map_err(|e| match e {
            Error::Config { key, reason } => serde::de::Error::custom(format!("{key} {reason}")),
            other => serde::de::Error::custom(other),
        })
    }
}

impl From<SyncConfig> for SyncFile {
    fn from(config: SyncConfig) -> Self {
        let (mut easgd, mut bmuf, mut diloco) = Default::default();
        match config.algorithm.rule() {
            Some(Rule::Easgd(settings)) => easgd = *settings,
            Some(Rule::Bmuf(settings)) => bmuf = *settings,
            Some(Rule::Diloco(settings)) => diloco = *settings,
            Some(Rule::Ma | Rule::Own(_)) | None => {}
        }
        SyncFile {
            shadow: config.algorithm.loops().copied().unwrap_or_default(),
            algorithm: config.algorithm,
            group_size: config.group_size,
            schedule: config.schedule,
            seed: config.seed,
            easgd,
            bmuf,
            diloco,
            peer_timeout_ms: config.peer_timeout_ms,
            link: config.link,
            compression: config.compression,
            topk_ratio: config.topk_ratio,
            registered: config.registered,
        }
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::None,
            group_size: 0,
            schedule: Schedule::Global,
            seed: 0,
            peer_timeout_ms: 5000.0,
            link: LinkModel::default(),
            compression: "none".into(),
            topk_ratio: 0.1,
            registered: Sections::default(),
        }
    }
}

impl SyncConfig {
    /// The section `[sync.NAME]` of the registered rule `name`, as `T`;
    /// `T::default()` when the config has none.
    ///
    /// # Errors
    ///
    /// A section `T` cannot read ([`Error::Config`] naming `sync.NAME`).
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        self.registered.get("sync", name)
    }

    /// The most shards an EASGD server may have (each is an actor thread).
    pub const MAX_SERVER_SHARDS: usize = 256;

    /// The group size for `trainers` trainers (0: all of them).
    pub fn group_size_for(&self, trainers: usize) -> usize {
        if self.group_size == 0 {
            trainers
        } else {
            self.group_size
        }
    }

    /// Trainers per EASGD server shard by default.
    pub const TRAINERS_PER_SERVER_SHARD: usize = 4;

    /// Shards of the EASGD server for `trainers` over `processes`:
    /// `sync.easgd.server_shards` when set, else one per
    /// [`Self::TRAINERS_PER_SERVER_SHARD`] trainers and at least one per
    /// process, as a cluster adds servers with trainers. Each shard's link
    /// carries its slice for one trainer at a time: with one shard 16 trainers
    /// queue at it (a step lands 9.6 steps after its snapshot, against 0.6
    /// with 4 shards), the replicas are pulled towards a stale centre, and
    /// the centre scores NE 0.840 against 0.825 with 4 shards (3 seeds, p
    /// 0.05; docs/results/e4-easgd-shards.md).
    pub fn server_shards_for(&self, trainers: usize, processes: usize) -> usize {
        let set = match self.algorithm.rule() {
            Some(Rule::Easgd(easgd)) => easgd.server_shards,
            _ => None,
        };
        set.unwrap_or_else(|| {
            trainers
                .div_ceil(Self::TRAINERS_PER_SERVER_SHARD)
                .max(processes)
                .clamp(1, Self::MAX_SERVER_SHARDS)
        })
    }

    /// How long a trainer held back by `max_staleness` waits for an average
    /// before it fails: two minutes past the longest a round is held up on
    /// purpose (its delay) and waits for a member (the peer timeout).
    pub(crate) fn staleness_patience(&self) -> std::time::Duration {
        let shadow = self.algorithm.loops().copied().unwrap_or_default();
        let held_up = shadow.delay_ms + shadow.delay_jitter_ms + self.peer_timeout_ms;
        std::time::Duration::from_secs(120) + std::time::Duration::from_secs_f64(held_up / 1000.0)
    }

    /// The staleness bound: `sync.shadow.max_staleness` under `shadow-*`
    /// (foreground rounds are exact), else none.
    pub(crate) fn staleness_bound(&self) -> Option<u64> {
        self.algorithm.loops().and_then(|loops| loops.max_staleness)
    }

    /// How long a group member is waited for; `None` = for ever.
    pub fn peer_timeout(&self) -> Option<std::time::Duration> {
        (self.peer_timeout_ms > 0.0)
            .then(|| std::time::Duration::from_secs_f64(self.peer_timeout_ms / 1000.0))
    }

    /// The largest default α: beyond ½ a replica and the centre overshoot
    /// each other (a round multiplies their difference by 1 − 2α).
    pub const MAX_DEFAULT_ALPHA: f32 = 0.5;

    /// EASGD's α per round for `trainers`, `sync.easgd.alpha` when set. By default
    /// the pull per trainer step is EASGD's (β = 0.9 shared by the trainers,
    /// one round a step), compounded over the steps between rounds:
    /// `fr-easgd:K` takes `1 − (1 − 0.9/N)^K`, at most ½. Shadow rounds land
    /// every ~8 steps on 2 cores, where that reaches ½ up to N = 8; they take
    /// ½ at every N. In E1's setting at N = 16 (~12 rounds a run) a fixed
    /// 0.9/N = 0.056 left the replicas apart and their centre at NE 1.12;
    /// ½ brings it to `none`'s (0.847 against 0.843, 3 seeds), and did better
    /// than the compounded 0.37 over 5 seeds (0.831 against 0.843).
    pub fn alpha_for(&self, trainers: usize) -> f32 {
        let per_step = 0.9 / trainers.max(1) as f32;
        let compounded = |steps: u64| {
            let steps = steps.clamp(1, i32::MAX as u64) as i32;
            (1.0 - (1.0 - per_step).powi(steps)).min(Self::MAX_DEFAULT_ALPHA)
        };
        let set = match self.algorithm.rule() {
            Some(Rule::Easgd(easgd)) => easgd.alpha,
            _ => None,
        };
        set.unwrap_or(match self.algorithm {
            Algorithm::Foreground { every, .. } => compounded(every),
            _ => Self::MAX_DEFAULT_ALPHA,
        })
    }

    /// BMUF's parameters for groups of `group_size`: unless `sync.bmuf.eta` says,
    /// η is [`BmufParams::SHADOW_ETA`] for shadow rounds (which land every few
    /// steps) and the rule of thumb 1 − 1/group size for foreground blocks.
    pub fn bmuf_for(&self, group_size: usize) -> BmufParams {
        let default = if self.algorithm.is_shadow() {
            BmufParams::SHADOW_ETA
        } else {
            BmufParams::for_group(group_size).eta
        };
        let set = match self.algorithm.rule() {
            Some(Rule::Bmuf(bmuf)) => *bmuf,
            _ => BmufSettings::default(),
        };
        BmufParams {
            eta: set.eta.unwrap_or(default),
            zeta: set.zeta,
            nesterov: set.nesterov,
        }
    }

    /// DiLoCo's outer optimizer (`sync.diloco`; its defaults under another
    /// rule).
    pub fn diloco(&self) -> DilocoParams {
        match self.algorithm.rule() {
            Some(Rule::Diloco(diloco)) => *diloco,
            _ => DilocoParams::default(),
        }
    }

    /// Checks the ranges that do not depend on the number of trainers.
    ///
    /// # Errors
    ///
    /// A setting out of range, named by its key ([`Error::Config`]).
    pub fn validate(&self) -> Result<()> {
        match self.algorithm.rule() {
            Some(Rule::Easgd(easgd)) => {
                easgd.validate()?;
                if (easgd.server_shards)
                    .is_some_and(|s| !(1..=Self::MAX_SERVER_SHARDS).contains(&s))
                {
                    return bad("sync.easgd.server_shards", "must be in 1..=256");
                }
            }
            Some(Rule::Bmuf(bmuf)) => bmuf.validate()?,
            Some(Rule::Diloco(diloco)) => validate_diloco(diloco)?,
            Some(Rule::Ma | Rule::Own(_)) | None => {}
        }
        if let Some(loops) = self.algorithm.loops() {
            loops.validate()?;
        }
        if !(self.topk_ratio > 0.0 && self.topk_ratio <= 1.0) {
            return bad("sync.topk_ratio", "must be a share of values in (0, 1]");
        }
        if !(0.0..=DAY_MS).contains(&self.peer_timeout_ms) {
            return bad(
                "sync.peer_timeout_ms",
                "must be in [0, 86400000] (a day; 0 = wait for ever)",
            );
        }
        let link = &self.link;
        if !(0.0..=DAY_MS * 1e3).contains(&link.latency_us)
            || !(0.0..=f64::INFINITY).contains(&link.bandwidth_gbps)
            || (link.slow_trainer.is_some() && !(1.0..=f64::INFINITY).contains(&link.slow_factor))
        {
            return bad(
                "sync.link",
                "latency_us must be in [0, 86400000000] (a day), bandwidth_gbps ≥ 0 and \
                 slow_factor ≥ 1",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config under `algorithm` with `rule` (settings) in its place.
    fn with_rule(algorithm: &str, rule: Rule) -> SyncConfig {
        let mut c = SyncConfig {
            algorithm: algorithm.parse().unwrap(),
            ..SyncConfig::default()
        };
        *c.algorithm.rule_mut().unwrap() = rule;
        c
    }

    /// A config under `shadow-ma` whose loops are `loops`.
    fn with_loops(loops: ShadowSettings) -> SyncConfig {
        SyncConfig {
            algorithm: Algorithm::Shadow {
                rule: Rule::Ma,
                loops,
            },
            ..SyncConfig::default()
        }
    }

    #[test]
    fn injected_delays_are_bounded_at_a_day() {
        let with = |delay_ms, delay_jitter_ms| {
            with_loops(ShadowSettings {
                delay_ms,
                delay_jitter_ms,
                ..ShadowSettings::default()
            })
        };
        assert!(with(86_400_000.0, 500.0).validate().is_ok());
        for (delay, jitter, key) in [
            (1e300, 0.0, "sync.shadow.delay_ms"),
            (1e12, 0.0, "sync.shadow.delay_ms"),
            (-1.0, 0.0, "sync.shadow.delay_ms"),
            (f64::NAN, 0.0, "sync.shadow.delay_ms"),
            (0.0, 1e300, "sync.shadow.delay_jitter_ms"),
        ] {
            let e = with(delay, jitter).validate().unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains("a day"),
                "{delay} {jitter}: {e}"
            );
        }
    }

    #[test]
    fn a_bounded_run_refuses_a_delay_that_would_stop_it_for_minutes() {
        let bounded = |delay_ms, delay_jitter_ms| ShadowSettings {
            max_staleness: Some(4),
            delay_ms,
            delay_jitter_ms,
            ..ShadowSettings::default()
        };
        assert!(bounded(50_000.0, 10_000.0).validate().is_ok());
        let e = bounded(50_000.0, 10_001.0).validate().unwrap_err();
        assert!(
            e.to_string().contains("sync.shadow.delay_ms")
                && e.to_string().contains("max_staleness"),
            "{e}"
        );
        let unbounded = ShadowSettings {
            max_staleness: None,
            ..bounded(1e9, 0.0)
        };
        assert!(unbounded
            .validate()
            .unwrap_err()
            .to_string()
            .contains("a day"));
    }

    /// EASGD's settings `alpha` and `server_shards`.
    fn easgd(alpha: Option<f32>, server_shards: Option<usize>) -> Rule {
        Rule::Easgd(EasgdSettings {
            alpha,
            server_shards,
        })
    }

    #[test]
    fn defaults_and_ranges() {
        let c = SyncConfig::default();
        assert_eq!(c.group_size_for(8), 8);
        // EASGD's paper at one step a round; compounded, at most ½.
        let alpha = |algorithm, set, n| with_rule(algorithm, easgd(set, None)).alpha_for(n);
        assert!((alpha("fr-easgd:1", None, 4) - 0.225).abs() < 1e-7);
        let two = 1.0 - (1.0 - 0.9f32 / 16.0).powi(2);
        assert!((alpha("fr-easgd:2", None, 16) - two).abs() < 1e-6);
        assert_eq!(alpha("fr-easgd:10", None, 4), 0.5);
        assert_eq!(alpha("shadow-easgd", None, 16), 0.5);
        assert_eq!(alpha("shadow-easgd", Some(0.1), 16), 0.1);
        // A shard per 4 trainers, at least one per process, unless set.
        let shards =
            |set, n, p| with_rule("shadow-easgd", easgd(None, set)).server_shards_for(n, p);
        assert_eq!(
            [shards(None, 1, 1), shards(None, 4, 1), shards(None, 5, 1)],
            [1, 1, 2]
        );
        assert_eq!([shards(None, 16, 1), shards(None, 8, 4)], [4, 4]);
        assert_eq!(shards(Some(1), 16, 1), 1);
        assert_eq!(c.bmuf_for(4).eta, 0.75);
        let shadow: SyncConfig = with_rule("shadow-bmuf", Rule::named("bmuf"));
        assert_eq!(shadow.bmuf_for(16).eta, BmufParams::SHADOW_ETA);
        let eta = |eta| {
            Rule::Bmuf(BmufSettings {
                eta,
                ..BmufSettings::default()
            })
        };
        assert_eq!(
            with_rule("shadow-bmuf", eta(Some(0.9))).bmuf_for(16).eta,
            0.9
        );
        for (c, key) in [
            (
                with_rule("shadow-easgd", easgd(Some(1.5), None)),
                "sync.easgd.alpha",
            ),
            (
                with_rule("fr-easgd:4", easgd(Some(0.0), None)),
                "sync.easgd.alpha",
            ),
            (with_rule("shadow-bmuf", eta(Some(1.0))), "sync.bmuf.eta"),
            (
                with_rule("shadow-easgd", easgd(None, Some(0))),
                "sync.easgd.server_shards",
            ),
            (
                with_loops(ShadowSettings {
                    max_cpu_share: 1.5,
                    ..ShadowSettings::default()
                }),
                "sync.shadow.max_cpu_share",
            ),
        ] {
            assert!(c.validate().unwrap_err().to_string().contains(key));
        }
    }

    #[test]
    fn a_file_gives_the_algorithm_its_sections_and_refuses_another_modes() {
        let read = |json: &str| serde_json::from_str::<SyncConfig>(json).map_err(|e| e.to_string());
        let c = read(
            r#"{"algorithm": "shadow-bmuf", "bmuf": {"eta": 0.5}, "shadow": {"min_steps": 9}}"#,
        )
        .unwrap();
        assert_eq!(c.bmuf_for(4).eta, 0.5);
        assert_eq!(c.algorithm.loops().map(|l| l.min_steps), Some(9));
        // Written back, every section is there: the algorithm's own, the
        // others' at their defaults (read back the same).
        let written = serde_json::to_value(&c).unwrap();
        assert_eq!(written["shadow"]["min_steps"], 9);
        assert_eq!(
            written["easgd"],
            serde_json::to_value(EasgdSettings::default()).unwrap()
        );
        assert_eq!(read(&written.to_string()).unwrap(), c);
        // Another mode's section, set: refused, naming it and why.
        for (json, key, why) in [
            (
                r#"{"algorithm": "none", "shadow": {"min_steps": 9}}"#,
                "sync.shadow",
                "background loops",
            ),
            (
                r#"{"algorithm": "fr-ma:4", "shadow": {"min_steps": 9}}"#,
                "sync.shadow",
                "fr-ma:4 has none",
            ),
            (
                r#"{"algorithm": "shadow-ma", "bmuf": {"eta": 0.5}}"#,
                "sync.bmuf",
                "use shadow-bmuf",
            ),
            (
                r#"{"algorithm": "shadow-bmuf", "diloco": {"outer_lr": 1.0}}"#,
                "sync.diloco",
                "outer optimizer",
            ),
            (
                r#"{"algorithm": "fr-bmuf:4", "easgd": {"alpha": 0.1}}"#,
                "sync.easgd",
                "EASGD",
            ),
        ] {
            let e = read(json).unwrap_err();
            assert!(
                e.contains(key) && e.contains("ignore") && e.contains(why),
                "{json}: {e}"
            );
        }
        // … but at its defaults (a results file lists every section): dropped.
        let c = read(r#"{"algorithm": "none", "shadow": {"min_steps": 4}}"#).unwrap();
        assert_eq!(c, SyncConfig::default());
    }

    #[test]
    fn the_keys_are_those_a_file_writes() {
        let written = serde_json::to_value(SyncFile::default()).unwrap();
        let mut keys: Vec<&str> = written
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut listed = SyncFile::KEYS.to_vec();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed);
    }
}
