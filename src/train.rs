//! One trainer, one pass over the training data, evaluated on held-out data.
//!
//! [`train`] resolves the data (files, or the built-in synthetic set), starts the
//! [`Pipeline`], steps a [`CtrLearner`] through its shard, evaluates every
//! `train.eval_every` examples and at the end, and returns a [`TrainReport`].
//! A failure mid-run (a malformed line under `fail`, a read error) does not lose
//! what was computed: the report keeps the history, the final evaluation of the
//! model trained so far, and the error.

use crate::config::Config;
use crate::data::{
    BadLinePolicy, Batch, CriteoReader, Oracle, Pipeline, PipelineConfig, ReadStats, SyntheticData,
    TableLayout,
};
use crate::metrics::{evaluate, Metrics};
use crate::model::CtrLearner;
use crate::Result;
use serde::{Deserialize, Serialize};
use shadowsync_actors::Learner;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Examples per evaluation batch.
const EVAL_BATCH: usize = 8192;

/// One evaluation during training.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// Training examples seen before this evaluation.
    pub examples: u64,
    /// Training wall-clock seconds before it (evaluations excluded).
    pub train_seconds: f64,
    /// Test metrics.
    pub metrics: Metrics,
}

/// The data a run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSummary {
    /// Training file.
    pub train: PathBuf,
    /// Test file.
    pub test: PathBuf,
    /// Training file read counts.
    pub train_read: ReadStats,
    /// Test file read counts.
    pub test_read: ReadStats,
    /// The planted model's figures on the test file (synthetic data only).
    pub test_oracle: Option<Oracle>,
}

/// Everything a run measured (written as JSON by `shadowsync train --results`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The configuration the run used.
    pub config: Config,
    /// The data it used.
    pub data: DataSummary,
    /// Training examples consumed.
    pub examples: u64,
    /// Optimizer steps taken.
    pub steps: u64,
    /// Training wall-clock seconds (evaluations excluded).
    pub train_seconds: f64,
    /// `examples / train_seconds`.
    pub examples_per_sec: f64,
    /// Evaluations during training, in order.
    pub history: Vec<EvalPoint>,
    /// Evaluation of the final model.
    pub final_metrics: Metrics,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
}

/// Receives progress from a running training loop.
pub trait Observer {
    /// Training starts; `total` examples if known.
    fn started(&mut self, _total: Option<u64>) {}
    /// `examples` seen so far.
    fn progressed(&mut self, _examples: u64) {}
    /// An evaluation finished.
    fn evaluated(&mut self, _point: &EvalPoint) {}
}

/// An observer that ignores everything.
impl Observer for () {}

/// Reads a whole (test) file into batches.
pub fn load_batches(
    path: &Path,
    layout: &TableLayout,
    policy: BadLinePolicy,
    batch_size: usize,
) -> Result<(Vec<Batch>, ReadStats)> {
    let mut reader = CriteoReader::open(path, policy)?;
    let mut batches = Vec::new();
    let mut examples = Vec::with_capacity(batch_size);
    for example in reader.by_ref() {
        examples.push(example?);
        if examples.len() == batch_size {
            batches.push(Batch::from_examples(&examples, layout)?);
            examples.clear();
        }
    }
    if !examples.is_empty() {
        batches.push(Batch::from_examples(&examples, layout)?);
    }
    Ok((batches, reader.stats().clone()))
}

/// Trains one model for one pass and evaluates it.
pub fn train(config: &Config, observer: &mut dyn Observer) -> Result<TrainReport> {
    config.validate()?;
    tch::set_num_threads(config.train.threads as i32);
    tch::manual_seed(config.train.seed as i64);
    let layout = config.table_layout()?;

    let (train_path, test_path, test_oracle, total) = match (&config.data.train, &config.data.test)
    {
        (Some(train), Some(test)) => (train.clone(), test.clone(), None, None),
        _ => {
            let synthetic = &config.data.synthetic;
            let dir = synthetic.directory();
            tracing::info!(dir = %dir.display(), "using built-in synthetic data");
            let data = SyntheticData::ensure(synthetic.spec(), &dir)?;
            (
                data.train,
                data.test,
                Some(data.test_oracle),
                Some(synthetic.train_rows),
            )
        }
    };
    let (test_batches, test_read) =
        load_batches(&test_path, &layout, config.data.bad_lines, EVAL_BATCH)?;

    let mut pipeline = Pipeline::spawn(
        &train_path,
        layout.clone(),
        &PipelineConfig {
            batch_size: config.train.batch_size,
            shards: 1,
            policy: config.data.bad_lines,
            capacity: 64,
        },
    )?;
    let shard = pipeline.take_shards().pop();
    let mut learner = CtrLearner::new(&config.model, &config.optim, &layout, shard)?;

    observer.started(total);
    let mut examples = 0u64;
    let mut steps = 0u64;
    let mut train_seconds = 0.0;
    let mut history = Vec::new();
    let mut next_eval = config.train.eval_every;
    let mut error = None;
    let evaluate_now =
        |learner: &CtrLearner, examples: u64, train_seconds: f64| -> Result<EvalPoint> {
            let (predictions, labels) = learner.predict_all(&test_batches)?;
            Ok(EvalPoint {
                examples,
                train_seconds,
                metrics: evaluate(&predictions, &labels),
            })
        };
    loop {
        let started = Instant::now();
        let outcome = learner.step();
        train_seconds += started.elapsed().as_secs_f64();
        match outcome {
            Ok(Some(step)) => {
                examples += step.examples as u64;
                steps += 1;
                observer.progressed(examples);
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
        if config.train.eval_every > 0 && examples >= next_eval {
            next_eval += config.train.eval_every;
            let point = evaluate_now(&learner, examples, train_seconds)?;
            observer.evaluated(&point);
            history.push(point);
        }
    }
    let train_read = pipeline.finish()?;
    let last = evaluate_now(&learner, examples, train_seconds)?;
    if history.last().map(|p| p.examples) != Some(examples) {
        observer.evaluated(&last);
        history.push(last);
    }
    Ok(TrainReport {
        config: config.clone(),
        data: DataSummary {
            train: train_path,
            test: test_path,
            train_read,
            test_read,
            test_oracle,
        },
        examples,
        steps,
        train_seconds,
        examples_per_sec: examples as f64 / train_seconds.max(1e-9),
        history,
        final_metrics: last.metrics,
        error,
    })
}
