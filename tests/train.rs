//! Training through the library: one trainer, and Hogwild workers.

mod common;

use common::{exclusive, sample};
use shadowsync::config::{
    Config, DlrmSettings, ElasticStep, EmbeddingsMode, ModelKind, OptimizerKind,
};
use shadowsync::data::Dealing;
use shadowsync::train::{Run, TrainReport};
use std::path::Path;

fn synthetic_config(dir: &Path, rows: u64) -> Config {
    let mut c = Config::default();
    c.data.synthetic.train_rows = rows;
    c.data.synthetic.test_rows = rows / 4;
    c.data.synthetic.dir = Some(dir.to_path_buf());
    c.data.table_size = 20_000;
    c.train.eval_every = rows / 2;
    c
}

fn lr_adagrad(c: &mut Config) {
    c.model.kind = "lr".into();
    c.optim.dense = OptimizerKind::Adagrad;
    c.optim.sparse = "adagrad".into();
    c.optim.dense_lr = 0.05;
    c.optim.sparse_lr = Some(0.05);
}

#[test]
fn hogwild_workers_share_their_trainers_replica_and_see_every_example_once() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 40_000);
    lr_adagrad(&mut c);
    c.train.trainers = 2;
    c.train.workers = 2;
    c.sync.algorithm = "shadow-ma".parse().unwrap();
    let report = Run::new().train(&c).unwrap();
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.examples, 40_000);
    let stats = &report.cluster.trainer_stats;
    assert_eq!(stats.len(), 2, "two trainers, whatever their workers");
    // Dealt shared, each trainer takes what its workers are ready for: about
    // half each, never a starved one.
    assert!(
        stats.iter().all(|s| s.examples >= 8_000 && s.syncs > 0),
        "{stats:?}"
    );
    let m = report.final_metrics;
    assert!(m.ne < 0.92 && m.auc > 0.7, "NE {} AUC {}", m.ne, m.auc);
}

/// A run that grows from 2 trainers to 4 and shrinks to 3 deals every batch
/// once, from one queue, and learns as 4 fixed trainers do.
#[test]
fn an_elastic_run_trains_every_example_once_and_learns() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 80_000);
    lr_adagrad(&mut c);
    c.sync.algorithm = "shadow-ma".parse().unwrap();
    c.train.trainers = 2;
    let step = |at_step, add, remove| ElasticStep {
        at_step,
        add,
        remove,
    };
    c.elastic = vec![step(100, 2, None), step(350, 0, Some(1))];
    let elastic = Run::new().train(&c).unwrap();
    assert!(elastic.error.is_none(), "{:?}", elastic.error);
    assert_eq!(elastic.examples, 80_000);
    let cluster = &elastic.cluster;
    assert_eq!((cluster.trainers, cluster.departed.clone()), (4, vec![1]));
    let steps: Vec<u64> = cluster.trainer_stats.iter().map(|s| s.steps).collect();
    // The joiners started past step 100 of the 625; trainer 1 left at 350.
    assert!(steps[2] > 0 && steps[3] > 0 && steps[1] < 350, "{steps:?}");
    assert!(steps[0] + steps[1] >= 100, "{steps:?}");
    assert_eq!(elastic.replica_metrics.len(), 3, "the trainers at the end");
    // It learns; that it learns as well as 4 fixed trainers is a claim
    // (`elastic-costs-no-ne`: one run each moves by thread timing).
    let ne = elastic.final_metrics.ne;
    assert!(ne < 0.92, "NE {ne}");
}

/// More trainers than an actor's mailbox has places (16): every replica's
/// final score is asked for at once, and every one comes back.
#[test]
fn sixty_four_trainers_end_with_every_replicas_results() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 20_000);
    lr_adagrad(&mut c);
    c.train.trainers = 64;
    c.train.eval_every = 0;
    c.sync.algorithm = "shadow-ma".parse().unwrap();
    let report = Run::new().train(&c).unwrap();
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.examples, 20_000);
    assert_eq!(report.cluster.trainer_stats.len(), 64);
    assert_eq!(report.replica_metrics.len(), 64);
    let recoveries: u64 = report
        .cluster
        .trainer_stats
        .iter()
        .map(|s| s.recoveries)
        .sum();
    assert_eq!(recoveries, 0);
}

