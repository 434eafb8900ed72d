//! The embedding server of a process: an actor, on a thread of its own, that
//! answers other processes' fetches from the process's shard and applies the
//! gradients they push to it.

use super::RowStore;
#[cfg(feature = "mpi")]
use crate::system::deliver;
use crate::system::spawn_system;
use crate::system::ShardReply;
use crate::Result;
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// What another process asks of a shard.
#[derive(Debug, Clone, PartialEq)]
pub enum RowRequest {
    /// The rows `ids` (owned by the shard), one after another.
    Fetch {
        /// Global row ids.
        ids: Vec<u64>,
    },
    /// Apply `grads` (a row of values per id) to the rows `ids` at `lr`;
    /// answered with no values once applied.
    Push {
        /// Global row ids.
        ids: Vec<u64>,
        /// Their gradients, coalesced (one row per id).
        grads: Vec<f32>,
        /// The pushing trainer's learning rate.
        lr: f32,
    },
}

/// The shards of other processes, reached through the fabric.
pub trait RemoteRows: Send + Sync + std::fmt::Debug {
    /// Sends `request` to the shard of process `process`; its answer (the
    /// process, then the rows or an error) comes on `reply`.
    ///
    /// # Errors
    ///
    /// The fabric has stopped or cannot reach `process`.
    fn send(&self, process: usize, request: RowRequest, reply: Sender<ShardReply>) -> Result<()>;
}

/// A shard shared by its server and the trainers of its process.
pub(super) type SharedStore = Arc<Mutex<RowStore>>;

/// The shard, locked (a panic while it was held cannot leave a row half
/// written: updates do not panic).
pub(super) fn locked(store: &SharedStore) -> MutexGuard<'_, RowStore> {
    store
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A request of process `from` and where to answer it.
#[derive(Message)]
#[rtype(result = "()")]
struct Serve {
    from: usize,
    request: RowRequest,
    reply: Sender<ShardReply>,
}

/// The actor serving a process's shard.
pub struct RowServerActor {
    rank: usize,
    store: SharedStore,
}

impl Actor for RowServerActor {
    type Context = Context<Self>;
}

impl Handler<Serve> for RowServerActor {
    type Result = ();

    fn handle(&mut self, serve: Serve, _: &mut Context<Self>) {
        let mut store = locked(&self.store);
        let answer = match &serve.request {
            RowRequest::Fetch { ids } => {
                let mut rows = vec![0f32; ids.len() * store.width()];
                store.read(ids, &mut rows).map(|()| rows)
            }
            RowRequest::Push { ids, grads, lr } => store
                .apply(serve.from, ids, grads, *lr)
                .map(|()| Vec::new()),
        };
        let _ = serve.reply.send((self.rank, answer));
    }
}

/// A process's embedding server: its shard, and the actor answering the
/// other processes.
#[derive(Debug)]
pub struct RowServer {
    rank: usize,
    store: SharedStore,
    addr: Addr<RowServerActor>,
    system: System,
    thread: Option<JoinHandle<()>>,
}

impl RowServer {
    /// Starts serving `store`, the shard of process `rank`.
    ///
    /// # Errors
    ///
    /// An actix system that cannot start on its thread.
    pub fn start(rank: usize, store: RowStore) -> Result<Self> {
        let store = Arc::new(Mutex::new(store));
        let served = Arc::clone(&store);
        let (system, thread, addr) = spawn_system("embedding-server", move || {
            RowServerActor {
                rank,
                store: served,
            }
            .start()
        })?;
        Ok(Self {
            rank,
            store,
            addr,
            system,
            thread: Some(thread),
        })
    }

    /// The process whose shard this is.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The actor, for the fabric to hand it other processes' requests.
    pub fn addr(&self) -> Addr<RowServerActor> {
        self.addr.clone()
    }

    /// The shard (for this process's trainers, checkpoints and tests).
    pub fn store(&self) -> &Arc<Mutex<RowStore>> {
        &self.store
    }

    /// Runs `f` on the shard, locked.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut RowStore) -> T) -> T {
        f(&mut locked(&self.store))
    }
}

impl Drop for RowServer {
    fn drop(&mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Hands process `from`'s `request` to the server `addr`, answering on
/// `reply`; waits while the server's mailbox is full.
#[cfg(feature = "mpi")]
pub(crate) fn serve_rows(
    addr: &Addr<RowServerActor>,
    from: usize,
    request: RowRequest,
    reply: Sender<ShardReply>,
) -> Result<()> {
    deliver(
        addr,
        Serve {
            from,
            request,
            reply,
        },
        "embedding server",
    )
}

#[cfg(all(test, feature = "mpi"))]
mod tests {
    use super::*;
    use crate::embedding::{RowSharding, Sgd};
    use crossbeam_channel::unbounded;

    /// The server of the 4 rows of one rank, each of width 1 and value 0.
    fn server() -> RowServer {
        let sharding = RowSharding::new(4, 1).unwrap();
        let store = RowStore::new(sharding, 0, 1, Box::new(Sgd), |_, row| row.fill(0.0)).unwrap();
        RowServer::start(0, store).unwrap()
    }

    #[test]
    fn pushes_past_a_full_mailbox_wait_and_are_all_applied() {
        let server = server();
        let (reply, answers) = unbounded();
        // The shard held busy, as when this rank's trainers write it: the
        // server takes no request, and 100 pushes are more than its mailbox
        // holds (16).
        let busy = locked(server.store());
        let addr = server.addr();
        let sender = std::thread::spawn(move || {
            (0..100).try_for_each(|_| {
                let push = RowRequest::Push {
                    ids: vec![1],
                    grads: vec![1.0],
                    lr: 1.0,
                };
                serve_rows(&addr, 1, push, reply.clone())
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(busy);
        sender.join().unwrap().unwrap();
        for _ in 0..100 {
            let (rank, answer) = answers.recv().unwrap();
            assert_eq!((rank, answer.unwrap()), (0, Vec::new()));
        }
        let mut row = [0.0];
        server.with_store(|s| s.read(&[1], &mut row)).unwrap();
        assert_eq!(row, [-100.0]);
        assert_eq!(server.with_store(|s| s.applied().of(1)), (100, 100));
    }
}
