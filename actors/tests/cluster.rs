//! The runtime end to end with a learner that is not a CTR model: least squares
//! `y = w·x` on an endless (or bounded) stream of seeded random data.

use shadowsync_actors::events::Event;
use shadowsync_actors::sync::{
    GroupSchedule, LinkModel, RuleState, Rules, Schedule, Schedules, ShadowThreads, SyncRule,
};
use shadowsync_actors::Cluster;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, run_to_the_end, EventLog, LeastSquares};

#[test]
fn shadow_syncs_complete_while_steps_keep_increasing_and_stop_is_prompt() {
    let _serial = exclusive();
    let c = config("shadow-ma");
    let log = EventLog::of(&c.events);
    let cluster = Cluster::start(c, learners(4, None)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let early = cluster.stats();
    std::thread::sleep(Duration::from_millis(300));
    let late = cluster.stats();
    for (a, b) in early.iter().zip(&late) {
        assert!(b.steps > a.steps, "trainer {} stopped stepping", a.trainer);
        assert!(b.syncs > a.syncs, "trainer {} stopped syncing", a.trainer);
    }
    let start = Instant::now();
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        start.elapsed()
    );
    assert!(
        outcome.report.errors.is_empty(),
        "{:?}",
        outcome.report.errors
    );
    assert_eq!(outcome.learners.len(), 4);
    assert!(outcome.report.bytes_sent > 0);
    let events = log.finish();
    assert!(events.iter().any(|e| matches!(e, Event::Synced { .. })));
}