/// Every example read is trained once or accounted for: sync-sgd steps its
/// 8 trainers together, and the 5 that have one batch more (20,000 rows in
/// batches of 128 dealt round-robin) drop it, counted; a run that loses a
/// batch otherwise fails (`report.error`).
#[test]
fn sync_sgd_counts_the_batches_of_its_last_uneven_round() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 20_000);
    c.model.kind = "lr".into();
    c.train.trainers = 8;
    c.sync.algorithm = "sync-sgd".parse().unwrap();
    let report = Run::new().train(&c).unwrap();
    assert!(report.error.is_none(), "{:?}", report.error);
    let dropped: Vec<u64> = report
        .cluster
        .trainer_stats
        .iter()
        .map(|s| s.dropped_examples)
        .collect();
    // 157 chunks of 128 (the last of 32): trainers 0-4 have 20, 5-7 have 19.
    assert_eq!(dropped, [128, 128, 128, 128, 32, 0, 0, 0]);
    assert_eq!(report.examples + dropped.iter().sum::<u64>(), 20_000);
}

#[test]
fn logistic_regression_learns_the_planted_model() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 40_000);
    lr_adagrad(&mut c);
    let report = Run::new().train(&c).unwrap();
    assert_eq!(report.examples, 40_000);
    assert_eq!(report.steps, 40_000_u64.div_ceil(128));
    // Live evaluations depend on timing; the final one is always there.
    assert_eq!(report.history.last().unwrap().examples, 40_000);
    assert!(report.examples_per_sec > 0.0);
    let m = report.final_metrics;
    let oracle = report.data.test_oracle.unwrap();
    assert_eq!(m.examples, 10_000);
    assert!(m.ne < 0.92 && m.auc > 0.7, "NE {} AUC {}", m.ne, m.auc);
    assert!(
        m.ne > oracle.ne,
        "cannot beat the oracle: {} vs {}",
        m.ne,
        oracle.ne
    );
    assert!(
        (m.calibration - 1.0).abs() < 0.1,
        "calibration {}",
        m.calibration
    );
}

#[test]
fn training_is_deterministic_for_a_seed() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 8_000);
    lr_adagrad(&mut c);
    let a = Run::new().train(&c).unwrap().final_metrics;
    let b = Run::new().train(&c).unwrap().final_metrics;
    assert_eq!(a, b);
}

/// A sharded table in one process is one shard behind the sharded path's
/// client: one trainer fetching each batch's rows after the last batch's
/// updates (staleness 1) must train exactly as on the local table, under
/// SGD and under Adagrad (to float-summation order), for every model.
#[test]
fn a_sharded_table_trains_as_the_local_table() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    for (kind, adagrad) in [("lr", true), ("dlrm", false), ("dlrm", true)] {
        let mut c = synthetic_config(dir.path(), 8_000);
        if adagrad {
            lr_adagrad(&mut c);
        }
        c.model.kind = kind.into();
        if kind == "dlrm" {
            (c.optim.dense_lr, c.optim.sparse_lr) = (0.01, Some(0.01));
        }
        let local = Run::new().train(&c).unwrap();
        c.train.embeddings = Some(EmbeddingsMode::Sharded);
        c.train.embedding_staleness = 1;
        let sharded = Run::new().train(&c).unwrap();
        let (a, b) = (local.final_metrics, sharded.final_metrics);
        assert!(
            (a.ne - b.ne).abs() < 1e-4 && (a.auc - b.auc).abs() < 1e-4,
            "{kind}, adagrad {adagrad}: local NE {} AUC {}, sharded NE {} AUC {}",
            a.ne,
            a.auc,
            b.ne,
            b.auc
        );
        // (DLRM needs more rows than this to learn; its equality is the point.)
        assert!(kind == "dlrm" || a.ne < 0.95, "{kind}: NE {}", a.ne);
    }
}

#[test]
fn every_model_trains_on_the_real_criteo_rows() {
    let _serial = exclusive();
    for kind in ["lr", "dlrm", "deepfm"] {
        let mut c = Config::default();
        c.model.kind = kind.into();
        c.data.train = Some(sample("criteo_kaggle_paddlerec_train100.tsv"));
        c.data.test = Some(sample("criteo_kaggle_paddlerec_test100.tsv"));
        c.data.table_size = 1000;
        c.train.batch_size = 16;
        let report: TrainReport = Run::new().train(&c).unwrap();
        assert_eq!(
            (report.examples, report.final_metrics.examples),
            (100, 100),
            "{kind:?}"
        );
        assert!(report.final_metrics.logloss.is_finite(), "{kind:?}");
        assert!(report.error.is_none());
    }
}

