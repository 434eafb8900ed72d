//! What a finished run prints, and how an error reads.

use crate::metrics::Metrics;
use crate::report::mean_std;
use crate::runtime::sync::Algorithm;
use crate::train::{DistributedReport, TrainReport};

/// The run's summary: speed, sync, quality, then what happened along the way.
pub(crate) fn print_summary(report: &TrainReport) {
    print_speed(report);
    if let Some(d) = &report.distributed {
        print_distributed(d);
    }
    print_sync(report);
    print_quality(report);
    print_events(report);
}

/// Examples/s over the training clock and over the wall clock.
fn print_speed(report: &TrainReport) {
    let trainers = job_trainers(report);
    println!(
        "trained {} on {} examples in {:.1} s: {:.0} examples/s ({} trainer{}{}, {})",
        report.config.model.kind,
        report.examples,
        report.train_seconds,
        report.examples_per_sec,
        trainers,
        if trainers == 1 { "" } else { "s" },
        report
            .distributed
            .as_ref()
            .map_or(String::new(), |d| format!(" in {} processes", d.processes)),
        report.cluster.algorithm,
    );
    let wall = &report.wall;
    println!(
        "launch to results {:.1} s: {:.0} examples/s ({:.1} s to the first batch, {:.1} s \
         training, {:.1} s scoring)",
        wall.to_results_seconds,
        wall.examples_per_sec,
        wall.to_first_batch_seconds,
        wall.training_seconds,
        wall.scoring_seconds,
    );
}

/// Trainers joined and left, the sync's rounds and bytes, examples dropped.
fn print_sync(report: &TrainReport) {
    let cluster = &report.cluster;
    let trainers = job_trainers(report);
    if !report.config.elastic.is_empty() {
        let at_start = report.config.train.trainers;
        let joined: Vec<usize> = (at_start..cluster.trainers).collect();
        println!(
            "elastic: {at_start} trainers at the start, {} at the end; joined: {joined:?}, left: {:?}",
            cluster.trainers - cluster.departed.len(),
            cluster.departed,
        );
    }
    if trainers > 1 && cluster.algorithm != Algorithm::None {
        let n = cluster.trainer_stats.len() as f64;
        let mean = |f: fn(&crate::runtime::stats::TrainerStats) -> f64| {
            cluster.trainer_stats.iter().map(f).sum::<f64>() / n
        };
        println!(
            "sync: groups of {} ({}), {:.0} syncs per trainer, sync gap {:.1} steps, staleness {:.1} steps{}",
            cluster.group_size,
            report.config.sync.schedule,
            mean(|s| s.syncs as f64),
            mean(|s| s.mean_sync_gap),
            mean(|s| s.mean_staleness),
            cluster.sync_cpu_share().map_or(String::new(), |share| format!(
                ", sync CPU {:.1}% of the trainers'",
                100.0 * share
            )),
        );
        println!("sync payloads: {}", payload_bytes(report));
    }
    let dropped: u64 = cluster
        .trainer_stats
        .iter()
        .map(|s| s.dropped_examples)
        .sum();
    if dropped > 0 {
        println!(
            "{dropped} examples of the last round left untrained: sync-sgd steps every \
             trainer together, and some had one batch more than the others (DDP's drop_last)"
        );
    }
}

/// The final model's test figures, each replica's, and the oracle's.
fn print_quality(report: &TrainReport) {
    let m = &report.final_metrics;
    println!(
        "test ({} examples): NE {:.4}  AUC {:.4}  logloss {:.4}  calibration {:.3}",
        m.examples, m.ne, m.auc, m.logloss, m.calibration
    );
    if m.ctr == 0.0 || m.ctr == 1.0 {
        println!(
            "NE and AUC are undefined: every test example is a {} (CTR {}), and both need \
             clicks and non-clicks",
            if m.ctr == 0.0 { "non-click" } else { "click" },
            m.ctr
        );
    }
    let replicas = &report.replica_metrics;
    if replicas.len() > 1 {
        let spread = |f: fn(&Metrics) -> f64| mean_std(&replicas.iter().map(f).collect::<Vec<_>>());
        let ((ne, ne_sd), (auc, auc_sd)) = (spread(|m| m.ne), spread(|m| m.auc));
        println!(
            "each of the {} replicas on its own: NE {ne:.4} ± {ne_sd:.4}  AUC {auc:.4} ± {auc_sd:.4}; \
             consensus distance {:.3e}",
            replicas.len(),
            report.consensus_distance
        );
    }
    if let Some(o) = &report.data.test_oracle {
        println!(
            "oracle (true probabilities) on test: NE {:.4}  logloss {:.4}",
            o.ne, o.logloss
        );
    }
}

