//! Checkpoints of a running cluster: every trainer parks at the same step
//! count, under every kind of algorithm, and a cluster started from the state
//! goes on from it.

use shadowsync_actors::{Cluster, ClusterBuilder, ClusterState};
use shadowsync_testkit::exclusive;
use shadowsync_testkit::runtime::{config, learners, LeastSquares};
use std::time::{Duration, Instant};

const TRAINERS: usize = 4;
const STEPS: u64 = 200;

/// Runs `algorithm` to the end with a checkpoint every `every` steps; returns
/// the checkpoints taken.
fn checkpoints(algorithm: &str, every: u64) -> (Vec<ClusterState>, Cluster<LeastSquares>) {
    let mut c = config(algorithm);
    c.checkpoint_every = every;
    let cluster = Cluster::start(c, learners(TRAINERS, Some(STEPS))).unwrap();
    (run_to_end(&cluster, algorithm), cluster)
}

/// Checkpoints `cluster` whenever it parks until its trainers finish (within
/// a minute).
fn run_to_end(cluster: &Cluster<LeastSquares>, algorithm: &str) -> Vec<ClusterState> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut states = Vec::new();
    while !cluster.stats().iter().all(|s| s.finished) {
        assert!(
            Instant::now() < deadline,
            "{algorithm}: stuck at {:?}",
            cluster.stats()
        );
        if cluster.parked() {
            states.push(cluster.checkpoint(|| ()).unwrap().0);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    states
}

#[test]
fn every_algorithm_parks_all_trainers_at_the_same_step_and_goes_on() {
    let _serial = exclusive();
    for (algorithm, period) in [
        ("none", 25),
        ("shadow-ma", 25),
        ("shadow-easgd", 25),
        ("fr-ma:3", 27), // 25 rounded up to a multiple of 3
        ("fr-bmuf:5", 25),
        ("sync-sgd", 25),
    ] {
        let (states, cluster) = checkpoints(algorithm, 25);
        let outcome = cluster.wait().unwrap();
        assert!(
            outcome.report.errors.is_empty(),
            "{:?}",
            outcome.report.errors
        );
        assert_eq!(outcome.report.examples, TRAINERS as u64 * STEPS * 64);
        let expected: Vec<u64> = (1..)
            .map(|k| k * period)
            .take_while(|&s| s <= STEPS)
            .collect();
        let taken: Vec<u64> = states.iter().map(|s| s.trainers[0].steps).collect();
        assert_eq!(taken, expected, "{algorithm}");
        for state in &states {
            let steps = state.trainers[0].steps;
            assert!(
                state
                    .trainers
                    .iter()
                    .all(|t| t.steps == steps && t.examples == steps * 64),
                "{algorithm}: {:?}",
                state.trainers.iter().map(|t| t.steps).collect::<Vec<_>>()
            );
            // Each learner's own record of its position agrees.
            assert!(state
                .learners
                .iter()
                .all(|l| l.as_ref().is_some_and(|l| l.position == steps)));
            assert_eq!(state.center.is_some(), algorithm.contains("easgd"));
            let rounds: Vec<u64> = state.trainers.iter().map(|t| t.sync.round).collect();
            match algorithm {
                "none" => assert_eq!(rounds, [0; TRAINERS]),
                "fr-bmuf:5" => assert_eq!(rounds, [steps / 5; TRAINERS]),
                "fr-ma:3" => assert_eq!(rounds, [steps / 3; TRAINERS]),
                "sync-sgd" => assert_eq!(rounds, [steps; TRAINERS]),
                _ => {}
            }
            assert!(state
                .trainers
                .iter()
                .all(|t| t.sync.rule.arrays.is_empty() != algorithm.contains("bmuf")));
        }
    }
}

#[test]
fn sync_peers_go_on_from_their_saved_rounds_and_block_momentum() {
    let _serial = exclusive();
    let (states, cluster) = checkpoints("fr-bmuf:5", 50);
    cluster.wait().unwrap();
    let mut state = states[1].clone();
    for trainer in &mut state.trainers {
        assert_eq!((trainer.steps, trainer.sync.round), (100, 20));
        let arrays = &mut trainer.sync.rule.arrays;
        let (_, momentum) = arrays.iter_mut().find(|(n, _)| n == "momentum").unwrap();
        assert!(momentum.iter().any(|&m| m != 0.0));
        // A block momentum of 100 everywhere: the first round after resuming
        // carries every replica η·100 = 75 away (a fresh BMUF would not move it).
        momentum.fill(100.0);
    }
    let resumed = ClusterBuilder::new(config("fr-bmuf:5"), learners(TRAINERS, Some(5)))
        .resume_from(state.clone())
        .start()
        .unwrap();
    let outcome = resumed.wait().unwrap();
    assert!(
        outcome.report.errors.is_empty(),
        "{:?}",
        outcome.report.errors
    );
    assert!(
        outcome.peers.iter().all(|p| p.round == 21),
        "{:?}",
        outcome.peers.iter().map(|p| p.round).collect::<Vec<_>>()
    );
    for learner in &outcome.learners {
        let dense = learner.dense();
        assert!(dense.iter().all(|&w| w > 50.0), "{dense:?}");
    }
    // A state of another algorithm does not fit.
    let error = ClusterBuilder::new(config("fr-ma:5"), learners(TRAINERS, Some(5)))
        .resume_from(state.clone())
        .start()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("sync state"), "{error}");
}

