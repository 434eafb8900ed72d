//! How messages cross between ranks: one buffer of `u32` words per message,
//! a header and the `f32` values' bits, bit for bit.

use crate::embedding::RowRequest;
use crate::sync::transport::{Message, Outgoing, Phase};
use crate::sync::ShardRequest;
use std::sync::Arc;
use std::time::Instant;

/// One buffer for one rank.
pub(super) struct Envelope {
    pub(super) rank: i32,
    pub(super) tag: i32,
    pub(super) words: Vec<u32>,
}

impl Envelope {
    /// A control message (`words`, one of the control words) to `rank`.
    pub(super) fn control(rank: usize, words: &[u32]) -> Self {
        Self {
            rank: rank as i32,
            tag: CONTROL_TAG,
            words: words.to_vec(),
        }
    }
}

/// The MPI tag of parameter messages.
pub(super) const TAG: i32 = 17;
/// The MPI tag of control messages: [`ARRIVED`], [`STOP`], [`AGREED`] (and
/// the point, low word first) or [`WITHDRAWN`].
pub(super) const CONTROL_TAG: i32 = 18;
/// The MPI tag of requests to EASGD's centre shards or to embedding rows, and
/// their answers.
pub(super) const SERVER_TAG: i32 = 19;
/// The MPI tag of requests to a sharded embedding table's rows and their
/// answers (counted apart from the dense sync's bytes).
pub(super) const ROWS_TAG: i32 = 20;
/// Control: the sending rank has come to its next rendezvous.
pub(super) const ARRIVED: u32 = 0;
/// Control: end syncing now.
pub(super) const STOP: u32 = 1;
/// Control: the sending rank has come to a point (see `Fabric::agree`).
pub(super) const AGREED: u32 = 2;
/// Control: the sending rank comes to no further points.
pub(super) const WITHDRAWN: u32 = 3;
/// Words of a message's header.
const HEADER: usize = 6;

/// `[to, from, round low, round high, phase, values]` then the bits of the
/// values the message carries (its span of the sender's buffer, not the rest).
pub(super) fn encode(out: &Outgoing) -> Vec<u32> {
    let message = &out.message;
    let values = message.values();
    let mut words = Vec::with_capacity(HEADER + values.len());
    words.extend([
        out.to as u32,
        message.from as u32,
        message.round as u32,
        (message.round >> 32) as u32,
        match message.phase {
            Phase::Scatter => 0,
            Phase::Gather => 1,
            Phase::Shared => 2,
            Phase::Applied => 3,
        },
        values.len() as u32,
    ]);
    words.extend(values.iter().map(|x| x.to_bits()));
    words
}

/// The destination and the message of `words` (delivered now: the network
/// between ranks is real, not simulated).
pub(super) fn decode(words: &[u32]) -> std::result::Result<(usize, Message), String> {
    let Some(&[to, from, low, high, phase, len]) = words.get(..HEADER) else {
        return Err(format!("{} words, shorter than a header", words.len()));
    };
    let values = &words[HEADER..];
    if values.len() != len as usize {
        return Err(format!("{} values, the header says {len}", values.len()));
    }
    let phase = match phase {
        0 => Phase::Scatter,
        1 => Phase::Gather,
        2 => Phase::Shared,
        3 => Phase::Applied,
        other => return Err(format!("unknown phase {other}")),
    };
    let data: Arc<[f32]> = values.iter().map(|&w| f32::from_bits(w)).collect();
    let span = 0..data.len();
    Ok((
        to as usize,
        Message {
            round: u64::from(low) | (u64::from(high) << 32),
            phase,
            from: from as usize,
            data,
            span,
            deliver_at: Instant::now(),
        },
    ))
}

/// What crosses between ranks for EASGD's centre shards and embedding rows.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ShardWire {
    Request {
        ticket: u64,
        shard: usize,
        request: ShardRequest,
    },
    Rows {
        ticket: u64,
        request: RowRequest,
    },
    Answer {
        ticket: u64,
        shard: usize,
        answer: std::result::Result<Vec<f32>, String>,
    },
}

/// [`ShardWire`]'s kinds, its first word.
const ELASTIC: u32 = 0;
const CENTER: u32 = 1;
const ANSWER: u32 = 2;
const FAILED: u32 = 3;
const FETCH: u32 = 4;
const PUSH: u32 = 5;