/// Resumes, checkpoints, settings that never took effect, lines skipped.
fn print_events(report: &TrainReport) {
    if let Some(resumed) = &report.resumed {
        println!(
            "resumed from {} ({} examples trained before it)",
            resumed.checkpoint.display(),
            resumed.examples
        );
        for rejected in &resumed.rejected {
            println!("  unusable newer checkpoint: {rejected}");
        }
    }
    if let Some(path) = &report.checkpoint {
        println!("checkpoint: {}", path.display());
    }
    for error in &report.checkpoint_errors {
        println!("checkpoint not written: {error}");
    }
    for error in &report.checkpoints_unpruned {
        println!("older checkpoints not removed (pruning failed): {error}");
    }
    for setting in &report.unreached_settings {
        println!("never took effect: {setting}");
    }
    for (name, read) in [
        ("train", &report.data.train_read),
        ("test", &report.data.test_read),
    ] {
        if read.skipped > 0 {
            println!(
                "skipped {} malformed {name} lines of {}; first:",
                read.skipped, read.lines
            );
            for reason in &read.first_skipped {
                println!("  {reason}");
            }
        }
    }
}

/// The trainers of the whole job (of every process).
fn job_trainers(report: &TrainReport) -> usize {
    let cluster = &report.cluster;
    report
        .distributed
        .as_ref()
        .map_or(cluster.trainers, |d| d.job_trainers)
}

/// The dense sync's bytes sent per example, and before compression if
/// compressed.
fn payload_bytes(report: &TrainReport) -> String {
    let cluster = &report.cluster;
    // Two significant digits of a figure under 10 (a sync every few thousand
    // examples sends a fraction of a byte per example).
    let per_example = |bytes: u64| match cluster.per_example(bytes) {
        b if b < 10.0 => format!("{b:.2}"),
        b => format!("{b:.0}"),
    };
    let sent = per_example(cluster.bytes_sent);
    match report.config.sync.compression.as_str() {
        _ if cluster.bytes_sent == 0 => "no dense sync bytes sent".to_string(),
        "none" => format!("{sent} bytes sent per example"),
        codec => format!(
            "{sent} bytes sent per example, {codec}-compressed from {} ({:.1}×)",
            per_example(cluster.bytes_before_compression),
            cluster.bytes_before_compression as f64 / cluster.bytes_sent as f64
        ),
    }
}

/// A process's part in a run across processes: how the tables were kept,
/// bytes sent, memory.
fn print_distributed(d: &DistributedReport) {
    let embeddings = match (&d.table_sync, &d.sharded) {
        (Some(sync), _) => format!("replicated tables, {} merge rounds", sync.rounds),
        (_, Some(rows)) => format!(
            "sharded tables, {} batches fetched, {:.1} s waiting for rows, \
             pushes sent {} / applied here {} ({})",
            rows.fetches,
            rows.wait_seconds,
            rows.pushes_sent.total(),
            rows.pushes_applied.total(),
            match d.unaccounted_pushes.len() {
                0 => "every push of the job applied once".to_string(),
                n => format!("{n} pairs of processes disagree"),
            }
        ),
        (None, None) => "no tables".to_string(),
    };
    println!(
        "across processes (rank {}): {embeddings}; bytes sent per example: dense sync {:.1}, embeddings {:.1}",
        d.process, d.dense_bytes_per_example, d.sparse_bytes_per_example
    );
    let each: Vec<String> = d
        .memory_per_process
        .iter()
        .map(|m| {
            format!(
                "{} ({} peak)",
                mib(m.table_bytes),
                m.peak_rss_bytes.map_or("?".into(), mib)
            )
        })
        .collect();
    println!("embedding rows per process: {}", each.join(", "));
}

/// `bytes` in MiB, for a person.
fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1 << 20) as f64)
}

/// An error's chain of messages, one per line (shadowsync's errors say their
/// causes themselves: a chain is anyhow's context over them).
pub(crate) fn error_text(error: &anyhow::Error) -> String {
    let mut lines = vec![error.to_string()];
    lines.extend(
        error
            .chain()
            .skip(1)
            .map(|cause| format!("  caused by: {cause}")),
    );
    lines.join("\n")
}
