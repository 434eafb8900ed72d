//! The MPI transport (feature `mpi`): group means across 2 and 4 ranks, and
//! BMUF's targets from them, equal an independent computation under every
//! DS-Sync schedule (and so do the fabric's mean, sum and gather); EASGD's
//! centre, sharded over the ranks, ends where every elastic step of every
//! trainer moved it; a sharded embedding table applies every pushed
//! gradient once, equal to one table given the same gradients in the same
//! order (SGD and Adagrad); and a failing rank, or a fetch nobody answers,
//! ends the whole job within seconds, named, as does a collective that never
//! completes (the watchdog). Each test launches itself under
//! `mpirun` (it needs Open MPI: `scripts/setup.sh --with-mpi`); the ranks run
//! the same test with `SHADOWSYNC_MPI_RANKS` set and do the rank's part.

#![cfg(feature = "mpi")]

use shadowsync_actors::embedding::{
    Adagrad, RowClient, RowRule, RowServer, RowSharding, RowStats, RowStore, Sgd,
};
use shadowsync_actors::events::EventBus;
use shadowsync_actors::sync::mpi::MpiNode;
use shadowsync_actors::sync::{
    unaccounted_in_job, BmufParams, Fabric, GroupPlan, GroupSchedule, LinkModel, OuterState,
    Schedule, ServerClient,
};
use shadowsync_actors::system::spawn_system;
use shadowsync_testkit::process;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RANKS_VAR: &str = "SHADOWSYNC_MPI_RANKS";
const PER_RANK: usize = 2;
const VALUES: usize = 10_001;
const ROUNDS: u64 = 12;

/// What `mpirun` said and did, running `test` of this binary on `ranks` ranks.
struct Job {
    success: bool,
    output: String,
    took: Duration,
}

/// A job that takes longer has hung: it is killed and the test fails,
/// showing its threads.
const JOB_LIMIT: Duration = Duration::from_secs(120);

