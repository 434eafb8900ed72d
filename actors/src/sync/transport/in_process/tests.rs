//! The in-process transport's rounds, exchanges and simulated link.

use super::*;
use crate::sync::Schedule;
use crate::sync::{Codecs, GroupPlan, GroupSchedule, Int8};

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
    compressed_round(values, abstain, "none")
        .into_iter()
        .map(|(mean, _)| mean)
        .collect()
}

/// What one member's `group_mean` came to: the mean, or `None` if stopped.
type MeanOf = Result<Option<Vec<f32>>>;

/// [`one_round`] with `sync.compression = compression`; with each member's
/// bytes sent, on the wire and before compression.
fn compressed_round(
    values: &[Vec<f32>],
    abstain: &[bool],
    compression: &str,
) -> Vec<(MeanOf, [u64; 2])> {
    let config = SyncConfig {
        compression: compression.into(),
        ..SyncConfig::default()
    };
    let mut endpoints = mesh(
        values.len(),
        LinkModel::default(),
        Arc::new(AtomicBool::new(false)),
    );
    let initial = vec![0.0; values[0].len()];
    for ep in &mut endpoints {
        ep.compress_with(&Codecs::default(), &config, &initial)
            .unwrap();
    }
    let group: Vec<usize> = (0..values.len()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .map(|mut ep| {
                let group = group.clone();
                let payload: Payload = values[ep.id()].clone().into();
                let contribute = !abstain[ep.id()];
                s.spawn(move || {
                    let mean = ep
                        .group_mean(0, &group, &payload, contribute)
                        .map(|mean| mean.map(|m| m.mean));
                    let sent = [ep.bytes_counter(), ep.values_counter()];
                    (mean, sent.map(|c| c.load(Ordering::Relaxed)))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_compressed_mean_is_within_the_codec_bound_and_counts_both_sizes() {
    let values: Vec<Vec<f32>> = (0..3)
        .map(|t| {
            (0..1000)
                .map(|j| ((j * 37 + t * 11) % 200) as f32 / 100.0 - 1.0)
                .collect()
        })
        .collect();
    let exact: Vec<f32> = (0..1000)
        .map(|j| values.iter().map(|v| v[j]).sum::<f32>() / 3.0)
        .collect();
    // Slices of 334, 334 and 332: member 0 scatters the two others' and
    // gathers its own to both, 1334 values.
    let before = 1334 * 4;
    let int8 = compressed_round(&values, &[false; 3], "int8");
    let (_, [wire, uncompressed]) = &int8[0];
    assert_eq!(*uncompressed, before);
    assert_eq!(
        *wire as usize,
        Int8::wire_len(334) * 3 + Int8::wire_len(332)
    );
    for (member, (mean, _)) in int8.iter().enumerate() {
        let mean = mean.as_ref().unwrap().as_ref().unwrap();
        // Half a step of the contributions' scale, then of the mean's.
        let bound = 2.0 * 1.0 / 254.0 + 1e-6;
        for (j, (got, want)) in mean.iter().zip(&exact).enumerate() {
            assert!(
                (got - want).abs() <= bound,
                "member {member} [{j}]: {got} ≠ {want}"
            );
        }
    }
    let (fp16, [wire, _]) = &compressed_round(&values, &[false; 3], "fp16")[1];
    assert_eq!(*wire, before / 2);
    let fp16 = fp16.as_ref().unwrap().as_ref().unwrap();
    assert!(fp16.iter().zip(&exact).all(|(a, b)| (a - b).abs() <= 2e-3));
    // `topk` sends the tenth of each message that changed most since the
    // initial zeros, 8 bytes each and 4 of count, its reduced slice to each
    // peer apart; a value left out is the sender's last sent, here 0.
    let topk = compressed_round(&values, &[false; 3], "topk");
    let (_, [wire, _]) = &topk[0];
    assert_eq!(*wire, 3 * (4 + 34 * 8) + (4 + 34 * 8));
    let means: Vec<&Vec<f32>> = topk
        .iter()
        .map(|(mean, _)| mean.as_ref().unwrap().as_ref().unwrap())
        .collect();
    let exact_where_all_sent = means[0]
        .iter()
        .zip(&exact)
        .filter(|(a, b)| (*a - *b).abs() < 1e-6)
        .count();
    assert!(
        exact_where_all_sent < 1000 / 2,
        "{exact_where_all_sent} of 1000 exact"
    );
    for (j, &own) in means[0][..334].iter().enumerate() {
        // Member 0's own slice: its value, and the others' largest or 0.
        let others: Vec<f32> = [1, 2].map(|t| values[t][j]).into();
        let possible = |sent: [bool; 2]| {
            let other = |i: usize| if sent[i] { others[i] } else { 0.0 };
            (values[0][j] + other(0) + other(1)) / 3.0
        };
        let fits = [[false, false], [true, false], [false, true], [true, true]]
            .iter()
            .any(|&sent| (possible(sent) - own).abs() < 1e-6);
        assert!(fits, "[{j}]: {own}");
    }
}

#[test]
fn a_compressed_message_a_receiver_cannot_decode_is_refused() {
    let values = [vec![1.0; 8], vec![2.0; 8]];
    let mut endpoints = mesh(2, LinkModel::default(), Arc::new(AtomicBool::new(false)));
    let config = SyncConfig {
        compression: "fp16".into(),
        ..SyncConfig::default()
    };
    endpoints[0]
        .compress_with(&Codecs::default(), &config, &[0.0; 8])
        .unwrap();
    // Member 0 may wait for member 1's slice, which never comes.
    endpoints[0].set_timeout(Some(Duration::from_millis(200)));
    let results: Vec<Result<_>> = std::thread::scope(|s| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .map(|mut ep| {
                let payload: Payload = values[ep.id()].clone().into();
                s.spawn(move || ep.group_mean(0, &[0, 1], &payload, true).map(drop))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = results[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("compressed") && e.contains("sync.compression"),
        "{e}"
    );
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

/// Top-k keeps the values last sent at both ends of a link. A member timed
/// out of a round sends its messages late; the others must still decode
/// them (into nothing), or their memory of its link lags the sender's for
/// good: the values it sent then are never sent again. With every member's
/// values constant, the rounds' mean must then come to the exact mean.
#[test]
fn late_top_k_messages_keep_both_ends_of_the_link_in_step() {
    let config = SyncConfig {
        compression: "topk".into(),
        topk_ratio: 0.25,
        ..SyncConfig::default()
    };
    let len = 12;
    let value = |id: usize| -> Vec<f32> { (0..len).map(|i| (id * len + i) as f32).collect() };
    let mut endpoints = mesh(3, LinkModel::default(), Arc::new(AtomicBool::new(false)));
    for ep in &mut endpoints {
        ep.set_timeout(Some(Duration::from_millis(100)));
        ep.compress_with(&Codecs::default(), &config, &vec![0.0; len])
            .unwrap();
    }
    let group = [0, 1, 2];
    let run = |endpoints: Vec<Endpoint>, round: u64| -> Vec<(Endpoint, Vec<f32>)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = endpoints
                .into_iter()
                .map(|mut ep| {
                    s.spawn(move || {
                        let payload = value(ep.id()).into();
                        let mean = ep.group_mean(round, &group, &payload, true);
                        (ep, mean.unwrap().unwrap().mean)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let silent = endpoints.pop().unwrap();
    let done = run(endpoints, 0);
    let (silent, _) = run(vec![silent], 0).pop().unwrap();
    let mut all: Vec<Endpoint> = done.into_iter().map(|(ep, _)| ep).collect();
    all.push(silent);
    let exact: Vec<f32> = (0..len).map(|i| (len + i) as f32).collect();
    let mut means = Vec::new();
    for round in 1..=24 {
        let outcome = run(all, round);
        means = outcome.iter().map(|(_, mean)| mean.clone()).collect();
        all = outcome.into_iter().map(|(ep, _)| ep).collect();
    }
    for mean in &means {
        for (got, want) in mean.iter().zip(&exact) {
            assert!((got - want).abs() < 1e-4, "{mean:?} against {exact:?}");
        }
    }
}
