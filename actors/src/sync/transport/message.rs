//! What travels between endpoints: a [`Payload`] (shared, refilled in place)
//! and the messages that carry a span of it, or its encoding, in a round's
//! phase.

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
    ///
    /// # Errors
    ///
    /// What `fill` returns.
    pub fn refill(&mut self, fill: impl FnOnce(&mut [f32]) -> Result<()>) -> Result<()> {
        self.refill_to(self.0.len(), fill)
    }

    /// Refills the payload with `len` values through `fill`: in place when no
    /// receiver still holds the previous contents and they were as many, in a
    /// fresh buffer otherwise.
    ///
    /// # Errors
    ///
    /// What `fill` returns.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// A payload in flight: its round, phase and sender, and its values.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) round: u64,
    pub(crate) phase: Phase,
    pub(crate) from: usize,
    pub(crate) body: Body,
    pub(crate) deliver_at: Instant,
}

/// The values of a [`Message`].
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// `data[span]` as `f32` (in one process `data` is the sender's whole
    /// buffer, shared; across processes only the span crosses).
    Values {
        data: Arc<[f32]>,
        span: std::ops::Range<usize>,
    },
    /// `len` values, at `offset` of the synced vector, as the sender's
    /// codec encoded them (the offset decodes a message that comes after
    /// its round: a codec with memory of its link must see every message).
    Encoded {
        wire: Arc<[u8]>,
        len: usize,
        offset: usize,
    },
}

impl Body {
    /// The whole of `data`.
    pub(crate) fn whole(data: Arc<[f32]>) -> Self {
        let span = 0..data.len();
        Self::Values { data, span }
    }

    /// Bytes on the wire.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Self::Values { span, .. } => span.len() * std::mem::size_of::<f32>(),
            Self::Encoded { wire, .. } => wire.len(),
        }
    }
}

impl Message {
    /// How many values it carries.
    pub(crate) fn len(&self) -> usize {
        match &self.body {
            Body::Values { span, .. } => span.len(),
            Body::Encoded { len, .. } => *len,
        }
    }

    /// The values sent as `f32` (none if encoded: the receiving endpoint
    /// decodes them).
    pub(crate) fn values(&self) -> &[f32] {
        match &self.body {
            Body::Values { data, span } => data.get(span.clone()).unwrap_or_default(),
            Body::Encoded { .. } => &[],
        }
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
