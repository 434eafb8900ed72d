//! Runtime benchmark: N trainers × every algorithm × with and without a
//! simulated link, on one synthetic data set, side by side in one run.
//!
//! ```text
//! cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ROWS=100000 SHADOWSYNC_BENCH_TRAINERS=2,4 cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ALGORITHMS=none,shadow-ma,fr-ma:1 cargo bench --bench cluster_scaling
//! ```
//!
//! Defaults: 1M training rows, N ∈ {1, 2, 4, 8}, DLRM (Kaggle shape), batch 128,
//! every algorithm, link off and 1 Gbit/s + 200 µs. Prints per run: total
//! examples/s, its ratio to `none` at the same N and link, test NE, mean sync gap
//! and staleness; then the targets (shadow ≥ 0.95 of `none` with the link;
//! `fr-*:1` and `sync-sgd` below; NE of shadow ≤ foreground at the largest N).

use anyhow::Context;
use shadowsync::config::Config;
use shadowsync::runtime::sync::{Algorithm, LinkModel};
use shadowsync::train::{train, TrainReport};

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

struct Row {
    trainers: usize,
    link: &'static str,
    algorithm: Algorithm,
    report: TrainReport,
}

fn mean_of(report: &TrainReport, f: fn(&shadowsync::runtime::stats::TrainerStats) -> f64) -> f64 {
    let stats = &report.cluster.trainer_stats;
    stats.iter().map(f).sum::<f64>() / stats.len().max(1) as f64
}

fn main() -> anyhow::Result<()> {
    let rows: u64 = std::env::var("SHADOWSYNC_BENCH_ROWS")
        .map_or(Ok(1_000_000), |v| v.parse())
        .context("SHADOWSYNC_BENCH_ROWS")?;
    let trainers: Vec<usize> = env_list("SHADOWSYNC_BENCH_TRAINERS", "1,2,4,8")
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .context("SHADOWSYNC_BENCH_TRAINERS")?;
    let algorithms: Vec<Algorithm> = env_list(
        "SHADOWSYNC_BENCH_ALGORITHMS",
        "none,sync-sgd,fr-ma:1,fr-ma:10,fr-easgd:10,fr-bmuf:10,shadow-ma,shadow-easgd,shadow-bmuf",
    )
    .iter()
    .map(|s| s.parse())
    .collect::<Result<_, _>>()?;
    let links = [
        ("off", LinkModel::default()),
        (
            "1Gb/200us",
            LinkModel {
                latency_us: 200.0,
                bandwidth_gbps: 1.0,
                ..LinkModel::default()
            },
        ),
    ];

    let mut results = Vec::new();
    for &n in &trainers {
        for (link_name, link) in links {
            for &algorithm in &algorithms {
                if n == 1 && algorithm != Algorithm::None {
                    continue; // nothing to synchronize
                }
                let mut config = Config::default();
                config.data.synthetic.train_rows = rows;
                config.data.synthetic.test_rows = rows / 10;
                config.train.eval_every = 0;
                config.train.trainers = n;
                config.sync.algorithm = algorithm;
                config.sync.link = link;
                eprintln!("N={n} link={link_name} {algorithm}");
                let report = train(&config, &mut ())?;
                results.push(Row {
                    trainers: n,
                    link: link_name,
                    algorithm,
                    report,
                });
            }
        }
    }

    println!("\ncluster_scaling: DLRM Kaggle shape, batch 128, {rows} synthetic rows, one pass");
    println!(
        "{:>3} {:>10} {:>14} {:>11} {:>8} {:>8} {:>9} {:>10}",
        "N", "link", "algorithm", "examples/s", "/none", "test NE", "sync gap", "staleness"
    );
    for row in &results {
        let none = results
            .iter()
            .find(|r| {
                r.trainers == row.trainers && r.link == row.link && r.algorithm == Algorithm::None
            })
            .map_or(f64::NAN, |r| r.report.examples_per_sec);
        println!(
            "{:>3} {:>10} {:>14} {:>11.0} {:>8.2} {:>8.4} {:>9.1} {:>10.1}",
            row.trainers,
            row.link,
            row.algorithm.to_string(),
            row.report.examples_per_sec,
            row.report.examples_per_sec / none,
            row.report.final_metrics.ne,
            mean_of(&row.report, |s| s.mean_sync_gap),
            mean_of(&row.report, |s| s.mean_staleness),
        );
    }
    Ok(())
}
