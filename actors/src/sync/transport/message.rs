//! What travels between endpoints: a [`Payload`] (shared, refilled in place),
//! the messages that carry a span of it in a round's phase, and how a vector
//! is cut into a group's slices.

use crate::Result;
use std::sync::Arc;
use std::time::Instant;

/// A reduction, element by element, of a group's contributions into `out`:
/// `reduce(out, contributions)` (see [`SyncRule::reduce`](crate::sync::SyncRule::reduce)).
pub(crate) type Reduce = dyn Fn(&mut [f32], &[&[f32]]);

/// A send buffer for parameter vectors, shared with receivers without copying and
/// refilled in place once they have all dropped it.
#[derive(Debug, Clone)]
pub struct Payload(Arc<[f32]>);

impl Payload {
    /// A payload of `len` zeros.
    pub fn zeros(len: usize) -> Self {
        Self(Arc::from(vec![0f32; len]))
    }

    /// Refills the payload through `fill`: in place when no receiver still holds
    /// the previous contents, in a fresh buffer otherwise.
    pub fn refill(&mut self, fill: impl FnOnce(&mut [f32]) -> Result<()>) -> Result<()> {
        self.refill_to(self.0.len(), fill)
    }

    /// Refills the payload with `len` values through `fill`: in place when no
    /// receiver still holds the previous contents and they were as many, in a
    /// fresh buffer otherwise.
    pub fn refill_to(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<()> {
        if let Some(values) = Arc::get_mut(&mut self.0).filter(|v| v.len() == len) {
            return fill(values);
        }
        let mut fresh = vec![0f32; len];
        fill(&mut fresh)?;
        self.0 = Arc::from(fresh);
        Ok(())
    }

    /// The values.
    pub fn values(&self) -> &[f32] {
        &self.0
    }

    /// The values, shared (no copy).
    pub fn shared(&self) -> Arc<[f32]> {
        Arc::clone(&self.0)
    }
}

impl From<Vec<f32>> for Payload {
    fn from(values: Vec<f32>) -> Self {
        Self(Arc::from(values))
    }
}

/// The two phases of a group mean (reduce-scatter, then all-gather).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A member's values of the receiver's slice.
    Scatter,
    /// A member's reduced slice: the group mean over its part of the vector.
    Gather,
    /// `sync-sgd`: a member's shared gradients (rows of a shared table).
    Shared,
    /// `sync-sgd`: a member has applied its rows of the group's shared
    /// gradients.
    Applied,
}

/// A payload in flight: the values `data[span]` (in one process `data` is the
/// sender's whole buffer, shared; across processes only the span crosses).
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) round: u64,
    pub(crate) phase: Phase,
    pub(crate) from: usize,
    pub(crate) data: Arc<[f32]>,
    pub(crate) span: std::ops::Range<usize>,
    pub(crate) deliver_at: Instant,
}

impl Message {
    /// The values sent.
    pub(crate) fn values(&self) -> &[f32] {
        self.data.get(self.span.clone()).unwrap_or_default()
    }
}

/// A message for a trainer in another process, handed to the process's
/// communication thread (see the `mpi` module, the only reader of its fields).
#[derive(Debug)]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct Outgoing {
    pub(crate) to: usize,
    pub(crate) message: Message,
}
