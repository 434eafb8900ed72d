//! How messages cross between ranks: one buffer of `u32` words per message,
//! a header and the `f32` values' bits, bit for bit (or a codec's bytes).

use crate::embedding::RowRequest;
use crate::sync::transport::{packed, unpacked, Body, Codec, Message, Outgoing, Phase};
use crate::sync::ShardRequest;
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
/// the point, low word first), [`WITHDRAWN`], [`DEAL`] or [`DEALT`].
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
/// Control, to rank 0: deal the sender chunks (a ticket, then the first
/// chunk it may take and how many, each low word first).
pub(super) const DEAL: u32 = 4;
/// Control, from rank 0: the chunks dealt (the ticket, then the first chunk,
/// low word first).
pub(super) const DEALT: u32 = 5;

/// A `u64` as two words, low first.
pub(super) fn words_of(value: u64) -> [u32; 2] {
    [value as u32, (value >> 32) as u32]
}

/// The `u64` of two words, low first.
pub(super) fn u64_of(low: u32, high: u32) -> u64 {
    u64::from(low) | (u64::from(high) << 32)
}
/// Words of a message's header.
const HEADER: usize = 8;
/// The header's last word when the values cross as `f32`, not encoded.
const PLAIN: u32 = u32::MAX;

/// `[to, from, round low, round high, phase, values, encoded, offset]` then
/// the bits of the values the message carries (its span of the sender's
/// buffer, not the rest; `encoded` is [`PLAIN`]), or the `encoded` bytes of
/// their encoding, four a word, little-endian (`offset`: where in the synced
/// vector the encoded values lie).
pub(super) fn encode(out: &Outgoing) -> Vec<u32> {
    let message = &out.message;
    let values = message.values();
    let mut words = Vec::with_capacity(HEADER + values.len());
    let (encoded, offset) = match &message.body {
        Body::Values { .. } => (None, 0),
        Body::Encoded { wire, offset, .. } => (Some(wire), *offset),
    };
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
        message.len() as u32,
        encoded.map_or(PLAIN, |wire| wire.len() as u32),
        offset as u32,
    ]);
    match encoded {
        None => words.extend(values.iter().map(|x| x.to_bits())),
        Some(wire) => words.extend(packed(wire)),
    }
    words
}

