//! Fault containment: faults injected into one trainer of four (errors, panics,
//! a diverging replica, a hang, a learner that keeps failing) never stop the
//! others, never reach their replicas, and are reported.

use shadowsync_actors::events::{Event, EventBus};
use shadowsync_actors::faults::{Fault, FaultKind};
use shadowsync_actors::sync::{Rule, ShadowThreads};
use shadowsync_actors::{Cluster, ClusterConfig, ClusterOutcome, Error};
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, EventLog, LeastSquares};
use std::time::{Duration, Instant};

fn with_faults(algorithm: &str, faults: Vec<Fault>) -> ClusterConfig {
    let mut c = config(algorithm);
    if let Some(loops) = c.sync.algorithm.loops_mut() {
        loops.min_interval_ms = 2.0;
    }
    c.faults = faults;
    c
}

fn fault(trainer: usize, kind: FaultKind, at_step: u64, every: u64) -> Fault {
    Fault {
        trainer,
        kind,
        at_step,
        every,
    }
}

/// Four trainers of 400 steps, 0.2 ms each.
fn paced() -> Vec<LeastSquares> {
    let mut ls = learners(4, Some(400));
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_micros(200));
    ls
}

/// Runs `learners` under `c` to their end: the outcome and every event.
fn run_logged(
    c: ClusterConfig,
    learners: Vec<LeastSquares>,
) -> (ClusterOutcome<LeastSquares>, Vec<Event>) {
    let log = EventLog::of(&c.events);
    let outcome = Cluster::start(c, learners).unwrap().wait().unwrap();
    (outcome, log.finish())
}

/// Four endless trainers (0.5 ms a step) under `algorithm` with `faults`,
/// whose groups wait 200 ms at most for a member.
fn with_quick_timeouts(
    algorithm: &str,
    faults: Vec<Fault>,
    events: &EventBus,
    threads: ShadowThreads,
) -> Cluster<LeastSquares> {
    let mut c = with_faults(algorithm, faults);
    if let Some(loops) = c.sync.algorithm.loops_mut() {
        loops.threads = threads;
    }
    c.events = events.clone();
    c.sync.peer_timeout_ms = 200.0;
    let mut ls = learners(4, None);
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_micros(500));
    Cluster::start(c, ls).unwrap()
}

/// Recoveries per trainer as the event stream reported them.
fn recoveries_reported(events: &[Event], n: usize) -> Vec<u64> {
    let mut counts = vec![0; n];
    for event in events {
        if let Event::TrainerRecovered { trainer, .. } = event {
            counts[*trainer] += 1;
        }
    }
    counts
}

/// Checks that trainer 2's divergence reached no one else: only it recovered,
/// every replica (and EASGD's centre) is finite and near the truth. Returns the
/// recoveries per trainer.
fn assert_only_trainer_2_harmed(
    algorithm: &str,
    outcome: &ClusterOutcome<LeastSquares>,
) -> Vec<u64> {
    let recoveries: Vec<u64> = outcome
        .report
        .trainer_stats
        .iter()
        .map(|s| s.recoveries)
        .collect();
    // A replica that took in a non-finite average would have diverged too (and
    // recovered).
    assert_eq!(
        (recoveries[0], recoveries[1], recoveries[3]),
        (0, 0, 0),
        "{algorithm}: {recoveries:?}"
    );
    for (i, learner) in outcome.learners.iter().enumerate() {
        let dense = learner.dense();
        assert!(
            dense.iter().all(|x| x.is_finite()),
            "{algorithm}: trainer {i}"
        );
        let loss = learner.loss_of(&dense);
        assert!(
            loss < 0.2,
            "{algorithm}: trainer {i} is {loss} from the truth"
        );
    }
    if let Some(center) = &outcome.center {
        assert!(center.iter().all(|x| x.is_finite()), "{algorithm}: centre");
    }
    recoveries
}

