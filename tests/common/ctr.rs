//! The CTR runs the cluster test and the claims share: four DeepFM trainers
//! under Adagrad on 640,000 synthetic rows, one pass.

#![allow(dead_code)] // each test binary uses its own part

use shadowsync::config::{Config, DeepFmSettings, ModelKind, OptimizerKind};
use shadowsync::train::{Run, TrainReport};
use std::path::Path;

/// Enough data for the replicas' dense layers to settle: at 160k–320k rows the
/// averaged replicas varied from run to run as much as they trailed one trainer.
pub(crate) const ROWS: u64 = 640_000;

/// One trainer's batch; four trainers take a quarter of it each.
pub(crate) const BATCH: usize = 128;

pub(crate) fn config(dir: &Path, trainers: usize, algorithm: &str) -> Config {
    let mut c = Config::default();
    c.data.synthetic.train_rows = ROWS;
    c.data.synthetic.test_rows = 20_000;
    c.data.synthetic.seed = 3;
    c.data.synthetic.dir = Some(dir.to_path_buf());
    c.data.table_size = 20_000;
    let mut deepfm = DeepFmSettings::default();
    deepfm.deep_mlp = vec![64, 64];
    c.model.kind = ModelKind::DeepFm(deepfm);
    c.model.embedding_dim = 8;
    c.optim.dense = OptimizerKind::Adagrad;
    c.optim.dense_lr = 0.02;
    c.optim.sparse = "adagrad".into();
    c.optim.sparse_lr = Some(0.05);
    c.train.eval_every = 0;
    c.train.trainers = trainers;
    c.sync.algorithm = algorithm.parse().unwrap();
    if let Some(loops) = c.sync.algorithm.loops_mut() {
        loops.min_interval_ms = 0.0;
    }
    c
}

pub(crate) fn run(config: &Config) -> TrainReport {
    let report = Run::new().train(config).unwrap();
    let algorithm = &config.sync.algorithm;
    assert!(report.error.is_none(), "{algorithm}: {:?}", report.error);
    assert_eq!(
        report.examples, ROWS,
        "{algorithm}: one pass, every example once"
    );
    report
}

/// One trainer with batches of [`BATCH`], or several trainers whose batches
/// add up to the same global batch (the comparison DDP makes): at a 4× larger
/// global batch even averaging every step (`fr-ma:1`) trailed one trainer by
/// 0.0034 NE.
pub(crate) fn same_global_batch(dir: &Path, trainers: usize, algorithm: &str) -> Config {
    let mut c = config(dir, trainers, algorithm);
    c.train.batch_size = BATCH / trainers;
    c
}
