//! A 4-trainer CTR run: DLRM on built-in synthetic data, synchronized in the
//! background by shadow model averaging over DS-Sync groups of 2, reshuffled at
//! random every round.
//!
//! ```sh
//! cargo run --release --example four_trainers
//! ```

use shadowsync::config::Config;
use shadowsync::runtime::sync::Schedule;
use shadowsync::train::Run;

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.data.synthetic.train_rows = 200_000;
    config.data.synthetic.test_rows = 20_000;
    // The default Adagrad at the dense rate of the built-in experiments (twice
    // the default's).
    config.optim.dense_lr = 0.02;
    config.train.trainers = 4;
    config.train.eval_every = 0;
    config.sync.algorithm = "shadow-ma".parse()?;
    config.sync.group_size = 2;
    config.sync.schedule = Schedule::Random;

    let report = Run::new().train(&config)?;
    let m = report.final_metrics;
    println!(
        "{} examples in {:.1} s ({:.0} examples/s); test NE {:.4}, AUC {:.4}",
        report.examples, report.train_seconds, report.examples_per_sec, m.ne, m.auc
    );
    for s in &report.cluster.trainer_stats {
        println!(
            "trainer {}: {} steps, {:.0} examples/s, {} syncs, sync gap {:.1}, staleness {:.1} (max {})",
            s.trainer, s.steps, s.examples_per_sec, s.syncs, s.mean_sync_gap, s.mean_staleness, s.max_staleness
        );
    }
    if let Some(last) = report.cluster.consensus.last() {
        println!(
            "consensus distance at {:.1} s: {:.3e}",
            last.seconds, last.distance
        );
    }
    Ok(())
}
