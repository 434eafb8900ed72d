//! The report's tables: a row per cell, and the head-to-head of the pairs.

use super::stats::{difference, mean_std};
use super::{is_seed, per_trainer, text, Cell, ALGORITHM, SYNC};
use crate::experiment::{Experiment, RunResult};
use shadowsync_actors::ClusterReport;
use std::fmt::Write as _;

/// The table: one row per cell.
pub(super) fn table(md: &mut String, experiment: &Experiment, cells: &[Cell]) {
    let name = experiment.baseline.as_str();
    let columns = Columns {
        keys: experiment.keys.iter().filter(|k| !is_seed(k)).collect(),
        seeds: experiment.keys.iter().any(|k| is_seed(k)),
        baseline: cells
            .iter()
            .any(|c| c.algorithm() == Some(name))
            .then_some(name),
        target_ne: experiment.target_ne,
    };
    let header = header(&columns.keys, columns.baseline, columns.target_ne);
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    for cell in cells {
        let _ = writeln!(md, "| {} |", columns.row(cells, cell).join(" | "));
    }
    columns.legend(md);
}

/// What the table shows beside the figures every table has: the grid's
/// keys, whether seeds vary, the baseline it compares with, the target NE.
struct Columns<'e> {
    keys: Vec<&'e String>,
    seeds: bool,
    baseline: Option<&'e str>,
    target_ne: Option<f64>,
}

impl Columns<'_> {
    /// A mean, ± its standard deviation when seeds vary.
    fn pm(&self, (mean, std): (f64, f64), digits: usize) -> String {
        if self.seeds {
            format!("{mean:.digits$} ± {std:.digits$}")
        } else {
            format!("{mean:.digits$}")
        }
    }

    /// `cell`'s row, in the header's order.
    fn row(&self, cells: &[Cell], cell: &Cell) -> Vec<String> {
        let mut row: Vec<String> = (self.keys.iter())
            .map(|k| cell.setting(k).map_or(String::new(), text))
            .collect();
        let rate = cell.stat(|r| r.report.examples_per_sec);
        row.push(cell.runs.len().to_string());
        row.push(self.pm(cell.stat(|r| r.report.final_metrics.ne), 4));
        row.push(self.pm(cell.stat(|r| r.report.final_metrics.auc), 4));
        row.push(self.pm(cell.stat(|r| r.report.final_metrics.logloss), 4));
        row.push(replicas_ne(cell));
        let distance = cell.stat(|r| r.report.consensus_distance).0;
        row.push(format!("{distance:.2e}"));
        row.push(format!("{:.0}", rate.0));
        if let Some(name) = self.baseline {
            let base = counterpart(cells, cell, name);
            row.push(base.map_or("".into(), |base| {
                format!("{:.2}", rate.0 / base.stat(|r| r.report.examples_per_sec).0)
            }));
            let other = base.filter(|base| !std::ptr::eq(*base, cell));
            row.push(other.map_or("".into(), |base| ne_against(cell, base)));
        }
        let gap = cell.stat(|r| per_trainer(r, |s| s.mean_sync_gap)).0;
        let staleness = cell.stat(|r| per_trainer(r, |s| s.mean_staleness)).0;
        row.extend([
            format!("{gap:.1}"),
            format!("{staleness:.1}"),
            sync_cpu(cell),
        ]);
        row.push(sync_bytes(cell));
        row.push(format!("{:.1}", cell.stat(|r| r.report.train_seconds).0));
        if let Some(target) = self.target_ne {
            row.extend(self.to_target(cell, target));
        }
        row
    }

    /// The ms per sync round, and the seconds to `target` NE.
    fn to_target(&self, cell: &Cell, target: f64) -> [String; 2] {
        let round = cell.stat(|r| {
            1000.0 * r.report.cluster.seconds / per_trainer(r, |s| s.syncs as f64).max(1.0)
        });
        let reached: Vec<f64> = (cell.runs.iter())
            .filter_map(|r| seconds_to(r, target))
            .collect();
        let seconds = if reached.len() == cell.runs.len() {
            self.pm(mean_std(&reached), 1)
        } else {
            format!("reached by {} of {} runs", reached.len(), cell.runs.len())
        };
        [format!("{:.1}", round.0), seconds]
    }

    /// What each column means.
    fn legend(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "\nNE, AUC and logloss on the test set after the run, of the final model (EASGD's \
             centre, the replicas' mean; under `none` the mean of the replicas' own){}; replicas' \
             NE: each replica scored as it is, mean (standard deviation over the replicas); \
             consensus distance: mean over the replicas of ‖w_i − w̄‖² at the end; examples/s: \
             all trainers together{}; sync gap and staleness: mean over trainers, in steps; sync \
             CPU: the CPU time of the shadow loops' rounds and of EASGD's server shards against \
             the trainers' own (a foreground sync counts in its trainer's); sync bytes/example: \
             the dense sync's payload bytes between trainers per example trained (of: before \
             compression).\n",
            if self.seeds {
                " (mean ± standard deviation over seeds)"
            } else {
                ""
            },
            self.baseline.map_or(String::new(), |name| format!(
                "; ÷ {name}: against `{name}` at the same other settings; NE − {name}'s: the \
                 difference of the mean test NEs, with the two-sided p-value of Welch's \
                 t-test over the runs (p > 0.05: no difference measured)"
            )),
        );
        if let Some(target) = self.target_ne {
            let _ = writeln!(
                md,
                "ms per sync round: the run's wall-clock time over its syncs per trainer (for a \
                 foreground algorithm syncing every step, a step and its sync); seconds to NE ≤ \
                 {target}: training seconds at the first evaluation that reached it.\n"
            );
        }
    }
}

