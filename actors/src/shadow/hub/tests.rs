use super::*;
use crate::events::EventBus;
use crate::recovery::RecoveryPoint;
use crate::shadow::RoundDelay;
use crate::stats::TrainerCounters;
use crate::sync::coordinator::{CoordinatorClient, GroupCoordinator};
use crate::sync::{mesh, GroupPlan, ModelAveraging, Schedule, SyncPeer, WriteBack};
use crate::system::spawn_system;
use crate::{FlatParams, ParamAlias};
use actix::Actor;
use std::sync::atomic::AtomicBool;
use tch::nn;

/// Trainers in one group, trainer `t`'s replica holding `values[t]`.
struct Group {
    hub: ShadowHub,
    replicas: Vec<ParamAlias>,
    _vars: Vec<nn::VarStore>,
    system: actix::System,
}

const UNPACED: Pacing = Pacing {
    min_interval: Duration::ZERO,
    min_steps: 0,
    max_cpu_share: 0.0,
    delay: RoundDelay::NONE,
    max_staleness: None,
};

fn group_of(values: &[Vec<f32>], link: LinkModel) -> Group {
    let n = values.len();
    let plan = GroupPlan::new(Schedule::Global, n, n).unwrap();
    let coordinated = Arc::new(plan.clone());
    let (system, _thread, addr) = spawn_system("hub-test", move || {
        GroupCoordinator::new(coordinated, EventBus::default()).start()
    })
    .unwrap();
    let client = CoordinatorClient::new(addr);
    let endpoints = mesh(n, link, Arc::new(AtomicBool::new(false)));
    let (mut shadows, mut replicas, mut vars) = (Vec::new(), Vec::new(), Vec::new());
    for (endpoint, values) in endpoints.into_iter().zip(values) {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let dim = values.len() as i64;
        let _ = vs.root().zeros("w", &[dim]);
        let params = FlatParams::adopt(&vs).unwrap();
        let replica = ParamAlias::new(&params).unwrap();
        replica
            .write_back(WriteBack::Overwrite, values, values)
            .unwrap();
        let id = endpoint.id();
        let peer = SyncPeer::new(endpoint, client.clone(), Box::new(ModelAveraging), None).unwrap();
        shadows.push(ShadowLoop::new(
            ParamAlias::new(&params).unwrap(),
            peer,
            WriteBack::Delta,
            Arc::new(TrainerCounters::new(id)),
            Arc::new(RecoveryPoint::new(values)),
        ));
        replicas.push(replica);
        vars.push(vs);
    }
    Group {
        hub: ShadowHub::new(shadows, UNPACED, link).unwrap(),
        replicas,
        _vars: vars,
        system,
    }
}

fn values_of(replica: &ParamAlias) -> Vec<f32> {
    let mut out = vec![0.0; replica.len()];
    replica.snapshot_into(&mut out).unwrap();
    out
}

#[test]
fn a_round_writes_the_mean_of_the_finite_snapshots_into_every_member() {
    // Longer than a chunk, not a multiple of it: three chunks, the last short.
    let len = 2 * CHUNK + 5;
    let at = |t: usize| (0..len).map(|j| (t * 1000 + j % 97) as f32).collect();
    let mut diverged: Vec<f32> = at(2);
    diverged[CHUNK + 1] = f32::NAN;
    let mut group = group_of(&[at(0), at(1), diverged], LinkModel::default());
    let mut reports = Vec::new();
    assert!(group.hub.tick(&mut reports).is_some());
    // On an ideal link the round lands in the tick it starts.
    assert_eq!(reports.len(), 3, "{reports:?}");
    for r in &reports {
        let outcome = r.result.as_ref().unwrap();
        assert_eq!(outcome.round, 0);
        assert!(outcome.written_back);
        assert_eq!(outcome.contributed, r.trainer != 2, "{r:?}");
    }
    // Trainers 0 and 1's mean, worked out on its own; trainer 2 diverged,
    // sits out and takes it outright.
    let mean: Vec<f32> = (0..len)
        .map(|j| ((j % 97) as f32 + (1000 + j % 97) as f32) / 2.0)
        .collect();
    for replica in &group.replicas {
        assert_eq!(values_of(replica), mean);
    }
    group.system.stop();
}

#[test]
fn a_round_lands_once_the_simulated_link_has_carried_it() {
    let link = LinkModel {
        latency_us: 30_000.0,
        ..LinkModel::default()
    };
    let mut group = group_of(&[vec![1.0; 8], vec![3.0; 8]], link);
    let mut reports = Vec::new();
    let wait = group.hub.tick(&mut reports).unwrap();
    // Two phases of one 30 ms message each: nothing has landed yet.
    assert!(reports.is_empty(), "{reports:?}");
    assert_eq!(link.group_round_time(&[0, 1], 8), Duration::from_millis(60));
    assert!(wait <= Duration::from_millis(60), "{wait:?}");
    assert_eq!(values_of(&group.replicas[0]), vec![1.0; 8]);
    std::thread::sleep(Duration::from_millis(60));
    group.hub.tick(&mut reports).unwrap();
    assert_eq!(reports.len(), 2, "{reports:?}");
    for replica in &group.replicas {
        assert_eq!(values_of(replica), vec![2.0; 8]);
    }
    group.system.stop();
}

#[test]
fn the_bytes_a_member_sends_are_the_transports() {
    // 10 values in 3 slices of 4, 4, 2: member 0 sends 6 values, then 4
    // to each of 2 others.
    assert_eq!(bytes_sent_per_member(10, 3), (6 + 2 * 4) * 4);
    assert_eq!(bytes_sent_per_member(10, 2), (5 + 5) * 4);
    assert_eq!(bytes_sent_per_member(10, 1), 0);
}