#[test]
fn repeated_errors_and_panics_in_one_trainer_are_contained() {
    let _serial = exclusive();
    for algorithm in ["none", "sync-sgd", "fr-ma:5", "shadow-ma", "shadow-easgd"] {
        let faults = vec![
            fault(1, FaultKind::Error, 20, 30),
            fault(1, FaultKind::Panic, 35, 60),
        ];
        let (outcome, events) = run_logged(with_faults(algorithm, faults), paced());
        let report = &outcome.report;
        assert!(report.errors.is_empty(), "{algorithm}: {:?}", report.errors);
        // Every example trained: an injected failure strikes before the batch is read.
        assert_eq!(report.examples, 4 * 400 * 64, "{algorithm}");
        // Faults count attempts (400 steps + 21 failed attempts): errors at
        // 20, 50, ..., 410 (14) and panics at 35, 95, ..., 395 (7).
        let recoveries: Vec<u64> = report.trainer_stats.iter().map(|s| s.recoveries).collect();
        assert_eq!(recoveries, vec![0, 21, 0, 0], "{algorithm}");
        assert_eq!(recoveries_reported(&events, 4), recoveries, "{algorithm}");
        for (i, learner) in outcome.learners.iter().enumerate() {
            let loss = learner.loss_of(&learner.dense());
            assert!(
                loss < 0.2,
                "{algorithm}: trainer {i} is {loss} from the truth"
            );
        }
    }
}

#[test]
fn a_diverged_replica_is_never_averaged_into_the_others() {
    let _serial = exclusive();
    for algorithm in [
        "none",
        "fr-ma:5",
        "fr-bmuf:5",
        "shadow-ma",
        "shadow-easgd",
        "shadow-bmuf",
    ] {
        // An infinite learning rate on trainer 2 at steps 50, 150, 250, 350.
        let faults = vec![fault(2, FaultKind::Diverge, 50, 100)];
        let cluster = Cluster::start(with_faults(algorithm, faults), paced()).unwrap();
        let outcome = cluster.wait().unwrap();
        let report = &outcome.report;
        assert!(report.errors.is_empty(), "{algorithm}: {:?}", report.errors);
        // Four divergences: its shadow loop may overwrite one with the group's
        // average before the trainer's own check sees it, and a write-back
        // racing a reload may leave NaN for one more recovery.
        let recoveries = assert_only_trainer_2_harmed(algorithm, &outcome);
        assert!(
            (1..=8).contains(&recoveries[2]),
            "{algorithm}: {recoveries:?}"
        );
    }
}

#[test]
fn a_replica_that_stays_diverged_sits_out_its_groups_averages() {
    let _serial = exclusive();
    for algorithm in ["shadow-ma", "shadow-easgd", "shadow-bmuf"] {
        let mut ls = learners(4, None);
        ls.iter_mut()
            .for_each(|l| l.step_delay = Duration::from_micros(200));
        // NaN for 1.5 s from its step 100, longer than a shadow loop waits for
        // steps: it snapshots NaN.
        ls[2].poison_at = Some(100);
        ls[2].poison_hold = Duration::from_millis(1500);
        let c = with_faults(algorithm, Vec::new());
        let log = EventLog::of(&c.events);
        let cluster = Cluster::start(c, ls).unwrap();
        // Trainer 2 comes back, then all four train together for 300 of its
        // steps, so that the replicas are judged after training, not while a
        // trainer that restarted from its recovery point is still pulling
        // finished ones back (BMUF's block momentum overshoots then: with
        // 400 steps each the others used to finish during the hold).
        let deadline = Instant::now() + Duration::from_secs(60);
        while cluster.stats()[2].steps < 400 {
            assert!(Instant::now() < deadline, "{algorithm}: trainer 2 stuck");
            std::thread::sleep(Duration::from_millis(10));
        }
        cluster.stop();
        let outcome = cluster.wait().unwrap();
        let events = log.finish();
        let report = &outcome.report;
        assert!(report.errors.is_empty(), "{algorithm}: {:?}", report.errors);
        let abstentions: Vec<u64> = report.trainer_stats.iter().map(|s| s.abstentions).collect();
        assert!(abstentions[2] >= 1, "{algorithm}: {abstentions:?}");
        assert_eq!(
            abstentions.iter().sum::<u64>(),
            abstentions[2],
            "{algorithm}"
        );
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Abstained { trainer: 2, .. })),
            "{algorithm}: not reported"
        );
        assert_only_trainer_2_harmed(algorithm, &outcome);
    }
}

