//! What each trainer has done so far, readable from any thread without messages.
//!
//! A trainer and its shadow loop update one [`TrainerCounters`] with relaxed
//! atomics; [`TrainerCounters::stats`] reads a consistent-enough [`TrainerStats`]
//! at any time (the cluster handle, monitors, the final report).
//!
//! They also count the CPU time the trainer's steps and its shadow loop's
//! rounds take, each on its own thread ([`CpuCharge`]): what syncing costs the
//! trainers on shared cores, measured directly rather than read off a noisy
//! difference in examples/s. And what the process's memory holds, as Linux's
//! `/proc` files say ([`proc_bytes`]).

use cpu_time::ThreadTime;
use serde::{Deserialize, Deserializer, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Buckets of the step histograms: bucket 0 counts 0, bucket `k ≥ 1` counts
/// values in `[2^(k−1), 2^k)`, and the last bucket everything from `2^14` up.
pub const HISTOGRAM_BUCKETS: usize = 16;

/// The bucket of `value` in a step histogram.
pub fn histogram_bucket(value: u64) -> usize {
    ((u64::BITS - value.leading_zeros()) as usize).min(HISTOGRAM_BUCKETS - 1)
}

/// A step histogram updated from several threads.
#[derive(Debug, Default)]
struct AtomicHistogram([AtomicU64; HISTOGRAM_BUCKETS]);

impl AtomicHistogram {
    fn record(&self, value: u64) {
        self.0[histogram_bucket(value)].fetch_add(1, Relaxed);
    }

    fn counts(&self) -> [u64; HISTOGRAM_BUCKETS] {
        std::array::from_fn(|k| self.0[k].load(Relaxed))
    }
}

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
    /// The step count at the snapshot of the newest average applied to the
    /// replica (see [`TrainerCounters::average_age`]).
    fresh_from: AtomicU64,
    gaps: AtomicHistogram,
    stalenesses: AtomicHistogram,
    busy_micros: AtomicU64,
    running_workers: AtomicUsize,
    finished: AtomicBool,
    recoveries: AtomicU64,
    abstentions: AtomicU64,
    dropped: AtomicU64,
    training_cpu: CpuAccount,
    sync_cpu: CpuAccount,
    /// Steps and examples trained before this run (by the run it resumes).
    resumed_from: (u64, u64),
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
    /// Distribution of the sync gaps (see [`histogram_bucket`]).
    pub sync_gap_histogram: [u64; HISTOGRAM_BUCKETS],
    /// Distribution of the stalenesses (see [`histogram_bucket`]).
    pub staleness_histogram: [u64; HISTOGRAM_BUCKETS],
    /// Examples per second of training time.
    pub examples_per_sec: f64,
    /// Whether the trainer has finished its data.
    pub finished: bool,
    /// Failed or diverged steps the trainer recovered from.
    pub recoveries: u64,
    /// Sync rounds its replica sat out because its snapshot was not finite.
    pub abstentions: u64,
    /// Examples of a batch it computed and did not apply, by design: under
    /// `sync-sgd`, its last batch when another trainer's data had run out
    /// (DDP's `drop_last`).
    #[serde(default)]
    pub dropped_examples: u64,
    /// CPU seconds its steps took (in-line syncs included, waits not).
    #[serde(default)]
    pub training_cpu_seconds: f64,
    /// CPU seconds its shadow loop's rounds took.
    #[serde(default)]
    pub sync_cpu_seconds: f64,
}

impl TrainerCounters {
    /// Fresh counters of trainer `id`, its clock starting now.
    pub fn new(id: usize) -> Self {
        Self::with_workers(id, 1)
    }

    /// Fresh counters of trainer `id` stepped by `workers` Hogwild workers.
    pub fn with_workers(id: usize, workers: usize) -> Self {
        Self {
            id,
            started: Instant::now(),
            steps: AtomicU64::new(0),
            examples: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            staleness_sum: AtomicU64::new(0),
            staleness_max: AtomicU64::new(0),
            steps_at_last_sync: AtomicU64::new(0),
            fresh_from: AtomicU64::new(0),
            gaps: AtomicHistogram::default(),
            stalenesses: AtomicHistogram::default(),
            busy_micros: AtomicU64::new(0),
            running_workers: AtomicUsize::new(workers.max(1)),
            finished: AtomicBool::new(false),
            recoveries: AtomicU64::new(0),
            abstentions: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            training_cpu: CpuAccount::default(),
            sync_cpu: CpuAccount::default(),
            resumed_from: (0, 0),
        }
    }

    /// Counters that go on from `steps` and `examples` trained before (by a run
    /// this one resumes): the totals include them, the rates do not.
    pub fn resumed_from(mut self, steps: u64, examples: u64) -> Self {
        self.steps = AtomicU64::new(steps);
        self.examples = AtomicU64::new(examples);
        self.steps_at_last_sync = AtomicU64::new(steps);
        self.fresh_from = AtomicU64::new(steps);
        self.resumed_from = (steps, examples);
        self
    }

