//! Your own component beside a running cluster: early stopping. A
//! [`Monitor`] sees every event of the run from the first step, the live
//! evaluations among them, and stops training once the test NE reaches a
//! target; what was trained is kept, evaluated and reported.
//!
//! ```sh
//! cargo run --release --example custom_actor
//! ```

use shadowsync::config::Config;
use shadowsync::runtime::events::Event;
use shadowsync::runtime::monitor::{ClusterControl, Monitor};
use shadowsync::train::{Observer, Run};

/// Stops the run at the first live evaluation with NE at or below `target`.
struct EarlyStop {
    target: f64,
    syncs: u64,
}

impl Monitor for EarlyStop {
    fn on_event(&mut self, event: &Event, control: &ClusterControl) {
        match event {
            Event::Synced { .. } => self.syncs += 1,
            Event::Evaluated { examples, metrics } => {
                let ne = metrics.iter().find(|(name, _)| name == "ne").map(|m| m.1);
                let Some(ne) = ne else { return };
                println!(
                    "{examples:>8} examples: test NE {ne:.4} ({} syncs so far)",
                    self.syncs
                );
                if ne <= self.target && !control.stopped() {
                    println!("target NE {} reached: stopping", self.target);
                    control.stop();
                }
            }
            _ => {}
        }
    }
}

/// Hands the training run its monitor.
struct WithEarlyStop(f64);

impl Observer for WithEarlyStop {
    fn monitors(&mut self) -> Vec<Box<dyn Monitor>> {
        vec![Box::new(EarlyStop {
            target: self.0,
            syncs: 0,
        })]
    }
}

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.data.synthetic.train_rows = 400_000;
    config.data.synthetic.test_rows = 20_000;
    // The default Adagrad at the dense rate of the built-in experiments (twice
    // the default's).
    config.optim.dense_lr = 0.02;
    config.train.trainers = 4;
    config.train.eval_every = 20_000;
    config.sync.algorithm = "shadow-ma".parse()?;

    let report = Run::new()
        .observer(&mut WithEarlyStop(0.85))
        .train(&config)?;
    println!(
        "stopped after {} of {} examples; final test NE {:.4}, AUC {:.4}",
        report.examples,
        config.data.synthetic.train_rows,
        report.final_metrics.ne,
        report.final_metrics.auc
    );
    Ok(())
}
