//! Embedding tables sharded over the processes of a job: each process stores
//! about 1/R of every table's rows (and their optimizer state), serves them to
//! the others, and applies the gradients they push, Hogwild-style, as the
//! embedding parameter servers of the ShadowSync paper.
//!
//! - **Who owns a row**: [`RowSharding`]. Row `id` of a table of `rows` lives
//!   on process `id mod R`, at local index `id div R`. Round-robin spreads every
//!   field of a fused CTR table (its rows are contiguous ids) and its frequent
//!   ids evenly over the processes; it needs no lookup table and does not
//!   depend on the data.
//! - **A shard**: [`RowStore`], the rows a process owns with the state of its
//!   [`RowRule`] (the update from a row's gradient: [`Sgd`], [`Adagrad`],
//!   [`Ftrl`], or a rule of one's own).
//! - **Its server**: [`RowServer`], an actor on a thread of its own that
//!   answers the other processes' fetches and applies their pushes; the
//!   fabric's communication thread hands it their requests
//!   ([`Fabric::serve_rows`](crate::sync::Fabric::serve_rows)).
//! - **A trainer's side**: [`RowClient`]. It fetches a batch's unique rows
//!   with one request per owning process (its own process's rows read in
//!   place, under the shard's lock, not copied through the fabric), and pushes
//!   their coalesced gradients back with one message per owner, without
//!   waiting for them to be applied. A bound on the batches in flight (fetched
//!   but not yet applied everywhere) is the embeddings' staleness: with 1, a
//!   fetch waits for the previous batch's pushes, so every batch sees every
//!   earlier one (exact, sequential); with 2 the next batch's rows can be
//!   fetched while the current one computes. [`RowStats`] counts the traffic
//!   and the staleness seen.
//! - **Nothing lost**: the clients count the pushes they send to each owner,
//!   each shard those it applies from each sender, and [`unaccounted`] finds
//!   where the two differ ([`ledger`](self::PushCounts)).
//!
//! A fetch or a push that gets no answer within the client's timeout is an
//! error naming the process and what was asked.

mod client;
mod ledger;
mod rule;
mod server;
mod store;

pub use client::{Fetch, RowClient, RowStats, RowTraffic};
pub use ledger::{unaccounted, PushCounts, Pushes, Unaccounted};
pub use rule::{check_rule, update_rows, Adagrad, Ftrl, RowRule, Sgd, MAX_STATE_ARRAYS};
#[cfg(feature = "mpi")]
pub(crate) use server::serve_rows;
pub use server::{RemoteRows, RowRequest, RowServer, RowServerActor};
pub use store::RowStore;

use crate::{Error, Result};

/// Which process owns which row: row `id` lives on process `id mod R` at local
/// index `id div R`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSharding {
    rows: u64,
    ranks: usize,
}

impl RowSharding {
    /// `rows` rows over `ranks` processes.
    ///
    /// # Errors
    ///
    /// Rows over no processes ([`Error::Layout`]).
    pub fn new(rows: u64, ranks: usize) -> Result<Self> {
        if ranks == 0 {
            return Err(Error::Layout("rows sharded over 0 processes".into()));
        }
        Ok(Self { rows, ranks })
    }

    /// Rows of the table.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Processes the rows are spread over.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The process that owns row `id`.
    pub fn owner(&self, id: u64) -> usize {
        (id % self.ranks as u64) as usize
    }

    /// Where row `id` lies in its owner's shard.
    pub fn local(&self, id: u64) -> usize {
        (id / self.ranks as u64) as usize
    }

    /// The id of the `local`-th row of `rank`'s shard.
    pub fn global(&self, rank: usize, local: usize) -> u64 {
        local as u64 * self.ranks as u64 + rank as u64
    }

    /// How many rows `rank`'s shard holds.
    pub fn rows_of(&self, rank: usize) -> usize {
        let (rows, ranks, rank) = (self.rows, self.ranks as u64, rank as u64);
        if rank >= rows {
            0
        } else {
            ((rows - rank).div_ceil(ranks)) as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_row_has_exactly_one_owner_and_place(rows in 0u64..500, ranks in 1usize..9) {
            let s = RowSharding::new(rows, ranks).unwrap();
            let mut seen = vec![false; rows as usize];
            for rank in 0..ranks {
                for local in 0..s.rows_of(rank) {
                    let id = s.global(rank, local);
                    prop_assert!(id < rows);
                    prop_assert_eq!((s.owner(id), s.local(id)), (rank, local));
                    prop_assert!(!seen[id as usize]);
                    seen[id as usize] = true;
                }
            }
            prop_assert!(seen.iter().all(|&s| s));
            let sizes: Vec<usize> = (0..ranks).map(|r| s.rows_of(r)).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(max - min <= 1, "{sizes:?}");
        }
    }
}
