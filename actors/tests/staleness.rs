//! Staleness under control: `sync.shadow.delay_ms` makes shadow rounds land late on
//! purpose, and `sync.shadow.max_staleness` bounds how far a trainer runs ahead of
//! its newest average, for the per-process hub and per-trainer loops alike.

use shadowsync_actors::stats::TrainerStats;
use shadowsync_actors::sync::{ShadowSettings, ShadowThreads};
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, run_to_the_end};
use std::time::{Duration, Instant};

const STEPS: u64 = 60;

/// Two trainers of [`STEPS`] steps of 1 ms under `shadow-ma`, every round
/// landing `delay_ms` after its snapshot, bounded by `max_staleness`.
fn run_with(
    max_staleness: Option<u64>,
    threads: ShadowThreads,
    delay_ms: f64,
    max_cpu_share: f64,
) -> Vec<TrainerStats> {
    let _machine = exclusive();
    let mut ls = learners(2, Some(STEPS));
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_millis(1));
    let mut c = config("shadow-ma");
    let loops = c.sync.algorithm.loops_mut().unwrap();
    loops.delay_ms = delay_ms;
    loops.max_staleness = max_staleness;
    loops.threads = threads;
    loops.max_cpu_share = max_cpu_share;
    run_to_the_end(c, ls).report.trainer_stats
}

/// As [`run_with`], 30 ms late, with no CPU budget.
fn run(max_staleness: Option<u64>, threads: ShadowThreads) -> Vec<TrainerStats> {
    run_with(max_staleness, threads, 30.0, 0.0)
}

/// A bound of 0 under the default CPU budget: a held trainer takes no steps,
/// so its rounds must not wait for the CPU time those steps would pay. They
/// did, and every step then waited for a stalled trainer's second (about a
/// minute for these 60 steps, where the rounds' 20 ms interval make ~1.5 s).
#[test]
fn a_bound_of_zero_steps_at_the_rounds_pace_under_the_cpu_budget() {
    for threads in [ShadowThreads::PerProcess, ShadowThreads::PerTrainer] {
        let started = Instant::now();
        let stats = run_with(Some(0), threads, 0.0, ShadowSettings::DEFAULT_MAX_CPU_SHARE);
        let took = started.elapsed();
        assert!(stats.iter().all(|t| t.steps == STEPS), "{stats:?}");
        assert!(stats.iter().all(|t| t.max_staleness <= 1), "{stats:?}");
        // A hang detector, 20× what the run takes: not a speed target.
        assert!(took < Duration::from_secs(30), "{threads:?}: {took:?}");
    }
}

#[test]
fn a_delayed_round_lands_many_steps_stale_unless_the_staleness_is_bounded() {
    let free = run(None, ShadowThreads::PerProcess);
    assert!(free.iter().all(|t| t.max_staleness >= 5), "{free:?}");
    for threads in [ShadowThreads::PerProcess, ShadowThreads::PerTrainer] {
        for bound in [0, 2] {
            let bounded = run(Some(bound), threads);
            for t in &bounded {
                assert_eq!(t.steps, STEPS, "{threads:?}, bound {bound}");
                assert!(t.syncs > 0, "{t:?}");
                assert!(
                    t.max_staleness <= bound + 1,
                    "{threads:?}, bound {bound}: {t:?}"
                );
            }
        }
    }
}
