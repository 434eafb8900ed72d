//! Exactly-once accounting of pushed gradients.
//!
//! Every process's clients count the pushes, and the rows in them, that they
//! send to each owner ([`RowStats`](super::RowStats)); every shard counts
//! those it applies from each sender ([`RowStore`](super::RowStore)). At the
//! end of a run what each process sent an owner must be what that owner
//! applied from it: a push dropped, failed or applied twice anywhere shows as
//! a difference naming both processes ([`unaccounted`], over a job:
//! [`unaccounted_in_job`]).

use crate::sync::Fabric;
use crate::Result;
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

/// [`unaccounted`] over the whole job, on every process (a collective):
/// `sent` and `applied` are this process's counts.
pub fn unaccounted_in_job(
    fabric: &dyn Fabric,
    sent: &PushCounts,
    applied: &PushCounts,
) -> Result<Vec<Unaccounted>> {
    let (n, me) = (fabric.processes(), fabric.process());
    // Two n × n tables of (pushes, rows) by [sender][owner], summed over the
    // processes: each fills its own row of the sent one and its own column
    // of the applied one.
    let at = |table: usize, sender: usize, owner: usize| ((table * n + sender) * n + owner) * 2;
    let mut tables = vec![0u64; 4 * n * n];
    for other in 0..n {
        let (pushes, rows) = sent.of(other);
        tables[at(0, me, other)..][..2].copy_from_slice(&[pushes, rows]);
        let (pushes, rows) = applied.of(other);
        tables[at(1, other, me)..][..2].copy_from_slice(&[pushes, rows]);
    }
    fabric.sum(&mut tables)?;
    let counts = |table: usize, process: usize, by_owner: bool| {
        let mut counts = PushCounts::default();
        for other in 0..n {
            let (sender, owner) = match by_owner {
                true => (process, other),
                false => (other, process),
            };
            let cell = at(table, sender, owner);
            counts.pushes.push(tables[cell]);
            counts.rows.push(tables[cell + 1]);
        }
        counts
    };
    let sent: Vec<PushCounts> = (0..n).map(|s| counts(0, s, true)).collect();
    let applied: Vec<PushCounts> = (0..n).map(|o| counts(1, o, false)).collect();
    Ok(unaccounted(&sent, &applied))
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
