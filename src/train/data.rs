//! The data phase of a run: which files it reads (given, or the built-in
//! synthetic set), checked before anything is allocated or trained — the test
//! set loaded and not empty, the data unchanged since a checkpoint being
//! resumed, the embedding table within the machine's memory.

use super::memory::available_memory;
use super::{load_batches, EVAL_BATCH};
use crate::checkpoint::{Checkpoint, DataFile};
use crate::config::{Config, RowShape};
use crate::data::{Batch, ChunkLedger, Oracle, ReadStats, SyntheticData, TableLayout};
use crate::{Error, Result};
use shadowsync_actors::sync::Fabric;
use std::path::{Path, PathBuf};

/// The data of a run, ready to train on.
pub(super) struct RunData {
    /// Training file.
    pub train: PathBuf,
    /// Test file.
    pub test: PathBuf,
    /// The planted model's figures on the test file (synthetic data only).
    pub test_oracle: Option<Oracle>,
    /// Training examples, when known (synthetic data).
    pub total: Option<u64>,
    /// The test set, in evaluation batches.
    pub test_batches: Vec<Batch>,
    /// The test file's read counts.
    pub test_read: ReadStats,
    /// The files as read now (kept in checkpoints).
    pub files: Vec<DataFile>,
    /// Shared dealing: the chunks of the pass trained (kept in checkpoints),
    /// once the pipeline runs.
    pub ledger: Option<ChunkLedger>,
}

impl RunData {
    /// Resolves, checks and loads what `config` trains on; `resumed`, the
    /// checkpoint a resumed run goes on from, must have read the same files.
    pub(super) fn prepare(
        fabric: &dyn Fabric,
        config: &Config,
        layout: &TableLayout,
        row_shape: RowShape,
        resumed: Option<&Checkpoint>,
    ) -> Result<Self> {
        let (train, test, test_oracle, total) = match (&config.data.train, &config.data.test) {
            (Some(train), Some(test)) => (train.clone(), test.clone(), None, None),
            _ => {
                let data = synthetic(fabric, config)?;
                let rows = config.data.synthetic.train_rows;
                (data.train, data.test, Some(data.test_oracle), Some(rows))
            }
        };
        let files = [&test, &train]
            .into_iter()
            .filter_map(|path| DataFile::of(path).transpose())
            .collect::<Result<Vec<_>>>()?;
        for file in resumed.iter().flat_map(|c| &c.data) {
            file.check_unchanged()?;
        }
        let (test_batches, test_read) =
            load_batches(&test, layout, config.data.bad_lines, EVAL_BATCH)?;
        if test_batches.is_empty() {
            return Err(no_examples(&test, &test_read));
        }
        if let Some(class) = one_class(&test_batches)? {
            tracing::warn!(
                test = %test.display(),
                "every test example is a {class}: NE and AUC will be undefined (both need \
                 clicks and non-clicks)"
            );
        }
        if let Some(available) = available_memory() {
            config.check_table_fits(available, row_shape, fabric.processes())?;
        }
        Ok(Self {
            train,
            test,
            test_oracle,
            total,
            test_batches,
            test_read,
            files,
            ledger: None,
        })
    }
}

/// The built-in synthetic data set, generated once. Across processes, the
/// first makes it before the others look (they would replace files under
/// each other's readers).
fn synthetic(fabric: &dyn Fabric, config: &Config) -> Result<SyntheticData> {
    let synthetic = &config.data.synthetic;
    let dir = synthetic.directory();
    tracing::info!(dir = %dir.display(), "using built-in synthetic data");
    let ensure = || SyntheticData::ensure(synthetic.spec(), &dir);
    if fabric.process() == 0 {
        let data = ensure()?;
        fabric.sum(&mut [0])?;
        Ok(data)
    } else {
        fabric.sum(&mut [0])?;
        ensure()
    }
}

/// The error of a data file that gave no example: empty, or every line
/// malformed and skipped.
pub(super) fn no_examples(path: &Path, read: &ReadStats) -> Error {
    let reason = match (read.lines, read.skipped) {
        (0, _) => "has no examples: the file is empty".to_string(),
        (lines, skipped) if skipped == lines => format!(
            "has no examples: every one of its {lines} lines is malformed (skipped under \
             data.bad_lines = \"skip\"); the first: {}",
            read.first_skipped.join("; ")
        ),
        (lines, _) => format!("has no examples in its {lines} lines"),
    };
    Error::data(path, reason)
}

/// `"click"` or `"non-click"` if every example of `batches` is one, else none.
fn one_class(batches: &[Batch]) -> Result<Option<&'static str>> {
    let (mut clicks, mut examples) = (0.0, 0usize);
    for batch in batches {
        clicks += batch.labels.f_sum(tch::Kind::Double)?.double_value(&[]);
        examples += batch.len();
    }
    Ok(if clicks == 0.0 {
        Some("non-click")
    } else if clicks == examples as f64 {
        Some("click")
    } else {
        None
    })
}