/// The destination and the message of `words` (delivered now: the network
/// between ranks is real, not simulated).
pub(super) fn decode(words: &[u32]) -> std::result::Result<(usize, Message), String> {
    let Some(&[to, from, low, high, phase, len, encoded, offset]) = words.get(..HEADER) else {
        return Err(format!("{} words, shorter than a header", words.len()));
    };
    let values = &words[HEADER..];
    let body = match encoded {
        PLAIN if values.len() != len as usize => {
            return Err(format!("{} values, the header says {len}", values.len()))
        }
        PLAIN => Body::whole(values.iter().map(|&w| f32::from_bits(w)).collect()),
        bytes => Body::Encoded {
            wire: unpacked(values, bytes)?.into(),
            len: len as usize,
            offset: offset as usize,
        },
    };
    let phase = match phase {
        0 => Phase::Scatter,
        1 => Phase::Gather,
        2 => Phase::Shared,
        3 => Phase::Applied,
        other => return Err(format!("unknown phase {other}")),
    };
    Ok((
        to as usize,
        Message {
            round: u64::from(low) | (u64::from(high) << 32),
            phase,
            from: from as usize,
            body,
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
const PUSH_CODED: u32 = 6;
const ANSWER_CODED: u32 = 7;
const ELASTIC_CODED: u32 = 8;

impl ShardWire {
    /// `[kind, ticket low, ticket high, shard]`, then for an elastic step
    /// `[trainer, round low, round high, α, at, answer_move]` and the values'
    /// bits; for an answer the values' bits, or the error's UTF-8 bytes one
    /// per word. A fetch of rows: the ids (two words each); a push: `[lr,
    /// rows]`, the ids, then the gradients' bits (the shard word is unused:
    /// 0). With a `codec`, a push's gradients, a compressed elastic step's
    /// values (one answered with the move) and an answer's values cross
    /// encoded ([`value_words`]); the caller gives one for the answers it
    /// encodes.
    pub(super) fn encode(&self, codec: Option<&mut dyn Codec>) -> Vec<u32> {
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
                        answer_move,
                    },
            } => {
                let codec = codec.filter(|_| *answer_move);
                let mut words = head(kind(&codec, ELASTIC, ELASTIC_CODED), *ticket, *shard);
                words.extend([
                    *trainer as u32,
                    *round as u32,
                    (*round >> 32) as u32,
                    alpha.to_bits(),
                    *at as u32,
                    u32::from(*answer_move),
                ]);
                words.extend(value_words(values, codec));
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
                let mut words = head(kind(&codec, PUSH, PUSH_CODED), *ticket, 0);
                words.extend([lr.to_bits(), ids.len() as u32]);
                words.extend(ids.iter().flat_map(|&id| [id as u32, (id >> 32) as u32]));
                words.extend(value_words(grads, codec));
                words
            }
            Self::Answer {
                ticket,
                shard,
                answer: Ok(values),
            } => {
                let mut words = head(kind(&codec, ANSWER, ANSWER_CODED), *ticket, *shard);
                words.extend(value_words(values, codec));
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

    /// The message of `words`, decoding encoded values with `codec`.
    pub(super) fn decode(
        words: &[u32],
        codec: Option<&mut dyn Codec>,
    ) -> std::result::Result<Self, String> {
        let Some(&[kind, low, high, shard]) = words.get(..4) else {
            return Err(format!("{} words, shorter than a header", words.len()));
        };
        let (ticket, shard, rest) = (
            u64::from(low) | (u64::from(high) << 32),
            shard as usize,
            &words[4..],
        );
        let ids = ids_of;
        Ok(match kind {
            CENTER => Self::Request {
                ticket,
                shard,
                request: ShardRequest::Center,
            },
            ELASTIC | ELASTIC_CODED => {
                let Some(&[trainer, low, high, alpha, at, answer_move]) = rest.get(..6) else {
                    return Err("an elastic request without its fields".into());
                };
                let coded = (kind == ELASTIC_CODED).then_some(codec);
                Self::Request {
                    ticket,
                    shard,
                    request: ShardRequest::Elastic {
                        values: values_of(&rest[6..], coded)?.into(),
                        at: at as usize,
                        alpha: f32::from_bits(alpha),
                        trainer: trainer as usize,
                        round: u64::from(low) | (u64::from(high) << 32),
                        answer_move: answer_move != 0,
                    },
                }
            }
            FETCH if rest.len() % 2 == 0 => Self::Rows {
                ticket,
                request: RowRequest::Fetch { ids: ids(rest) },
            },
            FETCH => return Err("a fetch of rows with half an id".into()),
            PUSH | PUSH_CODED => {
                let Some(&[lr, rows]) = rest.get(..2) else {
                    return Err("a push of rows without its fields".into());
                };
                let Some(id_words) = rest.get(2..2 + 2 * rows as usize) else {
                    return Err(format!("a push of {rows} rows without their ids"));
                };
                let values = &rest[2 + 2 * rows as usize..];
                Self::Rows {
                    ticket,
                    request: RowRequest::Push {
                        ids: ids(id_words),
                        grads: values_of(values, (kind == PUSH_CODED).then_some(codec))?,
                        lr: f32::from_bits(lr),
                    },
                }
            }
            ANSWER | ANSWER_CODED => Self::Answer {
                ticket,
                shard,
                answer: Ok(values_of(rest, (kind == ANSWER_CODED).then_some(codec))?),
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

/// The kind `plain`, or `coded` with a `codec`.
fn kind(codec: &Option<&mut dyn Codec>, plain: u32, coded: u32) -> u32 {
    match codec {
        Some(_) => coded,
        None => plain,
    }
}

/// `values` as words: their bits, or with a `codec` (stateless: no link's
/// memory) `[values, bytes]` and their encoding's bytes packed four a word.
fn value_words(values: &[f32], codec: Option<&mut dyn Codec>) -> Vec<u32> {
    match codec {
        None => values.iter().map(|x| x.to_bits()).collect(),
        Some(codec) => {
            let mut wire = Vec::new();
            codec.encode(0, values, &mut wire);
            let mut words = vec![values.len() as u32, wire.len() as u32];
            words.extend(packed(&wire));
            words
        }
    }
}

/// The values of `words` made by [`value_words`]: `None` for bits, or the
/// codec that decodes them (an error if this rank has none).
fn values_of(
    words: &[u32],
    coded: Option<Option<&mut dyn Codec>>,
) -> std::result::Result<Vec<f32>, String> {
    let Some(codec) = coded else {
        return Ok(floats_of(words));
    };
    let Some(codec) = codec else {
        return Err("compressed values, and sync.compression is \"none\" here".into());
    };
    let Some((&[values, bytes], packed)) = words.split_first_chunk::<2>() else {
        return Err("compressed values without their sizes".into());
    };
    let mut out = vec![0f32; values as usize];
    codec
        .decode(0, &unpacked(packed, bytes)?, &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
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
    use std::sync::Arc;

    #[test]
    fn a_message_crosses_bit_for_bit_and_only_its_span() {
        let data: Arc<[f32]> = Arc::from(vec![7.0, 1.5, -0.0, f32::NAN, f32::MAX, 3e-39, 8.0]);
        let out = Outgoing {
            to: 7,
            message: Message {
                round: (5u64 << 32) + 9,
                phase: Phase::Gather,
                from: 3,
                body: Body::Values {
                    data: Arc::clone(&data),
                    span: 1..6,
                },
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
    fn an_encoded_message_crosses_as_its_bytes() {
        let wire: Arc<[u8]> = Arc::from(vec![1u8, 2, 3, 4, 5, 6, 7]);
        let out = Outgoing {
            to: 1,
            message: Message {
                round: 4,
                phase: Phase::Scatter,
                from: 0,
                body: Body::Encoded {
                    wire: Arc::clone(&wire),
                    len: 100,
                    offset: 300,
                },
                deliver_at: Instant::now(),
            },
        };
        let words = encode(&out);
        assert_eq!(words.len(), HEADER + 2, "7 bytes in 2 words");
        let (_, back) = decode(&words).unwrap();
        assert_eq!(back.len(), 100);
        match back.body {
            Body::Encoded {
                wire: back,
                len,
                offset,
            } => assert_eq!((&back[..], len, offset), (&wire[..], 100, 300)),
            Body::Values { .. } => panic!("decoded as values"),
        }
        let e = decode(&words[..HEADER + 1]).unwrap_err();
        assert!(e.contains("7 bytes"), "{e}");
    }

    #[test]
    fn malformed_messages_are_refused_not_trusted() {
        assert!(decode(&[1, 2, 3])
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(decode(&[0, 1, 0, 0, 0, 3, PLAIN, 0, 7])
            .unwrap_err()
            .contains("header says 3"));
        assert!(decode(&[0, 1, 0, 0, 9, 0, PLAIN, 0])
            .unwrap_err()
            .contains("unknown phase 9"));
    }

    #[test]
    fn rows_steps_and_answers_cross_compressed_with_a_codec() {
        use crate::sync::Int8;
        // Steps of a scale of 1 (the largest is 127): int8 keeps them exactly.
        let values: Vec<f32> = (0..64).map(|i| (4 * i) as f32 - 127.0).collect();
        let step = |answer_move| ShardWire::Request {
            ticket: 9,
            shard: 2,
            request: ShardRequest::Elastic {
                values: Arc::from(&values[..]),
                at: 128,
                alpha: 0.1,
                trainer: 3,
                round: 5,
                answer_move,
            },
        };
        let push = ShardWire::Rows {
            ticket: 7,
            request: RowRequest::Push {
                ids: (0..16).map(|i| i << 36).collect(),
                grads: values.clone(),
                lr: 0.1,
            },
        };
        let answer = ShardWire::Answer {
            ticket: 8,
            shard: 1,
            answer: Ok(values.clone()),
        };
        for wire in [push, answer, step(true)] {
            let plain = wire.encode(None);
            let words = wire.encode(Some(&mut Int8));
            // A byte a value, 4 a block and 2 words of sizes, against 4 a
            // value: 64 values' 16 words and 2 against 64.
            assert_eq!(plain.len() - words.len(), 64 - 16 - 1 - 2, "{words:?}");
            assert_eq!(ShardWire::decode(&words, Some(&mut Int8)).unwrap(), wire);
            let e = ShardWire::decode(&words, None).unwrap_err();
            assert!(e.contains("sync.compression"), "{e}");
        }
        // A step answered with its target crosses as `f32`, codec or not.
        let plain = step(false);
        assert_eq!(plain.encode(Some(&mut Int8)), plain.encode(None));
    }

    #[test]
    fn shard_requests_and_answers_cross_intact() {
        let elastic = ShardRequest::Elastic {
            values: Arc::from(vec![0.25, -1.0, 3e-39]),
            at: 40,
            alpha: 0.3,
            trainer: 5,
            round: (2u64 << 32) + 1,
            answer_move: true,
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
            assert_eq!(ShardWire::decode(&wire.encode(None), None).unwrap(), wire);
        }
        assert!(ShardWire::decode(&[0, 1], None)
            .unwrap_err()
            .contains("shorter than a header"));
        assert!(ShardWire::decode(&[ELASTIC, 1, 0, 0, 5], None)
            .unwrap_err()
            .contains("without its fields"));
        assert!(ShardWire::decode(&[FAILED, 1, 0, 0, 300], None)
            .unwrap_err()
            .contains("not a byte"));
        assert!(ShardWire::decode(&[FETCH, 1, 0, 0, 5], None)
            .unwrap_err()
            .contains("half an id"));
        assert!(ShardWire::decode(&[PUSH, 1, 0, 0, 0, 3, 1, 0], None)
            .unwrap_err()
            .contains("3 rows without their ids"));
        assert!(ShardWire::decode(&[9, 1, 0, 0], None)
            .unwrap_err()
            .contains("unknown kind 9"));
    }
}
