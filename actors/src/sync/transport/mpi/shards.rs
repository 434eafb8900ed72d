//! Services across ranks: EASGD's centre shards and a sharded embedding
//! table's rows. A trainer's request to another rank leaves with a ticket; the
//! serving rank hands it to its shard actor (or embedding server) and sends
//! the answer back, which finds its asker by the ticket.

use super::ask::Ask;
use super::post::PostOffice;
use super::post::Serving;
use super::wire::Envelope;
use super::wire::{ShardWire, ROWS_TAG, SERVER_TAG};
use crate::embedding::{serve_rows, RemoteRows, RowRequest, RowServerActor};
use crate::sync::{serve, Codec, RemoteShards, ServerShardActor, ShardRequest};
use crate::system::ShardReply;
use crate::{Error, Result, ShardFault};
use actix::Addr;
use crossbeam_channel::{bounded, Sender};

/// The centre shards of other ranks, reached through the communication thread.
#[derive(Debug)]
pub(super) struct ShardsOnRanks {
    pub(super) asks: Sender<Ask>,
}

impl RemoteShards for ShardsOnRanks {
    fn send(
        &self,
        process: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    ) -> Result<()> {
        self.asks
            .send(Ask::Shard {
                rank: process,
                shard,
                request,
                reply,
            })
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }
}

/// The embedding rows of other ranks, reached through the communication thread.
#[derive(Debug)]
pub(super) struct RowsOnRanks {
    pub(super) asks: Sender<Ask>,
}

impl RemoteRows for RowsOnRanks {
    fn send(&self, process: usize, request: RowRequest, reply: Sender<ShardReply>) -> Result<()> {
        self.asks
            .send(Ask::Rows {
                rank: process,
                request,
                reply,
            })
            .map_err(|_| Error::Stopped("MPI communication thread"))
    }
}

impl PostOffice {
    /// Serves `hosted` from now on, starting with the requests that came
    /// early; compressed steps cross encoded by `codec` (a stateless one),
    /// if any.
    pub(super) fn host(
        &mut self,
        hosted: Vec<(usize, Addr<ServerShardActor>)>,
        codec: Option<Box<dyn Codec>>,
    ) {
        self.hosted = Some(hosted.into_iter().collect());
        self.centre_codec = codec;
        self.take_early(SERVER_TAG);
    }

