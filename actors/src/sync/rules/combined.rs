//! A group's combined vector, as the members reduced it.
//!
//! After a reduce-scatter every member holds one slice of the combined vector
//! and the all-gather hands each member the others' slices. [`Combined`] keeps
//! them as they arrived, shared with their senders (in one process, each is
//! the sender's own reduced buffer): a shadow round turns them into its target
//! and writes that back into the replica slice by slice, straight from where
//! they arrived, with no whole vector assembled in between. That saves a
//! write and a read of the whole vector per round (docs/results/runtime.md,
//! "The gather written back where it lands"). [`Combined::into_vec`] assembles
//! it for those that want one vector (`sync-sgd`'s gradients, a foreground
//! round's target).

use crate::{Error, Result};
use std::ops::Range;
use std::sync::Arc;

/// Values of a target made and written back at a time (by a peer, and in
/// [`ServerClient::elastic_on_this_thread`](crate::sync::ServerClient::elastic_on_this_thread)).
pub(crate) const TARGET_BLOCK: usize = 2048;

/// A slice of a combined vector as it arrived: `data[span]`, at `offset` in
/// the vector.
pub(crate) type SharedSlice = (usize, Arc<[f32]>, Range<usize>);

/// A vector of `len` values in parts that tile `0..len`, in order.
#[derive(Debug, Clone)]
pub struct Combined {
    len: usize,
    parts: Vec<Part>,
}

/// One part of a [`Combined`]: the values `data[span]` at `offset`.
#[derive(Debug, Clone)]
enum Part {
    /// Shared with whoever sent it.
    Shared {
        offset: usize,
        data: Arc<[f32]>,
        span: Range<usize>,
    },
    /// Owned values at `offset` (EASGD's target, as the server's shards
    /// answered it).
    Owned { offset: usize, values: Vec<f32> },
}

impl Part {
    fn offset(&self) -> usize {
        match self {
            Part::Shared { offset, .. } | Part::Owned { offset, .. } => *offset,
        }
    }

    fn values(&self) -> &[f32] {
        match self {
            Part::Shared { data, span, .. } => data.get(span.clone()).unwrap_or_default(),
            Part::Owned { values, .. } => values,
        }
    }
}

impl Combined {
    /// A whole vector, owned.
    pub fn whole(values: Vec<f32>) -> Self {
        Self {
            len: values.len(),
            parts: vec![Part::Owned { offset: 0, values }],
        }
    }

    /// The vector of `len` values whose parts are `data[span]` at `offset`,
    /// shared.
    ///
    /// # Errors
    ///
    /// Parts that do not tile `0..len` exactly (in any order): [`Error::Layout`](crate::Error::Layout).
    pub fn tiled(len: usize, parts: impl IntoIterator<Item = SharedSlice>) -> Result<Self> {
        let parts =
            parts
                .into_iter()
                .map(|(offset, data, span)| Part::Shared { offset, data, span });
        Self::tile(len, parts.collect())
    }

    /// The vector of `len` values whose parts are owned values at an offset.
    ///
    /// # Errors
    ///
    /// As [`Combined::tiled`].
    pub fn owned(len: usize, parts: impl IntoIterator<Item = (usize, Vec<f32>)>) -> Result<Self> {
        let parts = parts
            .into_iter()
            .map(|(offset, values)| Part::Owned { offset, values });
        Self::tile(len, parts.collect())
    }

    fn tile(len: usize, mut parts: Vec<Part>) -> Result<Self> {
        parts.sort_by_key(Part::offset);
        let mut end = 0;
        for part in &parts {
            let values = part.values().len();
            if part.offset() != end {
                return Err(Error::Layout(format!(
                    "a combined vector of {len} values has a part at {} where {end} was due",
                    part.offset()
                )));
            }
            end += values;
        }
        if end != len {
            return Err(Error::Layout(format!(
                "the parts of a combined vector of {len} values end at {end}"
            )));
        }
        Ok(Self { len, parts })
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it has no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts in order, each with its offset.
    pub fn parts(&self) -> impl Iterator<Item = (usize, &[f32])> {
        self.parts.iter().map(|p| (p.offset(), p.values()))
    }

    /// The whole vector: an owned whole as it is, otherwise the parts copied
    /// into `into` (a recycled buffer, resized).
    pub fn into_vec(mut self, mut into: Vec<f32>) -> Vec<f32> {
        if let [Part::Owned { values, .. }] = self.parts.as_mut_slice() {
            return std::mem::take(values);
        }
        into.resize(self.len, 0.0);
        for (offset, values) in self.parts() {
            into[offset..offset + values.len()].copy_from_slice(values);
        }
        into
    }

    /// An owned buffer of it, if it has one, for a later round to fill.
    pub fn into_spare(mut self) -> Option<Vec<f32>> {
        match self.parts.pop() {
            Some(Part::Owned { values, .. }) => Some(values),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(values: &[f32]) -> Arc<[f32]> {
        Arc::from(values)
    }

    #[test]
    fn parts_in_any_order_tile_the_vector_and_assemble_it() {
        let a = shared(&[9.0, 1.0, 2.0, 9.0]);
        let b = shared(&[3.0, 4.0, 5.0]);
        let combined =
            Combined::tiled(5, [(2, Arc::clone(&b), 0..3), (0, Arc::clone(&a), 1..3)]).unwrap();
        let offsets: Vec<usize> = combined.parts().map(|(o, _)| o).collect();
        assert_eq!(offsets, [0, 2]);
        assert_eq!(combined.len(), 5);
        // A recycled buffer full of garbage is overwritten everywhere.
        let assembled = combined.into_vec(vec![f32::NAN; 9]);
        assert_eq!(assembled, [1.0, 2.0, 3.0, 4.0, 5.0]);
        // The senders' buffers are free again once the parts are dropped.
        assert_eq!(Arc::strong_count(&a), 1);
    }

    #[test]
    fn gaps_overlaps_and_short_parts_are_refused() {
        let v = shared(&[1.0, 2.0, 3.0]);
        let part = |offset: usize, span: Range<usize>| (offset, Arc::clone(&v), span);
        for (parts, len) in [
            (vec![part(0, 0..2), part(3, 0..1)], 4), // gap at 2
            (vec![part(0, 0..2), part(1, 0..2)], 3), // overlap
            (vec![part(0, 0..2)], 3),                // too short
            (vec![part(0, 0..3)], 2),                // too long
        ] {
            let e = Combined::tiled(len, parts).unwrap_err().to_string();
            assert!(e.contains(&format!("{len} values")), "{e}");
        }
        assert!(Combined::tiled(0, []).unwrap().is_empty());
    }

    #[test]
    fn a_whole_vector_is_handed_back_without_a_copy() {
        let values = vec![1.0, 2.0];
        let at = values.as_ptr();
        let combined = Combined::whole(values);
        assert_eq!(combined.parts().collect::<Vec<_>>(), [(0, &[1.0, 2.0][..])]);
        let assembled = combined.into_vec(Vec::new());
        assert_eq!(assembled.as_ptr(), at);
        let values = vec![3.0];
        let at = values.as_ptr();
        let spare = Combined::whole(values).into_spare().unwrap_or_default();
        assert_eq!(spare.as_ptr(), at);
        let parts = Combined::tiled(1, [(0, shared(&[1.0]), 0..1)]).unwrap();
        assert!(parts.into_spare().is_none());
    }
}