    /// The trainer's index.
    pub fn trainer(&self) -> usize {
        self.id
    }

    /// Records a recovery from a failed or diverged step.
    pub fn record_recovery(&self) {
        self.recoveries.fetch_add(1, Relaxed);
    }

    /// Records a sync round the replica sat out (its snapshot was not finite).
    pub fn record_abstention(&self) {
        self.abstentions.fetch_add(1, Relaxed);
    }

    /// Records a batch of `examples` computed and left unapplied by design
    /// (see [`TrainerStats::dropped_examples`]).
    pub fn record_dropped(&self, examples: usize) {
        self.dropped.fetch_add(examples as u64, Relaxed);
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

    /// Records a completed sync whose snapshot was taken at step `snapshot`
    /// (the step count then); returns its staleness, the steps taken since.
    pub fn record_sync_since(&self, snapshot: u64) -> u64 {
        let steps = self.steps();
        let staleness = steps.saturating_sub(snapshot);
        self.syncs.fetch_add(1, Relaxed);
        self.staleness_sum.fetch_add(staleness, Relaxed);
        self.staleness_max.fetch_max(staleness, Relaxed);
        self.stalenesses.record(staleness);
        self.fresh_from.fetch_max(snapshot.min(steps), Relaxed);
        let previous = self.steps_at_last_sync.swap(steps, Relaxed);
        self.gaps.record(steps.saturating_sub(previous));
        staleness
    }

    /// How many of the trainer's steps old the newest average applied to its
    /// replica is: steps now, less the steps at that average's snapshot.
    pub fn average_age(&self) -> u64 {
        self.steps().saturating_sub(self.fresh_from.load(Relaxed))
    }

    /// Charges this thread's CPU time to the trainer's steps until dropped.
    pub fn charge_training(&self) -> CpuCharge<'_> {
        self.training_cpu.charge()
    }

    /// Charges this thread's CPU time to the trainer's shadow loop until dropped.
    pub fn charge_sync(&self) -> CpuCharge<'_> {
        self.sync_cpu.charge()
    }

    /// Charges `spent` CPU time to the trainer's sync (its share of a thread
    /// serving several trainers).
    pub fn add_sync_cpu(&self, spent: Duration) {
        self.sync_cpu.add(spent);
    }

    /// The training CPU time the trainer must still spend before its shadow
    /// loop's CPU time is again within `share` of the trainer's own (zero when
    /// it is, or when `share` is not positive).
    pub fn sync_cpu_debt(&self, share: f64) -> Duration {
        if share <= 0.0 {
            return Duration::ZERO;
        }
        let owed = self.sync_cpu.seconds() / share - self.training_cpu.seconds();
        Duration::try_from_secs_f64(owed.max(0.0)).unwrap_or(Duration::MAX)
    }

    /// Its workers still training.
    pub fn running_workers(&self) -> usize {
        self.running_workers.load(Relaxed)
    }

    /// Whether the trainer has finished.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Relaxed)
    }

    /// Marks one worker finished; when it is the last, the trainer is finished
    /// and its training time stops here (returns true then).
    pub fn finish(&self) -> bool {
        let before = self
            .running_workers
            .fetch_update(Relaxed, Relaxed, |w| Some(w.saturating_sub(1)))
            .unwrap_or(0);
        if before > 1 || self.finished.swap(true, Relaxed) {
            return false;
        }
        self.busy_micros
            .store(self.started.elapsed().as_micros() as u64, Relaxed);
        true
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
            mean_sync_gap: per_sync(self.steps_at_last_sync.load(Relaxed) - self.resumed_from.0),
            mean_staleness: per_sync(self.staleness_sum.load(Relaxed)),
            max_staleness: self.staleness_max.load(Relaxed),
            sync_gap_histogram: self.gaps.counts(),
            staleness_histogram: self.stalenesses.counts(),
            examples_per_sec: (examples - self.resumed_from.1) as f64 / seconds.max(1e-9),
            finished,
            recoveries: self.recoveries.load(Relaxed),
            abstentions: self.abstentions.load(Relaxed),
            dropped_examples: self.dropped.load(Relaxed),
            training_cpu_seconds: self.training_cpu.seconds(),
            sync_cpu_seconds: self.sync_cpu.seconds(),
        }
    }
}

/// CPU time charged by any number of threads.
#[derive(Debug, Default)]
pub struct CpuAccount(AtomicU64);

impl CpuAccount {
    /// Charges this thread's CPU time from now until the charge is dropped.
    pub fn charge(&self) -> CpuCharge<'_> {
        CpuCharge {
            account: self,
            start: ThreadTime::try_now().ok(),
        }
    }

    /// Charges `spent` CPU time.
    pub fn add(&self, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Relaxed);
    }

    /// The CPU seconds charged so far.
    pub fn seconds(&self) -> f64 {
        self.0.load(Relaxed) as f64 * 1e-9
    }
}

