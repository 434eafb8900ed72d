//! What a person sees while a run goes: a progress bar on a terminal (log lines
//! otherwise), evaluations as they come, and what SIGINT and SIGTERM do.

use crate::experiment::{GridObserver, Run};
use crate::metrics::EvalPoint;
use crate::train::{Observer, TrainReport};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What SIGINT and SIGTERM do. Before training starts (reading data, which may
/// block on a pipe) there is nothing to keep: the process ends at once. While
/// a run trains, the first signal raises `flag` for a graceful stop (the model
/// trained so far is evaluated, results and a checkpoint written); if that
/// takes more than [`Interrupt::GRACE`], or on a second signal, the process ends
/// at once. Exit status 128 + the signal's number, as a shell reports it.
#[derive(Clone)]
pub(crate) struct Interrupt {
    /// Raised by the first signal while training.
    pub(crate) flag: Arc<AtomicBool>,
    /// Whether a run is training (a signal then stops it gracefully).
    pub(crate) training: Arc<AtomicBool>,
}

impl Interrupt {
    /// How long a graceful stop may take.
    pub(crate) const GRACE: Duration = Duration::from_secs(60);

    /// Installs the handling of SIGINT and SIGTERM.
    pub(crate) fn install() -> Result<Self> {
        let interrupt = Self {
            flag: Arc::default(),
            training: Arc::default(),
        };
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("installing a signal handler")?;
        let watch = interrupt.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    watch.received(signal);
                }
            })
            .context("starting the signal thread")?;
        Ok(interrupt)
    }

    pub(crate) fn received(&self, signal: i32) {
        let name = if signal == SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        let quit = |why: &str| {
            eprintln!("{name}: {why}");
            signal_hook::low_level::exit(128 + signal)
        };
        if !self.training.load(Ordering::SeqCst) {
            quit("interrupted before training started; nothing to keep");
        }
        if self.flag.swap(true, Ordering::SeqCst) {
            quit("second signal: exiting now (the last checkpoint, if any, is kept)");
        }
        eprintln!(
            "{name}: stopping: evaluating the model trained so far, writing results and a checkpoint \
             (a second signal exits at once)"
        );
        // The deadline on a thread of its own: this one must stay free to hear
        // a second signal.
        std::thread::spawn(move || {
            std::thread::sleep(Self::GRACE);
            eprintln!(
                "{name}: the graceful stop took more than {} s: exiting now",
                Self::GRACE.as_secs()
            );
            signal_hook::low_level::exit(128 + signal)
        });
    }

    /// Marks whether a run is training.
    pub(crate) fn set_training(&self, training: bool) {
        self.training.store(training, Ordering::SeqCst);
    }

    pub(crate) fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// A progress bar on a terminal; a log line every few seconds otherwise.
pub(crate) struct Progress {
    pub(crate) bar: ProgressBar,
    pub(crate) last_log: Instant,
    pub(crate) started: Instant,
    /// SIGINT and SIGTERM.
    pub(crate) interrupt: Interrupt,
}

impl Progress {
    /// Progress of a run that SIGINT and SIGTERM stop gracefully.
    pub(crate) fn new(interrupt: Interrupt) -> Self {
        Self {
            bar: ProgressBar::hidden(),
            last_log: Instant::now(),
            started: Instant::now(),
            interrupt,
        }
    }
}

impl Observer for Progress {
    fn started(&mut self, total: Option<u64>) {
        self.interrupt.set_training(true);
        self.bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{bar:40} {human_pos}/{human_len} examples  {prefix}  eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {human_pos} examples  {prefix}  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        self.started = Instant::now();
    }

    fn progressed(&mut self, examples: u64) {
        let rate = examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        self.bar.set_position(examples);
        self.bar.set_prefix(format!("{rate:.0} examples/s"));
        if self.bar.is_hidden() && self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            tracing::info!(examples, examples_per_sec = rate.round(), "training");
        }
    }

    fn interrupted(&mut self) -> bool {
        let interrupted = self.interrupt.raised();
        if interrupted {
            self.bar.set_message("interrupted: stopping");
        }
        interrupted
    }

    fn evaluated(&mut self, point: &EvalPoint) {
        let m = &point.metrics;
        self.bar
            .set_message(format!("test NE {:.4} AUC {:.4}", m.ne, m.auc));
        self.bar.suspend(|| {
            tracing::info!(
                examples = point.examples,
                ne = format!("{:.4}", m.ne),
                auc = format!("{:.4}", m.auc),
                logloss = format!("{:.4}", m.logloss),
                "evaluated"
            )
        });
    }
}

/// One progress bar over a grid's runs, its message the current run's progress.
pub(crate) struct GridProgress {
    pub(crate) bar: ProgressBar,
    pub(crate) run: String,
    pub(crate) run_total: Option<u64>,
    pub(crate) started: Instant,
    pub(crate) last_log: Instant,
    pub(crate) interrupt: Interrupt,
}

impl GridProgress {
    pub(crate) fn new(interrupt: Interrupt) -> Result<Self> {
        let bar = ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{bar:30} run {pos}/{len}  elapsed {elapsed}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Ok(Self {
            bar,
            run: String::new(),
            run_total: None,
            started: Instant::now(),
            last_log: Instant::now(),
            interrupt,
        })
    }
}

impl Observer for GridProgress {
    fn started(&mut self, total: Option<u64>) {
        self.interrupt.set_training(true);
        self.run_total = total;
        self.started = Instant::now();
    }

    fn progressed(&mut self, examples: u64) {
        let rate = examples as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let done = match self.run_total {
            Some(total) => format!("{:.0}%", 100.0 * examples as f64 / total.max(1) as f64),
            None => format!("{examples} examples"),
        };
        self.bar
            .set_message(format!("{}: {done}, {rate:.0} examples/s", self.run));
        if self.bar.is_hidden() && self.last_log.elapsed() >= Duration::from_secs(10) {
            self.last_log = Instant::now();
            tracing::info!(run = %self.run, examples, examples_per_sec = rate.round(), "training");
        }
    }

    fn interrupted(&mut self) -> bool {
        self.interrupt.raised()
    }
}

impl GridObserver for GridProgress {
    fn run_started(&mut self, index: usize, total: usize, run: &Run) {
        // Between runs (a run's data being made) a signal ends the grid at
        // once: the runs done are kept.
        self.interrupt.set_training(false);
        self.bar.set_length(total as u64);
        self.bar.set_position(index as u64);
        self.run.clone_from(&run.id);
        self.bar.set_message(run.id.clone());
    }

    fn run_ended(&mut self, run: &Run, report: &TrainReport, reused: bool) {
        self.bar.inc(1);
        let m = &report.final_metrics;
        let line = format!(
            "{}: NE {:.4} AUC {:.4}, {:.0} examples/s{}{}",
            run.id,
            m.ne,
            m.auc,
            report.examples_per_sec,
            if reused {
                " (results already there)"
            } else {
                ""
            },
            report
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(" — FAILED: {e}")),
        );
        self.bar.suspend(|| println!("{line}"));
    }
}
