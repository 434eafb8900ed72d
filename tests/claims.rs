//! The statistical claims: `./dev claims [NAME…]`, not part of the gate.
//!
//! Each claim compares two sets of runs whose test NE varies with thread
//! timing (four or sixteen asynchronous trainers on shared cores), so no
//! single run can decide it. A claim decides on the runs' means with Welch's
//! t-test, against a margin derived from the effect it must detect (written
//! beside each claim), never widened to make a run pass:
//! * *better*: the candidate's NE is below the reference's by more than the
//!   margin, one-sided p < 0.05;
//! * *as good*: the two means are within the margin of each other, shown by
//!   two one-sided tests (TOST) at p < 0.05 — a claim that the runs are too
//!   few or too noisy to show fails rather than passes by default.
//!
//! Every claim run writes docs/results/claims.md: each claim with its
//! measured effect, its margin, the runs on each side, the p-value and
//! whether it holds; the process exits non-zero if one does not. Run it when
//! a change touches learning or sync (it takes about half an hour on 2 cores).

mod common;

use common::{checkpoints, ctr};
use shadowsync::config::{Config, ElasticStep, OptimPreset, OptimizerKind};
use shadowsync::report::{mean_std, Welch};
use shadowsync::runtime::faults::{Fault, FaultKind};
use shadowsync::train::Run;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// How a claim compares its candidate with its reference (lower NE is better).
#[derive(Debug, Clone, Copy)]
enum Test {
    /// The candidate's NE is lower by more than the margin.
    Better { margin: f64 },
    /// The two NEs are within the margin of each other.
    AsGood { margin: f64 },
}

/// A claim's statement and what it measured.
struct Claim {
    name: &'static str,
    statement: &'static str,
    /// Why the margin is what it is.
    margin_from: &'static str,
    test: Test,
    candidate: (&'static str, Vec<f64>),
    reference: (&'static str, Vec<f64>),
}

/// What a claim came to.
struct Verdict {
    /// Reference's mean NE less the candidate's (positive: candidate better).
    effect: f64,
    standard_error: f64,
    p: f64,
    holds: bool,
}

impl Claim {
    fn verdict(&self) -> Verdict {
        // Welch's test of the reference against the candidate: a positive
        // difference is the candidate's gain.
        let welch = Welch::new(&self.reference.1, &self.candidate.1);
        let Some(welch) = welch else {
            return Verdict {
                effect: f64::NAN,
                standard_error: f64::NAN,
                p: 1.0,
                holds: false,
            };
        };
        let p = match self.test {
            // H0: effect <= margin.
            Test::Better { margin } => welch.p_above(margin),
            // TOST: both H0: effect <= -margin and H0: effect >= margin
            // rejected; the larger of the two p-values.
            Test::AsGood { margin } => welch.p_above(-margin).max(mirrored(welch).p_above(-margin)),
        };
        Verdict {
            effect: welch.difference,
            standard_error: welch.standard_error,
            p,
            holds: p < 0.05,
        }
    }
}

/// The test of the other way round: the difference negated.
fn mirrored(welch: Welch) -> Welch {
    Welch {
        difference: -welch.difference,
        ..welch
    }
}

/// Runs a claim's runs in a scratch directory.
type MeasureClaim = fn(&Path) -> Claim;

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let chosen = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));
    let claims: Vec<(&str, MeasureClaim)> = vec![
        (
            "shadow-ma-as-good-as-one-trainer",
            shadow_ma_as_good_as_one_trainer,
        ),
        (
            "shadow-ma-beats-no-sync-under-sgd",
            shadow_ma_beats_no_sync_under_sgd,
        ),
        ("faults-cost-no-ne", faults_cost_no_ne),
        ("elastic-costs-no-ne", elastic_costs_no_ne),
        ("resume-costs-no-ne", resume_costs_no_ne),
        ("easgd-16-beats-no-sync", easgd_sixteen_beats_no_sync),
        #[cfg(feature = "mpi")]
        (
            "mpi-2x2-as-good-as-one-process",
            mpi::two_by_two_as_good_as_one_process,
        ),
        #[cfg(feature = "mpi")]
        (
            "mpi-dlrm-sharded-as-good-as-one-process",
            mpi::dlrm_sharded_as_good_as_one_process,
        ),
        #[cfg(feature = "mpi")]
        (
            "mpi-easgd-centre-sharded-as-good-as-one-process",
            mpi::easgd_sharded_as_good_as_one_process,
        ),
    ];
    let mut measured = Vec::new();
    for (name, claim) in claims.into_iter().filter(|(n, _)| chosen(n)) {
        eprintln!("claim {name}: running");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let claim = claim(dir.path());
        let verdict = claim.verdict();
        eprintln!(
            "claim {name}: effect {:+.4} NE, p {:.3}: {}",
            verdict.effect,
            verdict.p,
            if verdict.holds {
                "holds"
            } else {
                "DOES NOT HOLD"
            }
        );
        measured.push((claim, verdict));
    }
    let report = markdown(&measured);
    print!("{report}");
    if filters.is_empty() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/claims.md");
        std::fs::write(&path, &report).expect("docs/results/claims.md is writable");
        eprintln!("wrote {}", path.display());
    }
    let failed = measured.iter().filter(|(_, v)| !v.holds).count();
    println!("{} passed, {failed} failed", measured.len() - failed);
    std::process::exit(i32::from(failed > 0));
}

