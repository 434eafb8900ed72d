//! Runtime benchmark: N trainers × every algorithm × with and without a
//! simulated link, on one synthetic data set, side by side in one run.
//!
//! ```text
//! cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ROWS=100000 SHADOWSYNC_BENCH_TRAINERS=2,4 cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_ALGORITHMS=none,shadow-ma,fr-ma:1 SHADOWSYNC_BENCH_LINKS=1g cargo bench --bench cluster_scaling
//! SHADOWSYNC_BENCH_REPEATS=3 ...   # every cell 3 times, interleaved; medians reported
//! SHADOWSYNC_BENCH_CONFIG=benches/dlrm-adagrad.toml ...   # model/optimizer from a config
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
use shadowsync::train::{Run, TrainReport};
use std::path::Path;

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// One cell of the grid and its repeated runs.
struct Row {
    trainers: usize,
    link: &'static str,
    algorithm: Algorithm,
    reports: Vec<TrainReport>,
}

impl Row {
    /// Median examples/s over the repeats (robust to a run that the shared
    /// machine slowed down).
    fn examples_per_sec(&self) -> f64 {
        let mut eps: Vec<f64> = self.reports.iter().map(|r| r.examples_per_sec).collect();
        eps.sort_by(f64::total_cmp);
        match eps.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => eps[n / 2],
            n => (eps[n / 2 - 1] + eps[n / 2]) / 2.0,
        }
    }

    /// Smallest and largest examples/s over the repeats.
    fn spread(&self) -> (f64, f64) {
        let eps = self.reports.iter().map(|r| r.examples_per_sec);
        (
            eps.clone().fold(f64::INFINITY, f64::min),
            eps.fold(0.0, f64::max),
        )
    }

    /// Mean over the repeats of `f` of a report.
    fn mean(&self, f: impl Fn(&TrainReport) -> f64) -> f64 {
        self.reports.iter().map(f).sum::<f64>() / self.reports.len().max(1) as f64
    }

    /// Mean test NE.
    fn ne(&self) -> f64 {
        self.mean(|r| r.final_metrics.ne)
    }

    /// Mean over repeats and trainers of a trainer figure.
    fn per_trainer(&self, f: fn(&shadowsync::runtime::stats::TrainerStats) -> f64) -> f64 {
        self.mean(|r| {
            let stats = &r.cluster.trainer_stats;
            stats.iter().map(f).sum::<f64>() / stats.len().max(1) as f64
        })
    }
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

    // Model, optimizer and the rest from a config file, if one is given.
    let base = match std::env::var("SHADOWSYNC_BENCH_CONFIG") {
        Ok(path) => Config::from_file(Path::new(&path)).context("SHADOWSYNC_BENCH_CONFIG")?,
        Err(_) => Config::default(),
    };
    let repeats: usize = std::env::var("SHADOWSYNC_BENCH_REPEATS")
        .map_or(Ok(1), |v| v.parse())
        .context("SHADOWSYNC_BENCH_REPEATS")?;

    let mut results = Vec::new();
    for &n in &trainers {
        for &(link, _) in &links {
            for algorithm in &algorithms {
                // With one trainer there is nothing to synchronize.
                if n > 1 || *algorithm == Algorithm::None {
                    results.push(Row {
                        trainers: n,
                        link,
                        algorithm: algorithm.clone(),
                        reports: Vec::new(),
                    });
                }
            }
        }
    }
    // Repeats go round the whole grid, so that a slow spell of the shared
    // machine hits different cells each time.
    for repeat in 1..=repeats.max(1) {
        for row in &mut results {
            let (n, algorithm) = (row.trainers, row.algorithm.clone());
            let link = links
                .iter()
                .find(|(name, _)| *name == row.link)
                .map(|l| l.1);
            let mut config = base.clone();
            config.data.synthetic.train_rows = rows;
            config.data.synthetic.test_rows = rows / 10;
            config.train.eval_every = 0;
            config.train.trainers = n;
            config.sync.algorithm = algorithm.clone();
            config.sync.link = link.unwrap_or_default();
            eprintln!("[{repeat}/{repeats}] N={n} link={} {algorithm}", row.link);
            row.reports.push(Run::new().train(&config)?);
        }
    }

    println!(
        "\ncluster_scaling: {:?}, {:?} dense / {:?} sparse, batch {}, {rows} synthetic rows, \
         one pass, {repeats} run(s) per cell (examples/s: median, min–max; NE: mean)",
        base.model.kind, base.optim.dense, base.optim.sparse, base.train.batch_size
    );
    println!(
        "{:>3} {:>10} {:>14} {:>11} {:>15} {:>6} {:>8} {:>9} {:>10}",
        "N",
        "link",
        "algorithm",
        "examples/s",
        "min–max",
        "/none",
        "test NE",
        "sync gap",
        "staleness"
    );
    for row in &results {
        let (low, high) = row.spread();
        println!(
            "{:>3} {:>10} {:>14} {:>11.0} {:>15} {:>6.2} {:>8.4} {:>9.1} {:>10.1}",
            row.trainers,
            row.link,
            row.algorithm.to_string(),
            row.examples_per_sec(),
            format!("{low:.0}–{high:.0}"),
            ratio_to_none(&results, row),
            row.ne(),
            row.per_trainer(|s| s.mean_sync_gap),
            row.per_trainer(|s| s.mean_staleness),
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
            row.examples_per_sec() / none.examples_per_sec()
        })
}

/// The issue's targets, met or not, from the rows measured.
fn print_targets(results: &[Row]) {
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    // Ratios to `none` with the link (N > 1) of the algorithms `pick` selects.
    let ratios = |pick: fn(&Algorithm) -> bool| -> Vec<f64> {
        results
            .iter()
            .filter(|r| r.link != "off" && r.trainers > 1 && pick(&r.algorithm))
            .map(|r| ratio_to_none(results, r))
            .collect()
    };
    println!("\ntargets (simulated link, N > 1):");
    let shadow = ratios(|a| matches!(a, Algorithm::Shadow { .. }));
    if !shadow.is_empty() {
        let worst = shadow.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "  every shadow algorithm ≥ 0.95 of none's examples/s: {} (lowest {worst:.2})",
            verdict(worst >= 0.95)
        );
    }
    let blocking = ratios(|a| {
        matches!(
            a,
            Algorithm::SyncSgd | Algorithm::Foreground { every: 1, .. }
        )
    });
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
            let (s, f) = (shadow.ne(), fore.ne());
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
