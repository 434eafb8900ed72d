//! How a pass's chunks reach the consumers, and which of them were trained.
//!
//! Under [`Dealing::Shared`] (the default where an algorithm allows it) the
//! file is read once and every chunk goes to whichever consumer asks first:
//! a fast trainer takes more of the pass, a slow one less, and the job ends
//! when the pass does, not when its slowest trainer's share does. Under
//! [`Dealing::Static`] consumer `s` of `S` gets chunks `k ≡ s (mod S)`, in
//! order: the paper's setting, and what sync-sgd's equal step counts need.
//!
//! A shared pass is made exact across a kill and resume by a [`ChunkLedger`]:
//! a consumer marks each chunk once it has trained it, and a checkpoint keeps
//! the ledger as a [`ChunkSet`] (a cursor below which every chunk is
//! trained, plus the few above it that were). A resumed pipeline reads past
//! exactly those, so the chunks that were read but still in flight at the
//! checkpoint are trained after it, and every example is trained once. This
//! is stricter than tf.data service's dynamic sharding, whose splits are
//! handed out at most once.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

/// How the chunks of a pass are dealt to the consumers (`data.dealing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Dealing {
    /// Each chunk to whichever consumer asks first; the file read once.
    #[default]
    Shared,
    /// Consumer `s` of `S` gets chunks `k ≡ s (mod S)`, in order, from a
    /// reader of its own (up to 16 readers of a plain file).
    Static,
}

/// The chunks of a pass trained so far: every chunk numbered below `below`,
/// and those in `above` (sorted). Chunks are numbered from 0 in file order,
/// over the whole job's pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSet {
    /// Every chunk below this one is trained (or another process's).
    pub below: u64,
    /// Chunks at or above `below` that are trained, in order.
    pub above: Vec<u64>,
}

impl ChunkSet {
    /// Whether chunk `k` is in the set.
    pub fn contains(&self, k: u64) -> bool {
        k < self.below || self.above.binary_search(&k).is_ok()
    }

    /// Chunks in the set among the first `chunks` (those below `below`
    /// counted whole, other processes' included).
    pub fn count_below(&self, chunks: u64) -> u64 {
        self.below.min(chunks) + self.above.iter().filter(|&&k| k < chunks).count() as u64
    }
}

/// A live record of the chunks trained, shared by the consumers (who mark
/// them), the parsers (who mark the chunks whose every line was skipped) and
/// whoever takes a checkpoint.
#[derive(Debug, Clone)]
pub struct ChunkLedger(Arc<Ledger>);

#[derive(Debug)]
struct Ledger {
    state: Mutex<Marks>,
    /// Chunk `k` is this process's when `k mod shards` is in `kept`.
    shards: u64,
    kept: Range<usize>,
}

#[derive(Debug)]
struct Marks {
    below: u64,
    above: BTreeSet<u64>,
}

impl ChunkLedger {
    /// A ledger of the chunks `k` with `k mod shards` in `kept` (this
    /// process's), starting from `done`.
    pub(crate) fn new(shards: usize, kept: Range<usize>, done: &ChunkSet) -> Self {
        let ledger = Ledger {
            state: Mutex::new(Marks {
                below: done.below,
                above: done.above.iter().copied().collect(),
            }),
            shards: shards.max(1) as u64,
            kept,
        };
        let mut marks = ledger.lock();
        ledger.advance(&mut marks);
        drop(marks);
        Self(Arc::new(ledger))
    }

    /// Marks chunk `k` trained.
    pub fn mark(&self, k: u64) {
        let mut marks = self.0.lock();
        if k >= marks.below {
            marks.above.insert(k);
            self.0.advance(&mut marks);
        }
    }

    /// What is trained now, for a checkpoint.
    pub fn snapshot(&self) -> ChunkSet {
        let marks = self.0.lock();
        ChunkSet {
            below: marks.below,
            above: marks.above.iter().copied().collect(),
        }
    }
}

impl Ledger {
    /// The marks; a consumer that panicked holding them left them whole
    /// (each change is one insert and a cursor move).
    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the cursor past the chunks marked, and past other processes'.
    fn advance(&self, marks: &mut Marks) {
        loop {
            let below = marks.below;
            let theirs = !self.kept.contains(&((below % self.shards) as usize));
            if theirs || marks.above.remove(&below) {
                marks.below += 1;
            } else {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_cursor_moves_past_what_is_trained_and_what_is_another_process() {
        // Process 1 of 2, 2 shards each: its chunks are k mod 4 in {2, 3}.
        let ledger = ChunkLedger::new(4, 2..4, &ChunkSet::default());
        assert_eq!(ledger.snapshot().below, 2);
        ledger.mark(3);
        assert_eq!(
            ledger.snapshot(),
            ChunkSet {
                below: 2,
                above: vec![3]
            }
        );
        ledger.mark(2);
        assert_eq!(ledger.snapshot().below, 6, "2, 3 trained; 4, 5 not ours");
        ledger.mark(2); // a mark below the cursor changes nothing
        assert_eq!(ledger.snapshot().above, Vec::<u64>::new());
    }

    proptest! {
        /// Whatever order chunks are trained in, the set holds exactly the
        /// trained ones (and, in one process, nothing else), and keeps above
        /// its cursor no more than were trained out of order.
        #[test]
        fn the_snapshot_is_exactly_the_chunks_trained(
            order in Just((0u64..64).collect::<Vec<_>>()).prop_shuffle(),
            taken in 0usize..64,
        ) {
            let ledger = ChunkLedger::new(8, 0..8, &ChunkSet::default());
            let trained = &order[..taken];
            for &k in trained {
                ledger.mark(k);
            }
            let set = ledger.snapshot();
            for k in 0..64 {
                prop_assert_eq!(set.contains(k), trained.contains(&k), "chunk {}", k);
            }
            prop_assert!(set.above.len() <= taken);
            prop_assert_eq!(set.count_below(64), taken as u64);
            // A ledger resumed from it goes on from the same set.
            let resumed = ChunkLedger::new(8, 0..8, &set);
            prop_assert_eq!(resumed.snapshot(), set);
        }
    }
}
