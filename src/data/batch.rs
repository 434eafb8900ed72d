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
    /// Where the batch comes from: its chunk's number in the pass (shared
    /// dealing) or index in its consumer's share (static dealing; see
    /// [`Pipeline`](crate::data::Pipeline)); 0 outside a pipeline.
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

/// The rows of `batches`, in order, cut into `parts` runs as even as whole
/// rows allow (one per scorer of a test set, say), each in batches of at most
/// `max_rows`. The batches are views of one copy of the rows.
///
/// # Errors
///
/// A tensor libtorch cannot make.
pub fn split_rows(batches: Vec<Batch>, parts: usize, max_rows: usize) -> Result<Vec<Vec<Batch>>> {
    let (parts, max_rows) = (parts.max(1), max_rows.max(1) as i64);
    let column =
        |of: fn(&Batch) -> &Tensor| Tensor::f_cat(&batches.iter().map(of).collect::<Vec<_>>(), 0);
    let all = Batch {
        dense: column(|b| &b.dense)?,
        sparse: column(|b| &b.sparse)?,
        labels: column(|b| &b.labels)?,
        chunk: 0,
    };
    drop(batches);
    let rows = all.len() as i64;
    let mut split = Vec::with_capacity(parts);
    for part in 0..parts as i64 {
        let (start, end) = (rows * part / parts as i64, rows * (part + 1) / parts as i64);
        let mut run = Vec::new();
        let mut at = start;
        while at < end {
            let len = max_rows.min(end - at);
            run.push(Batch {
                dense: all.dense.f_narrow(0, at, len)?,
                sparse: all.sparse.f_narrow(0, at, len)?,
                labels: all.labels.f_narrow(0, at, len)?,
                chunk: 0,
            });
            at += len;
        }
        split.push(run);
    }
    Ok(split)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(labels: &[f32]) -> Batch {
        let n = labels.len() as i64;
        Batch {
            dense: Tensor::from_slice(&vec![0f32; labels.len() * NUM_DENSE]).view([n, 13]),
            sparse: Tensor::from_slice(&vec![0i64; labels.len() * NUM_SPARSE]).view([n, 26]),
            labels: Tensor::from_slice(labels),
            chunk: 0,
        }
    }

    #[test]
    fn rows_split_evenly_in_order_within_the_batch_bound() {
        let rows: Vec<f32> = (0..23).map(|i| i as f32).collect();
        let batches = vec![batch(&rows[..8]), batch(&rows[8..16]), batch(&rows[16..])];
        let split = split_rows(batches, 3, 4).unwrap();
        let sizes: Vec<Vec<usize>> = split
            .iter()
            .map(|run| run.iter().map(Batch::len).collect())
            .collect();
        assert_eq!(sizes, vec![vec![4, 3], vec![4, 4], vec![4, 4]]);
        let order: Vec<f32> = split
            .iter()
            .flatten()
            .flat_map(|b| Vec::<f32>::try_from(&b.labels).unwrap())
            .collect();
        assert_eq!(order, rows);
        assert_eq!(split[0][0].dense.size(), vec![4, 13]);
        // More parts than rows: the extra ones are empty.
        let split = split_rows(vec![batch(&rows[..2])], 4, 8).unwrap();
        assert_eq!(
            split.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![0, 1, 0, 1]
        );
    }
}
