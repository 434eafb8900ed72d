//! A custom component plugged into a running cluster: a [`Monitor`] that sees the
//! cluster's event stream (every sync written back, every round's groups, every
//! recovery) on its own thread and reports, once a second, the round, each
//! trainer's sync count and the worst staleness seen: the kind of watchdog a user
//! writes for their own setup. It is added by the run's observer.
//!
//! ```sh
//! cargo run --release --example sync_monitor
//! ```

use shadowsync::config::Config;
use shadowsync::runtime::events::Event;
use shadowsync::runtime::monitor::{ClusterControl, Monitor};
use shadowsync::runtime::sync::LinkModel;
use shadowsync::train::{Observer, Run};
use std::time::{Duration, Instant};

/// Per-trainer tallies of the event stream, reported once a second.
struct SyncTally {
    syncs: Vec<u64>,
    worst_staleness: Vec<u64>,
    /// Rounds the group coordinator has handed out.
    rounds: u64,
    /// Failed or diverged steps, sync rounds and service requests recovered from.
    recoveries: u64,
    /// Group members timed out of a round.
    timeouts: u64,
    last_report: Instant,
}

impl Monitor for SyncTally {
    fn on_event(&mut self, event: &Event, _control: &ClusterControl) {
        match *event {
            Event::Synced {
                trainer, staleness, ..
            } => {
                if self.syncs.len() <= trainer {
                    self.syncs.resize(trainer + 1, 0);
                    self.worst_staleness.resize(trainer + 1, 0);
                }
                self.syncs[trainer] += 1;
                self.worst_staleness[trainer] = self.worst_staleness[trainer].max(staleness);
            }
            Event::Regrouped { .. } => self.rounds += 1,
            Event::TrainerRecovered { .. }
            | Event::SyncRecovered { .. }
            | Event::ServiceRecovered { .. } => self.recoveries += 1,
            Event::PeerTimedOut { .. } => self.timeouts += 1,
            _ => {} // finishing, abstentions, rejoins, and kinds of events to come
        }
        if self.last_report.elapsed() >= Duration::from_secs(1) {
            self.last_report = Instant::now();
            println!(
                "round {}: syncs per trainer {:?}, worst staleness {:?}",
                self.rounds, self.syncs, self.worst_staleness
            );
        }
    }

    fn on_end(&mut self) {
        println!(
            "final syncs per trainer {:?}, worst staleness {:?}, recoveries {}, peers timed out {}",
            self.syncs, self.worst_staleness, self.recoveries, self.timeouts
        );
    }
}

/// Adds the monitor to the run.
struct WithMonitor;

impl Observer for WithMonitor {
    fn monitors(&mut self) -> Vec<Box<dyn Monitor>> {
        vec![Box::new(SyncTally {
            syncs: Vec::new(),
            worst_staleness: Vec::new(),
            rounds: 0,
            recoveries: 0,
            timeouts: 0,
            last_report: Instant::now(),
        })]
    }
}

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
    // A slow simulated network: 1 Gbit/s, 200 µs, and trainer 3 on a 4× slower link.
    config.sync.link = LinkModel {
        latency_us: 200.0,
        bandwidth_gbps: 1.0,
        slow_trainer: Some(3),
        slow_factor: 4.0,
    };

    let report = Run::new().observer(&mut WithMonitor).train(&config)?;
    println!(
        "done: {} examples, test NE {:.4}",
        report.examples, report.final_metrics.ne
    );
    Ok(())
}
