use super::*;
use crate::sync::InProcess;
use crate::system::spawn_system;
use std::time::{Duration, Instant};

#[test]
fn sharded_elastic_step_equals_the_unsharded_one() {
    let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let snapshot: Arc<[f32]> = (0..10).map(|i| 2.0 * i as f32 + 1.0).collect();
    let mut expected_center = initial.clone();
    let expected = elastic(&snapshot, &mut expected_center, 0.5);
    for shards in [1, 3, 4, 10, 16] {
        let start = {
            let initial = initial.clone();
            move || {
                ServerClient::start(
                    &initial,
                    shards,
                    None,
                    &EventBus::default(),
                    &[],
                    &InProcess,
                )
            }
        };
        let (system, thread, server) = spawn_system("server-test", start).unwrap();
        let server = server.unwrap();
        assert_eq!(server.shard_count(), shards);
        let target = server.elastic(Arc::clone(&snapshot), 0.5, 0, 0, || false);
        let (target, sent) = target.unwrap().unwrap();
        assert_eq!(sent, 4 * 10, "the replica, as f32");
        assert_eq!(target.parts().count(), shards, "one part a shard");
        assert_eq!(target.into_vec(Vec::new()), expected, "{shards} shards");
        assert_eq!(server.center().unwrap(), expected_center);
        let short: Arc<[f32]> = Arc::from(vec![0f32; 3]);
        assert!(server.elastic(short, 0.5, 0, 1, || false).is_err());
        system.stop();
        thread.join().unwrap();
        // With the system gone, a request fails instead of hanging. The
        // shards' arbiters stop on their own threads a moment after the
        // system's, so a request may still be answered meanwhile.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.center().is_ok() {
            assert!(Instant::now() < deadline, "the shards outlived the system");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(shard_ranges(10, 0).is_err());
}

#[test]
fn an_elastic_step_made_here_is_the_requested_one_and_a_fault_moves_no_centre() {
    use crate::faults::FaultKind;
    // Longer than a block of the step made here, cut at shard edges inside blocks.
    let len = 5000;
    let initial: Vec<f32> = (0..len).map(|i| (i % 13) as f32).collect();
    let snapshot: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 2.0).collect();
    // Two steps worked out on one vector: the first asked of the shards,
    // the second made here.
    let mut expected_center = initial.clone();
    let _ = elastic(&snapshot, &mut expected_center, 0.25);
    let expected = elastic(&snapshot, &mut expected_center, 0.25);
    let fault = Fault {
        trainer: 1,
        kind: FaultKind::ServerPanic,
        at_step: 2,
        every: 0,
    };
    for shards in [1, 3, 4] {
        let start = {
            let initial = initial.clone();
            let events = EventBus::default();
            move || ServerClient::start(&initial, shards, None, &events, &[fault], &InProcess)
        };
        let (system, thread, server) = spawn_system("server-test", start).unwrap();
        let server = server.unwrap();
        assert!(server.all_here());
        let asked = server.elastic(Arc::from(&snapshot[..]), 0.25, 1, 1, || false);
        assert!(asked.unwrap().is_some());
        let mut target = vec![f32::NAN; len];
        server
            .elastic_on_this_thread(&snapshot, 0.25, 1, 3, |at, block| {
                target[at..at + block.len()].copy_from_slice(block);
                Ok(())
            })
            .unwrap();
        assert_eq!(target, expected, "{shards} shards");
        assert_eq!(server.center().unwrap(), expected_center);
        // Trainer 1's round 2 fails on every shard, and nothing moves.
        let mut written = 0;
        let e = server
            .elastic_on_this_thread(&snapshot, 0.25, 1, 2, |_, block| {
                written += block.len();
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(e, Error::ShardFailed { shard: 0, .. }), "{e}");
        assert_eq!(written, 0);
        assert_eq!(server.center().unwrap(), expected_center);
        let short = server.elastic_on_this_thread(&snapshot[..3], 0.25, 1, 4, |_, _| Ok(()));
        assert!(short.is_err());
        system.stop();
        thread.join().unwrap();
    }
}

#[test]
fn a_shard_steps_the_same_from_its_slice_as_from_the_whole_vector() {
    let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let snapshot: Vec<f32> = (0..10).map(|i| 3.0 - i as f32).collect();
    let mut whole = ServerShard::new(&initial, 4..8).unwrap();
    let mut sliced = whole.clone();
    let from_whole = whole.elastic(&snapshot, 0, 0.25).unwrap();
    let from_slice = sliced.elastic(&snapshot[4..8], 4, 0.25).unwrap();
    assert_eq!(from_whole, from_slice);
    assert_eq!(whole, sliced);
    // A slice that does not hold the shard is refused, not misread.
    assert!(sliced.elastic(&snapshot[5..8], 5, 0.25).is_err());
    assert!(sliced.elastic(&snapshot[4..7], 4, 0.25).is_err());
}

#[test]
fn shard_ranges_cover_the_vector_in_order() {
    let ranges = shard_ranges(10, 3).unwrap();
    assert_eq!(ranges, vec![0..4, 4..8, 8..10]);
    assert_eq!(shard_ranges(2, 4).unwrap(), vec![0..1, 1..2, 2..2, 2..2]);
}

#[test]
fn a_compressed_step_rounds_only_what_crosses_and_counts_the_encoded_bytes() {
    use crate::sync::{Codecs, SyncConfig};
    let len = 1000;
    let initial: Vec<f32> = (0..len).map(|i| ((i * 37) as f32).sin()).collect();
    let config = SyncConfig {
        compression: "int8".into(),
        ..SyncConfig::default()
    };
    let codec = CentreCodec::new(&Codecs::default(), &config, &initial).unwrap();
    for shards in [1, 3] {
        let start = {
            let (initial, codec) = (initial.clone(), codec.clone());
            move || {
                ServerClient::start(
                    &initial,
                    shards,
                    codec,
                    &EventBus::default(),
                    &[],
                    &InProcess,
                )
            }
        };
        let (system, thread, server) = spawn_system("server-test", start).unwrap();
        let server = server.unwrap();
        assert!(server.compressed());
        // The replica is where the centre is: uncompressed, its target is
        // itself and the centre stays.
        let snapshot: Arc<[f32]> = Arc::from(&initial[..]);
        let (target, sent) = server
            .elastic(Arc::clone(&snapshot), 0.5, 0, 0, || false)
            .unwrap()
            .unwrap();
        // A byte a value and 4 a block of 256, per shard's slice.
        let encoded: usize = shard_ranges(len, shards)
            .unwrap()
            .iter()
            .map(|r| r.len() + 4 * r.len().div_ceil(256))
            .sum();
        assert_eq!(sent, encoded as u64, "{shards} shards");
        // int8 rounds a value by up to 1/254 of its block's largest (here
        // 1). The centre sees the replica so rounded and moves by α of that;
        // the replica moves back as much, and that move's own rounding. Its
        // target, rounded as it crossed, would be off by up to 1/254.
        let pulled = 0.5 / 254.0 * 1.001;
        let target = target.into_vec(Vec::new());
        let off = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        assert!(off(&target, &snapshot) <= pulled + 1e-5, "{shards} shards");
        assert!(
            off(&target, &snapshot) > 0.0,
            "{shards} shards: nothing rounded"
        );
        assert!(off(&server.center().unwrap(), &snapshot) <= pulled);
        system.stop();
        thread.join().unwrap();
    }
}