/// The claims and their verdicts as docs/results/claims.md.
fn markdown(measured: &[(Claim, Verdict)]) -> String {
    let mut md = String::from(
        "# Statistical claims\n\n\
         Written by `./dev claims` (tests/claims.rs), which says how each claim is decided. \
         Test NE of each run; effect = the reference's mean NE less the candidate's \
         (positive: the candidate is better); ± is the standard error of that difference.\n\n\
         | claim | candidate | reference | runs | effect | test | p | holds |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (claim, v) in measured {
        let (mean_c, sd_c) = mean_std(&claim.candidate.1);
        let (mean_r, sd_r) = mean_std(&claim.reference.1);
        let test = match claim.test {
            Test::Better { margin } => format!("effect > {margin}"),
            Test::AsGood { margin } => format!("|effect| < {margin}"),
        };
        let _ = writeln!(
            md,
            "| {} | {} {mean_c:.4} ± {sd_c:.4} | {} {mean_r:.4} ± {sd_r:.4} | {} + {} | {:+.4} ± {:.4} | {test} | {:.3} | {} |",
            claim.name,
            claim.candidate.0,
            claim.reference.0,
            claim.candidate.1.len(),
            claim.reference.1.len(),
            v.effect,
            v.standard_error,
            v.p,
            if v.holds { "yes" } else { "**no**" },
        );
    }
    md.push_str("\n## The claims and their margins\n\n");
    for (claim, _) in measured {
        let _ = writeln!(
            md,
            "- **{}**: {} Margin: {}\n  Runs: candidate {:?}, reference {:?}.",
            claim.name,
            claim.statement,
            claim.margin_from,
            rounded(&claim.candidate.1),
            rounded(&claim.reference.1),
        );
    }
    md
}

fn rounded(values: &[f64]) -> Vec<f64> {
    values.iter().map(|v| (v * 1e4).round() / 1e4).collect()
}

/// Test NE of `runs` runs of `config`, each checked to train every example
/// once; `vary` sets up run `i` (its seed).
fn nes(config: &Config, runs: u64, vary: impl Fn(&mut Config, u64)) -> Vec<f64> {
    (0..runs)
        .map(|i| {
            let mut c = config.clone();
            vary(&mut c, i);
            ctr::run(&c).final_metrics.ne
        })
        .collect()
}

/// The training seed of run `i`.
fn seeded(c: &mut Config, i: u64) {
    c.train.seed = 1 + i;
}

/// Runs per side of the in-process claims.
const RUNS: u64 = 5;

fn shadow_ma_as_good_as_one_trainer(dir: &Path) -> Claim {
    let one = ctr::same_global_batch(dir, 1, "none");
    let four = ctr::same_global_batch(dir, 4, "shadow-ma");
    Claim {
        name: "shadow-ma-as-good-as-one-trainer",
        statement: "4 shadow-ma trainers (DeepFM, Adagrad, batches of 32) score the NE of one \
                    trainer at the same global batch of 128 on 640k rows.",
        margin_from: "0.01 NE, the gap a user would notice (averaging every step, fr-ma:1, \
                      trailed one trainer by 0.003 at a 4x global batch); run-to-run spread \
                      ~0.003-0.006 leaves 5 runs a side able to show 0.01, not less.",
        test: Test::AsGood { margin: 0.01 },
        candidate: ("4 × shadow-ma", nes(&four, RUNS, seeded)),
        reference: ("1 trainer", nes(&one, RUNS, seeded)),
    }
}

fn shadow_ma_beats_no_sync_under_sgd(dir: &Path) -> Claim {
    let plain_sgd = |algorithm| {
        let mut c = ctr::same_global_batch(dir, 4, algorithm);
        c.optim = OptimPreset::DlrmReference.into();
        c
    };
    Claim {
        name: "shadow-ma-beats-no-sync-under-sgd",
        statement: "Under plain SGD 0.1 (the DLRM reference preset), 4 shadow-ma trainers \
                    score a lower NE than 4 trainers that never sync (whose NE is their \
                    replicas' mean).",
        margin_from: "0.006 NE, a third of the 0.018 averaging took off over 4 seeds \
                      (0.8091 against 0.7911): a sync that lost two thirds of its effect \
                      fails.",
        test: Test::Better { margin: 0.006 },
        candidate: ("4 × shadow-ma", nes(&plain_sgd("shadow-ma"), RUNS, seeded)),
        reference: ("4 × none", nes(&plain_sgd("none"), RUNS, seeded)),
    }
}