#[test]
fn a_hung_trainer_does_not_stall_its_groups_syncs() {
    let _serial = exclusive();
    let hang = Duration::from_millis(3000);
    let faults = vec![fault(
        3,
        FaultKind::Hang {
            ms: hang.as_millis() as u64,
        },
        30,
        0,
    )];
    let mut ls = learners(4, None);
    ls.iter_mut()
        .for_each(|l| l.step_delay = Duration::from_micros(500));
    let cluster = Cluster::start(with_faults("shadow-ma", faults), ls).unwrap();
    // Trainer 3 hangs from its step 30 (a few ms in) for 3 s.
    std::thread::sleep(Duration::from_millis(500));
    let before = cluster.stats();
    std::thread::sleep(Duration::from_millis(2000));
    let after = cluster.stats();
    assert_eq!(before[3].steps, 30, "trainer 3 should be hung at step 30");
    assert_eq!(after[3].steps, 30, "trainer 3 should still be hung");
    for trainer in 0..3 {
        assert!(
            after[trainer].steps > before[trainer].steps,
            "trainer {trainer} stopped stepping"
        );
        // Its group's rounds go on, each waiting a second at most for the hung
        // trainer's shadow loop.
        assert!(
            after[trainer].syncs > before[trainer].syncs,
            "trainer {trainer} stopped syncing: {} then {}",
            before[trainer].syncs,
            after[trainer].syncs
        );
    }
    let asked = Instant::now();
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    // Stopping waits for the hang to end at most.
    assert!(asked.elapsed() < hang, "stop took {:?}", asked.elapsed());
    assert!(
        outcome.report.errors.is_empty(),
        "{:?}",
        outcome.report.errors
    );
}

