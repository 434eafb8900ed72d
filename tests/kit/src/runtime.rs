//! What the runtime tests share: a learner that is not a CTR model — least
//! squares `y = w·x` on an endless (or bounded) stream of seeded random data —
//! and helpers to configure and start clusters of them.

use crossbeam_channel::RecvTimeoutError;
use shadowsync_actors::events::{Event, EventBus};
use shadowsync_actors::{
    Cluster, ClusterConfig, ClusterOutcome, FlatParams, Learner, LearnerState, SharedGradients,
    StepOutcome,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tch::{nn, nn::Module, Device, Kind, Tensor};

const DIM: i64 = 32;

#[derive(Debug)]
pub struct LeastSquares {
    pub _vars: nn::VarStore,
    pub layer: nn::Linear,
    pub params: FlatParams,
    pub truth: Tensor,
    pub lr: f64,
    pub steps_left: Option<u64>,
    pub step_delay: Duration,
    /// Its seed, also its index among the learners.
    pub index: i64,
    /// Every combination of the (here imaginary) shared gradients it was
    /// handed to apply.
    pub shared_applied: Vec<SharedGradients>,
    /// Every step fails once this many steps were taken.
    pub broken_after: Option<u64>,
    /// The update of this step (counted from 1) turns the parameters into NaN
    /// and then takes `poison_hold` more, as a replica that stays diverged for
    /// a while before its trainer notices.
    pub poison_at: Option<u64>,
    pub poison_hold: Duration,
    /// Steps taken (its position in its data, for checkpoints).
    pub steps_taken: u64,
}

impl LeastSquares {
    pub fn new(seed: i64, steps: Option<u64>) -> Self {
        tch::manual_seed(seed);
        let vars = nn::VarStore::new(Device::Cpu);
        let layer = nn::linear(vars.root() / "w", DIM, 1, Default::default());
        let params = FlatParams::adopt(&vars).unwrap();
        let truth = Tensor::arange(DIM, (Kind::Float, Device::Cpu)) / DIM as f64;
        Self {
            _vars: vars,
            layer,
            params,
            truth,
            lr: 0.05,
            steps_left: steps,
            step_delay: Duration::ZERO,
            index: seed,
            shared_applied: Vec::new(),
            broken_after: None,
            poison_at: None,
            poison_hold: Duration::ZERO,
            steps_taken: 0,
        }
    }

    /// A Hogwild worker of `owner`'s replica, with its own data stream.
    pub fn worker_of(owner: &LeastSquares, seed: i64, steps: Option<u64>) -> Self {
        let mut worker = Self::new(seed, steps);
        worker.params = FlatParams::adopt_shared(&worker._vars, &owner.params).unwrap();
        worker
    }

    /// The dense parameters.
    pub fn dense(&self) -> Vec<f32> {
        let mut values = vec![0.0; self.params.numel()];
        self.params.copy_to(&mut values).unwrap();
        values
    }

    pub fn loss_of(&self, values: &[f32]) -> f64 {
        // Distance of the weights (bias excluded) to the truth.
        let w = Tensor::from_slice(&values[1..]);
        (w - &self.truth)
            .square()
            .sum(Kind::Float)
            .double_value(&[])
    }
}

impl Learner for LeastSquares {
    type Error = tch::TchError;

    fn compute_gradients(&mut self) -> Result<Option<StepOutcome>, tch::TchError> {
        if self.broken_after.is_some_and(|n| self.steps_taken >= n) {
            return Err(tch::TchError::Kind("this learner is broken".into()));
        }
        if let Some(left) = &mut self.steps_left {
            if *left == 0 {
                return Ok(None);
            }
            *left -= 1;
        }
        if !self.step_delay.is_zero() {
            std::thread::sleep(self.step_delay);
        }
        let x = Tensor::f_randn([64, DIM], (Kind::Float, Device::Cpu))?;
        let y = x.matmul(&self.truth.view([DIM, 1]));
        let loss = (self.layer.forward(&x) - y).square().mean(Kind::Float);
        self.params
            .zero_grad()
            .map_err(|e| tch::TchError::Kind(e.to_string()))?;
        loss.f_backward()?;
        self.steps_taken += 1;
        Ok(Some(StepOutcome {
            examples: 64,
            loss: loss.double_value(&[]),
        }))
    }

    fn apply_gradients(&mut self) -> Result<(), tch::TchError> {
        let step = self.params.grad() * self.lr;
        let _ = tch::no_grad(|| self.params.values().shallow_clone().f_sub_(&step))?;
        if self.poison_at == Some(self.steps_taken) {
            let _ = tch::no_grad(|| self.params.values().shallow_clone().f_fill_(f64::NAN))?;
            std::thread::sleep(self.poison_hold);
        }
        Ok(())
    }

    fn dense_params(&self) -> &FlatParams {
        &self.params
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// A gradient of 1 + its index on each of rows 0..4 (width 1), as if
    /// every trainer looked up the same rows of a shared table.
    fn take_shared_gradients(&mut self) -> Result<Option<SharedGradients>, tch::TchError> {
        Ok(Some(SharedGradients {
            ids: vec![0, 1, 2, 3],
            width: 1,
            values: vec![1.0 + self.index as f32; 4],
        }))
    }

    fn apply_shared_gradients(&mut self, gradients: &SharedGradients) -> Result<(), tch::TchError> {
        self.shared_applied.push(gradients.clone());
        Ok(())
    }

    /// The learning rate, and the steps taken as the position.
    fn save_state(&self) -> Result<LearnerState, tch::TchError> {
        Ok(LearnerState {
            arrays: vec![("lr".into(), vec![self.lr as f32])],
            position: self.steps_taken,
        })
    }

    fn restore_state(&mut self, state: &LearnerState) -> Result<(), tch::TchError> {
        self.lr = f64::from(state.arrays[0].1[0]);
        self.steps_taken = state.position;
        Ok(())
    }
}

/// A cluster configuration for `algorithm` with quick chunks and consensus.
///
/// Rounds are paced by time and steps only: these learners sleep through most
/// of a step, so a CPU budget (a share of the learner's CPU time) would let a
/// loop make as many rounds as this machine's split of CPU between sleeping
/// learners and sync happens to allow, and fault tests counting rounds would
/// pass on one machine and fail on the next. The budget has tests of its own.
pub fn config(algorithm: &str) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.sync.algorithm = algorithm.parse().unwrap();
    if let Some(loops) = config.sync.algorithm.loops_mut() {
        loops.max_cpu_share = 0.0;
    }
    config.chunk_ms = 5;
    config.consensus_every_ms = 50;
    config
}

/// Runs `learners` under `config` to the end; fails the test on any
/// trainer's error.
pub fn run_to_the_end(
    config: ClusterConfig,
    learners: Vec<LeastSquares>,
) -> ClusterOutcome<LeastSquares> {
    let outcome = Cluster::start(config, learners).unwrap().wait().unwrap();
    assert!(
        outcome.report.errors.is_empty(),
        "{:?}",
        outcome.report.errors
    );
    outcome
}

pub fn learners(n: usize, steps: Option<u64>) -> Vec<LeastSquares> {
    (0..n).map(|i| LeastSquares::new(i as i64, steps)).collect()
}

/// Every event of a run, read by a thread as it is published: a subscriber
/// read only once the run is over would lose what its 4,096 places cannot
/// hold (a fast shadow loop publishes thousands of `Synced`).
pub struct EventLog {
    done: Arc<AtomicBool>,
    reader: std::thread::JoinHandle<Vec<Event>>,
}

impl EventLog {
    /// Subscribes to `bus`: set it as a cluster's `events` before starting it.
    pub fn of(bus: &EventBus) -> Self {
        let events = bus.subscribe();
        let done = Arc::new(AtomicBool::new(false));
        let over = Arc::clone(&done);
        let reader = std::thread::spawn(move || {
            let mut log = Vec::new();
            while !over.load(Ordering::Acquire) {
                match events.recv_timeout(Duration::from_millis(5)) {
                    Ok(event) => log.push(event),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            log.extend(events.try_iter());
            log
        });
        Self { done, reader }
    }

    /// The events published so far: all of them once the cluster has ended.
    pub fn finish(self) -> Vec<Event> {
        self.done.store(true, Ordering::Release);
        self.reader.join().unwrap()
    }
}

/// What a soak run saw.
#[derive(Debug)]
pub struct SoakReport {
    /// Resident memory (MB) sampled every second: (seconds, MB).
    pub memory: Vec<(f64, f64)>,
    /// Steps of all trainers.
    pub steps: u64,
    /// Syncs the trainers counted.
    pub syncs: u64,
    /// `Event::Synced` received by a subscriber (from its subscription on).
    pub synced_events: u64,
    /// Rounds missing from a trainer's received `Synced` events between the
    /// first and the last it received.
    pub rounds_missing: u64,
    /// Trainers whose sync count is not their last synced round + 1 (every
    /// round of a clean run writes back, numbered from 0).
    pub counts_unmatched: usize,
    /// Events the subscriber missed.
    pub events_dropped: u64,
    /// Trainers that stepped and synced.
    pub active_trainers: usize,
    /// How long `stop` + `wait` took.
    pub stop_took: Duration,
    /// Errors the cluster reported.
    pub errors: Vec<String>,
}

/// This process's resident memory in MB (Linux), 0 where unknown.
pub fn resident_mb() -> f64 {
    shadowsync_actors::stats::proc_bytes("/proc/self/status", "VmRSS:")
        .map_or(0.0, |bytes| bytes as f64 / f64::from(1u32 << 20))
}

/// Runs `trainers` least-squares trainers under `algorithm` (random groups of 4)
/// for `duration`, sampling memory every second and counting every sync event.
pub fn soak(trainers: usize, algorithm: &str, duration: Duration) -> SoakReport {
    use shadowsync_actors::sync::Schedule;
    use std::time::Instant;

    let mut c = config(algorithm);
    c.sync.group_size = 4;
    c.sync.schedule = Schedule::Random;
    c.consensus_every_ms = 1000;
    let mut ls = learners(trainers, None);
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_millis(1));
    let events = c.events.subscribe();
    let cluster = Cluster::start(c, ls).unwrap();
    let started = Instant::now();
    let mut memory = Vec::new();
    // Per trainer: (first round, last round, events) of the Synced received.
    let mut received = vec![(u64::MAX, 0u64, 0u64); trainers];
    let mut count = |event: Event| {
        if let Event::Synced { trainer, round, .. } = event {
            let (first, last, n) = &mut received[trainer];
            *first = (*first).min(round);
            *last = (*last).max(round);
            *n += 1;
        }
    };
    while started.elapsed() < duration {
        if started.elapsed().as_secs_f64() >= memory.len() as f64 {
            memory.push((started.elapsed().as_secs_f64(), resident_mb()));
        }
        events.try_iter().for_each(&mut count);
        std::thread::sleep(Duration::from_millis(10));
    }
    let asked = Instant::now();
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    let stop_took = asked.elapsed();
    events.try_iter().for_each(&mut count);
    let stats = &outcome.report.trainer_stats;
    SoakReport {
        memory,
        steps: stats.iter().map(|s| s.steps).sum(),
        syncs: stats.iter().map(|s| s.syncs).sum(),
        synced_events: received.iter().map(|r| r.2).sum(),
        rounds_missing: received
            .iter()
            .filter(|r| r.2 > 0)
            .map(|&(first, last, n)| last - first + 1 - n)
            .sum(),
        counts_unmatched: received
            .iter()
            .zip(stats)
            .filter(|((_, last, n), s)| *n == 0 || s.syncs != last + 1)
            .count(),
        events_dropped: outcome.report.events_dropped,
        active_trainers: stats.iter().filter(|s| s.steps > 0 && s.syncs > 0).count(),
        stop_took,
        errors: outcome.report.errors.clone(),
    }
}
