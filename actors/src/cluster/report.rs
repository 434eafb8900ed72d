//! What a finished cluster hands back: [`ClusterReport`], [`ClusterOutcome`],
//! and the consensus distance sampled while it ran.

use super::checkpoint::{ClusterState, TrainerState};
use super::roster::Roster;
use crate::hogwild::ParamAlias;
use crate::stats::TrainerStats;
use crate::sync::{mean_into, Algorithm, PeerState};
use crate::{Error, Learner, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The spread of the replicas at one moment: mean over trainers of ‖wᵢ − w̄‖².
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConsensusPoint {
    /// Seconds since the start.
    pub seconds: f64,
    /// Consensus distance (NaN once a replica diverged).
    #[serde(deserialize_with = "crate::stats::null_as_nan")]
    pub distance: f64,
}

/// What a cluster run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterReport {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Number of trainers.
    pub trainers: usize,
    /// Group size (of the last plan, for a cluster whose trainers changed).
    pub group_size: usize,
    /// Wall-clock seconds from start to the last trainer's end.
    pub seconds: f64,
    /// Examples trained, all trainers (with those of a run it resumes).
    pub examples: u64,
    /// Examples trained by this run per second.
    pub examples_per_sec: f64,
    /// Per trainer.
    pub trainer_stats: Vec<TrainerStats>,
    /// Consensus distance over time.
    pub consensus: Vec<ConsensusPoint>,
    /// Parameter bytes sent between trainers (compressed, if
    /// `sync.compression` says).
    pub bytes_sent: u64,
    /// The same, counted before compression (as `f32`).
    #[serde(default)]
    pub bytes_before_compression: u64,
    /// CPU seconds EASGD's server shards in this process spent serving.
    #[serde(default)]
    pub server_cpu_seconds: f64,
    /// The trainers that left while it ran (an elastic cluster's; their
    /// learners are in the outcome, with their replicas as they left).
    #[serde(default)]
    pub departed: Vec<usize>,
    /// Errors of trainers or sync loops, if any.
    pub errors: Vec<String>,
    /// Events that slow subscribers missed.
    pub events_dropped: u64,
}

impl ClusterReport {
    /// `bytes` per example the run trained (with those of a run it resumes):
    /// [`ClusterReport::bytes_sent`] or
    /// [`ClusterReport::bytes_before_compression`] per example.
    pub fn per_example(&self, bytes: u64) -> f64 {
        bytes as f64 / self.examples.max(1) as f64
    }

    /// The CPU time the shadow loops' rounds and EASGD's server shards took
    /// against the trainers' own; `None` where no CPU time was measured.
    pub fn sync_cpu_share(&self) -> Option<f64> {
        let stats = &self.trainer_stats;
        let training: f64 = stats.iter().map(|s| s.training_cpu_seconds).sum();
        let sync: f64 = stats.iter().map(|s| s.sync_cpu_seconds).sum();
        (training > 0.0).then(|| (sync + self.server_cpu_seconds) / training)
    }
}

/// The learners as trained, and the report.
#[derive(Debug)]
pub struct ClusterOutcome<L> {
    /// The learners in the order they were given (trainer by trainer, a
    /// trainer's workers consecutive).
    pub learners: Vec<L>,
    /// EASGD's centre copy, for `*-easgd`.
    pub center: Option<Vec<f32>>,
    /// Each trainer's sync peer's state as it ended.
    pub peers: Vec<PeerState>,
    /// The figures.
    pub report: ClusterReport,
}

impl<L: Learner> ClusterOutcome<L> {
    /// The trained model's dense parameters: EASGD's centre, or else the mean
    /// of the replicas of the trainers that did not leave (of this
    /// process's, across processes).
    ///
    /// # Errors
    ///
    /// A replica that cannot be read (a buffer that is not a contiguous
    /// CPU `f32` tensor).
    pub fn model(&self) -> Result<Vec<f32>> {
        if let Some(center) = &self.center {
            return Ok(center.clone());
        }
        let workers = (self.learners.len() / self.report.trainers.max(1)).max(1);
        let departed = &self.report.departed;
        let replicas: Vec<&L> = (self.learners.iter().step_by(workers).enumerate())
            .filter_map(|(trainer, l)| (!departed.contains(&trainer)).then_some(l))
            .collect();
        let len = replicas.first().map_or(0, |l| l.dense_params().numel());
        let (mut mean, mut replica) = (vec![0f32; len], vec![0f32; len]);
        for learner in &replicas {
            learner.dense_params().copy_to(&mut replica)?;
            let share = 1.0 / replicas.len() as f32;
            mean.iter_mut()
                .zip(&replica)
                .for_each(|(m, r)| *m += r * share);
        }
        Ok(mean)
    }
}

