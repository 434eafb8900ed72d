//! Elastic clusters: trainers join and leave while the cluster runs; the
//! groups follow from the next round, a joiner starts from the others' mean,
//! and what an elastic cluster cannot do is refused by name.

use shadowsync_actors::events::Event;
use shadowsync_actors::{Cluster, ClusterConfig, Error};
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, EventLog, LeastSquares};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A learner of `steps` steps of 1 ms each.
fn learner(seed: i64, steps: u64) -> LeastSquares {
    let mut learner = LeastSquares::new(seed, Some(steps));
    learner.step_delay = Duration::from_millis(1);
    learner
}

/// `config(algorithm)` with `capacity` seats.
fn elastic(algorithm: &str, capacity: usize) -> ClusterConfig {
    let mut config = config(algorithm);
    config.elastic_capacity = capacity;
    config
}

/// Waits until the trainers started have taken `steps` steps in all.
fn until_steps(cluster: &Cluster<LeastSquares>, steps: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.stats().iter().map(|s| s.steps).sum::<u64>() < steps {
        assert!(Instant::now() < deadline, "the trainers stopped stepping");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn config_key(error: Error) -> String {
    match error {
        Error::Config { key, .. } => key,
        other => panic!("not a config error: {other}"),
    }
}

#[test]
fn a_cluster_grows_to_four_and_shrinks_to_three_with_the_groups_following() {
    let _machine = exclusive();
    let c = elastic("shadow-ma", 4);
    let log = EventLog::of(&c.events);
    let cluster = Cluster::start(c, vec![learner(0, 600), learner(1, 600)]).unwrap();
    until_steps(&cluster, 200);
    let fresh = LeastSquares::new(7, None);
    let fresh_loss = fresh.loss_of(&fresh.dense());
    assert_eq!(cluster.add_trainer(learner(2, 300)).unwrap(), 2);
    // The joiner starts from the others' mean, not from its own start.
    let joined = cluster.replicas().unwrap()[2].clone();
    assert!(fresh.loss_of(&joined) < 0.1 * fresh_loss, "{fresh_loss}");
    assert_eq!(cluster.add_trainer(learner(3, 300)).unwrap(), 3);
    until_steps(&cluster, 500);
    cluster.remove_trainer(1).unwrap();
    assert_eq!(cluster.active_trainers(), vec![0, 2, 3]);
    let outcome = cluster.wait().unwrap();
    let events = log.finish();
    let report = &outcome.report;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!((report.trainers, report.departed.clone()), (4, vec![1]));
    assert_eq!(
        report.group_size, 3,
        "the last plan's groups, of every member"
    );
    assert_eq!(outcome.learners.len(), 4);
    let steps: Vec<u64> = report.trainer_stats.iter().map(|s| s.steps).collect();
    assert!(steps[1] < 600, "trainer 1 left early: {steps:?}");
    assert_eq!((steps[0], steps[2], steps[3]), (600, 300, 300));
    let round_of = |wanted: fn(&Event) -> Option<(usize, u64)>| -> Vec<(usize, u64)> {
        events.iter().filter_map(wanted).collect()
    };
    let joins = round_of(|e| match e {
        Event::TrainerJoined { trainer, round } => Some((*trainer, *round)),
        _ => None,
    });
    let left = round_of(|e| match e {
        Event::TrainerLeft { trainer, round } => Some((*trainer, *round)),
        _ => None,
    });
    assert_eq!(joins.iter().map(|j| j.0).collect::<Vec<_>>(), vec![2, 3]);
    let [(1, left_from)] = left[..] else {
        panic!("{left:?}")
    };
    // Every round's partition is of the members of that round.
    let mut regrouped = 0;
    for event in &events {
        let Event::Regrouped { round, groups } = event else {
            continue;
        };
        regrouped += 1;
        let members: BTreeSet<usize> = groups.iter().flatten().copied().collect();
        let mut expected: BTreeSet<usize> = [0, 1].into();
        expected.extend(joins.iter().filter(|j| j.1 <= *round).map(|j| j.0));
        if *round >= left_from {
            expected.remove(&1);
        }
        assert_eq!(members, expected, "round {round}");
    }
    assert!(regrouped > 0);
    // The joiners took part in rounds.
    for joiner in [2, 3] {
        let synced = events
            .iter()
            .filter(|e| matches!(e, Event::Synced { trainer, .. } if *trainer == joiner))
            .count();
        assert!(synced > 0, "trainer {joiner} never synced");
    }
    let model = outcome.model().unwrap();
    assert!(outcome.learners[0].loss_of(&model) < 0.01 * fresh_loss);
}

#[test]
fn without_sync_trainers_join_and_leave_and_every_learner_comes_back() {
    let _machine = exclusive();
    let cluster = Cluster::start(elastic("none", 4), vec![learner(0, 200)]).unwrap();
    assert_eq!(cluster.add_trainer(learner(1, 100)).unwrap(), 1);
    // Two seats left: three joiners are refused, and nothing changes.
    let three = (2..5).map(|seed| learner(seed, 100)).collect();
    let refused = cluster.add_trainers(three).unwrap_err();
    assert_eq!(config_key(refused), "elastic_capacity");
    assert_eq!(cluster.active_trainers(), vec![0, 1]);
    let two = (2..4).map(|seed| learner(seed, 100)).collect();
    assert_eq!(cluster.add_trainers(two).unwrap(), vec![2, 3]);
    cluster.remove_trainer(0).unwrap();
    let outcome = cluster.wait().unwrap();
    let errors = &outcome.report.errors;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(outcome.learners.len(), 4);
    assert_eq!(outcome.report.departed, vec![0]);
    let steps: Vec<u64> = outcome
        .report
        .trainer_stats
        .iter()
        .map(|s| s.steps)
        .collect();
    assert_eq!(steps[1..], [100, 100, 100]);
}

#[test]
fn what_an_elastic_cluster_cannot_do_is_refused_by_name() {
    let _machine = exclusive();
    // A fixed cluster.
    let fixed = Cluster::start(config("shadow-ma"), learners(2, Some(2000))).unwrap();
    let refused = fixed.add_trainer(learner(2, 10)).unwrap_err();
    assert_eq!(config_key(refused), "elastic_capacity");
    assert_eq!(
        config_key(fixed.remove_trainer(0).unwrap_err()),
        "elastic_capacity"
    );
    fixed.stop();
    fixed.wait().unwrap();
    // Algorithms that cannot take a change.
    for algorithm in ["sync-sgd", "fr-ma:4", "shadow-easgd"] {
        let started = Cluster::start(elastic(algorithm, 3), learners(2, Some(10)));
        let key = config_key(started.err().unwrap_or_else(|| panic!("{algorithm}")));
        assert_eq!(key, "elastic_capacity", "{algorithm}");
    }
    // Fixed groups of 2 have no plan for 3 trainers: the add changes nothing.
    let mut c = elastic("shadow-ma", 3);
    c.sync.group_size = 2;
    c.sync.schedule = "fixed".parse().unwrap();
    let cluster = Cluster::start(c, learners(2, Some(2000))).unwrap();
    let refused = cluster.add_trainer(learner(2, 10)).unwrap_err();
    assert_eq!(config_key(refused), "sync.group_size");
    assert_eq!(cluster.active_trainers(), vec![0, 1]);
    // Not a trainer; the last one.
    assert_eq!(
        config_key(cluster.remove_trainer(5).unwrap_err()),
        "trainer"
    );
    cluster.stop();
    cluster.wait().unwrap();
    let lone = Cluster::start(elastic("shadow-ma", 1), learners(1, Some(2000))).unwrap();
    assert_eq!(config_key(lone.remove_trainer(0).unwrap_err()), "trainer");
    // Every seat taken.
    assert_eq!(
        config_key(lone.add_trainer(learner(1, 10)).unwrap_err()),
        "elastic_capacity"
    );
    lone.stop();
    lone.wait().unwrap();
    // A stopped cluster takes no trainer.
    let stopped = Cluster::start(elastic("shadow-ma", 2), learners(1, Some(2000))).unwrap();
    stopped.stop();
    let refused = stopped.add_trainer(learner(1, 10)).unwrap_err();
    assert!(matches!(refused, Error::Stopped(_)), "{refused}");
    stopped.wait().unwrap();
}