impl ShardWire {
    /// `[kind, ticket low, ticket high, shard]`, then for an elastic step
    /// `[trainer, round low, round high, α, at]` and the values' bits; for an
    /// answer the values' bits, or the error's UTF-8 bytes one per word. A
    /// fetch of rows: the ids (two words each); a push: `[lr, rows]`, the ids,
    /// then the gradients' bits (the shard word is unused: 0).
    pub(super) fn encode(&self) -> Vec<u32> {
        let head = |kind: u32, ticket: u64, shard: usize| {
            vec![kind, ticket as u32, (ticket >> 32) as u32, shard as u32]
        };
        match self {
            Self::Request {
                ticket,
                shard,
                request: ShardRequest::Center,
            } => head(CENTER, *ticket, *shard),
            Self::Request {
                ticket,
                shard,
                request:
                    ShardRequest::Elastic {
                        values,
                        at,
                        alpha,
                        trainer,
                        round,
                    },
            } => {
                let mut words = head(ELASTIC, *ticket, *shard);
                words.extend([
                    *trainer as u32,
                    *round as u32,
                    (*round >> 32) as u32,
                    alpha.to_bits(),
                    *at as u32,
                ]);
                words.extend(values.iter().map(|x| x.to_bits()));
                words
            }
            Self::Rows {
                ticket,
                request: RowRequest::Fetch { ids },
            } => {
                let mut words = head(FETCH, *ticket, 0);
                words.extend(ids.iter().flat_map(|&id| [id as u32, (id >> 32) as u32]));
                words
            }
            Self::Rows {
                ticket,
                request: RowRequest::Push { ids, grads, lr },
            } => {
                let mut words = head(PUSH, *ticket, 0);
                words.extend([lr.to_bits(), ids.len() as u32]);
                words.extend(ids.iter().flat_map(|&id| [id as u32, (id >> 32) as u32]));
                words.extend(grads.iter().map(|x| x.to_bits()));
                words
            }
            Self::Answer {
                ticket,
                shard,
                answer: Ok(values),
            } => {
                let mut words = head(ANSWER, *ticket, *shard);
                words.extend(values.iter().map(|x| x.to_bits()));
                words
            }
            Self::Answer {
                ticket,
                shard,
                answer: Err(error),
            } => {
                let mut words = head(FAILED, *ticket, *shard);
                words.extend(error.bytes().map(u32::from));
                words
            }
        }
    }

    pub(super) fn decode(words: &[u32]) -> std::result::Result<Self, String> {
        let Some(&[kind, low, high, shard]) = words.get(..4) else {
            return Err(format!("{} words, shorter than a header", words.len()));
        };
        let (ticket, shard, rest) = (
            u64::from(low) | (u64::from(high) << 32),
            shard as usize,
            &words[4..],
        );
        let (floats, ids) = (floats_of, ids_of);
        Ok(match kind {
            CENTER => Self::Request {
                ticket,
                shard,
                request: ShardRequest::Center,
            },
            ELASTIC => {
                let Some(&[trainer, low, high, alpha, at]) = rest.get(..5) else {
                    return Err("an elastic request without its fields".into());
                };
                Self::Request {
                    ticket,
                    shard,
                    request: ShardRequest::Elastic {
                        values: floats(&rest[5..]).into(),
                        at: at as usize,
                        alpha: f32::from_bits(alpha),
                        trainer: trainer as usize,
                        round: u64::from(low) | (u64::from(high) << 32),
                    },
                }
            }
            FETCH if rest.len() % 2 == 0 => Self::Rows {
                ticket,
                request: RowRequest::Fetch { ids: ids(rest) },
            },
            FETCH => return Err("a fetch of rows with half an id".into()),
            PUSH => {
                let Some(&[lr, rows]) = rest.get(..2) else {
                    return Err("a push of rows without its fields".into());
                };
                let Some(id_words) = rest.get(2..2 + 2 * rows as usize) else {
                    return Err(format!("a push of {rows} rows without their ids"));
                };
                Self::Rows {
                    ticket,
                    request: RowRequest::Push {
                        ids: ids(id_words),
                        grads: floats(&rest[2 + 2 * rows as usize..]),
                        lr: f32::from_bits(lr),
                    },
                }
            }
            ANSWER => Self::Answer {
                ticket,
                shard,
                answer: Ok(floats(rest)),
            },
            FAILED => {
                let bytes = rest
                    .iter()
                    .map(|&w| u8::try_from(w).map_err(|_| format!("{w} is not a byte")))
                    .collect::<std::result::Result<Vec<u8>, String>>()?;
                Self::Answer {
                    ticket,
                    shard,
                    answer: Err(String::from_utf8_lossy(&bytes).into_owned()),
                }
            }
            other => return Err(format!("unknown kind {other}")),
        })
    }
}

