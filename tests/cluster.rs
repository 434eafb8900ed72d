//! Several trainers on CTR data through the runtime: quality against one trainer
//! and against no synchronization (whose NE is the mean over its independent
//! replicas).

use shadowsync::config::{Config, ModelKind, OptimPreset, OptimizerKind};
use shadowsync::runtime::events::Event;
use shadowsync::runtime::faults::{Fault, FaultKind};
use shadowsync::train::{train, Observer, TrainReport};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// The tests compare NE across runs of four trainers on two cores: run them one
/// at a time, so that one test's load does not shift another's figures.
fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Enough data for the replicas' dense layers to settle: at 160k–320k rows the
/// averaged replicas varied from run to run as much as they trailed one trainer.
const ROWS: u64 = 640_000;

/// One trainer's batch; four trainers take a quarter of it each.
const BATCH: usize = 128;

fn config(dir: &Path, trainers: usize, algorithm: &str) -> Config {
    let mut c = Config::default();
    c.data.synthetic.train_rows = ROWS;
    c.data.synthetic.test_rows = 20_000;
    c.data.synthetic.seed = 3;
    c.data.synthetic.dir = Some(dir.to_path_buf());
    c.data.table_size = 20_000;
    c.model.kind = ModelKind::Deepfm;
    c.model.embedding_dim = 8;
    c.model.deep_mlp = vec![64, 64];
    c.optim.dense = OptimizerKind::Adagrad;
    c.optim.dense_lr = 0.02;
    c.optim.sparse = OptimizerKind::Adagrad;
    c.optim.sparse_lr = 0.05;
    c.train.eval_every = 0;
    c.train.trainers = trainers;
    c.sync.algorithm = algorithm.parse().unwrap();
    c.sync.min_interval_ms = 0.0;
    c
}

fn run(config: &Config) -> TrainReport {
    let report = train(config, &mut ()).unwrap();
    let algorithm = &config.sync.algorithm;
    assert!(report.error.is_none(), "{algorithm}: {:?}", report.error);
    assert_eq!(
        report.examples, ROWS,
        "{algorithm}: one pass, every example once"
    );
    report
}

/// One trainer with batches of [`BATCH`], or four trainers whose batches of a
/// quarter of it add up to the same global batch (the comparison DDP makes):
/// at a 4× larger global batch even averaging every step (`fr-ma:1`) trailed
/// one trainer by 0.0034 NE, which left run-to-run noise too little room.
fn same_global_batch(dir: &Path, trainers: usize, algorithm: &str) -> Config {
    let mut c = config(dir, trainers, algorithm);
    c.train.batch_size = BATCH / trainers;
    c
}

/// Median test NE of three runs: four asynchronous trainers on two shared cores
/// vary from run to run (shadow-ma by up to 0.006 NE here, more on a loaded
/// machine), a single run's timing must not decide the test.
fn median_of_three(config: &Config) -> TrainReport {
    let mut runs: Vec<TrainReport> = (0..3).map(|_| run(config)).collect();
    runs.sort_by(|a, b| a.final_metrics.ne.total_cmp(&b.final_metrics.ne));
    runs.swap_remove(1)
}

/// Sync gaps of a run's trainers, for the messages.
fn gaps(report: &TrainReport) -> Vec<String> {
    let stats = &report.cluster.trainer_stats;
    stats
        .iter()
        .map(|s| format!("{:.1}", s.mean_sync_gap))
        .collect()
}

/// Made under Adagrad, the default. Under plain SGD one trainer is no yardstick:
/// four trainers at batches of 32 step the shared embedding table four times as
/// often as one at 128, and one trainer ended 0.018 NE behind them.
#[test]
fn four_shadow_ma_trainers_match_one_trainer() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let single = run(&same_global_batch(dir.path(), 1, "none"))
        .final_metrics
        .ne;
    let shadow = median_of_three(&same_global_batch(dir.path(), 4, "shadow-ma"));
    let shadow_ne = shadow.final_metrics.ne;
    eprintln!(
        "test NE: one trainer {single:.4}, 4 × shadow-ma {shadow_ne:.4} (median of 3; \
         sync gap {:?} steps)",
        gaps(&shadow)
    );
    assert!(
        (shadow_ne - single).abs() <= 0.005,
        "shadow-ma NE {shadow_ne:.4} vs one trainer {single:.4}"
    );
    let stats = &shadow.cluster.trainer_stats;
    assert_eq!(stats.len(), 4);
    assert!(
        stats
            .iter()
            .all(|s| s.syncs > 0 && s.examples >= ROWS / 4 - 1_000),
        "{stats:?}"
    );
}

