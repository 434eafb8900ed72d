//! A custom component plugged into a running cluster: a monitor that consumes the
//! cluster's event stream (every sync written back, every round's groups, every
//! trainer finishing) on its own thread and reports, once a second, the round, each
//! trainer's sync count and the worst staleness seen — the kind of watchdog a user writes for their own setup.
//!
//! ```sh
//! cargo run --release --example sync_monitor
//! ```

use shadowsync::config::{Config, OptimizerKind};
use shadowsync::runtime::events::Event;
use shadowsync::runtime::sync::LinkModel;
use shadowsync::train::{train, Observer};
use std::time::{Duration, Instant};

/// Passes the cluster's event stream to the monitor when training starts.
struct HandOver(crossbeam_channel::Sender<crossbeam_channel::Receiver<Event>>);

impl Observer for HandOver {
    fn cluster_started(&mut self, events: crossbeam_channel::Receiver<Event>) {
        let _ = self.0.send(events);
    }
}

/// Per-trainer tallies of the event stream.
#[derive(Default)]
struct Monitor {
    syncs: Vec<u64>,
    worst_staleness: Vec<u64>,
    /// Rounds the group coordinator has handed out.
    rounds: u64,
    /// Failed or diverged steps, sync rounds and service requests recovered from.
    recoveries: u64,
    /// Group members timed out of a round.
    timeouts: u64,
    finished: usize,
}

impl Monitor {
    fn observe(&mut self, event: &Event) {
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
            Event::TrainerFinished { .. } | Event::TrainerFailed { .. } => self.finished += 1,
            _ => {} // abstentions, rejoins, and kinds of events to come
        }
    }
}

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.data.synthetic.train_rows = 200_000;
    config.data.synthetic.test_rows = 20_000;
    // Adagrad on both parts: on this little data, DLRM's plain SGD 0.1 split
    // over several trainers barely leaves the base rate.
    config.optim.dense = OptimizerKind::Adagrad;
    config.optim.dense_lr = 0.02;
    config.optim.sparse = OptimizerKind::Adagrad;
    config.optim.sparse_lr = 0.05;
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

    // The training run on its own thread; its observer hands the cluster's event
    // stream over to the monitor.
    let trainers = config.train.trainers;
    let (events_tx, events_rx) = crossbeam_channel::bounded(1);
    let run = std::thread::spawn(move || train(&config, &mut HandOver(events_tx)));
    let events = events_rx.recv()?;
    let mut monitor = Monitor::default();
    let mut last_report = Instant::now();
    while monitor.finished < trainers {
        if let Ok(event) = events.recv_timeout(Duration::from_millis(100)) {
            monitor.observe(&event);
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            println!(
                "round {}: syncs per trainer {:?}, worst staleness {:?}",
                monitor.rounds, monitor.syncs, monitor.worst_staleness
            );
        }
    }
    let report = run
        .join()
        .map_err(|_| anyhow::anyhow!("the training thread panicked"))??;
    println!(
        "done: {} examples, test NE {:.4}",
        report.examples, report.final_metrics.ne
    );
    println!(
        "final syncs per trainer {:?}, worst staleness {:?}, recoveries {}, peers timed out {}",
        monitor.syncs, monitor.worst_staleness, monitor.recoveries, monitor.timeouts
    );
    Ok(())
}
