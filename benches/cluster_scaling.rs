//! Runtime benchmark: N trainers × every algorithm × with and without a
//! simulated link, on one synthetic data set, side by side in one run.
//!
//! ```text
//! cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ROWS=100000 SHADOWSYNC_BENCH_TRAINERS=2,4 cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ALGORITHMS=none,shadow-ma,fr-ma:1 SHADOWSYNC_BENCH_LINKS=1g cargo bench --bench cluster_scaling
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
    let links: Vec<(&str, LinkModel)> = env_list("SHADOWSYNC_BENCH_LINKS", "off,1g")
        .iter()
        .map(|name| match name.as_str() {
            "off" => Ok(("off", LinkModel::default())),
            "1g" => Ok((
                "1Gb/200us",
                LinkModel {
                    latency_us: 200.0,
                    bandwidth_gbps: 1.0,
                    ..LinkModel::default()
                },
            )),
            other => anyhow::bail!("SHADOWSYNC_BENCH_LINKS: unknown link {other:?} (off, 1g)"),
        })
        .collect::<anyhow::Result<_>>()?;

    let mut results = Vec::new();
    for &n in &trainers {
        for &(link_name, link) in &links {
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
        println!(
            "{:>3} {:>10} {:>14} {:>11.0} {:>8.2} {:>8.4} {:>9.1} {:>10.1}",
            row.trainers,
            row.link,
            row.algorithm.to_string(),
            row.report.examples_per_sec,
            ratio_to_none(&results, row),
            row.report.final_metrics.ne,
            mean_of(&row.report, |s| s.mean_sync_gap),
            mean_of(&row.report, |s| s.mean_staleness),
        );
    }
    print_targets(&results);
    Ok(())
}

/// Examples/s of `row` ÷ those of `none` at the same N and link.
fn ratio_to_none(results: &[Row], row: &Row) -> f64 {
    results
        .iter()
        .find(|r| {
            r.trainers == row.trainers && r.link == row.link && r.algorithm == Algorithm::None
        })
        .map_or(f64::NAN, |none| {
            row.report.examples_per_sec / none.report.examples_per_sec
        })
}

/// The issue's targets, met or not, from the rows measured.
fn print_targets(results: &[Row]) {
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let with_link = |r: &&Row| r.link != "off" && r.trainers > 1;
    println!("\ntargets (simulated link, N > 1):");
    let shadow: Vec<_> = results
        .iter()
        .filter(with_link)
        .filter(|r| matches!(r.algorithm, Algorithm::Shadow { .. }))
        .map(|r| ratio_to_none(results, r))
        .collect();
    if !shadow.is_empty() {
        let worst = shadow.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "  every shadow algorithm ≥ 0.95 of none's examples/s: {} (lowest {worst:.2})",
            verdict(worst >= 0.95)
        );
    }
    let blocking: Vec<_> = results
        .iter()
        .filter(with_link)
        .filter(|r| {
            matches!(
                r.algorithm,
                Algorithm::SyncSgd | Algorithm::Foreground { every: 1, .. }
            )
        })
        .map(|r| ratio_to_none(results, r))
        .collect();
    if !blocking.is_empty() {
        let best = blocking.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "  sync-sgd and fr-*:1 clearly below (< 0.9): {} (highest {best:.2})",
            verdict(best < 0.9)
        );
    }
    let Some(largest) = results.iter().map(|r| r.trainers).max() else {
        return;
    };
    println!("at N = {largest}, shadow NE ≤ its foreground counterpart's NE:");
    for shadow in results
        .iter()
        .filter(|r| r.trainers == largest && matches!(r.algorithm, Algorithm::Shadow { .. }))
    {
        for fore in results.iter().filter(|r| {
            r.trainers == largest
                && r.link == shadow.link
                && matches!(r.algorithm, Algorithm::Foreground { .. })
                && r.algorithm.rule() == shadow.algorithm.rule()
        }) {
            let (s, f) = (shadow.report.final_metrics.ne, fore.report.final_metrics.ne);
            println!(
                "  link {:>9}: {} {s:.4} vs {} {f:.4}: {}",
                shadow.link,
                shadow.algorithm,
                fore.algorithm,
                verdict(s <= f)
            );
        }
    }
}