/// Samples the consensus distance of the `roster`'s active replicas every
/// `every` until `stop`, and once more when stopped, so that even a short
/// run has its final point.
pub(super) fn sample_consensus(
    roster: &Mutex<Roster>,
    every: Duration,
    stop: &AtomicBool,
    started: Instant,
) -> Vec<ConsensusPoint> {
    let mut points = Vec::new();
    let mut snapshots: Vec<Vec<f32>> = Vec::new();
    let mut stopping = false;
    while !stopping {
        let due = Instant::now() + every;
        while !stopping && Instant::now() < due {
            std::thread::sleep(every.min(Duration::from_millis(10)));
            stopping = stop.load(Ordering::Relaxed);
        }
        let roster = roster.lock().unwrap_or_else(|p| p.into_inner());
        let replicas: Vec<&ParamAlias> = roster.active_replicas().collect();
        let len = replicas.first().map_or(0, |r| r.len());
        snapshots.resize_with(replicas.len(), || vec![0f32; len]);
        if replicas
            .iter()
            .zip(&mut snapshots)
            .any(|(r, s)| r.snapshot_into(s).is_err())
        {
            break;
        }
        drop(roster);
        points.push(ConsensusPoint {
            seconds: started.elapsed().as_secs_f64(),
            distance: consensus_distance(&snapshots),
        });
    }
    points
}

/// The replicas' element-wise mean, w̄ (empty for none).
pub fn mean_replica(replicas: &[Vec<f32>]) -> Vec<f32> {
    let mut mean = vec![0f32; replicas.first().map_or(0, Vec::len)];
    let each: Vec<&[f32]> = replicas.iter().map(Vec::as_slice).collect();
    mean_into(&mut mean, &each);
    mean
}

/// Mean over replicas of ‖wᵢ − w̄‖²: how far apart they are.
pub fn consensus_distance(replicas: &[Vec<f32>]) -> f64 {
    spread_around(replicas, &mean_replica(replicas))
}

/// Mean over `replicas` of ‖wᵢ − c‖², summed in f64: their consensus
/// distance when `centre` is their mean (across processes, the mean of every
/// process's replicas).
pub fn spread_around(replicas: &[Vec<f32>], centre: &[f32]) -> f64 {
    let squared = |w: &Vec<f32>| -> f64 {
        w.iter()
            .zip(centre)
            .map(|(x, c)| f64::from(x - c).powi(2))
            .sum()
    };
    replicas.iter().map(squared).sum::<f64>() / replicas.len().max(1) as f64
}

impl<L: Learner> ClusterOutcome<L> {
    /// The state of the cluster as it ended (`workers` learners per trainer),
    /// to resume from or to keep.
    ///
    /// # Errors
    ///
    /// A learner whose state cannot be saved.
    pub fn state(&self, workers: usize) -> Result<ClusterState> {
        let trainers = self
            .learners
            .iter()
            .step_by(workers.max(1))
            .zip(&self.report.trainer_stats)
            .zip(&self.peers)
            .map(|((learner, stats), sync)| {
                let params = learner.dense_params();
                let mut dense = vec![0f32; params.numel()];
                params.copy_to(&mut dense)?;
                Ok(TrainerState {
                    steps: stats.steps,
                    examples: stats.examples,
                    dense,
                    sync: sync.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let learners = self
            .learners
            .iter()
            .map(|l| l.save_state().map(Some).map_err(Error::learner))
            .collect::<Result<Vec<_>>>()?;
        Ok(ClusterState {
            trainers,
            learners,
            center: self.center.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consensus_distance_golden() {
        // Mean (2, 0); squared distances 1+4=5 and 1+4=5; mean 5.
        assert_eq!(consensus_distance(&[vec![1.0, 2.0], vec![3.0, -2.0]]), 5.0);
        assert_eq!(consensus_distance(&[vec![1.0, 2.0], vec![1.0, 2.0]]), 0.0);
    }
}