#[test]
fn a_hung_member_of_foreground_rounds_is_timed_out_left_out_and_taken_back() {
    let _serial = exclusive();
    for algorithm in ["fr-ma:5", "sync-sgd"] {
        let faults = vec![fault(3, FaultKind::Hang { ms: 2500 }, 30, 0)];
        let bus = EventBus::default();
        let events = bus.subscribe();
        let cluster = with_quick_timeouts(algorithm, faults, &bus, ShadowThreads::PerProcess);
        // Trainer 3 hangs at its step 30 for 2.5 s; without a timeout the others
        // would wait for it at their next round, a few steps later.
        let deadline = Instant::now() + Duration::from_secs(10);
        while cluster.stats()[3].steps < 30 {
            assert!(
                Instant::now() < deadline,
                "{algorithm}: trainer 3 never got to step 30"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let before = cluster.stats();
        std::thread::sleep(Duration::from_millis(1000));
        let after = cluster.stats();
        assert_eq!(after[3].steps, 30, "{algorithm}: trainer 3 should be hung");
        for trainer in 0..3 {
            assert!(
                after[trainer].steps > before[trainer].steps + 10
                    && after[trainer].syncs > before[trainer].syncs + 2,
                "{algorithm}: trainer {trainer} waits for the hung one: {:?} then {:?}",
                before[trainer],
                after[trainer]
            );
        }
        // Once it answers again it is back in the groups, and syncs again.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut timed_out, mut rejoined) = (false, false);
        while !rejoined && Instant::now() < deadline {
            for event in events.try_iter() {
                match event {
                    Event::PeerTimedOut { trainer: 3, .. } => timed_out = true,
                    Event::PeerRejoined { trainer: 3, .. } => rejoined = true,
                    Event::PeerTimedOut { trainer, .. } | Event::PeerRejoined { trainer, .. } => {
                        panic!("{algorithm}: trainer {trainer} was timed out")
                    }
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(timed_out && rejoined, "{algorithm}: {timed_out} {rejoined}");
        let back = cluster.stats()[3].syncs;
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            cluster.stats()[3].syncs > back,
            "{algorithm}: trainer 3 no longer syncs"
        );
        cluster.stop();
        let outcome = cluster.wait().unwrap();
        assert!(
            outcome.report.errors.is_empty(),
            "{:?}",
            outcome.report.errors
        );
        assert_only_trainer_2_harmed(algorithm, &outcome);
    }
}

#[test]
fn a_failing_or_hung_shadow_sync_loop_is_contained() {
    let _serial = exclusive();
    for threads in [ShadowThreads::PerProcess, ShadowThreads::PerTrainer] {
        a_failing_or_hung_shadow_sync_loop_is_contained_with(threads);
    }
}

/// What the events of a run with failing and hung sync loops told.
#[derive(Debug, Default)]
struct SyncFaultsSeen {
    panics: usize,
    timed_out: [bool; 4],
    rejoined: [bool; 4],
}

impl SyncFaultsSeen {
    fn take(&mut self, event: Event, threads: ShadowThreads) {
        match event {
            Event::SyncRecovered { trainer, cause, .. } => {
                assert_eq!(trainer, 1, "{threads:?}: {cause}");
                assert!(cause.contains("injected sync panic"), "{cause}");
                self.panics += 1;
            }
            Event::PeerTimedOut { trainer, .. } => self.timed_out[trainer] = true,
            Event::PeerRejoined { trainer, .. } => self.rejoined[trainer] = true,
            _ => {}
        }
    }
}

fn a_failing_or_hung_shadow_sync_loop_is_contained_with(threads: ShadowThreads) {
    let faults = vec![
        fault(1, FaultKind::SyncPanic, 5, 20),
        fault(2, FaultKind::SyncHang { ms: 1500 }, 10, 0),
    ];
    let bus = EventBus::default();
    let events = bus.subscribe();
    let cluster = with_quick_timeouts("shadow-ma", faults, &bus, threads);
    let mut seen = SyncFaultsSeen::default();
    // Waits for the faults to play out, however slowly this machine runs the
    // rounds: rounds 5 and 25 of trainer 1's loop panic (it goes on each
    // time), trainer 2's loop hangs 1.5 s at its round 10, is timed out of
    // its group and is back once it asks again.
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.panics < 2 || !seen.rejoined[2] {
        assert!(Instant::now() < deadline, "{threads:?}: {seen:?}");
        if let Ok(event) = events.recv_timeout(Duration::from_millis(20)) {
            seen.take(event, threads);
        }
    }
    // Every loop syncs on after the faults.
    let before = cluster.stats();
    while (0..4).any(|t| cluster.stats()[t].syncs <= before[t].syncs) {
        assert!(
            Instant::now() < deadline,
            "{threads:?}: a trainer no longer syncs: {before:?} then {:?}",
            cluster.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    events.try_iter().for_each(|e| seen.take(e, threads));
    assert!(
        outcome.report.errors.is_empty(),
        "{threads:?}: {:?}",
        outcome.report.errors
    );
    assert!(seen.timed_out[2], "{threads:?}: {seen:?}");
    // Only the hung loop was left out: the hang held no one else back.
    assert!(
        !seen.timed_out[0] && !seen.timed_out[3],
        "{threads:?}: {seen:?}"
    );
    assert_only_trainer_2_harmed("shadow-ma", &outcome);
}

#[test]
fn a_trainer_that_keeps_failing_is_given_up_without_stalling_the_others() {
    let _serial = exclusive();
    for algorithm in ["shadow-ma", "none"] {
        let mut ls = learners(4, Some(300));
        ls[1].broken_after = Some(50);
        let (outcome, events) = run_logged(config(algorithm), ls);
        let report = &outcome.report;
        assert_eq!(report.errors.len(), 1, "{algorithm}: {:?}", report.errors);
        assert!(
            report.errors[0].contains("trainer 1 failed 5 steps in a row")
                && report.errors[0].contains("this learner is broken"),
            "{algorithm}: {}",
            report.errors[0]
        );
        let steps: Vec<u64> = report.trainer_stats.iter().map(|s| s.steps).collect();
        assert_eq!(steps, vec![300, 50, 300, 300], "{algorithm}");
        assert_eq!(report.trainer_stats[1].recoveries, 4, "{algorithm}");
        // The event keeps the error typed: a subscriber can match on it.
        assert!(
            events.iter().any(|e| matches!(
                e,
                Event::TrainerFailed { trainer: 1, error }
                    if matches!(**error, Error::Faulty { trainer: 1, faults: 5, .. })
            )),
            "{algorithm}: no failure event"
        );
    }
}

#[test]
fn a_coordinator_or_server_shard_failing_on_requests_is_contained() {
    let _serial = exclusive();
    // The shadow hub asks the coordinator for a group once, for its first
    // idle member (trainer 0): the fault is put on the trainer that asks.
    let coordinator = (FaultKind::CoordinatorPanic, "group coordinator");
    let server = (FaultKind::ServerPanic, "server shard");
    for (algorithm, threads, (kind, service), faulty) in [
        ("shadow-ma", ShadowThreads::PerProcess, coordinator, 0),
        ("shadow-ma", ShadowThreads::PerTrainer, coordinator, 1),
        ("fr-ma:5", ShadowThreads::PerProcess, coordinator, 1),
        ("shadow-easgd", ShadowThreads::PerProcess, server, 1),
        ("fr-easgd:5", ShadowThreads::PerProcess, server, 1),
    ] {
        // The faulty trainer's requests of its rounds 1, 3, 5, ... fail: two
        // failures by its third round, even when a busy machine leaves its
        // shadow loop few rounds in the run (with every fifth from the third,
        // a clean-clone CI run under load saw one).
        let mut c = with_faults(algorithm, vec![fault(faulty, kind, 1, 2)]);
        if let Some(Rule::Easgd(easgd)) = c.sync.algorithm.rule_mut() {
            easgd.server_shards = Some(2);
        }
        if let Some(loops) = c.sync.algorithm.loops_mut() {
            loops.threads = threads;
        }
        let algorithm = format!("{algorithm} ({threads:?})");
        // Steps of 1 ms: runs long enough for several rounds of every loop,
        // whose requests are all answered before the run ends.
        let mut learners = paced();
        learners
            .iter_mut()
            .for_each(|l| l.step_delay = Duration::from_millis(1));
        let (outcome, events) = run_logged(c, learners);
        let report = &outcome.report;
        assert!(report.errors.is_empty(), "{algorithm}: {:?}", report.errors);
        assert_eq!(report.examples, 4 * 400 * 64, "{algorithm}");
        let (mut failures, mut rounds_lost) = (0, 0);
        for event in events {
            match event {
                Event::ServiceRecovered { service: s, cause } => {
                    assert!(s.starts_with(service), "{algorithm}: {s}");
                    let asked = format!("trainer {faulty}");
                    assert!(cause.contains(&asked), "{algorithm}: {cause}");
                    failures += 1;
                }
                Event::SyncRecovered { trainer, .. } | Event::TrainerRecovered { trainer, .. } => {
                    assert_eq!(trainer, faulty, "{algorithm}");
                    rounds_lost += 1;
                }
                _ => {}
            }
        }
        assert!(failures >= 2, "{algorithm}: {failures} failures");
        if kind == FaultKind::CoordinatorPanic {
            // Asked again, the restored coordinator answered: no round lost.
            assert_eq!(rounds_lost, 0, "{algorithm}");
        } else {
            // Each of the two shards failed on the round, which was lost.
            assert_eq!(failures, 2 * rounds_lost, "{algorithm}");
        }
        for (i, (learner, stats)) in outcome
            .learners
            .iter()
            .zip(&report.trainer_stats)
            .enumerate()
        {
            assert!(stats.syncs > 0, "{algorithm}: trainer {i} never synced");
            let loss = learner.loss_of(&learner.dense());
            assert!(
                loss < 0.2,
                "{algorithm}: trainer {i} is {loss} from the truth"
            );
        }
        let center = outcome.center.unwrap_or_default();
        assert!(center.iter().all(|x| x.is_finite()), "{algorithm}");
    }
}
