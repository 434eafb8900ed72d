//! How a pass's chunks reach the consumers, and which of them were trained.
//!
//! Under [`Dealing::Shared`] (the default where an algorithm allows it) the
//! file is read once and every chunk goes to whichever consumer asks first:
//! a fast trainer takes more of the pass, a slow one less, and the job ends
//! when the pass does, not when its slowest trainer's share does. Under
//! [`Dealing::Static`] consumer `s` of `S` gets chunks `k ≡ s (mod S)`, in
//! order: the paper's setting, and what sync-sgd's equal step counts need.
//!
//! Across the processes of a job, a [`ChunkDealer`] says which chunks are
//! this process's: it hands out the pass's chunk numbers a few at a time, in
//! rising order over the job, to whichever process asks (shadowsync's
//! deals from rank 0 over the fabric), so a slow process takes fewer.
//!
//! A shared pass is made exact across a kill and resume by a [`ChunkLedger`]:
//! a consumer marks each chunk once it has trained it, and a checkpoint keeps
//! the ledger as a [`ChunkSet`] (a cursor below which every chunk is
//! trained, plus the spans above it that were). A resumed pipeline reads past
//! exactly those, so the chunks that were read but still in flight at the
//! checkpoint are trained after it, and every example is trained once. Each
//! process's set holds exactly the chunks its own trainers trained (and
//! those its run resumed past), so the job's is their [`union`](ChunkSet::union),
//! whenever each process took its checkpoint. This is stricter than tf.data
//! service's dynamic sharding, whose splits are handed out at most once.

use crate::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

/// Deals the chunks of a pass among the processes of a job.
pub trait ChunkDealer: Send + Sync + std::fmt::Debug {
    /// The next `count` chunks for this process, the first at or after
    /// `from`: every chunk of the pass goes to one process, and the chunks a
    /// process is dealt rise from one call to the next (its reader only
    /// moves forward). Chunks the dealer passes over for `from` are ones
    /// every process gave as trained.
    ///
    /// # Errors
    ///
    /// A dealer that cannot be reached.
    fn deal(&self, from: u64, count: u64) -> Result<Range<u64>>;
}

/// The chunks of a pass trained so far: every chunk numbered below `below`,
/// and those of the spans `above` (`[first, end)`, in order, apart, above
/// `below`). Chunks are numbered from 0 in file order, over the whole job's
/// pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSet {
    /// Every chunk below this one is trained.
    pub below: u64,
    /// Spans of chunks at or above `below` that are trained, in order.
    pub above: Vec<[u64; 2]>,
}

impl ChunkSet {
    /// Whether chunk `k` is in the set.
    pub fn contains(&self, k: u64) -> bool {
        let after = self.above.partition_point(|&[first, _]| first <= k);
        k < self.below || after > 0 && k < self.above[after - 1][1]
    }

    /// Chunks in the set among the first `chunks`.
    pub fn count_below(&self, chunks: u64) -> u64 {
        let spans = self
            .above
            .iter()
            .map(|&[first, end]| end.min(chunks).saturating_sub(first));
        self.below.min(chunks) + spans.sum::<u64>()
    }

    /// The chunks in any of `sets`: the job's, from each process's.
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a ChunkSet>) -> ChunkSet {
        let mut marks = Marks::default();
        for set in sets {
            marks.add(0..set.below);
            for &[first, end] in &set.above {
                marks.add(first..end);
            }
        }
        marks.set()
    }

    /// The set as words: `below`, then each span's first and end.
    pub fn to_words(&self) -> Vec<u64> {
        let spans = self.above.iter().flatten().copied();
        std::iter::once(self.below).chain(spans).collect()
    }

    /// The set [`to_words`](ChunkSet::to_words) wrote; `None` for words of
    /// another shape.
    pub fn from_words(words: &[u64]) -> Option<ChunkSet> {
        let (&below, spans) = words.split_first()?;
        let above: Vec<[u64; 2]> = spans.chunks_exact(2).map(|s| [s[0], s[1]]).collect();
        let ordered = above.windows(2).all(|w| w[0][1] < w[1][0]);
        let whole = spans.len() % 2 == 0
            && above
                .iter()
                .all(|&[first, end]| below < first && first < end);
        (whole && ordered).then_some(ChunkSet { below, above })
    }
}

/// A live record of the chunks trained, shared by the consumers (who mark
/// them), the parsers (who mark the chunks whose every line was skipped) and
/// whoever takes a checkpoint. It holds this process's chunks only (and
/// those it started from), each span of them once however many other
/// processes' chunks lie between.
#[derive(Debug, Clone)]
pub struct ChunkLedger(Arc<Mutex<Marks>>);

/// Chunks as spans: every chunk below `below`, and `[first, end)` for each
/// `first → end` of `above`, apart and above `below`.
#[derive(Debug, Default)]
struct Marks {
    below: u64,
    above: BTreeMap<u64, u64>,
}