/// The sync work's share of the CPU (mean over runs), where every run measured it.
fn sync_cpu(cell: &Cell) -> String {
    let share = |r: &RunResult| r.report.cluster.sync_cpu_share();
    if cell.runs.iter().all(|r| share(r).is_some()) {
        format!("{:.1}%", 100.0 * cell.stat(|r| share(r).unwrap_or(0.0)).0)
    } else {
        String::new()
    }
}

/// The cell of algorithm `name` at `cell`'s other settings.
fn counterpart<'c, 'r>(cells: &'c [Cell<'r>], cell: &Cell, name: &str) -> Option<&'c Cell<'r>> {
    cell.algorithm()?;
    cells.iter().find(|c| {
        c.algorithm() == Some(name)
            && c.settings
                .iter()
                .all(|(k, v)| k == ALGORITHM || k == SYNC || cell.setting(k) == Some(v))
    })
}

/// The head-to-head table of the experiment's pairs: for each cell of a
/// pair's first algorithm and the second's at the same other settings, n,
/// test NE and AUC (mean ± standard deviation over the runs) and their
/// differences with Welch's p-value.
pub(super) fn pairs_table(md: &mut String, experiment: &Experiment, cells: &[Cell]) {
    if experiment.pairs.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Head to head\n");
    let _ = writeln!(
        md,
        "| A | B | settings | runs (A, B) | test NE A | test NE B | NE A − B (p) | AUC A | AUC B | AUC A − B (p) | replicas' NE A | B |"
    );
    let _ = writeln!(md, "|{}", "---|".repeat(12));
    let ne = |r: &RunResult| r.report.final_metrics.ne;
    let auc = |r: &RunResult| r.report.final_metrics.auc;
    let pm = |values: &[f64]| {
        let (mean, sd) = mean_std(values);
        format!("{mean:.4} ± {sd:.4}")
    };
    for (a, b) in &experiment.pairs {
        let firsts = cells.iter().filter(|c| c.algorithm() == Some(a.as_str()));
        let mut found = false;
        for first in firsts {
            let Some(second) = counterpart(cells, first, b) else {
                continue;
            };
            found = true;
            let settings: Vec<String> = first
                .settings
                .iter()
                .filter(|(k, _)| k != ALGORITHM)
                .map(|(k, v)| format!("`{k}` {}", text(v)))
                .collect();
            let row = [
                format!("`{a}`"),
                format!("`{b}`"),
                settings.join(", "),
                format!("{}, {}", first.runs.len(), second.runs.len()),
                pm(&first.values(ne)),
                pm(&second.values(ne)),
                difference(&first.values(ne), &second.values(ne)),
                pm(&first.values(auc)),
                pm(&second.values(auc)),
                difference(&first.values(auc), &second.values(auc)),
                replicas_ne(first),
                replicas_ne(second),
            ];
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
        if !found {
            let _ = writeln!(md, "| `{a}` | `{b}` | not both run | | | | | | | | | |");
        }
    }
    let _ = writeln!(
        md,
        "\nMeans ± standard deviations over the runs; differences of the means with the \
         two-sided p-value of Welch's t-test (p > 0.05: no difference measured).\n"
    );
}

/// The table's header: the grid's keys, then the figures (with the ratio to
/// and difference from `baseline` when it ran).
fn header(keys: &[&String], baseline: Option<&str>, target_ne: Option<f64>) -> Vec<String> {
    let mut header: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    header.extend(
        [
            "runs",
            "test NE",
            "AUC",
            "logloss",
            "replicas' NE",
            "consensus distance",
            "examples/s",
        ]
        .map(String::from),
    );
    if let Some(name) = baseline {
        header.extend([format!("÷ {name}"), format!("NE − {name}'s (p)")]);
    }
    header.extend(
        [
            "sync gap",
            "staleness",
            "sync CPU",
            "sync bytes/example",
            "seconds",
        ]
        .map(String::from),
    );
    if let Some(target) = target_ne {
        header.extend([
            "ms per sync round".into(),
            format!("seconds to NE ≤ {target}"),
        ]);
    }
    header
}

/// The dense sync's bytes sent per example trained (mean over runs), with
/// what they were before compression where they were compressed.
fn sync_bytes(cell: &Cell) -> String {
    let per_example = |bytes: fn(&ClusterReport) -> u64| {
        cell.stat(|r| {
            let cluster = &r.report.cluster;
            cluster.per_example(bytes(cluster))
        })
        .0
    };
    let sent = per_example(|c| c.bytes_sent);
    let before = per_example(|c| c.bytes_before_compression);
    if before > sent {
        format!("{sent:.0} (of {before:.0})")
    } else {
        format!("{sent:.0}")
    }
}

/// `cell`'s test NE against the baseline's: [`difference`].
fn ne_against(cell: &Cell, baseline: &Cell) -> String {
    let ne = |r: &RunResult| r.report.final_metrics.ne;
    difference(&cell.values(ne), &baseline.values(ne))
}

/// The replicas' own NE in `cell`'s runs: the mean over runs of their mean,
/// and of their standard deviation, or "—" for results that have none.
fn replicas_ne(cell: &Cell) -> String {
    let spreads: Vec<(f64, f64)> = cell
        .runs
        .iter()
        .filter(|r| !r.report.replica_metrics.is_empty())
        .map(|r| {
            mean_std(
                &r.report
                    .replica_metrics
                    .iter()
                    .map(|m| m.ne)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    if spreads.is_empty() {
        return "—".into();
    }
    let n = spreads.len() as f64;
    let mean = spreads.iter().map(|s| s.0).sum::<f64>() / n;
    let sd = spreads.iter().map(|s| s.1).sum::<f64>() / n;
    format!("{mean:.4} ({sd:.4})")
}

/// Training seconds at the first evaluation of `run` with test NE ≤ `target`.
fn seconds_to(run: &RunResult, target: f64) -> Option<f64> {
    run.report
        .history
        .iter()
        .find(|p| p.metrics.ne <= target)
        .map(|p| p.train_seconds)
}