fn faults_cost_no_ne(dir: &Path) -> Claim {
    let clean = ctr::config(dir, 4, "shadow-ma");
    let mut faulty = clean.clone();
    let fault = |trainer, kind, at_step, every| Fault {
        trainer,
        kind,
        at_step,
        every,
    };
    faulty.faults = vec![
        fault(1, FaultKind::Error, 50, 97),
        fault(1, FaultKind::Panic, 75, 151),
        fault(2, FaultKind::Diverge, 100, 250),
    ];
    Claim {
        name: "faults-cost-no-ne",
        statement: "21 errors and panics in one of 4 shadow-ma trainers and 5 divergences \
                    of another cost no NE against a clean run (each failed step is retried, a \
                    diverged replica reloads its last average).",
        margin_from: "0.01 NE, the cost of losing a trainer's replica outright (a replica \
                      reset to its initial values mid-run).",
        test: Test::AsGood { margin: 0.01 },
        candidate: ("with faults", nes(&faulty, RUNS, seeded)),
        reference: ("clean", nes(&clean, RUNS, seeded)),
    }
}

fn elastic_costs_no_ne(dir: &Path) -> Claim {
    let fixed = ctr::config(dir, 4, "shadow-ma");
    let mut elastic = fixed.clone();
    elastic.train.trainers = 2;
    let step = |at_step, add, remove| ElasticStep {
        at_step,
        add,
        remove,
    };
    // Of about 1,250 steps a trainer: 2 join at step 300, one leaves at 900.
    elastic.elastic = vec![step(300, 2, None), step(900, 0, Some(1))];
    Claim {
        name: "elastic-costs-no-ne",
        statement: "shadow-ma trainers that change in the run (2, then 4 from step 300, \
                    then 3 from step 900) score the NE of 4 fixed trainers over the pass.",
        margin_from: "0.01 NE, the gap a user would notice; a joiner that started from fresh \
                      optimizer state jolted NE by 0.015-0.025 (E9), which this would fail.",
        test: Test::AsGood { margin: 0.01 },
        candidate: ("2 → 4 → 3", nes(&elastic, RUNS, seeded)),
        reference: ("4 fixed", nes(&fixed, RUNS, seeded)),
    }
}

fn resume_costs_no_ne(dir: &Path) -> Claim {
    let config = ctr::same_global_batch(dir, 4, "shadow-ma");
    let killed_and_resumed = |c: &mut Config, i: u64| {
        seeded(c, i);
        c.checkpoint.every_steps = 200;
        let run = dir.join(format!("run-{i}"));
        std::fs::create_dir_all(&run).expect("a writable scratch directory");
        let file = checkpoints::config_file(c, &run, "run");
        let stopped = checkpoints::killed_after(&file, &run, 2, Duration::from_secs(1));
        let (resumed, _) = checkpoints::resume(&stopped, &run.join("resumed.json"));
        assert_eq!(resumed["examples"], ctr::ROWS, "every example once");
        checkpoints::ne(&resumed)
    };
    Claim {
        name: "resume-costs-no-ne",
        statement: "4 shadow-ma trainers (the first claim's setup) killed with SIGKILL at a \
                    random moment after their second checkpoint and resumed with \
                    `shadowsync train --resume` score the NE of uninterrupted runs.",
        margin_from: "0.01 NE, the cost of losing a trainer's replica outright, as a resume \
                      that restored a replica or its optimizer state wrongly would.",
        test: Test::AsGood { margin: 0.01 },
        candidate: (
            "killed and resumed",
            (0..RUNS)
                .map(|i| killed_and_resumed(&mut config.clone(), i))
                .collect(),
        ),
        reference: ("uninterrupted", nes(&config, RUNS, seeded)),
    }
}