#[test]
fn control_messages_pause_resume_and_set_the_learning_rate() {
    let _serial = exclusive();
    let cluster = Cluster::start(config("none"), learners(2, None)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    cluster.pause();
    std::thread::sleep(Duration::from_millis(100)); // at most one chunk after the pause
    let paused = cluster.stats();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(
        cluster.stats().iter().map(|s| s.steps).collect::<Vec<_>>(),
        paused.iter().map(|s| s.steps).collect::<Vec<_>>()
    );
    cluster.set_learning_rate(0.0);
    cluster.resume();
    std::thread::sleep(Duration::from_millis(100));
    assert!(cluster.stats()[0].steps > paused[0].steps);
    cluster.stop();
    let outcome = cluster.wait().unwrap();
    assert!(outcome.learners.iter().all(|l| l.lr == 0.0));
}

#[test]
fn every_algorithm_trains_to_the_truth_and_pulls_replicas_together() {
    let _serial = exclusive();
    let algorithms = [
        "none",
        "sync-sgd",
        "fr-ma:4",
        "fr-easgd:4",
        "fr-bmuf:4",
        "shadow-ma",
        "shadow-easgd",
        "shadow-bmuf",
    ];
    // Shadow rounds on the hub (the default), and on a thread per trainer.
    let runs = algorithms
        .into_iter()
        .map(|name| (name, ShadowThreads::PerProcess))
        .chain(
            ["shadow-ma", "shadow-easgd", "shadow-bmuf"]
                .map(|name| (name, ShadowThreads::PerTrainer)),
        );
    for (name, threads) in runs {
        let mut c = config(name);
        c.sync.group_size = 2;
        c.sync.schedule = Schedule::Random;
        if let Some(loops) = c.sync.algorithm.loops_mut() {
            loops.threads = threads;
            // Shadow rounds span blocks of ~10 local steps, as BMUF's block
            // momentum assumes (unpaced rounds would apply it to blocks of
            // 0–1 steps).
            loops.min_interval_ms = 2.0;
        }
        let mut ls = learners(4, Some(400));
        ls.iter_mut()
            .for_each(|l| l.step_delay = Duration::from_micros(200));
        let cluster = Cluster::start(c, ls).unwrap();
        let outcome = cluster.wait().unwrap();
        assert!(
            outcome.report.errors.is_empty(),
            "{name} ({threads:?}): {:?}",
            outcome.report.errors
        );
        // sync-sgd in pairs: a trainer a round behind the first to finish
        // ends with it, its last batch not applied.
        let dropped = if name == "sync-sgd" { 4 * 4 * 64 } else { 0 };
        let examples = outcome.report.examples;
        assert!(
            (4 * 400 * 64 - dropped..=4 * 400 * 64).contains(&examples),
            "{name} ({threads:?}): {examples}"
        );
        let replicas: Vec<Vec<f32>> = outcome
            .learners
            .iter()
            .map(|l| {
                let mut v = vec![0.0; l.params.numel()];
                l.params.copy_to(&mut v).unwrap();
                v
            })
            .collect();
        for (i, r) in replicas.iter().enumerate() {
            let loss = outcome.learners[i].loss_of(r);
            // From ~10 at the start: a 100× reduction, whatever the sync timing
            // (block momentum applied at every unpaced shadow round overshoots a little).
            assert!(
                loss < 0.1,
                "{name} ({threads:?}): trainer {i} is {loss} from the truth"
            );
        }
        let stats = &outcome.report.trainer_stats;
        if name != "none" {
            assert!(
                stats.iter().all(|s| s.syncs > 0),
                "{name} ({threads:?}): {stats:?}"
            );
        }
        if name.starts_with("fr-") {
            assert!(
                stats
                    .iter()
                    .all(|s| s.mean_sync_gap == 4.0 && s.max_staleness == 0),
                "{name} ({threads:?}): {stats:?}"
            );
        }
        if name.ends_with("easgd") {
            assert!(outcome.center.is_some(), "{name}");
        }
        // Every step against the centre sends the replica (4 bytes a value)
        // and gets the target back, counted both ways as a group round's
        // two phases are.
        let bytes = outcome.report.bytes_sent;
        match name {
            "none" => assert_eq!(bytes, 0),
            _ if name.ends_with("easgd") => {
                let syncs: u64 = stats.iter().map(|s| s.syncs).sum();
                let replica = 4 * replicas[0].len() as u64;
                assert!(
                    bytes >= 2 * syncs * replica,
                    "{name} ({threads:?}): {bytes}"
                );
            }
            _ => assert!(bytes > 0, "{name} ({threads:?})"),
        }
    }
}

#[test]
fn sync_sgd_applies_each_shared_row_once_with_the_groups_mean() {
    let _serial = exclusive();
    let mut config = config("sync-sgd");
    config.sync.group_size = 2;
    config.sync.schedule = Schedule::Random;
    let cluster = Cluster::start(config, learners(4, Some(30))).unwrap();
    let outcome = cluster.wait().unwrap();
    // Learner i's gradient is 1 + i on rows 0..4. Every step each pair
    // {i, j} applies rows 0..4 once between them (two each), each with the
    // pair's mean. The first trainer to finish ends the foreground rounds: a
    // trainer still exchanging then ends too, its last batch not applied (a
    // step of its own would be no step of the m×-batch trainer).
    for learner in &outcome.learners {
        let steps = &learner.shared_applied;
        assert!(steps.iter().all(|s| s.ids.len() == 2), "{steps:?}");
    }
    let applied_steps: Vec<usize> = outcome
        .learners
        .iter()
        .map(|l| l.shared_applied.len())
        .collect();
    let together = *applied_steps.iter().min().unwrap();
    assert!(together >= 25, "only {applied_steps:?} steps of 30 applied");
    let examples = applied_steps.iter().sum::<usize>() as u64 * 64;
    assert_eq!(outcome.report.examples, examples);
    let mut applied: Vec<(u64, f32)> = Vec::new();
    for learner in &outcome.learners {
        for step in &learner.shared_applied[..together] {
            applied.extend(step.ids.iter().copied().zip(step.values.iter().copied()));
        }
    }
    for row in 0..4 {
        let means: Vec<f32> = applied
            .iter()
            .filter(|(id, _)| *id == row)
            .map(|a| a.1)
            .collect();
        // Once per pair and step.
        assert_eq!(means.len(), 2 * together, "row {row}");
        // Pairs of {1, 2, 3, 4}: means of two of them, and over every step
        // the two pairs' means add up to (1 + 2 + 3 + 4) / 2.
        assert!(
            means
                .iter()
                .all(|&m| (1.5..=3.5).contains(&m) && (2.0 * m).fract() == 0.0),
            "{means:?}"
        );
        let total = means.iter().sum::<f32>();
        assert!((total - 5.0 * together as f32).abs() < 1e-3, "{means:?}");
    }
    // No other algorithm touches shared gradients.
    let cluster = Cluster::start(self::config("fr-ma:1"), learners(2, Some(10))).unwrap();
    let outcome = cluster.wait().unwrap();
    assert!(outcome.learners.iter().all(|l| l.shared_applied.is_empty()));
}

/// A trainer with more data than the others ends with them under sync-sgd
/// (as DDP's `drop_last`): it never takes a step alone.
#[test]
fn sync_sgd_trainers_end_together_when_one_runs_out_of_data() {
    let _serial = exclusive();
    let mut ls = learners(2, Some(20));
    ls[1].steps_left = Some(30);
    let outcome = run_to_the_end(config("sync-sgd"), ls);
    assert_eq!(outcome.report.examples, 2 * 20 * 64);
    for learner in &outcome.learners {
        assert_eq!(learner.shared_applied.len(), 20);
        assert!(learner.shared_applied.iter().all(|s| s.ids.len() == 2));
    }
}

/// Under `none` and a foreground rule, a trainer that runs out of data first
/// ends the syncing, not the cluster: `stopped()` stays false (a CTR session
/// halted its data on it, and the others lost the batches still queued), and
/// the others train to the end of theirs.
#[test]
fn a_trainer_that_finishes_first_leaves_the_cluster_running() {
    let _serial = exclusive();
    for algorithm in ["none", "fr-ma:2"] {
        let mut ls = learners(2, Some(200));
        ls[0].steps_left = Some(5);
        ls[1].step_delay = Duration::from_millis(2);
        let cluster = Cluster::start(config(algorithm), ls).unwrap();
        let started = Instant::now();
        while !cluster.stats()[0].finished {
            assert!(started.elapsed() < Duration::from_secs(30), "{algorithm}");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !cluster.stats()[1].finished,
            "{algorithm}: the slow one ended too"
        );
        assert!(
            !cluster.stopped(),
            "{algorithm}: one trainer's end stopped the cluster"
        );
        let outcome = cluster.wait().unwrap();
        assert_eq!(outcome.report.examples, (5 + 200) * 64, "{algorithm}");
    }
}

#[test]
fn hogwild_workers_step_one_replica_that_the_shadow_loop_syncs() {
    let _serial = exclusive();
    let steps = 300;
    let mut learners = Vec::new();
    for trainer in 0..2 {
        let owner = LeastSquares::new(10 * trainer, Some(steps));
        let worker = LeastSquares::worker_of(&owner, 10 * trainer + 1, Some(steps));
        learners.extend([owner, worker]);
    }
    let mut config = config("shadow-ma");
    config.workers = 2;
    config.sync.algorithm.loops_mut().unwrap().min_interval_ms = 2.0;
    let log = EventLog::of(&config.events);
    let cluster = Cluster::start(config, learners).unwrap();
    let outcome = cluster.wait().unwrap();
    assert!(
        outcome.report.errors.is_empty(),
        "{:?}",
        outcome.report.errors
    );
    assert_eq!(outcome.learners.len(), 4);
    let stats = &outcome.report.trainer_stats;
    assert_eq!(stats.len(), 2);
    assert!(
        stats
            .iter()
            .all(|s| s.steps == 2 * steps && s.syncs > 0 && s.finished),
        "{stats:?}"
    );
    let finished = log
        .finish()
        .iter()
        .filter(|e| matches!(e, Event::TrainerFinished { .. }))
        .count();
    assert_eq!(finished, 2, "one event per trainer, not per worker");
    let [a, b, c, d] = &outcome.learners[..] else {
        unreachable!()
    };
    assert!(b.params.shares_values_with(&a.params) && d.params.shares_values_with(&c.params));
    assert!(!c.params.shares_values_with(&a.params));
    let mut values = vec![0f32; a.params.numel()];
    a.params.copy_to(&mut values).unwrap();
    assert!(a.loss_of(&values) < 1e-2, "{}", a.loss_of(&values));
}

#[test]
fn hogwild_workers_are_refused_where_they_cannot_work() {
    let _serial = exclusive();
    let owner = LeastSquares::new(0, Some(5));
    let worker = LeastSquares::worker_of(&owner, 1, Some(5));
    let mut foreground = config("fr-ma:1");
    foreground.workers = 2;
    let e = Cluster::start(foreground, vec![owner, worker])
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("workers") && e.to_string().contains("fr-ma:1"),
        "{e}"
    );
    let mut shadow = config("shadow-ma");
    shadow.workers = 2;
    let e = Cluster::start(shadow, learners(2, Some(5))).err().unwrap();
    assert!(e.to_string().contains("share"), "{e}");
}