impl ChunkLedger {
    /// A ledger starting from `done`.
    pub(crate) fn new(done: &ChunkSet) -> Self {
        let mut marks = Marks::default();
        marks.add(0..done.below);
        for &[first, end] in &done.above {
            marks.add(first..end);
        }
        Self(Arc::new(Mutex::new(marks)))
    }

    /// Marks chunk `k` trained.
    pub fn mark(&self, k: u64) {
        self.lock().add(k..k + 1);
    }

    /// What is trained now, for a checkpoint.
    pub fn snapshot(&self) -> ChunkSet {
        self.lock().set()
    }

    /// The marks; a consumer that panicked holding them left them whole
    /// (each change is a few inserts and removals of spans, none of which
    /// can panic).
    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Marks {
    /// Adds the chunks of `span`, joining the spans it meets or touches.
    fn add(&mut self, span: Range<u64>) {
        let (mut first, mut end) = (span.start.max(self.below), span.end);
        if first >= end {
            return;
        }
        // A span that starts at or before `first` and reaches it.
        if let Some((&before, &reach)) = self.above.range(..=first).next_back() {
            if reach >= first {
                first = before;
                end = end.max(reach);
            }
        }
        // The spans starting within [first, end] join it.
        let joined: Vec<(u64, u64)> = self
            .above
            .range(first..=end)
            .map(|(&f, &e)| (f, e))
            .collect();
        for (f, e) in joined {
            self.above.remove(&f);
            end = end.max(e);
        }
        if first <= self.below {
            self.below = self.below.max(end);
        } else {
            self.above.insert(first, end);
        }
    }

    fn set(&self) -> ChunkSet {
        ChunkSet {
            below: self.below,
            above: self
                .above
                .iter()
                .map(|(&first, &end)| [first, end])
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spans_join_and_the_cursor_moves_past_them() {
        let ledger = ChunkLedger::new(&ChunkSet::default());
        for k in [3, 5, 4, 9] {
            ledger.mark(k);
        }
        let set = ledger.snapshot();
        assert_eq!(
            set,
            ChunkSet {
                below: 0,
                above: vec![[3, 6], [9, 10]]
            }
        );
        assert!(set.contains(5) && !set.contains(6) && !set.contains(2));
        assert_eq!(set.count_below(10), 4);
        assert_eq!(set.count_below(4), 1);
        for k in [0, 1, 2] {
            ledger.mark(k);
        }
        ledger.mark(1); // once trained, marking again changes nothing
        assert_eq!(
            ledger.snapshot(),
            ChunkSet {
                below: 6,
                above: vec![[9, 10]]
            }
        );
    }

    #[test]
    fn words_of_another_shape_are_no_set() {
        let set = ChunkSet {
            below: 2,
            above: vec![[4, 6], [9, 12]],
        };
        assert_eq!(ChunkSet::from_words(&set.to_words()), Some(set));
        for words in [&[][..], &[2, 4], &[2, 6, 4], &[2, 2, 3], &[2, 4, 6, 6, 8]] {
            assert_eq!(ChunkSet::from_words(words), None, "{words:?}");
        }
    }

    proptest! {
        /// Whatever order chunks are trained in, the set holds exactly the
        /// trained ones, in no more spans than chunks trained; a ledger
        /// resumed from it goes on from the same set.
        #[test]
        fn the_snapshot_is_exactly_the_chunks_trained(
            order in Just((0u64..64).collect::<Vec<_>>()).prop_shuffle(),
            taken in 0usize..64,
        ) {
            let ledger = ChunkLedger::new(&ChunkSet::default());
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
            prop_assert_eq!(ChunkSet::from_words(&set.to_words()), Some(set.clone()));
            let resumed = ChunkLedger::new(&set);
            prop_assert_eq!(resumed.snapshot(), set);
        }

        /// Processes that each trained the chunks dealt to them: the union
        /// of their sets is the chunks any trained, whatever each took.
        #[test]
        fn the_jobs_set_is_the_union_of_the_processes(
            owner in proptest::collection::vec(0usize..3, 64),
            trained in proptest::collection::vec(any::<bool>(), 64),
        ) {
            let ledgers: Vec<ChunkLedger> =
                (0..3).map(|_| ChunkLedger::new(&ChunkSet::default())).collect();
            for (k, (&owner, &trained)) in owner.iter().zip(&trained).enumerate() {
                if trained {
                    ledgers[owner].mark(k as u64);
                }
            }
            let sets: Vec<ChunkSet> = ledgers.iter().map(ChunkLedger::snapshot).collect();
            let job = ChunkSet::union(&sets);
            for (k, &trained) in trained.iter().enumerate() {
                prop_assert_eq!(job.contains(k as u64), trained, "chunk {}", k);
            }
        }
    }
}
