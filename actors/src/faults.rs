//! Fault injection, for testing that the runtime contains failures.
//!
//! A [`Fault`] names a trainer, what goes wrong ([`FaultKind`]) and when: at one
//! step, or every `every` steps from that step on. The trainer consults
//! [`faults_due`] before each step; the runtime then has to detect the fault,
//! recover the trainer (the crate-private `recovery` module) and keep the cluster running.
//! Some kinds hit elsewhere ([`FaultKind::site`]), counting the trainer's sync
//! rounds rather than its steps: its shadow-sync loop (`sync-*`), the group
//! coordinator answering it (`coordinator-panic`), the parameter server's shards
//! serving it (`server-panic`). Nothing is injected unless a cluster is
//! configured with faults.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum FaultKind {
    /// The step returns an error.
    Error,
    /// The step panics.
    Panic,
    /// The step hangs for `ms` milliseconds before going on.
    Hang {
        /// How long.
        ms: u64,
    },
    /// The step's dense update is taken with an infinite learning rate: the
    /// replica's parameters become NaN/Inf.
    Diverge,
    /// The step's update of the shared embedding rows is lost after the row
    /// audit recorded it, as a transport bug would lose it: a sharded
    /// table's rows kept by other processes, or all of a table kept whole.
    /// Nothing recovers it; `train.audit_rows` must catch it. (Under
    /// `sync-sgd` the rows are combined in the group first and nothing is
    /// lost.)
    LosePush,
    /// The trainer's shadow-sync loop panics at the start of a round.
    SyncPanic,
    /// The trainer's shadow-sync loop hangs for `ms` milliseconds at the start
    /// of a round (its group must not wait for it).
    SyncHang {
        /// How long.
        ms: u64,
    },
    /// The group coordinator panics on the trainer's request for its group of
    /// a round (the first time it is asked).
    CoordinatorPanic,
    /// Every parameter server shard panics on the trainer's elastic step of a
    /// round.
    ServerPanic,
}

/// Where a fault hits, and what its `at_step` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultSite {
    /// The trainer's step (counting steps).
    Step,
    /// The trainer's shadow-sync loop (counting its rounds).
    SyncLoop,
    /// The group coordinator, answering the trainer (counting its rounds).
    Coordinator,
    /// The parameter server's shards, serving the trainer (counting its rounds).
    Server,
}