#[test]
fn with_a_slow_link_shadow_sync_keeps_the_trainers_throughput() {
    let _serial = exclusive();
    let link = LinkModel {
        latency_us: 20_000.0,
        bandwidth_gbps: 1.0,
        ..LinkModel::default()
    };
    let run = |name: &str, steps: u64| {
        let mut c = config(name);
        c.sync.link = link;
        // Trainers paced at ~1 ms a step, so the figure is stable on a busy machine.
        let mut ls = learners(2, Some(steps));
        ls.iter_mut()
            .for_each(|l| l.step_delay = Duration::from_millis(1));
        let cluster = Cluster::start(c, ls).unwrap();
        cluster.wait().unwrap().report
    };
    // Best of two runs each: a busy machine only ever slows a run down.
    let best = |name: &str| {
        let (a, b) = (run(name, 800), run(name, 800));
        if a.examples_per_sec >= b.examples_per_sec {
            a
        } else {
            b
        }
    };
    let none = best("none");
    let shadow = best("shadow-ma");
    let foreground = run("fr-ma:1", 40);
    // A trainer that waited on the link would step every 20 ms, at 1/20 of
    // `none`'s rate, as the foreground one does; one that does not keeps
    // about all of it (E1's shadow cost measures how much, apart: a bound
    // near 1 here only measured how busy the machine was). The bounds sit
    // halfway, far from both.
    let ratio = shadow.examples_per_sec / none.examples_per_sec;
    assert!(
        ratio > 0.5,
        "shadow-ma keeps only {ratio:.2} of none's examples/s"
    );
    assert!(shadow.trainer_stats.iter().all(|s| s.syncs > 0));
    assert!(foreground.examples_per_sec < 0.5 * none.examples_per_sec);
}

