//! Where each categorical value lands in the model's one fused embedding table.
//!
//! Each of the 26 fields gets its own hash table of `size` rows (DLRM: value mod
//! size); the 26 tables are stacked into one, field `f` starting at `offset[f]`, so
//! the model does one lookup per batch instead of 26.

use crate::data::NUM_SPARSE;
use crate::{Error, Result};

/// Sizes and offsets of the per-field tables inside the fused table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLayout {
    sizes: [u32; NUM_SPARSE],
    offsets: [i64; NUM_SPARSE],
}

impl TableLayout {
    /// Every field hashed into `size` rows.
    ///
    /// # Errors
    ///
    /// A size of 0 ([`Error::Config`]).
    pub fn uniform(size: u32) -> Result<Self> {
        Self::new(&[size; NUM_SPARSE])
    }

    /// Field `f` hashed into `sizes[f]` rows (26 sizes, each at least 1).
    ///
    /// # Errors
    ///
    /// Not 26 sizes, or a size of 0 ([`Error::Config`]).
    pub fn new(sizes: &[u32]) -> Result<Self> {
        let sizes: [u32; NUM_SPARSE] = sizes.try_into().map_err(|_| {
            Error::config(
                "data.table_sizes",
                format!(
                    "needs {NUM_SPARSE} sizes, one per field, got {}",
                    sizes.len()
                ),
            )
        })?;
        if let Some(f) = sizes.iter().position(|&s| s == 0) {
            return Err(Error::config(
                "data.table_sizes",
                format!("table of C{} has 0 rows; sizes must be at least 1", f + 1),
            ));
        }
        let mut offsets = [0i64; NUM_SPARSE];
        for f in 1..NUM_SPARSE {
            offsets[f] = offsets[f - 1] + i64::from(sizes[f - 1]);
        }
        Ok(Self { sizes, offsets })
    }

    /// Row of the fused table for `value` of field `field`.
    #[inline]
    pub fn row(&self, field: usize, value: u32) -> i64 {
        self.offsets[field] + i64::from(value % self.sizes[field])
    }

    /// Rows of the fused table.
    pub fn total_rows(&self) -> i64 {
        self.offsets[NUM_SPARSE - 1] + i64::from(self.sizes[NUM_SPARSE - 1])
    }

    /// Rows of each field's table.
    pub fn sizes(&self) -> &[u32; NUM_SPARSE] {
        &self.sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_offset_and_hashed_per_field() {
        let mut sizes = [10u32; NUM_SPARSE];
        sizes[0] = 3;
        let layout = TableLayout::new(&sizes).unwrap();
        assert_eq!(layout.row(0, 7), 1);
        assert_eq!(layout.row(1, 7), 3 + 7);
        assert_eq!(layout.row(2, 25), 3 + 10 + 5);
        assert_eq!(layout.total_rows(), 3 + 25 * 10);
    }

    #[test]
    fn rejects_wrong_count_and_empty_tables() {
        assert!(TableLayout::new(&[5; 3])
            .unwrap_err()
            .to_string()
            .contains("26 sizes"));
        let e = TableLayout::uniform(0).unwrap_err().to_string();
        assert!(e.contains("data.table_sizes") && e.contains("C1"), "{e}");
    }
}