fn mpirun(test: &str, ranks: usize) -> Job {
    let started = Instant::now();
    let job = process::mpirun(ranks)
        .args(["-x", RANKS_VAR])
        .arg(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(RANKS_VAR, ranks.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun (Open MPI) is needed: scripts/setup.sh --with-mpi installs it");
    let out = process::output_within(job, JOB_LIMIT);
    Job {
        success: out.status.success(),
        output: process::text(&out),
        took: started.elapsed(),
    }
}

/// Runs `test` on 2 and on 4 ranks: each job must succeed, and each rank
/// print `line(ranks, rank)`.
fn on_2_and_4_ranks(test: &str, line: impl Fn(usize, usize) -> String) {
    for ranks in [2, 4] {
        let job = mpirun(test, ranks);
        assert!(job.success, "{ranks} ranks:\n{}", job.output);
        for rank in 0..ranks {
            let line = line(ranks, rank);
            assert!(
                job.output.contains(&line),
                "{ranks} ranks, no {line:?}:\n{}",
                job.output
            );
        }
    }
}

/// The ranks a child was started with; `None` in the parent.
fn child_of() -> Option<usize> {
    std::env::var(RANKS_VAR).ok().and_then(|r| r.parse().ok())
}

/// Trainer `t`'s payload in `round`: distinct for every trainer, round, value.
fn payload(t: usize, round: u64) -> Vec<f32> {
    (0..VALUES)
        .map(|j| ((t * 7919 + round as usize * 104_729 + j * 31) % 2003) as f32 / 2003.0 - 0.5)
        .collect()
}

/// Trainer 1 abstains (as a diverged replica does) in rounds ≡ 1 mod 3.
fn contributes(t: usize, round: u64) -> bool {
    !(t == 1 && round % 3 == 1)
}

/// Every plan the test syncs under for `n` trainers: groups of 2 and of all
/// for the DS-Sync schedules; each rank's trainers as the hierarchical blocks.
fn plans(n: usize) -> Vec<GroupPlan> {
    let mut plans = Vec::new();
    for schedule in [Schedule::Alternating, Schedule::Random, Schedule::Hypercube] {
        for m in [2, n] {
            plans.push(
                GroupPlan::new(schedule.clone(), n, m)
                    .unwrap()
                    .with_seed(11),
            );
        }
    }
    plans.push(GroupPlan::new(Schedule::Hierarchical, n, PER_RANK).unwrap());
    plans
}

/// BMUF as the trainers run it, with Nesterov's look-ahead.
const BMUF: BmufParams = BmufParams {
    eta: 0.75,
    zeta: 1.2,
    nesterov: true,
};

/// BMUF's round worked independently, in f64: folds `mean` into the global
/// model `global` and block momentum `momentum`, returns the target.
fn bmuf_round(global: &mut [f64], momentum: &mut [f64], mean: &[f64]) -> Vec<f64> {
    let (eta, zeta) = (f64::from(BMUF.eta), f64::from(BMUF.zeta));
    (0..mean.len())
        .map(|j| {
            momentum[j] = eta * momentum[j] + zeta * (1.0 - eta) * (mean[j] - global[j]);
            global[j] += momentum[j];
            global[j] + eta * momentum[j]
        })
        .collect()
}

/// A rank's part: its trainers sync every plan's rounds and check each mean,
/// and the BMUF target each trainer makes of it, against what is computed
/// here, in f64, from the payloads' definition.
fn sync_and_check_on_this_rank() {
    let node = MpiNode::start(Some(Duration::from_secs(60))).unwrap();
    let n = node.ranks() * PER_RANK;
    let endpoints = node
        .mesh(
            PER_RANK,
            LinkModel::default(),
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap();
    let plans = plans(n);
    std::thread::scope(|s| {
        for mut endpoint in endpoints {
            let plans = &plans;
            // A member that failed ends its peers' rounds (and the test) in
            // seconds rather than leaving them waiting for it.
            endpoint.set_timeout(Some(Duration::from_secs(20)));
            s.spawn(move || {
                let me = endpoint.id();
                let mut bmuf = OuterState::new(&[0.0; VALUES]);
                let (mut global, mut momentum) = (vec![0f64; VALUES], vec![0f64; VALUES]);
                for (p, plan) in plans.iter().enumerate() {
                    for r in 0..ROUNDS {
                        let round = p as u64 * ROUNDS + r;
                        let group = plan.group_of(me, round);
                        let mean = endpoint
                            .group_mean(
                                round,
                                &group,
                                &payload(me, round).into(),
                                contributes(me, round),
                            )
                            .unwrap()
                            .unwrap();
                        assert!(mean.unresponsive.is_empty(), "{:?}", mean.unresponsive);
                        let contributors: Vec<_> = group
                            .iter()
                            .filter(|&&t| contributes(t, round))
                            .map(|&t| payload(t, round))
                            .collect();
                        let expected: Vec<f64> = (0..VALUES)
                            .map(|j| {
                                contributors.iter().map(|p| f64::from(p[j])).sum::<f64>()
                                    / contributors.len() as f64
                            })
                            .collect();
                        for (j, got) in mean.mean.iter().enumerate() {
                            assert!(
                                (f64::from(*got) - expected[j]).abs() < 1e-6,
                                "trainer {me} round {round} ({plan:?}) value {j}: {got} vs {}",
                                expected[j]
                            );
                        }
                        let mut target = vec![0.0; mean.mean.len()];
                        bmuf.bmuf(BMUF, 0, &mean.mean, &mut target);
                        let expected = bmuf_round(&mut global, &mut momentum, &expected);
                        for (j, got) in target.iter().enumerate() {
                            assert!(
                                (f64::from(*got) - expected[j]).abs() < 1e-4,
                                "trainer {me} round {round} ({plan:?}) BMUF value {j}: {got} vs {}",
                                expected[j]
                            );
                        }
                    }
                }
            });
        }
    });
    // The fabric's collectives: a mean and a sum over the ranks.
    let ranks = node.ranks();
    let mut values = vec![node.rank() as f32, 1.0, -2.5 * node.rank() as f32];
    node.average(&mut values).unwrap();
    let mean_rank = (ranks - 1) as f32 / 2.0;
    assert_eq!(values, vec![mean_rank, 1.0, -2.5 * mean_rank]);
    let mut counts = [node.rank() as u64 + 1, u64::from(u32::MAX) + 1];
    node.sum(&mut counts).unwrap();
    assert_eq!(
        counts,
        [(ranks * (ranks + 1) / 2) as u64, (ranks as u64) << 32]
    );
    let all = node
        .gather(vec![node.rank() as u32; node.rank() + 1])
        .unwrap();
    let expected: Vec<Vec<u32>> = (0..ranks).map(|r| vec![r as u32; r + 1]).collect();
    assert_eq!(all, expected);
    node.rendezvous().unwrap();
    println!(
        "rank {}: {} rounds checked, {} bytes sent to other ranks",
        node.rank(),
        plans.len() as u64 * ROUNDS,
        node.bytes_sent()
    );
    node.finish().unwrap();
}

#[test]
fn group_means_across_ranks_equal_an_independent_computation() {
    if child_of().is_some() {
        return sync_and_check_on_this_rank();
    }
    on_2_and_4_ranks(
        "group_means_across_ranks_equal_an_independent_computation",
        |ranks, rank| {
            format!(
                "rank {rank}: {} rounds checked",
                plans(ranks * PER_RANK).len() as u64 * ROUNDS
            )
        },
    );
}

/// Shards of the EASGD centre in the test: over 2 ranks, one serves two; over
/// 4, one serves none.
const SHARDS: usize = 3;
const ALPHA: f32 = 0.3;

/// A rank's part: its trainers make elastic steps against the centre sharded
/// over the ranks, all at once. Each step moves the centre by what it takes
/// from the replica (x − target), so the centre must end at its start plus
/// the sum of every trainer's x − target, whatever the order the shards served
/// them in — unless a step was lost or served twice.
fn elastic_steps_on_this_rank() {
    let node = Arc::new(MpiNode::start(Some(Duration::from_secs(60))).unwrap());
    let initial: Vec<f32> = (0..VALUES).map(|j| (j % 7) as f32 * 0.1).collect();
    let fabric: Arc<dyn Fabric> = node.clone();
    let start = {
        let initial = initial.clone();
        move || ServerClient::start(&initial, SHARDS, None, &EventBus::default(), &[], &*fabric)
    };
    let (system, system_thread, server) = spawn_system("easgd-test", start).unwrap();
    let server = server.unwrap();
    assert_eq!(server.shard_count(), SHARDS);
    let trainers = node.local_trainers(PER_RANK);
    let moved: Vec<Vec<f64>> = std::thread::scope(|s| {
        let threads: Vec<_> = trainers
            .map(|me| {
                let server = &server;
                s.spawn(move || {
                    let mut moved = vec![0f64; VALUES];
                    for round in 0..ROUNDS {
                        let x = payload(me, round);
                        let target = server
                            .elastic(x.clone().into(), ALPHA, me, round, || false)
                            .unwrap()
                            .unwrap()
                            .0
                            .into_vec(Vec::new());
                        for j in 0..VALUES {
                            moved[j] += f64::from(x[j]) - f64::from(target[j]);
                        }
                    }
                    moved
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Every rank's trainers' moves, as f64 bits, summed.
    let words: Vec<u32> = (0..VALUES)
        .flat_map(|j| {
            let bits = moved.iter().map(|m| m[j]).sum::<f64>().to_bits();
            [bits as u32, (bits >> 32) as u32]
        })
        .collect();
    let all = node.gather(words).unwrap();
    let total = |j: usize| -> f64 {
        all.iter()
            .map(|w| f64::from_bits(u64::from(w[2 * j]) | (u64::from(w[2 * j + 1]) << 32)))
            .sum()
    };
    node.rendezvous().unwrap();
    let center = server.center().unwrap();
    for (j, got) in center.iter().enumerate() {
        let expected = f64::from(initial[j]) + total(j);
        assert!(
            (f64::from(*got) - expected).abs() < 1e-4,
            "rank {}: centre value {j}: {got} vs {expected}",
            node.rank()
        );
    }
    // Every rank reads the same centre.
    let bits: Vec<u32> = center.iter().map(|x| x.to_bits()).collect();
    let centres = node.gather(bits.clone()).unwrap();
    assert!(
        centres.iter().all(|c| *c == bits),
        "the ranks read different centres"
    );
    system.stop();
    system_thread.join().unwrap();
    println!(
        "rank {}: {} elastic steps accounted for",
        node.rank(),
        PER_RANK as u64 * ROUNDS
    );
    node.finish().unwrap();
}

#[test]
fn easgd_centre_sharded_over_ranks_takes_every_elastic_step_once() {
    if child_of().is_some() {
        return elastic_steps_on_this_rank();
    }
    on_2_and_4_ranks(
        "easgd_centre_sharded_over_ranks_takes_every_elastic_step_once",
        |_, rank| {
            format!(
                "rank {rank}: {} elastic steps accounted for",
                PER_RANK as u64 * ROUNDS
            )
        },
    );
}

#[test]
fn a_failing_rank_ends_the_job_within_seconds_naming_it() {
    if let Some(ranks) = child_of() {
        let node = MpiNode::start(Some(Duration::from_secs(60))).unwrap();
        let mut endpoints = node
            .mesh(
                PER_RANK,
                LinkModel::default(),
                Arc::new(AtomicBool::new(false)),
            )
            .unwrap();
        if node.rank() == ranks - 1 {
            panic!("rank {}: injected failure", node.rank());
        }
        // The others wait for the failed rank's trainers for ever.
        let group: Vec<usize> = (0..ranks * PER_RANK).collect();
        let _ = endpoints[0].group_mean(0, &group, &vec![1.0].into(), true);
        unreachable!("a group mean completed without the failed rank");
    }
    let job = mpirun("a_failing_rank_ends_the_job_within_seconds_naming_it", 2);
    assert!(!job.success, "{}", job.output);
    assert!(job.took < Duration::from_secs(10), "took {:?}", job.took);
    assert!(
        job.output.contains("rank 1: injected failure"),
        "{}",
        job.output
    );
}

#[test]
fn a_collective_that_never_completes_ends_the_job_through_the_watchdog() {
    if child_of().is_some() {
        let node = MpiNode::start(Some(Duration::from_secs(2))).unwrap();
        if node.rank() == 0 {
            let _ = node.average(&mut [1.0]);
            unreachable!("an all-reduce completed without rank 1");
        }
        // Rank 1 never joins (a rank stuck in its own work).
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let job = mpirun(
        "a_collective_that_never_completes_ends_the_job_through_the_watchdog",
        2,
    );
    assert!(!job.success, "{}", job.output);
    assert!(job.took < Duration::from_secs(10), "took {:?}", job.took);
    assert!(
        job.output
            .contains("rank 0: an all-reduce did not complete within 2s (MPI watchdog)"),
        "{}",
        job.output
    );
}

const TABLE_ROWS: u64 = 1_000;
const WIDTH: usize = 8;
const BATCHES: u64 = 24;

/// The rows of batch `b`: 150 distinct ids, many of them in other batches too.
fn batch_ids(b: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = (0..200u64)
        .map(|i| (i * i * 7 + b * 131 + i * 17) % TABLE_ROWS)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.truncate(150);
    ids
}

/// Batch `b`'s gradient of row `id`.
fn batch_grads(b: u64, ids: &[u64]) -> Vec<f32> {
    ids.iter()
        .flat_map(|&id| {
            (0..WIDTH).map(move |j| (((id * 31 + b * 17 + j as u64 * 7) % 97) as f32 - 48.0) / 50.0)
        })
        .collect()
}

fn initial_row(id: u64, row: &mut [f32]) {
    for (j, x) in row.iter_mut().enumerate() {
        *x = ((id as usize * 13 + j * 5) % 23) as f32 / 23.0 - 0.5;
    }
}

fn rule(adagrad: bool) -> Box<dyn RowRule> {
    if adagrad {
        Box::new(Adagrad::default())
    } else {
        Box::new(Sgd)
    }
}

/// A rank's part of the sharded-rows test: under `adagrad` (else SGD), rank
/// `b mod R` fetches batch `b`'s rows, checks them against one unsharded
/// table given the same gradients in the same order, pushes the batch's
/// gradients and waits for them to be applied, before anyone takes batch
/// `b + 1` (one batch in flight: no overlap). Then, every rank at once,
/// prefetching (two batches in flight), each pushes every batch again: SGD's
/// sums do not depend on the order. Each shard must end equal to the unsharded
/// table's rows (and Adagrad's sums): a push lost or applied twice breaks it.
fn sharded_rows_on_this_rank(adagrad: bool) {
    let node = Arc::new(MpiNode::start(Some(Duration::from_secs(60))).unwrap());
    let (rank, ranks) = (node.rank(), node.ranks());
    let sharding = RowSharding::new(TABLE_ROWS, ranks).unwrap();
    let store = RowStore::new(sharding, rank, WIDTH, rule(adagrad), initial_row).unwrap();
    let server = RowServer::start(rank, store).unwrap();
    let remote = node.serve_rows(server.addr(), None).unwrap();
    let stats = Arc::new(RowStats::default());
    let timeout = Duration::from_secs(20);
    let client = |in_flight| {
        RowClient::new(
            sharding,
            &server,
            remote.clone(),
            in_flight,
            timeout,
            Arc::clone(&stats),
        )
        .unwrap()
    };
    let whole = RowSharding::new(TABLE_ROWS, 1).unwrap();
    let mut reference = RowStore::new(whole, 0, WIDTH, rule(adagrad), initial_row).unwrap();
    let lr = 0.05;
    let mut sequential = client(1);
    for b in 0..BATCHES {
        let ids = batch_ids(b);
        let grads = batch_grads(b, &ids);
        if b as usize % ranks == rank {
            let fetch = sequential.begin(&ids).unwrap();
            let rows = sequential.finish(fetch).unwrap();
            let mut expected = vec![0f32; rows.len()];
            reference.read(&ids, &mut expected).unwrap();
            assert_eq!(rows, expected, "rank {rank}: batch {b}'s rows");
            sequential.push(&ids, &grads, lr).unwrap();
            sequential.flush().unwrap();
        }
        reference.apply(0, &ids, &grads, lr).unwrap();
        node.rendezvous().unwrap();
    }
    if !adagrad {
        // Every rank pushes every batch, all at once, fetching ahead.
        let mut overlapping = client(2);
        let mut next = Some(overlapping.begin(&batch_ids(0)).unwrap());
        for b in 0..BATCHES {
            let ids = batch_ids(b);
            let fetch = next.take().unwrap();
            if b + 1 < BATCHES {
                next = Some(overlapping.begin(&batch_ids(b + 1)).unwrap());
            }
            overlapping.finish(fetch).unwrap();
            overlapping.push(&ids, &batch_grads(b, &ids), lr).unwrap();
            for _ in 0..ranks {
                reference.apply(0, &ids, &batch_grads(b, &ids), lr).unwrap();
            }
        }
        overlapping.flush().unwrap();
        let traffic = stats.traffic();
        assert!(traffic.staleness_histogram[1] > 0, "{traffic:?}");
        assert!(traffic.pushed_bytes > 0 && traffic.fetched_bytes > 0);
    }
    node.rendezvous().unwrap();
    // Every push sent was applied once, at its owner.
    let sent = stats.traffic().pushes_sent;
    let applied = server.with_store(|shard| shard.applied().clone());
    assert!(sent.total() > 0);
    let lost = unaccounted_in_job(&*node, &sent, &applied).unwrap();
    assert!(lost.is_empty(), "rank {rank}: {lost:?}");
    server.with_store(|shard| {
        let mine: Vec<u64> = (0..sharding.rows_of(rank))
            .map(|local| sharding.global(rank, local))
            .collect();
        let whole = reference.arrays();
        for (name, values) in shard.arrays() {
            let (_, all) = whole.iter().find(|(n, _)| *n == name).unwrap();
            for (local, &id) in mine.iter().enumerate() {
                let (got, want) = (
                    &values[local * WIDTH..(local + 1) * WIDTH],
                    &all[id as usize * WIDTH..(id as usize + 1) * WIDTH],
                );
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "rank {rank}: {name} of row {id}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    });
    node.rendezvous().unwrap();
    drop(server);
    println!(
        "rank {rank}: {} rows, every push applied once",
        sharding.rows_of(rank)
    );
    node.finish().unwrap();
}

/// What rank `rank` of `ranks` prints once its shard is checked.
fn every_push_applied(ranks: usize, rank: usize) -> String {
    let rows = RowSharding::new(TABLE_ROWS, ranks).unwrap().rows_of(rank);
    format!("rank {rank}: {rows} rows, every push applied once")
}

#[test]
fn sharded_rows_under_sgd_apply_every_pushed_gradient_once() {
    if child_of().is_some() {
        return sharded_rows_on_this_rank(false);
    }
    on_2_and_4_ranks(
        "sharded_rows_under_sgd_apply_every_pushed_gradient_once",
        every_push_applied,
    );
}

#[test]
fn sharded_rows_under_adagrad_equal_one_table_given_the_same_gradients() {
    if child_of().is_some() {
        return sharded_rows_on_this_rank(true);
    }
    on_2_and_4_ranks(
        "sharded_rows_under_adagrad_equal_one_table_given_the_same_gradients",
        every_push_applied,
    );
}

#[test]
fn a_fetch_nobody_answers_ends_in_an_error_naming_the_rank() {
    if child_of().is_some() {
        let node = Arc::new(MpiNode::start(Some(Duration::from_secs(60))).unwrap());
        let rank = node.rank();
        let sharding = RowSharding::new(TABLE_ROWS, node.ranks()).unwrap();
        let store = RowStore::new(sharding, rank, WIDTH, rule(false), initial_row).unwrap();
        let server = RowServer::start(rank, store).unwrap();
        // Rank 1 never serves its rows (a rank stuck in its own work).
        let remote = match rank {
            0 => node.serve_rows(server.addr(), None).unwrap(),
            _ => {
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
        };
        let stats = Arc::new(RowStats::default());
        let timeout = Duration::from_secs(2);
        let client = RowClient::new(sharding, &server, remote, 1, timeout, stats).unwrap();
        let e = client.fetch(&[0, 1, 2, 3]).unwrap_err();
        eprintln!("rank 0: {e}");
        std::process::exit(3);
    }
    let job = mpirun("a_fetch_nobody_answers_ends_in_an_error_naming_the_rank", 2);
    assert!(!job.success, "{}", job.output);
    assert!(job.took < Duration::from_secs(10), "took {:?}", job.took);
    assert!(
        job.output
            .contains("rank 0: embedding shard on process 1: no answer for rows within 2s"),
        "{}",
        job.output
    );
}
