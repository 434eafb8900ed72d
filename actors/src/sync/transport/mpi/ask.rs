//! What the node asks of its communication thread besides sending: the
//! collectives, the registrations, the requests to other ranks' shards.

use crate::embedding::{RowRequest, RowServerActor};
use crate::sync::transport::message::Message;
use crate::sync::{Codec, ServerShardActor, ShardRequest};
use crate::system::ShardReply;
use actix::Addr;
use crossbeam_channel::Sender;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What the node asks of its communication thread besides sending.
pub(super) enum Ask {
    /// Deliver messages for trainers `range` into these inboxes from now on,
    /// and raise `stop` when another rank stops syncing.
    Register {
        range: Range<usize>,
        inboxes: Vec<Sender<Message>>,
        stop: Arc<AtomicBool>,
    },
    /// This rank is at its next rendezvous: tell the others, answer once all are.
    Rendezvous(Sender<()>),
    /// This rank has come to this point: tell the others, answer whether
    /// all have (see `Fabric::agree`).
    Agree(u64, Sender<bool>),
    /// This rank comes to no further points: tell the others.
    Withdraw,
    /// Tell every other rank to stop syncing.
    StopAll,
    /// Deal this rank the next `count` chunks of the pass, the first at or
    /// after `from` (rank 0 deals them); answer the first.
    Deal {
        from: u64,
        count: u64,
        answer: Sender<u64>,
    },
    /// Sum these values over the ranks (`MPI_Iallreduce`) and answer the sums.
    Sum(Sums, Sender<Sums>),
    /// Gather every rank's words (`MPI_Iallgatherv`) and answer them.
    Gather(Vec<u32>, Sender<Vec<Vec<u32>>>),
    /// Serve these EASGD centre shards (index, actor) to the other ranks;
    /// compressed steps cross encoded by this codec, if any.
    HostShards(Vec<(usize, Addr<ServerShardActor>)>, Option<Box<dyn Codec>>),
    /// Send `request` to centre shard `shard` on rank `rank`; answer on `reply`.
    Shard {
        rank: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    },
    /// Hand the other ranks' requests for this rank's embedding rows to this
    /// server; rows and gradients cross encoded by this codec, if any.
    HostRows(Addr<RowServerActor>, Option<Box<dyn Codec>>),
    /// Send `request` to the embedding shard of rank `rank`; answer on `reply`.
    Rows {
        rank: usize,
        request: RowRequest,
        reply: Sender<ShardReply>,
    },
    /// Wait for every rank to finish, then finalize MPI and end.
    Finish,
}

impl std::fmt::Debug for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ask::Register { range, .. } => write!(f, "Register({range:?})"),
            Ask::Rendezvous(_) => write!(f, "Rendezvous"),
            Ask::Agree(point, _) => write!(f, "Agree({point})"),
            Ask::Withdraw => write!(f, "Withdraw"),
            Ask::StopAll => write!(f, "StopAll"),
            Ask::Deal { from, count, .. } => write!(f, "Deal({count} from {from})"),
            Ask::Sum(_, _) => write!(f, "Sum"),
            Ask::Gather(words, _) => write!(f, "Gather({} words)", words.len()),
            Ask::HostShards(hosted, _) => write!(f, "HostShards({})", hosted.len()),
            Ask::Shard { rank, shard, .. } => write!(f, "Shard({shard} on rank {rank})"),
            Ask::HostRows(..) => write!(f, "HostRows"),
            Ask::Rows { rank, .. } => write!(f, "Rows(on rank {rank})"),
            Ask::Finish => write!(f, "Finish"),
        }
    }
}

/// What [`Ask::Sum`] sums.
pub(super) enum Sums {
    Values(Vec<f32>),
    Counts(Vec<u64>),
}
