//! What each trainer has done so far, readable from any thread without messages.
//!
//! A trainer and its shadow loop update one [`TrainerCounters`] with relaxed
//! atomics; [`TrainerCounters::stats`] reads a consistent-enough [`TrainerStats`]
//! at any time (the cluster handle, monitors, the final report).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Live counters of one trainer.
#[derive(Debug)]
pub struct TrainerCounters {
    id: usize,
    started: Instant,
    steps: AtomicU64,
    examples: AtomicU64,
    syncs: AtomicU64,
    staleness_sum: AtomicU64,
    staleness_max: AtomicU64,
    steps_at_last_sync: AtomicU64,
    busy_micros: AtomicU64,
    finished: AtomicBool,
}

/// A snapshot of one trainer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainerStats {
    /// Trainer index.
    pub trainer: usize,
    /// Optimizer steps taken.
    pub steps: u64,
    /// Training examples consumed.
    pub examples: u64,
    /// Syncs completed (averages written back).
    pub syncs: u64,
    /// Mean trainer steps between two completed syncs.
    pub mean_sync_gap: f64,
    /// Mean steps the trainer took between a sync's snapshot and its write-back.
    pub mean_staleness: f64,
    /// Largest such staleness.
    pub max_staleness: u64,
    /// Examples per second of training time.
    pub examples_per_sec: f64,
    /// Whether the trainer has finished its data.
    pub finished: bool,
}

impl TrainerCounters {
    /// Fresh counters of trainer `id`, its clock starting now.
    pub fn new(id: usize) -> Self {
        Self {
            id,
            started: Instant::now(),
            steps: AtomicU64::new(0),
            examples: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            staleness_sum: AtomicU64::new(0),
            staleness_max: AtomicU64::new(0),
            steps_at_last_sync: AtomicU64::new(0),
            busy_micros: AtomicU64::new(0),
            finished: AtomicBool::new(false),
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Relaxed)
    }

    /// Records one step of `examples`.
    pub fn record_step(&self, examples: usize) {
        self.steps.fetch_add(1, Relaxed);
        self.examples.fetch_add(examples as u64, Relaxed);
    }

    /// Records a completed sync whose snapshot was taken `staleness` steps ago.
    pub fn record_sync(&self, staleness: u64) {
        self.syncs.fetch_add(1, Relaxed);
        self.staleness_sum.fetch_add(staleness, Relaxed);
        self.staleness_max.fetch_max(staleness, Relaxed);
        self.steps_at_last_sync.store(self.steps(), Relaxed);
    }

    /// Whether the trainer has finished.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Relaxed)
    }

    /// Marks the trainer finished; its training time stops here.
    pub fn finish(&self) {
        if !self.finished.swap(true, Relaxed) {
            self.busy_micros
                .store(self.started.elapsed().as_micros() as u64, Relaxed);
        }
    }

    /// The current figures.
    pub fn stats(&self) -> TrainerStats {
        let steps = self.steps();
        let syncs = self.syncs.load(Relaxed);
        let finished = self.is_finished();
        let seconds = if finished {
            self.busy_micros.load(Relaxed) as f64 * 1e-6
        } else {
            self.started.elapsed().as_secs_f64()
        };
        let examples = self.examples.load(Relaxed);
        let per_sync = |total: u64| {
            if syncs == 0 {
                0.0
            } else {
                total as f64 / syncs as f64
            }
        };
        TrainerStats {
            trainer: self.id,
            steps,
            examples,
            syncs,
            mean_sync_gap: per_sync(self.steps_at_last_sync.load(Relaxed)),
            mean_staleness: per_sync(self.staleness_sum.load(Relaxed)),
            max_staleness: self.staleness_max.load(Relaxed),
            examples_per_sec: examples as f64 / seconds.max(1e-9),
            finished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_and_staleness_are_per_sync_means() {
        let c = TrainerCounters::new(3);
        for _ in 0..10 {
            c.record_step(128);
        }
        c.record_sync(2);
        for _ in 0..10 {
            c.record_step(128);
        }
        c.record_sync(6);
        c.finish();
        let s = c.stats();
        assert_eq!((s.trainer, s.steps, s.examples, s.syncs), (3, 20, 2560, 2));
        assert_eq!(
            (s.mean_sync_gap, s.mean_staleness, s.max_staleness),
            (10.0, 4.0, 6)
        );
        assert!(s.finished && s.examples_per_sec > 0.0);
    }
}