#[test]
fn a_bad_line_mid_run_keeps_what_was_computed() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 4_000);
    c.model.kind = "lr".into();
    // The built-in data's files, one line broken, read as the user's own.
    let synthetic = std::mem::take(&mut c.data.synthetic);
    let data =
        shadowsync::data::SyntheticData::ensure(synthetic.spec(), &synthetic.directory()).unwrap();
    let text = std::fs::read_to_string(&data.train).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[3000] = "1\tnot-a-number";
    let broken = dir.path().join("broken.tsv");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    c.data.train = Some(broken);
    c.data.test = Some(data.test.clone());
    c.train.eval_every = 1_000;
    let report = Run::new().train(&c).unwrap();
    let error = report.error.unwrap();
    assert!(error.contains("broken.tsv:3001: field 2 (I1)"), "{error}");
    // Everything before the bad chunk was trained and evaluated.
    assert_eq!(report.examples, 2944); // 23 full batches of 128 before the chunk holding line 3001
    assert_eq!(report.history.last().unwrap().examples, 2944);
    assert!(report.final_metrics.logloss.is_finite());
}

/// Every replica is scored as it is, whatever the algorithm: independent
/// replicas end apart; replicas averaged after every step end close (a
/// trainer with one batch more than the other takes it alone) and score
/// about as the final model, their mean, does. Static shares: under shared
/// dealing a trainer starved of CPU (a loaded CI machine) may take few of the
/// batches, and its replica then ends near where it started, not apart.
#[test]
fn every_replica_is_scored_on_its_own_with_the_distance_between_them() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut c = synthetic_config(dir.path(), 20_000);
    lr_adagrad(&mut c);
    c.train.trainers = 2;
    c.data.dealing = Some(Dealing::Static);
    c.train.eval_every = 0;
    let run = |c: &mut Config, sync: &str| {
        c.sync.algorithm = sync.parse().unwrap();
        Run::new().train(c).unwrap()
    };
    let apart = run(&mut c, "none");
    assert_eq!(apart.replica_metrics.len(), 2);
    assert!(
        apart.consensus_distance > 1e-4,
        "{}",
        apart.consensus_distance
    );
    assert_ne!(apart.replica_metrics[0].ne, apart.replica_metrics[1].ne);

    let together = run(&mut c, "fr-ma:1");
    assert_eq!(together.replica_metrics.len(), 2);
    assert!(
        together.consensus_distance < apart.consensus_distance / 5.0,
        "averaged every step {}, never {}",
        together.consensus_distance,
        apart.consensus_distance
    );
    for replica in &together.replica_metrics {
        assert!((replica.ne - together.final_metrics.ne).abs() < 0.005);
    }
}

/// `sync-sgd` over m trainers is one trainer with an m× batch: the group's
/// dense gradients averaged, its shared (embedding) gradients combined and
/// applied once per row — under plain SGD, and under Adagrad, whose sums of
/// squares would differ if each member applied its share of a row's update.
#[test]
fn sync_sgd_over_two_trainers_is_one_trainer_with_twice_the_batch() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    for (optimizer, rows) in [
        (OptimizerKind::Sgd, "sgd"),
        (OptimizerKind::Adagrad, "adagrad"),
    ] {
        // 80 batches of 256 rows: every trainer's chunks whole.
        let mut c = synthetic_config(dir.path(), 20_480);
        let mut dlrm = DlrmSettings::default();
        dlrm.bottom_mlp = vec![8];
        dlrm.top_mlp = vec![8];
        c.model.kind = ModelKind::Dlrm(dlrm);
        c.model.embedding_dim = 4;
        c.data.table_size = 50;
        c.optim.dense = optimizer;
        c.optim.sparse = rows.into();
        c.optim.dense_lr = 0.05;
        c.optim.sparse_lr = Some(0.05);
        c.train.eval_every = 0;
        c.train.seed = 7;
        c.sync.algorithm = "sync-sgd".parse().unwrap();
        c.train.batch_size = 256;
        let one = Run::new().train(&c).unwrap();
        c.train.trainers = 2;
        c.train.batch_size = 128;
        let two = Run::new().train(&c).unwrap();
        let (a, b) = (one.final_metrics, two.final_metrics);
        assert_eq!(one.steps, 80);
        assert_eq!(two.steps, 160);
        assert!(
            (a.logloss - b.logloss).abs() < 1e-5 && (a.auc - b.auc).abs() < 1e-5,
            "{optimizer:?}: one trainer, batch 256: logloss {} AUC {}; two, batch 128: {} {}",
            a.logloss,
            a.auc,
            b.logloss,
            b.auc
        );
    }
}
