//! The in-process transport's rounds, exchanges and simulated link.

use super::*;
use crate::sync::Schedule;
use crate::sync::{GroupPlan, GroupSchedule};

#[test]
fn group_means_over_several_rounds_with_peers_running_ahead() {
    let n = 4;
    let plan = GroupPlan::new(Schedule::Random, n, 2).unwrap().with_seed(3);
    let endpoints = mesh(n, LinkModel::default(), Arc::new(AtomicBool::new(false)));
    let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .map(|mut ep| {
                let plan = &plan;
                s.spawn(move || {
                    (0..20u64)
                        .map(|round| {
                            let value = (ep.id() as f32 + 1.0) * (round as f32 + 1.0);
                            let group = plan.group_of(ep.id(), round);
                            ep.group_mean(round, &group, &vec![value, -value].into(), true)
                                .unwrap()
                                .unwrap()
                                .mean
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (trainer, rounds) in results.iter().enumerate() {
        for (round, mean) in rounds.iter().enumerate() {
            let group = plan.group_of(trainer, round as u64);
            let expected: f32 = group
                .iter()
                .map(|&t| (t as f32 + 1.0) * (round as f32 + 1.0))
                .sum::<f32>()
                / group.len() as f32;
            assert_eq!(
                mean,
                &vec![expected, -expected],
                "trainer {trainer} round {round}"
            );
        }
    }
}

/// Runs one round of `group_mean` over a mesh of `values.len()` members,
/// member `i` contributing `values[i]` unless `abstain[i]`.
fn one_round(values: &[Vec<f32>], abstain: &[bool]) -> Vec<Result<Option<Vec<f32>>>> {
    let endpoints = mesh(
        values.len(),
        LinkModel::default(),
        Arc::new(AtomicBool::new(false)),
    );
    let group: Vec<usize> = (0..values.len()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .map(|mut ep| {
                let group = group.clone();
                let payload: Payload = values[ep.id()].clone().into();
                let contribute = !abstain[ep.id()];
                s.spawn(move || {
                    ep.group_mean(0, &group, &payload, contribute)
                        .map(|mean| mean.map(|m| m.mean))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_member_that_abstains_is_left_out_of_the_mean_but_receives_it() {
    let values = vec![
        vec![1.0, 2.0, 3.0],
        vec![f32::NAN, f32::INFINITY, 0.0],
        vec![3.0, 6.0, 9.0],
        vec![5.0, 1.0, 0.0],
    ];
    let means = one_round(&values, &[false, true, false, false]);
    for mean in means {
        assert_eq!(mean.unwrap().unwrap(), vec![3.0, 3.0, 4.0]);
    }
    let nobody = one_round(&values[..2], &[true, true]);
    for mean in nobody {
        assert!(matches!(mean, Err(Error::NonFinite { ref group }) if group == &[0, 1]));
    }
}

#[test]
fn uneven_and_empty_slices_assemble_the_exact_mean() {
    for (n, len) in [(3usize, 7usize), (4, 2), (5, 13)] {
        let endpoints = mesh(n, LinkModel::default(), Arc::new(AtomicBool::new(false)));
        let group: Vec<usize> = (0..n).collect();
        let means: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    let group = group.clone();
                    s.spawn(move || {
                        let data: Vec<f32> = (0..len).map(|j| (ep.id() * 100 + j) as f32).collect();
                        ep.group_mean(0, &group, &data.into(), true)
                            .unwrap()
                            .unwrap()
                            .mean
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected: Vec<f32> = (0..len)
            .map(|j| (0..n).map(|i| (i * 100 + j) as f32).sum::<f32>() / n as f32)
            .collect();
        for mean in means {
            assert_eq!(mean, expected, "n={n} len={len}");
        }
    }
    assert_eq!(slice(7, 3, 2), 6..7);
    assert_eq!(slice(2, 4, 3), 2..2);
}

#[test]
fn a_group_round_takes_two_phases_of_the_slowest_senders_messages() {
    // 1 ms per message, and 1 byte/ns: 1,000 values (4,000 bytes) take 4 µs.
    let link = LinkModel {
        latency_us: 1000.0,
        bandwidth_gbps: 8.0,
        ..LinkModel::default()
    };
    let message = Duration::from_micros(1004);
    // Three members, slices of 1,000: each phase is two messages a sender.
    assert_eq!(link.group_round_time(&[0, 1, 2], 3000), 4 * message);
    // Trainer 1's link three times slower: it sends two slow messages a
    // phase, the others one slow and one not.
    let slow = LinkModel {
        slow_trainer: Some(1),
        slow_factor: 3.0,
        ..link
    };
    assert_eq!(slow.group_round_time(&[0, 1, 2], 3000), 12 * message);
    assert_eq!(link.group_round_time(&[4], 3000), Duration::ZERO);
}

#[test]
fn the_simulated_link_really_delays_delivery() {
    let link = LinkModel {
        latency_us: 20_000.0,
        bandwidth_gbps: 0.0,
        ..LinkModel::default()
    };
    assert_eq!(link.wire_time(0, 1, 1 << 20), Duration::from_millis(20));
    let gbit = LinkModel {
        bandwidth_gbps: 1.0,
        ..LinkModel::default()
    };
    assert_eq!(gbit.wire_time(0, 1, 125_000), Duration::from_millis(1));
    let slow = LinkModel {
        slow_trainer: Some(1),
        slow_factor: 10.0,
        ..link
    };
    assert_eq!(slow.wire_time(1, 0, 0), Duration::from_millis(200));
    assert_eq!(slow.wire_time(0, 2, 0), Duration::from_millis(20));

    let endpoints = mesh(2, link, Arc::new(AtomicBool::new(false)));
    let start = Instant::now();
    std::thread::scope(|s| {
        for mut ep in endpoints {
            s.spawn(move || {
                ep.group_mean(0, &[0, 1], &vec![1.0].into(), true)
                    .unwrap()
                    .unwrap()
            });
        }
    });
    assert!(start.elapsed() >= Duration::from_millis(20));
}

#[test]
fn a_silent_member_is_timed_out_and_named_and_its_late_messages_are_dropped_in_recycled_buffers() {
    let mut endpoints = mesh(3, LinkModel::default(), Arc::new(AtomicBool::new(false)));
    for ep in &mut endpoints {
        ep.set_timeout(Some(Duration::from_millis(100)));
    }
    let group = [0, 1, 2];
    let value = |id: usize, round: u64| vec![id as f32 + 10.0 * round as f32; 5];
    let run = |endpoints: Vec<Endpoint>, round: u64| -> Vec<(Endpoint, GroupMean)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    s.spawn(move || {
                        // A recycled buffer, filled with garbage: every
                        // slice must be written, the late member's too.
                        let spare = vec![f32::NAN; 5];
                        let reused = spare.as_ptr();
                        ep.recycle(spare);
                        let payload = value(ep.id(), round).into();
                        let mean = ep.group_mean(round, &group, &payload, true);
                        let mean = mean.unwrap().unwrap();
                        assert_eq!(mean.mean.as_ptr(), reused);
                        (ep, mean)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let silent = endpoints.pop().unwrap();
    // Round 0 without member 2: the others average over themselves.
    let started = Instant::now();
    let mut done = run(endpoints, 0);
    assert!(started.elapsed() >= Duration::from_millis(100));
    for (_, outcome) in &done {
        assert_eq!(outcome.mean, vec![0.5; 5]);
        assert_eq!(outcome.unresponsive, [2]);
    }
    // Member 2 comes back: its round 0 finds the others' messages at once.
    let started = Instant::now();
    let (silent, late) = run(vec![silent], 0).pop().unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(late.unresponsive.is_empty());
    // Round 1 with everyone: member 2's round-0 messages are dropped.
    let mut all: Vec<Endpoint> = done.drain(..).map(|(ep, _)| ep).collect();
    all.push(silent);
    for (_, outcome) in run(all, 1) {
        assert_eq!(outcome.mean, vec![11.0; 5]);
        assert!(outcome.unresponsive.is_empty());
    }
}

#[test]
fn stop_releases_a_trainer_waiting_for_a_silent_peer() {
    let stop = Arc::new(AtomicBool::new(false));
    let mut endpoints = mesh(2, LinkModel::default(), Arc::clone(&stop));
    let mut lonely = endpoints.remove(0);
    let waiter = std::thread::spawn(move || lonely.group_mean(0, &[0, 1], &vec![1.0].into(), true));
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    assert_eq!(waiter.join().unwrap().unwrap(), None);
}