/// Made under plain SGD 0.1 (the DLRM reference preset), where the replicas'
/// dense gradient noise at batches of 32 is what averaging takes away: over 4
/// seeds, 4 × none 0.8091 ± 0.0033 and 4 × shadow-ma 0.7911 ± 0.0022, but a
/// clean-clone CI run had one shadow-ma run at 0.8080, hence medians. Under
/// Adagrad, whose dense steps shrink, none trailed shadow-ma by ~0.003, no more
/// than one run differs from the next (a CI run had the median of three reversed
/// by 0.001).
#[test]
fn four_shadow_ma_trainers_beat_no_sync_under_plain_sgd() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let plain_sgd = |algorithm| {
        let mut c = same_global_batch(dir.path(), 4, algorithm);
        c.optim = OptimPreset::DlrmReference.into();
        c
    };
    let none = median_of_three(&plain_sgd("none")).final_metrics.ne;
    let shadow = median_of_three(&plain_sgd("shadow-ma"));
    let shadow_ne = shadow.final_metrics.ne;
    eprintln!(
        "test NE under plain SGD (medians of 3): 4 × none {none:.4}, 4 × shadow-ma \
         {shadow_ne:.4} (sync gap {:?} steps)",
        gaps(&shadow)
    );
    assert!(
        shadow_ne < none - 0.006,
        "shadow-ma NE {shadow_ne:.4} vs none {none:.4}: averaging should take a third \
         of the 0.018 measured off"
    );
}

/// Keeps the cluster's event stream.
struct KeepEvents(Option<crossbeam_channel::Receiver<shadowsync::runtime::events::Event>>);

impl Observer for KeepEvents {
    fn cluster_started(&mut self, events: crossbeam_channel::Receiver<Event>) {
        self.0 = Some(events);
    }
}

#[test]
fn failures_and_a_diverging_replica_in_two_of_four_trainers_cost_little_ne() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let clean = run(&config(dir.path(), 4, "shadow-ma")).final_metrics.ne;
    let fault = |trainer, kind, at_step, every| Fault {
        trainer,
        kind,
        at_step,
        every,
    };
    let mut c = config(dir.path(), 4, "shadow-ma");
    c.faults = vec![
        fault(1, FaultKind::Error, 50, 97),
        fault(1, FaultKind::Panic, 75, 151),
        // An infinite learning rate: trainer 2's replica turns NaN five times.
        fault(2, FaultKind::Diverge, 100, 250),
    ];
    let mut events = KeepEvents(None);
    let faulty = train(&c, &mut events).unwrap();
    assert!(faulty.error.is_none(), "{:?}", faulty.error);
    let causes: Vec<(usize, String)> = events
        .0
        .iter()
        .flat_map(|rx| rx.try_iter())
        .filter_map(|e| match e {
            Event::TrainerRecovered { trainer, cause, .. } => Some((trainer, cause)),
            _ => None,
        })
        .collect();
    eprintln!("recoveries: {causes:?}");
    assert_eq!(faulty.examples, ROWS, "no example lost or trained twice");
    let stats = &faulty.cluster.trainer_stats;
    let recoveries: Vec<u64> = stats.iter().map(|s| s.recoveries).collect();
    // Errors at 50, 147, ... and panics at 75, 226, ... below ~1250 steps: 13 + 8.
    assert_eq!(recoveries[0] + recoveries[3], 0, "{recoveries:?}");
    assert_eq!(recoveries[1], 21, "{recoveries:?}");
    // Five divergences; a shadow write-back may cure one before the trainer's
    // check, or race a reload and leave NaN for one more recovery.
    assert!((1..=10).contains(&recoveries[2]), "{recoveries:?}");
    assert!(
        stats
            .iter()
            .enumerate()
            .all(|(i, s)| i == 2 || s.abstentions == 0),
        "only trainer 2 may sit out a round: {stats:?}"
    );
    let ne = faulty.final_metrics.ne;
    eprintln!("test NE: clean {clean:.4}, with faults {ne:.4}");
    assert!(
        (ne - clean).abs() <= 0.01,
        "with faults {ne:.4} vs clean {clean:.4}"
    );
}
