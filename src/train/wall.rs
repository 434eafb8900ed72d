//! What the user waits for: a run's wall clock from launch to results, phase
//! by phase, beside the training clock of the trainers.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Where a run's wall-clock time went, from the call that launched it (this
/// process's run: a resumed run counts from its own launch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WallClock {
    /// Seconds from launch until every trainer was started and could take
    /// its first batch: the data resolved (synthetic data generated once),
    /// the test set loaded, the models built, the cluster started.
    pub to_first_batch_seconds: f64,
    /// Seconds from then until the last trainer finished.
    pub training_seconds: f64,
    /// Seconds scoring the final model and the replicas.
    pub scoring_seconds: f64,
    /// Seconds from launch to the report.
    pub to_results_seconds: f64,
    /// Examples this run trained per second of `to_results_seconds`.
    pub examples_per_sec: f64,
}

/// Marks the phases of a run as they end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stopwatch {
    launched: Instant,
    first_batch: Option<Instant>,
    trained: Option<Instant>,
}

impl Stopwatch {
    /// Starts at launch.
    pub(super) fn launch() -> Self {
        Self {
            launched: Instant::now(),
            first_batch: None,
            trained: None,
        }
    }

    /// The trainers are started.
    pub(super) fn trainers_started(&mut self) {
        self.first_batch = Some(Instant::now());
    }

    /// The last trainer finished.
    pub(super) fn trainers_done(&mut self) {
        self.trained = Some(Instant::now());
    }

    /// The figures now, at the report, of a run that trained `examples`
    /// and spent `scoring_seconds` scoring.
    pub(super) fn read(&self, examples: u64, scoring_seconds: f64) -> WallClock {
        let now = Instant::now();
        let first = self.first_batch.unwrap_or(now);
        let trained = self.trained.unwrap_or(now).max(first);
        let total = now.duration_since(self.launched).as_secs_f64();
        WallClock {
            to_first_batch_seconds: first.duration_since(self.launched).as_secs_f64(),
            training_seconds: trained.duration_since(first).as_secs_f64(),
            scoring_seconds,
            to_results_seconds: total,
            examples_per_sec: examples as f64 / total.max(f64::MIN_POSITIVE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_phases_add_up_to_no_more_than_launch_to_results() {
        let mut watch = Stopwatch::launch();
        std::thread::sleep(Duration::from_millis(20));
        watch.trainers_started();
        std::thread::sleep(Duration::from_millis(30));
        watch.trainers_done();
        std::thread::sleep(Duration::from_millis(10));
        let wall = watch.read(1000, 0.005);
        assert!(wall.to_first_batch_seconds >= 0.020);
        assert!(wall.training_seconds >= 0.030);
        let phases = wall.to_first_batch_seconds + wall.training_seconds + wall.scoring_seconds;
        assert!(phases <= wall.to_results_seconds, "{wall:?}");
        let rate = 1000.0 / wall.to_results_seconds;
        assert!((wall.examples_per_sec - rate).abs() < 1e-6 * rate);
    }
}
