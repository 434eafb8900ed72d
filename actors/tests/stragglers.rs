//! Stragglers: a trainer slowed on purpose lags alone under background sync,
//! and holds up everyone under synchronous SGD.
//!
//! The bounds are lower bounds that the sleeps themselves guarantee (a slowed
//! step cannot take less than its factor times the learner's own sleep), or
//! ratios far from what a loaded machine could blur.

use shadowsync_actors::stats::TrainerStats;
use shadowsync_actors::stragglers::Straggler;
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, run_to_the_end};
use std::time::Duration;

const STEPS: u64 = 40;
const STEP: Duration = Duration::from_millis(3);
const PAUSE_MS: u64 = 150;

/// Two trainers of [`STEPS`] steps of [`STEP`] each under `algorithm`;
/// trainer 1 takes each step 4× as long and pauses before step 10. Each
/// trainer's seconds of training.
fn seconds_of_each(algorithm: &str) -> Vec<f64> {
    let _machine = exclusive();
    let mut ls = learners(2, Some(STEPS));
    ls.iter_mut().for_each(|l| l.step_delay = STEP);
    let mut c = config(algorithm);
    c.stragglers = vec![Straggler {
        trainer: 1,
        slowdown: 4.0,
        pause_ms: PAUSE_MS,
        pause_at_steps: vec![10],
    }];
    let outcome = run_to_the_end(c, ls);
    let seconds = |t: &TrainerStats| t.examples as f64 / t.examples_per_sec;
    outcome.report.trainer_stats.iter().map(seconds).collect()
}

/// What the slowed trainer's steps and pause take at least.
fn slowed_floor() -> f64 {
    (STEPS as f64 * 4.0 * STEP.as_secs_f64()) + PAUSE_MS as f64 / 1e3
}

#[test]
fn under_background_sync_only_the_straggler_lags() {
    let seconds = seconds_of_each("shadow-ma");
    assert!(seconds[1] >= slowed_floor(), "{seconds:?}");
    assert!(
        seconds[0] * 2.0 < seconds[1],
        "trainer 0 waited: {seconds:?}"
    );
}

#[test]
fn under_synchronous_sgd_everyone_waits_for_the_straggler() {
    let seconds = seconds_of_each("sync-sgd");
    // Trainer 0's last all-reduce needs trainer 1's last gradients.
    let floor = slowed_floor() - 4.0 * STEP.as_secs_f64();
    assert!(seconds[0] >= floor, "{seconds:?}");
    assert!(seconds[1] >= floor, "{seconds:?}");
}

#[test]
fn a_straggler_of_no_trainer_is_refused_naming_the_key() {
    let mut c = config("shadow-ma");
    c.stragglers = vec![Straggler {
        trainer: 2,
        slowdown: 2.0,
        pause_ms: 0,
        pause_at_steps: Vec::new(),
    }];
    let e = shadowsync_actors::Cluster::start(c, learners(2, Some(5)))
        .err()
        .expect("a straggler of trainer 2 among 2 is refused")
        .to_string();
    assert!(e.contains("stragglers.trainer"), "{e}");
}

/// A stop ends the sleeps of a straggler's pause (a minute here), of its lag
/// (1,000× a step of 30 ms) and of a hung step (a minute), rather than
/// waiting them out.
#[test]
fn a_stop_wakes_a_pausing_a_lagging_and_a_hung_trainer() {
    use shadowsync_actors::faults::{Fault, FaultKind};
    use shadowsync_actors::Cluster;
    let _machine = exclusive();
    let mut ls = learners(3, None);
    ls.iter_mut().for_each(|l| l.step_delay = STEP);
    ls[1].step_delay = Duration::from_millis(30);
    let mut c = config("shadow-ma");
    c.stragglers = vec![
        Straggler {
            trainer: 0,
            slowdown: 1.0,
            pause_ms: 60_000,
            pause_at_steps: vec![2],
        },
        Straggler {
            trainer: 1,
            slowdown: Straggler::MAX_SLOWDOWN,
            pause_ms: 0,
            pause_at_steps: vec![],
        },
    ];
    c.faults = vec![Fault {
        trainer: 2,
        at_step: 2,
        kind: FaultKind::Hang { ms: 60_000 },
        every: 0,
    }];
    let cluster = Cluster::start(c, ls).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let stopping = std::time::Instant::now();
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    // A hang detector: the sleeps are 30 s and more, a stop ends them at once.
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "{:?}",
        stopping.elapsed()
    );
    let steps: Vec<u64> = outcome
        .report
        .trainer_stats
        .iter()
        .map(|t| t.steps)
        .collect();
    assert!(steps.iter().all(|&s| s >= 1), "{steps:?}");
}