/// The calling thread's CPU time from its creation until it is dropped, added
/// to its [`CpuAccount`] then (nothing where the OS has no per-thread clock).
#[derive(Debug)]
pub struct CpuCharge<'a> {
    account: &'a CpuAccount,
    start: Option<ThreadTime>,
}

impl Drop for CpuCharge<'_> {
    fn drop(&mut self) {
        if let Some(spent) = self.start.and_then(|start| start.try_elapsed().ok()) {
            self.account.add(spent);
        }
    }
}

/// Reads a number JSON holds as `null` (`serde_json` writes NaN and ±∞
/// so) as NaN: `#[serde(deserialize_with = "null_as_nan")]` on a figure
/// that may not be finite (a diverged run's).
///
/// # Errors
///
/// Neither a number nor `null`.
pub fn null_as_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The size on the line of a `/proc` file (`/proc/self/status`,
/// `/proc/meminfo`) that starts with `key` (`"VmHWM:"`, `"MemTotal:"`), written
/// there in kB, in bytes; `None` where the system has no such file or line.
pub fn proc_bytes(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
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
        assert_eq!(c.record_sync_since(8), 2);
        assert_eq!(c.average_age(), 2);
        for _ in 0..10 {
            c.record_step(128);
        }
        assert_eq!(c.record_sync_since(14), 6);
        // An older snapshot landing late leaves the newest average in place.
        assert_eq!(c.record_sync_since(4), 16);
        assert_eq!(c.average_age(), 6);
        c.finish();
        let s = c.stats();
        assert_eq!((s.trainer, s.steps, s.examples, s.syncs), (3, 20, 2560, 3));
        assert_eq!(
            (s.mean_sync_gap, s.mean_staleness, s.max_staleness),
            (20.0 / 3.0, 8.0, 16)
        );
        assert!(s.finished && s.examples_per_sec > 0.0);
        // Gaps 10, 10 and 0; stalenesses 2 in [2, 4), 6 in [4, 8), 16 in [16, 32).
        assert_eq!(s.sync_gap_histogram[4], 2);
        assert_eq!(s.staleness_histogram[2..6], [1, 1, 0, 1]);
        assert_eq!(s.staleness_histogram.iter().sum::<u64>(), 3);
    }

    #[test]
    fn cpu_is_charged_for_work_on_the_thread_not_for_sleep() {
        let c = TrainerCounters::new(0);
        {
            let _charge = c.charge_training();
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        {
            let _charge = c.charge_sync();
            std::thread::sleep(Duration::from_millis(30));
        }
        let s = c.stats();
        // 30 ms of spinning: most of it on the CPU, however loaded the machine.
        assert!(
            s.training_cpu_seconds > 0.001 && s.training_cpu_seconds < 0.5,
            "{}",
            s.training_cpu_seconds
        );
        assert!(s.sync_cpu_seconds < 0.001, "{}", s.sync_cpu_seconds);
        // Within its budget (here as much CPU as the training's, which the
        // bounds above keep it under however loaded the machine): nothing owed.
        assert_eq!(c.sync_cpu_debt(1.0), Duration::ZERO);
    }

    #[test]
    fn a_loop_over_its_cpu_budget_owes_the_training_time_that_covers_it() {
        let c = TrainerCounters::new(0);
        // 0.1 s of steps and 5 ms of rounds: 5 ms is 2.5% of 0.2 s, so 0.1 s
        // more of steps first.
        c.training_cpu.0.store(100_000_000, Relaxed);
        c.sync_cpu.0.store(5_000_000, Relaxed);
        let owed = c.sync_cpu_debt(0.025).as_secs_f64();
        assert!((owed - 0.1).abs() < 1e-9, "{owed}");
        assert_eq!(c.sync_cpu_debt(0.05), Duration::ZERO);
        assert_eq!(c.sync_cpu_debt(0.0), Duration::ZERO, "no budget, no bound");
    }

    #[test]
    fn a_trainer_finishes_with_its_last_worker() {
        let c = TrainerCounters::with_workers(0, 2);
        assert!(!c.finish() && !c.is_finished());
        assert!(c.finish() && c.is_finished());
        assert!(!c.finish(), "finishes once");
    }

    #[test]
    fn histogram_buckets_are_powers_of_two() {
        let buckets: Vec<usize> = [
            0,
            1,
            2,
            3,
            4,
            7,
            8,
            1 << 13,
            (1 << 14) - 1,
            1 << 14,
            u64::MAX,
        ]
        .into_iter()
        .map(histogram_bucket)
        .collect();
        assert_eq!(buckets, [0, 1, 2, 2, 3, 3, 4, 14, 14, 15, 15]);
    }
}