    /// Takes the messages of `tag` that came before their service was
    /// registered, in the order they came.
    fn take_early(&mut self, tag: i32) {
        let (now, later) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|(_, of, _)| *of == tag);
        self.early = later;
        for (from, tag, words) in now {
            self.on_shard_message(from, tag, &words);
        }
    }

    /// Whether the service of messages of `tag` has been registered (with
    /// its codec).
    fn registered(&self, tag: i32) -> bool {
        match tag {
            ROWS_TAG => self.rows.is_some(),
            _ => self.hosted.is_some(),
        }
    }

    /// The envelope of this rank's `request` to `shard` on `rank`, whose
    /// answer will go to `reply`.
    pub(super) fn ask_shard(
        &mut self,
        rank: usize,
        shard: usize,
        request: ShardRequest,
        reply: Sender<ShardReply>,
    ) -> Envelope {
        self.ticketed(rank, reply, SERVER_TAG, |ticket| ShardWire::Request {
            ticket,
            shard,
            request,
        })
    }

    /// The envelope of this rank's `request` for rows of `rank`'s embedding
    /// shard, whose answer will go to `reply`.
    pub(super) fn ask_rows(
        &mut self,
        rank: usize,
        request: RowRequest,
        reply: Sender<ShardReply>,
    ) -> Envelope {
        self.ticketed(rank, reply, ROWS_TAG, |ticket| ShardWire::Rows {
            ticket,
            request,
        })
    }

    /// The envelope of `wire` (of MPI tag `tag`), given a new ticket whose
    /// answer goes to `reply`.
    fn ticketed(
        &mut self,
        rank: usize,
        reply: Sender<ShardReply>,
        tag: i32,
        wire: impl FnOnce(u64) -> ShardWire,
    ) -> Envelope {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.insert(ticket, reply);
        Envelope {
            rank: rank as i32,
            tag,
            words: wire(ticket).encode(self.codec_of(tag)),
        }
    }

    /// The codec of messages of MPI tag `tag`: the rows' codec for
    /// [`ROWS_TAG`], the centre's for [`SERVER_TAG`].
    fn codec_of(&mut self, tag: i32) -> Option<&mut dyn Codec> {
        let codec = match tag {
            ROWS_TAG => &mut self.row_codec,
            _ => &mut self.centre_codec,
        };
        match codec {
            Some(codec) => Some(&mut **codec),
            None => None,
        }
    }

    /// Serves this rank's embedding rows from now on, starting with the
    /// requests that came early; rows and gradients cross encoded by
    /// `codec` (a stateless one), if any.
    pub(super) fn host_rows(
        &mut self,
        server: Addr<RowServerActor>,
        codec: Option<Box<dyn Codec>>,
    ) {
        self.rows = Some(server);
        self.row_codec = codec;
        self.take_early(ROWS_TAG);
    }

    /// Hands `rank`'s request for rows to the embedding server.
    fn serve_rows(&mut self, rank: usize, ticket: u64, request: RowRequest) {
        let (reply, answer) = bounded(1);
        let serving = Serving {
            rank,
            ticket,
            shard: self.rank,
            tag: ROWS_TAG,
            coded: true,
            answer,
        };
        let served = match &self.rows {
            Some(server) => serve_rows(server, rank, request, reply),
            None => Err(Error::Stopped("embedding row server")),
        };
        match served {
            Ok(()) => self.serving.push(serving),
            Err(e) => self.answer(&serving, Err(e)),
        }
    }

    /// Hands `rank`'s request to the shard actor; a compressed step's
    /// answer crosses encoded.
    fn serve(&mut self, rank: usize, ticket: u64, shard: usize, request: ShardRequest) {
        let (reply, answer) = bounded(1);
        let serving = Serving {
            rank,
            ticket,
            shard,
            tag: SERVER_TAG,
            coded: matches!(
                request,
                ShardRequest::Elastic {
                    answer_move: true,
                    ..
                }
            ),
            answer,
        };
        let served = match self.hosted.as_ref().and_then(|hosted| hosted.get(&shard)) {
            Some(addr) => serve(addr, request, reply),
            None => Err(Error::ShardFailed {
                shard,
                fault: ShardFault::NotHostedOn { rank: self.rank },
            }),
        };
        match served {
            Ok(()) => self.serving.push(serving),
            Err(e) => self.answer(&serving, Err(e)),
        }
    }

    /// Queues the answer to the request `serving` serves.
    fn answer(&mut self, serving: &Serving, answer: Result<Vec<f32>>) {
        let answer = ShardWire::Answer {
            ticket: serving.ticket,
            shard: serving.shard,
            answer: answer.map_err(|e| e.to_string()),
        };
        let codec = if serving.coded {
            self.codec_of(serving.tag)
        } else {
            None
        };
        let words = answer.encode(codec);
        self.answers.push(Envelope {
            rank: serving.rank as i32,
            tag: serving.tag,
            words,
        });
    }

    /// Queues the answers the shard actors have given.
    pub(super) fn collect_answers(&mut self) {
        for serving in std::mem::take(&mut self.serving) {
            match serving.answer.try_recv() {
                Ok((_, result)) => self.answer(&serving, result),
                Err(crossbeam_channel::TryRecvError::Empty) => self.serving.push(serving),
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    self.answer(&serving, Err(Error::Stopped("server shard")))
                }
            }
        }
    }

    /// Takes a message of [`SERVER_TAG`] or [`ROWS_TAG`] (`tag`) from `from`
    /// (keeps it, as it came, until its service and codec are registered:
    /// this rank asks nothing before, so it is a request).
    pub(super) fn on_shard_message(&mut self, from: usize, tag: i32, words: &[u32]) {
        if !self.registered(tag) {
            self.early.push((from, tag, words.to_vec()));
            return;
        }
        match ShardWire::decode(words, self.codec_of(tag)) {
            Ok(ShardWire::Request {
                ticket,
                shard,
                request,
            }) => self.serve(from, ticket, shard, request),
            Ok(ShardWire::Rows { ticket, request }) => self.serve_rows(from, ticket, request),
            Ok(ShardWire::Answer {
                ticket,
                shard,
                answer,
            }) => match self.tickets.remove(&ticket) {
                // The asker may have stopped waiting.
                Some(reply) => {
                    let answer = answer.map_err(|reason| Error::Remote {
                        process: from,
                        reason,
                    });
                    let _ = reply.try_send((shard, answer));
                }
                None => tracing::error!(ticket, from_rank = from, "an answer to no request"),
            },
            Err(reason) => tracing::error!(
                from_rank = from,
                "dropped a malformed MPI shard message: {reason}"
            ),
        }
    }
}