#[test]
fn a_cluster_started_from_a_checkpoint_goes_on_from_it() {
    let _serial = exclusive();
    let (states, cluster) = checkpoints("shadow-ma", 50);
    cluster.wait().unwrap();
    let state = &states[1];
    let done = state.trainers[0].steps;
    assert_eq!(done, 100);
    // Fresh learners (other initial weights, another learning rate) with the
    // steps left: the state overrides their weights and learning rate.
    let mut fresh = learners(TRAINERS, Some(STEPS - done));
    for learner in &mut fresh {
        learner.lr = 1.0;
    }
    let resumed = ClusterBuilder::new(config("none"), fresh)
        .resume_from(state.clone())
        .start()
        .unwrap();
    let outcome = resumed.wait().unwrap();
    for (learner, (trainer, saved)) in outcome
        .learners
        .iter()
        .zip(state.trainers.iter().zip(&state.learners))
    {
        let saved = saved.as_ref().unwrap();
        assert_eq!(learner.lr, f64::from(saved.arrays[0].1[0]));
        assert_eq!(learner.steps_taken, STEPS);
        // Trained on from the saved replica: closer to the truth than it was.
        assert!(learner.loss_of(&learner.dense()) < learner.loss_of(&trainer.dense));
    }
    let stats = &outcome.report.trainer_stats;
    assert!(
        stats
            .iter()
            .all(|s| s.steps == STEPS && s.examples == STEPS * 64),
        "{stats:?}"
    );
    assert_eq!(outcome.report.examples, TRAINERS as u64 * STEPS * 64);
}

#[test]
fn a_checkpoint_that_does_not_fit_the_learners_is_refused() {
    let _serial = exclusive();
    let (states, cluster) = checkpoints("none", 50);
    cluster.wait().unwrap();
    let error = ClusterBuilder::new(config("none"), learners(TRAINERS - 1, Some(1)))
        .resume_from(states[0].clone())
        .start()
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("resume") && error.contains("4 trainers"),
        "{error}"
    );
}

#[test]
fn foreground_trainers_resumed_a_few_steps_apart_sync_again_without_waiting_on_each_other() {
    let _serial = exclusive();
    let (states, cluster) = checkpoints("none", 50);
    cluster.wait().unwrap();
    // As an interrupted run leaves them: each stopped between its own chunks.
    let mut state = states[0].clone();
    for (trainer, steps) in state.trainers.iter_mut().zip([50, 47, 53, 49]) {
        trainer.steps = steps;
        trainer.examples = steps * 64;
        trainer.sync.round = steps / 4;
    }
    for algorithm in ["fr-ma:4", "sync-sgd"] {
        // Parked at 60, 80, 100: a trainer that had taken a round more than
        // another before parking would wait on it for ever (so would one
        // going on from a round behind the others').
        let mut c = config(algorithm);
        c.checkpoint_every = 20;
        let cluster = ClusterBuilder::new(c, learners(TRAINERS, Some(60)))
            .resume_from(state.clone())
            .start()
            .unwrap();
        let parked_at: Vec<u64> = run_to_end(&cluster, algorithm)
            .iter()
            .map(|s| s.trainers[0].steps)
            .collect();
        assert_eq!(parked_at, [60, 80, 100], "{algorithm}");
        let outcome = cluster.wait().unwrap();
        assert!(
            outcome.report.errors.is_empty(),
            "{:?}",
            outcome.report.errors
        );
        let syncs: Vec<u64> = outcome
            .report
            .trainer_stats
            .iter()
            .map(|s| s.syncs)
            .collect();
        // From step 54 on, everyone syncs at the same counts until the first
        // trainer (47 + 60 = 107) finishes.
        assert!(syncs.iter().all(|&s| s > 0), "{algorithm}: {syncs:?}");
    }
}

#[test]
fn a_trainer_resumed_parked_at_a_multiple_parks_with_the_others_not_a_period_later() {
    let _serial = exclusive();
    let (states, cluster) = checkpoints("none", 50);
    cluster.wait().unwrap();
    // As a run interrupted while trainer 0 was parked at step 40 leaves them.
    let mut state = states[0].clone();
    for (trainer, steps) in state.trainers.iter_mut().zip([40, 37, 33, 39]) {
        trainer.steps = steps;
        trainer.examples = steps * 64;
    }
    let mut c = config("shadow-ma");
    c.checkpoint_every = 20;
    let cluster = ClusterBuilder::new(c, learners(TRAINERS, Some(60)))
        .resume_from(state.clone())
        .start()
        .unwrap();
    let parked: Vec<Vec<u64>> = run_to_end(&cluster, "shadow-ma")
        .iter()
        .map(|s| s.trainers.iter().map(|t| t.steps).collect())
        .collect();
    cluster.wait().unwrap();
    // Trainer 0 takes one step before it sees it is due; the others park at 40.
    // Parked at 60 instead, it would have run a period alone (and, fed by the
    // same data pipeline as the others, starved waiting for their batches).
    // The last parking: trainer 0 after its 60th step (40 + 60), the others
    // done (at 37 + 60, 33 + 60, 39 + 60).
    assert_eq!(
        parked,
        [[41, 40, 40, 40], [60; 4], [80; 4], [100, 97, 93, 99]]
    );
}
