//! Staleness under control: `sync.delay_ms` makes shadow rounds land late on
//! purpose, and `sync.max_staleness` bounds how far a trainer runs ahead of
//! its newest average, for the per-process hub and per-trainer loops alike.

use shadowsync_actors::stats::TrainerStats;
use shadowsync_actors::sync::ShadowThreads;
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, run_to_the_end};
use std::time::Duration;

const STEPS: u64 = 60;

/// Two trainers of [`STEPS`] steps of 1 ms under `shadow-ma`, every round
/// landing 30 ms after its snapshot, bounded by `max_staleness`.
fn run(max_staleness: Option<u64>, threads: ShadowThreads) -> Vec<TrainerStats> {
    let _machine = exclusive();
    let mut ls = learners(2, Some(STEPS));
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_millis(1));
    let mut c = config("shadow-ma");
    c.sync.delay_ms = 30.0;
    c.sync.max_staleness = max_staleness;
    c.sync.shadow_threads = threads;
    run_to_the_end(c, ls).report.trainer_stats
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