/// Pairs that shift by one trainer every round: `{r, r+1}, {r+2, r+3}, …` (mod n).
#[derive(Debug)]
struct ShiftingPairs {
    trainers: usize,
}

impl GroupSchedule for ShiftingPairs {
    fn trainers(&self) -> usize {
        self.trainers
    }

    fn group_size(&self) -> usize {
        2
    }

    fn groups(&self, round: u64) -> Vec<Vec<usize>> {
        let n = self.trainers;
        let order: Vec<usize> = (0..n).map(|i| (i + round as usize) % n).collect();
        order
            .chunks(2)
            .map(|pair| {
                let mut group = pair.to_vec();
                group.sort_unstable();
                group
            })
            .collect()
    }
}

/// A rule with memory: the group mean, then a step `momentum` further along
/// the way the mean moved since the last round (the state it checkpoints).
#[derive(Debug)]
struct MeanWithMomentum {
    last: Vec<f32>,
}

impl SyncRule for MeanWithMomentum {
    fn target<'a>(
        &mut self,
        offset: usize,
        combined: &'a [f32],
        scratch: &'a mut [f32],
    ) -> &'a [f32] {
        let last = &mut self.last[offset..offset + combined.len()];
        for ((c, last), t) in combined.iter().zip(last).zip(scratch.iter_mut()) {
            *t = c + 0.1 * (c - *last);
            *last = *c;
        }
        scratch
    }

    fn state(&self) -> RuleState {
        RuleState {
            arrays: vec![("last".into(), self.last.clone())],
        }
    }

    fn restore(&mut self, saved: &RuleState) -> shadowsync_actors::Result<()> {
        self.last = saved.array("last", self.last.len())?.to_vec();
        Ok(())
    }
}

