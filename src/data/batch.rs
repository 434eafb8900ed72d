//! A batch of examples as tensors, ready for a model.

use crate::data::{Example, TableLayout, NUM_DENSE, NUM_SPARSE};
use crate::Result;
use tch::Tensor;

/// `dense` is `[B, 13]` f32, `sparse` is `[B, 26]` i64 rows of the fused
/// embedding table, `labels` is `[B]` f32.
#[derive(Debug)]
pub struct Batch {
    /// Transformed counts.
    pub dense: Tensor,
    /// Fused-table rows.
    pub sparse: Tensor,
    /// Click labels.
    pub labels: Tensor,
    /// Where the batch comes from in its consumer's share of the pass: the
    /// index of its chunk there (see [`Pipeline`](crate::data::Pipeline)); 0
    /// outside a pipeline.
    pub chunk: u64,
}

impl Batch {
    /// Builds the tensors of `examples`, hashing categorical values with `layout`.
    ///
    /// # Errors
    ///
    /// A tensor libtorch cannot make.
    pub fn from_examples(examples: &[Example], layout: &TableLayout) -> Result<Self> {
        let n = examples.len() as i64;
        let mut dense = Vec::with_capacity(examples.len() * NUM_DENSE);
        let mut sparse = Vec::with_capacity(examples.len() * NUM_SPARSE);
        let mut labels = Vec::with_capacity(examples.len());
        for ex in examples {
            labels.push(ex.label);
            dense.extend_from_slice(&ex.dense);
            sparse.extend(ex.sparse.iter().enumerate().map(|(f, &v)| layout.row(f, v)));
        }
        Ok(Self {
            dense: Tensor::f_from_slice(&dense)?.f_view([n, NUM_DENSE as i64])?,
            sparse: Tensor::f_from_slice(&sparse)?.f_view([n, NUM_SPARSE as i64])?,
            labels: Tensor::f_from_slice(&labels)?,
            chunk: 0,
        })
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.numel()
    }

    /// True for a batch of no examples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