impl FaultKind {
    /// Where it hits.
    pub fn site(&self) -> FaultSite {
        match self {
            FaultKind::Error
            | FaultKind::Panic
            | FaultKind::Hang { .. }
            | FaultKind::Diverge
            | FaultKind::LosePush => FaultSite::Step,
            FaultKind::SyncPanic | FaultKind::SyncHang { .. } => FaultSite::SyncLoop,
            FaultKind::CoordinatorPanic => FaultSite::Coordinator,
            FaultKind::ServerPanic => FaultSite::Server,
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The trainer it hits.
    pub trainer: usize,
    /// What goes wrong.
    pub kind: FaultKind,
    /// The first step it hits, from 0. For the kinds that hit a step, steps are
    /// counted as attempts: steps taken plus failed attempts, so that a failed
    /// step's retry is the next attempt (with `every = 1` every retry fails too,
    /// and the trainer is given up after its fifth failure in a row).
    pub at_step: u64,
    /// Hits again every `every` steps after `at_step` (0 or absent: once).
    #[serde(default)]
    pub every: u64,
}

impl Fault {
    /// Whether this fault hits `trainer` before its step number `step`.
    pub fn hits(&self, trainer: usize, step: u64) -> bool {
        if trainer != self.trainer || step < self.at_step {
            return false;
        }
        match self.every {
            0 => step == self.at_step,
            every => (step - self.at_step) % every == 0,
        }
    }

    /// How long a hang lasts (zero for kinds that do not hang).
    pub fn hang(&self) -> Duration {
        match self.kind {
            FaultKind::Hang { ms } | FaultKind::SyncHang { ms } => Duration::from_millis(ms),
            _ => Duration::ZERO,
        }
    }
}

/// The payload of an injected panic, its message. A panic hook can tell it
/// from a bug's: the `shadowsync` binary keeps the raw panic report of an
/// injected one off stderr, where the recovery's WARN line already says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedPanic(pub String);

/// Panics with an [`InjectedPanic`].
pub fn inject_panic(message: String) -> ! {
    std::panic::panic_any(InjectedPanic(message))
}

/// The faults of `faults` that hit at `site`.
pub fn faults_at(faults: &[Fault], site: FaultSite) -> Vec<Fault> {
    faults
        .iter()
        .filter(|f| f.kind.site() == site)
        .copied()
        .collect()
}

/// The faults of `faults` that hit `trainer` before its step `step`.
pub fn faults_due(
    faults: &[Fault],
    trainer: usize,
    step: u64,
) -> impl Iterator<Item = &Fault> + '_ {
    faults.iter().filter(move |f| f.hits(trainer, step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_hits_its_trainer_once_or_periodically() {
        let once = Fault {
            trainer: 1,
            kind: FaultKind::Error,
            at_step: 5,
            every: 0,
        };
        let hit: Vec<u64> = (0..30).filter(|&s| once.hits(1, s)).collect();
        assert_eq!(hit, vec![5]);
        assert!(!once.hits(0, 5));
        let every = Fault { every: 10, ..once };
        let hit: Vec<u64> = (0..30).filter(|&s| every.hits(1, s)).collect();
        assert_eq!(hit, vec![5, 15, 25]);
        let hang = Fault {
            kind: FaultKind::Hang { ms: 1500 },
            ..once
        };
        assert_eq!(hang.hang(), Duration::from_millis(1500));
        assert_eq!(once.hang(), Duration::ZERO);
        let all = [once, every, hang];
        assert_eq!(faults_due(&all, 1, 5).count(), 3);
        assert_eq!(faults_due(&all, 1, 15).count(), 1);
        assert_eq!(faults_due(&all, 2, 5).count(), 0);
    }

    #[test]
    fn faults_read_from_toml() {
        #[derive(Deserialize)]
        struct Plan {
            faults: Vec<Fault>,
        }
        let plan: Plan = toml::from_str(
            r#"
            faults = [
              { trainer = 0, kind = "panic", at_step = 3 },
              { trainer = 2, kind = { hang = { ms = 200 } }, at_step = 10, every = 50 },
              { trainer = 1, kind = "diverge", at_step = 7 },
              { trainer = 1, kind = "lose-push", at_step = 8 },
              { trainer = 3, kind = "sync-panic", at_step = 4 },
              { trainer = 3, kind = { sync-hang = { ms = 900 } }, at_step = 9 },
              { trainer = 0, kind = "coordinator-panic", at_step = 2 },
              { trainer = 1, kind = "server-panic", at_step = 5, every = 7 },
            ]"#,
        )
        .unwrap();
        assert_eq!(plan.faults[0].kind, FaultKind::Panic);
        assert_eq!(plan.faults[1].kind, FaultKind::Hang { ms: 200 });
        assert_eq!(plan.faults[1].every, 50);
        assert_eq!(plan.faults[2].kind, FaultKind::Diverge);
        assert_eq!(plan.faults[3].kind, FaultKind::LosePush);
        assert_eq!(plan.faults[4].kind, FaultKind::SyncPanic);
        assert_eq!(plan.faults[5].hang(), Duration::from_millis(900));
        let sites: Vec<FaultSite> = plan.faults.iter().map(|f| f.kind.site()).collect();
        use FaultSite::*;
        assert_eq!(
            sites,
            [
                Step,
                Step,
                Step,
                Step,
                SyncLoop,
                SyncLoop,
                Coordinator,
                Server
            ]
        );
        assert_eq!(faults_at(&plan.faults, Server), [plan.faults[7]]);
        assert!(toml::from_str::<Plan>(
            r#"faults = [{ trainer = 0, kind = "melt", at_step = 1 }]"#
        )
        .is_err());
    }
}