#[test]
fn a_schedule_and_a_rule_of_ones_own_run_like_built_in_ones() {
    let _serial = exclusive();
    let mut c = config("fr-momentum:2");
    c.schedules = Schedules::default().with("shifting-pairs", |context| {
        Ok(Arc::new(ShiftingPairs {
            trainers: context.trainers,
        }))
    });
    c.sync.schedule = "shifting-pairs".parse().unwrap();
    c.rules = Rules::default().with("momentum", |context| {
        Ok(Box::new(MeanWithMomentum {
            last: context.initial.to_vec(),
        }))
    });
    let log = EventLog::of(&c.events);
    let outcome = run_to_the_end(c, learners(4, Some(200)));
    assert_eq!(outcome.report.algorithm.to_string(), "fr-momentum:2");
    for (i, learner) in outcome.learners.iter().enumerate() {
        let loss = learner.loss_of(&learner.dense());
        assert!(loss < 0.1, "trainer {i} is {loss} from the truth");
        let stats = &outcome.report.trainer_stats[i];
        assert!(stats.syncs > 0 && stats.mean_sync_gap == 2.0, "{stats:?}");
    }
    // Every peer's rule memory comes back with the outcome (to checkpoint).
    assert!(outcome.peers.iter().all(|p| p.rule.arrays[0].0 == "last"));
    let schedule = ShiftingPairs { trainers: 4 };
    for event in log.finish() {
        if let Event::Regrouped { round, groups } = event {
            assert_eq!(groups, schedule.groups(round), "round {round}");
        }
    }
}

#[test]
fn an_unknown_rule_or_a_schedule_that_is_no_partition_is_refused() {
    let _serial = exclusive();
    let e = Cluster::start(config("shadow-gossip"), learners(2, Some(5)))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("sync.algorithm") && e.contains("\"gossip\""),
        "{e}"
    );
    /// Trainer 0 in both groups of round 3.
    #[derive(Debug)]
    struct Overlapping;
    impl GroupSchedule for Overlapping {
        fn trainers(&self) -> usize {
            4
        }
        fn group_size(&self) -> usize {
            2
        }
        fn groups(&self, round: u64) -> Vec<Vec<usize>> {
            match round {
                3 => vec![vec![0, 1], vec![0, 2]],
                _ => vec![vec![0, 1], vec![2, 3]],
            }
        }
    }
    let mut c = config("shadow-ma");
    c.schedules = Schedules::default().with("overlapping", |_| Ok(Arc::new(Overlapping)));
    c.sync.schedule = "overlapping".parse().unwrap();
    let e = Cluster::start(c.clone(), learners(4, Some(5)))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("sync.schedule") && e.contains("round 3"), "{e}");
    c.sync.schedule = "overlaping".parse().unwrap();
    let e = Cluster::start(c, learners(4, Some(5)))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("unknown schedule \"overlaping\""), "{e}");
}