/// `f32`s from their bits.
fn floats_of(words: &[u32]) -> Vec<f32> {
    words.iter().map(|&w| f32::from_bits(w)).collect()
}

/// `u64` ids from pairs of words, low then high.
fn ids_of(words: &[u32]) -> Vec<u64> {
    words
        .chunks(2)
        .map(|pair| u64::from(pair[0]) | (u64::from(pair[1]) << 32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_crosses_bit_for_bit_and_only_its_span() {
        let data: Arc<[f32]> = Arc::from(vec![7.0, 1.5, -0.0, f32::NAN, f32::MAX, 3e-39, 8.0]);
        let out = Outgoing {
            to: 7,
            message: Message {
                round: (5u64 << 32) + 9,
                phase: Phase::Gather,
                from: 3,
                data: Arc::clone(&data),
                span: 1..6,
                deliver_at: Instant::now(),
            },
        };
        let words = encode(&out);
        assert_eq!(words.len(), HEADER + 5, "the span only");
        let (to, back) = decode(&words).unwrap();
        assert_eq!((to, back.from, back.round), (7, 3, (5u64 << 32) + 9));
        assert_eq!(back.phase, Phase::Gather);
        let bits = |d: &[f32]| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(back.values()), bits(&data[1..6]));
    }

    #[test]
    fn malformed_messages_are_refused_not_trusted() {
        assert!(decode(&[1, 2, 3])
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(decode(&[0, 1, 0, 0, 0, 3, 7])
            .unwrap_err()
            .contains("header says 3"));
        assert!(decode(&[0, 1, 0, 0, 9, 0])
            .unwrap_err()
            .contains("unknown phase 9"));
    }

    #[test]
    fn shard_requests_and_answers_cross_intact() {
        let elastic = ShardRequest::Elastic {
            values: Arc::from(vec![0.25, -1.0, 3e-39]),
            at: 40,
            alpha: 0.3,
            trainer: 5,
            round: (2u64 << 32) + 1,
        };
        let big = (7u64 << 32) + 3;
        for wire in [
            ShardWire::Request {
                ticket: big,
                shard: 3,
                request: elastic,
            },
            ShardWire::Request {
                ticket: 0,
                shard: 1,
                request: ShardRequest::Center,
            },
            ShardWire::Answer {
                ticket: big,
                shard: 2,
                answer: Ok(vec![1.5, -0.0]),
            },
            ShardWire::Answer {
                ticket: 1,
                shard: 0,
                answer: Err("rank 1: server shard 0 failed — «panic»".into()),
            },
            ShardWire::Rows {
                ticket: big,
                request: RowRequest::Fetch {
                    ids: vec![0, 5, (3u64 << 32) + 7],
                },
            },
            ShardWire::Rows {
                ticket: 4,
                request: RowRequest::Push {
                    ids: vec![9, (1u64 << 40) + 2],
                    grads: vec![0.5, -1.0, 3e-39, f32::MAX],
                    lr: 0.05,
                },
            },
        ] {
            assert_eq!(ShardWire::decode(&wire.encode()).unwrap(), wire);
        }
        assert!(ShardWire::decode(&[0, 1])
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(ShardWire::decode(&[ELASTIC, 1, 0, 0, 5])
            .unwrap_err()
            .contains("without its fields"));
        assert!(ShardWire::decode(&[FAILED, 1, 0, 0, 300])
            .unwrap_err()
            .contains("not a byte"));
        assert!(ShardWire::decode(&[FETCH, 1, 0, 0, 5])
            .unwrap_err()
            .contains("half an id"));
        assert!(ShardWire::decode(&[PUSH, 1, 0, 0, 0, 3, 1, 0])
            .unwrap_err()
            .contains("3 rows without their ids"));
        assert!(ShardWire::decode(&[9, 1, 0, 0])
            .unwrap_err()
            .contains("unknown kind 9"));
    }
}
