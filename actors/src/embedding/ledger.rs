//! Exactly-once accounting of pushed gradients.
//!
//! Every process's clients count the pushes, and the rows in them, that they
//! send to each owner ([`RowStats`](super::RowStats)); every shard counts
//! those it applies from each sender ([`RowStore`](super::RowStore)). At the
//! end of a run what each process sent an owner must be what that owner
//! applied from it: a push dropped, failed or applied twice anywhere shows as
//! a difference naming both processes ([`unaccounted`], over a job:
//! [`unaccounted_in_job`](crate::sync::unaccounted_in_job), a collective of the
//! fabric).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Pushes and their rows, by the other process: the owner each went to, or
/// the sender each came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushCounts {
    /// Pushes (one message of a batch's rows to one owner), by process.
    pub pushes: Vec<u64>,
    /// Rows in them, by process.
    pub rows: Vec<u64>,
}

impl PushCounts {
    /// Counts one push of `rows` rows to or from `process`.
    pub fn record(&mut self, process: usize, rows: usize) {
        if self.pushes.len() <= process {
            self.pushes.resize(process + 1, 0);
            self.rows.resize(process + 1, 0);
        }
        self.pushes[process] += 1;
        self.rows[process] += rows as u64;
    }

    /// Pushes and rows to or from `process` (0 where none was counted).
    pub fn of(&self, process: usize) -> (u64, u64) {
        let at = |counts: &[u64]| counts.get(process).copied().unwrap_or(0);
        (at(&self.pushes), at(&self.rows))
    }

    /// All pushes counted.
    pub fn total(&self) -> u64 {
        self.pushes.iter().sum()
    }
}

/// One process's side of the ledger: what its trainers sent each owner and
/// what its shard applied from each sender. A checkpoint keeps it with the
/// shard, and a resumed run goes on counting from it, so that a job's
/// ledger spans its interruptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushes {
    /// Sent, by owner.
    pub sent: PushCounts,
    /// Applied, by sender.
    pub applied: PushCounts,
}

/// What `sender` sent `owner` against what `owner` applied from it, where
/// they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unaccounted {
    /// The process that pushed.
    pub sender: usize,
    /// The process that owns the rows.
    pub owner: usize,
    /// Pushes and rows sent.
    pub sent: (u64, u64),
    /// Pushes and rows applied.
    pub applied: (u64, u64),
}

impl fmt::Display for Unaccounted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} sent process {} {} pushes ({} rows), which applied {} ({} rows)",
            self.sender, self.owner, self.sent.0, self.sent.1, self.applied.0, self.applied.1
        )
    }
}

/// Every pair of processes whose counts differ, where `sent[s]` is what
/// process `s` sent, by owner, and `applied[o]` what process `o` applied, by
/// sender.
pub fn unaccounted(sent: &[PushCounts], applied: &[PushCounts]) -> Vec<Unaccounted> {
    let processes = sent.len().max(applied.len());
    let none = PushCounts::default();
    let mut differences = Vec::new();
    for sender in 0..processes {
        for owner in 0..processes {
            let sent = sent.get(sender).unwrap_or(&none).of(owner);
            let applied = applied.get(owner).unwrap_or(&none).of(sender);
            if sent != applied {
                differences.push(Unaccounted {
                    sender,
                    owner,
                    sent,
                    applied,
                });
            }
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counts(pushes: &[u64], rows: &[u64]) -> PushCounts {
        PushCounts {
            pushes: pushes.to_vec(),
            rows: rows.to_vec(),
        }
    }

    #[test]
    fn a_dropped_or_doubled_push_names_both_processes() {
        // Process 0 sent 3 pushes to 1; 1 applied 2 of them. Process 1 sent
        // 4 to 0, which applied one of them twice.
        let sent = [counts(&[5, 3], &[50, 30]), counts(&[4, 6], &[40, 60])];
        let applied = [counts(&[5, 5], &[50, 50]), counts(&[2, 6], &[20, 60])];
        let found = unaccounted(&sent, &applied);
        assert_eq!(
            found,
            [
                Unaccounted {
                    sender: 0,
                    owner: 1,
                    sent: (3, 30),
                    applied: (2, 20)
                },
                Unaccounted {
                    sender: 1,
                    owner: 0,
                    sent: (4, 40),
                    applied: (5, 50)
                },
            ]
        );
        assert_eq!(
            found[0].to_string(),
            "process 0 sent process 1 3 pushes (30 rows), which applied 2 (20 rows)"
        );
    }

    proptest! {
        /// Whatever the order pushes go in, counting each once on both sides
        /// leaves nothing unaccounted, and dropping any one is found.
        #[test]
        fn counts_kept_on_both_sides_agree_unless_one_is_lost(
            pushes in proptest::collection::vec((0usize..4, 0usize..4, 1usize..20), 1..60),
            lost in any::<proptest::sample::Index>(),
        ) {
            let mut sent = vec![PushCounts::default(); 4];
            let mut applied = vec![PushCounts::default(); 4];
            for &(from, to, rows) in &pushes {
                sent[from].record(to, rows);
                applied[to].record(from, rows);
            }
            prop_assert!(unaccounted(&sent, &applied).is_empty());
            let (from, to, rows) = pushes[lost.index(pushes.len())];
            applied[to] = {
                let mut again = PushCounts::default();
                for &(f, t, r) in &pushes {
                    if t == to && (f, r) != (from, rows) {
                        again.record(f, r);
                    }
                }
                // The others of that sender with the same size stay.
                let same = pushes.iter().filter(|&&p| p == (from, to, rows)).count();
                for _ in 1..same {
                    again.record(from, rows);
                }
                again
            };
            let found = unaccounted(&sent, &applied);
            prop_assert_eq!(found.len(), 1);
            prop_assert_eq!((found[0].sender, found[0].owner), (from, to));
            prop_assert_eq!(found[0].sent.0, found[0].applied.0 + 1);
        }
    }
}