fn easgd_sixteen_beats_no_sync(dir: &Path) -> Claim {
    let mut c = Config::default();
    c.data.synthetic.train_rows = 400_000;
    c.data.synthetic.test_rows = 20_000;
    c.data.synthetic.dir = Some(dir.to_path_buf());
    c.data.table_size = 100_000;
    c.model.kind = "dlrm".into();
    c.optim.dense = OptimizerKind::Adagrad;
    c.optim.sparse = "adagrad".into();
    c.optim.dense_lr = 0.02;
    c.optim.sparse_lr = Some(0.05);
    c.train.trainers = 16;
    c.train.eval_every = 0;
    let under = |sync: &str| {
        let mut c = c.clone();
        c.sync.algorithm = sync.parse().expect("a built-in algorithm");
        if sync != "none" {
            c.sync.link.latency_us = 200.0;
            c.sync.link.bandwidth_gbps = 1.0;
        }
        (0..3)
            .map(|i| {
                let mut c = c.clone();
                seeded(&mut c, i);
                let report = Run::new().train(&c).expect("a training run");
                assert_eq!(report.examples, 400_000, "{sync}: every example once");
                report.final_metrics.ne
            })
            .collect()
    };
    Claim {
        name: "easgd-16-beats-no-sync",
        statement: "16 shadow-easgd trainers (DLRM, Adagrad, E1's simulated 1 Gbit/s link, \
                    400k rows) end with a centre that scores a lower NE than 16 trainers \
                    that never sync.",
        margin_from: "0 NE: the claim is that the centre learns at all (it once scored \
                      1.05-1.12, worse than the base rate); 3 seeds measured 0.014 apart.",
        test: Test::Better { margin: 0.0 },
        candidate: ("16 × shadow-easgd (centre)", under("shadow-easgd")),
        reference: ("16 × none", under("none")),
    }
}

#[cfg(feature = "mpi")]
mod mpi {
    //! Jobs over MPI ranks against the same trainers in one process.

    use super::{Claim, Test};
    use crate::common::job::{data, train, train_with};
    use std::path::Path;

    const SEEDS: [u64; 5] = [1, 2, 3, 4, 5];

    const AS_ONE_PROCESS: &str = "0.01 NE, the gap a user would notice between one process \
                                  and the same trainers over ranks; the runs vary by thread \
                                  timing alone by ~0.004-0.01 NE.";

    pub(crate) fn two_by_two_as_good_as_one_process(dir: &Path) -> Claim {
        data(dir);
        let (ranks, one): (Vec<f64>, Vec<f64>) = SEEDS
            .iter()
            .map(|&seed| {
                let (spread, _) = train(dir, Some(2), 2, seed, "shadow-ma");
                let (together, _) = train(dir, None, 4, seed, "shadow-ma");
                (spread, together)
            })
            .unzip();
        Claim {
            name: "mpi-2x2-as-good-as-one-process",
            statement: "Logistic regression under shadow-ma (plain SGD, sharded tables) over \
                        2 ranks × 2 trainers scores the NE of 4 trainers in one process.",
            margin_from: AS_ONE_PROCESS,
            test: Test::AsGood { margin: 0.01 },
            candidate: ("2 × 2 ranks", ranks),
            reference: ("4 in one process", one),
        }
    }

    pub(crate) fn dlrm_sharded_as_good_as_one_process(dir: &Path) -> Claim {
        data(dir);
        let dlrm = [
            "--model",
            "dlrm",
            "--optimizer",
            "adagrad",
            "--lr",
            "0.01",
            "--sparse-optimizer",
            "adagrad",
            "--sparse-lr",
            "0.01",
        ];
        let (ranks, one): (Vec<f64>, Vec<f64>) = SEEDS
            .iter()
            .map(|&seed| {
                let run = |ranks, trainers| {
                    let (ne, report) =
                        train_with(dir, ranks, trainers, seed, "shadow-ma", ("", &dlrm));
                    assert_eq!(report["examples"], 400_000, "{report}");
                    ne
                };
                (run(Some(2), 2), run(None, 4))
            })
            .unzip();
        Claim {
            name: "mpi-dlrm-sharded-as-good-as-one-process",
            statement: "DLRM with Adagrad on tables sharded over 2 ranks × 2 trainers scores \
                        the NE of the same 4 trainers in one process.",
            margin_from: AS_ONE_PROCESS,
            test: Test::AsGood { margin: 0.01 },
            candidate: ("2 × 2 ranks, sharded", ranks),
            reference: ("4 in one process", one),
        }
    }

    pub(crate) fn easgd_sharded_as_good_as_one_process(dir: &Path) -> Claim {
        data(dir);
        let replicated = ("embeddings = \"replicated\"", &[][..]);
        let (ranks, one): (Vec<f64>, Vec<f64>) = SEEDS
            .iter()
            .map(|&seed| {
                let (spread, _) = train_with(dir, Some(2), 2, seed, "shadow-easgd", replicated);
                let (together, _) = train(dir, None, 4, seed, "shadow-easgd");
                (spread, together)
            })
            .unzip();
        Claim {
            name: "mpi-easgd-centre-sharded-as-good-as-one-process",
            statement: "Logistic regression under shadow-easgd, its centre sharded over 2 \
                        ranks × 2 trainers (replicated tables), scores the NE of 4 trainers \
                        in one process.",
            margin_from: AS_ONE_PROCESS,
            test: Test::AsGood { margin: 0.01 },
            candidate: ("2 × 2 ranks", ranks),
            reference: ("4 in one process", one),
        }
    }
}
