//! Compressed sync payloads: a [`Codec`] turns the values of a group
//! round's messages into fewer bytes, and back (and those of EASGD's steps
//! against its centre: `CentreCodec`).
//!
//! `sync.compression` names one: `none` (the default: values cross as
//! `f32`), [`Fp16`] (half precision), [`Int8`] (a byte per value and a
//! scale per block of [`Int8::BLOCK`]) or [`TopK`] (the `sync.topk_ratio`
//! share of each message's values that changed most, with error feedback).
//! A codec of one's own implements [`Codec`] and is registered by name in
//! [`Codecs`] (the cluster's `ClusterConfig::codecs`), as a sync rule is.
//!
//! A member has a codec instance for each direction of each link to a peer,
//! in each phase of a round (the slices it scatters, the reduced slice it
//! gathers): an instance may keep memory of what crossed its link, and the
//! instance at the other end keeps the same memory of what it decoded
//! (`topk` keeps the values last sent, starting from the initial
//! parameters every replica starts from). A stateless codec keeps none.

mod fp16;
mod int8;
mod topk;

pub use fp16::Fp16;
pub use int8::Int8;
pub use topk::TopK;

use super::message::{Body, Phase};
use crate::sync::SyncConfig;
use crate::{Error, Named, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Encodes the messages one way on one link, or decodes them at the other
/// end (see the module docs).
pub trait Codec: Send + fmt::Debug {
    /// Appends to `wire` the encoding of `values`, the values at
    /// `offset..offset + values.len()` of the synced vector (a codec with
    /// memory indexes it by position).
    fn encode(&mut self, offset: usize, values: &[f32], wire: &mut Vec<u8>);

    /// Decodes `wire`, the encoding of the values at `offset..offset +
    /// out.len()` of the synced vector, into `out`.
    ///
    /// # Errors
    ///
    /// A `wire` that is not an encoding of `out.len()` values
    /// ([`Error::Layout`], saying what does not fit).
    fn decode(&mut self, offset: usize, wire: &[u8], out: &mut [f32]) -> Result<()>;

    /// Whether it keeps no memory of a link: then one instance serves every
    /// link, and a message to many peers is encoded once. False unless
    /// said.
    fn stateless(&self) -> bool {
        false
    }
}

/// What a codec is made for.
#[derive(Debug, Clone, Copy)]
pub struct CodecContext<'a> {
    /// The `[sync]` settings.
    pub config: &'a SyncConfig,
    /// The dense parameters every replica starts from.
    pub initial: &'a [f32],
}

/// Makes a codec for one direction of one link.
pub type CodecFactory = Arc<dyn Fn(&CodecContext<'_>) -> Result<Box<dyn Codec>> + Send + Sync>;

/// Codecs by the name `sync.compression` gives them: `fp16`, `int8`,
/// `topk` and those added with [`Codecs::with`]; `none` sends values
/// uncompressed.
#[derive(Clone, Debug)]
pub struct Codecs(Named<CodecFactory>);

impl Codecs {
    /// The name of uncompressed payloads.
    pub const NONE: &'static str = "none";
}

impl Default for Codecs {
    fn default() -> Self {
        Self(Named::new("sync.compression", "codec").also_taking([Self::NONE]))
            .with("fp16", |_| Ok(Box::new(Fp16)))
            .with("int8", |_| Ok(Box::new(Int8)))
            .with("topk", |c| {
                Ok(Box::new(TopK::new(c.config.topk_ratio, c.initial)?))
            })
    }
}

impl Codecs {
    /// These codecs and `name`, made by `make` (in place of one of that name).
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&CodecContext<'_>) -> Result<Box<dyn Codec>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// An error naming `sync.compression` unless `name` is `none` or a codec.
    ///
    /// # Errors
    ///
    /// An unknown name, with the known ones.
    pub fn check(&self, name: &str) -> Result<()> {
        match name {
            Self::NONE => Ok(()),
            _ => self.0.get(name).map(drop),
        }
    }

    /// The factory of the codec `config.compression` names; `None` for
    /// `none`.
    ///
    /// # Errors
    ///
    /// A name registered nowhere ([`Error::Config`] naming `sync.compression`,
    /// with the known ones).
    pub fn factory(&self, config: &SyncConfig) -> Result<Option<CodecFactory>> {
        match config.compression.as_str() {
            Self::NONE => Ok(None),
            name => self.0.get(name).map(|make| Some(Arc::clone(make))),
        }
    }

    /// The codec `context.config.compression` names, for one direction of
    /// one link; `None` for `none`.
    ///
    /// # Errors
    ///
    /// As [`Codecs::factory`], or the factory's own error.
    pub fn make(&self, context: &CodecContext<'_>) -> Result<Option<Box<dyn Codec>>> {
        self.factory(context.config)?
            .map(|make| make(context))
            .transpose()
    }
}

/// Makes instances of one codec, each for one direction of one link.
pub(crate) type CodecMaker = Arc<dyn Fn() -> Result<Box<dyn Codec>> + Send + Sync>;

/// The maker of the codec `config.compression` names among `codecs`, for
/// links whose ends start from `initial`; `None` for `none`.
///
/// # Errors
///
/// As [`Codecs::factory`].
pub(crate) fn codec_maker(
    codecs: &Codecs,
    config: &SyncConfig,
    initial: &[f32],
) -> Result<Option<CodecMaker>> {
    let Some(factory) = codecs.factory(config)? else {
        return Ok(None);
    };
    let (config, initial): (SyncConfig, Arc<[f32]>) = (config.clone(), initial.into());
    Ok(Some(Arc::new(move || {
        factory(&CodecContext {
            config: &config,
            initial: &initial,
        })
    })))
}

/// `bytes` (a codec's encoding), four a word, little-endian (the last word
/// padded with zeros): how encoded values ride in messages of `u32` words.
pub fn packed(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks(4).map(|chunk| {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        u32::from_le_bytes(word)
    })
}

/// The first `bytes` bytes of `words` made by [`packed`].
///
/// # Errors
///
/// `words` not just as many as `bytes` take, saying both.
pub fn unpacked(words: &[u32], bytes: u32) -> std::result::Result<Vec<u8>, String> {
    if words.len() != (bytes as usize).div_ceil(4) {
        return Err(format!("{bytes} bytes in {} words", words.len()));
    }
    let all = words.iter().flat_map(|w| w.to_le_bytes());
    Ok(all.take(bytes as usize).collect())
}

/// Which end of a link a codec serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum End {
    Sending,
    Receiving,
}

/// An endpoint's codecs: one for each end of each link to a peer in each
/// phase (one for all links when the codec is stateless), made on first
/// use.
pub(crate) struct LinkCodecs {
    make: CodecMaker,
    stateless: bool,
    made: HashMap<(usize, Phase, End), Box<dyn Codec>>,
}

impl fmt::Debug for LinkCodecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkCodecs")
            .field("stateless", &self.stateless)
            .field("made", &self.made)
            .finish_non_exhaustive()
    }
}

impl LinkCodecs {
    /// The codecs `config.compression` names, for links whose ends start
    /// from `initial`; `None` for `none`.
    ///
    /// # Errors
    ///
    /// As [`Codecs::make`].
    pub(crate) fn new(
        codecs: &Codecs,
        config: &SyncConfig,
        initial: &[f32],
    ) -> Result<Option<Self>> {
        let Some(make) = codec_maker(codecs, config, initial)? else {
            return Ok(None);
        };
        let first = make()?;
        Ok(Some(Self {
            stateless: first.stateless(),
            make,
            made: HashMap::new(),
        }))
    }

    /// Whether one encoding serves every peer.
    pub(crate) fn stateless(&self) -> bool {
        self.stateless
    }

    /// The codec of `end` of the link to `peer` in `phase`.
    fn codec(&mut self, peer: usize, phase: Phase, end: End) -> Result<&mut Box<dyn Codec>> {
        let peer = if self.stateless { usize::MAX } else { peer };
        let codec = match self.made.entry((peer, phase, end)) {
            std::collections::hash_map::Entry::Occupied(made) => made.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert((self.make)()?),
        };
        Ok(codec)
    }

    /// `values`, at `offset` of the synced vector, encoded for `peer` in
    /// `phase`.
    ///
    /// # Errors
    ///
    /// A codec its factory fails to make.
    pub(crate) fn encode(
        &mut self,
        peer: usize,
        phase: Phase,
        offset: usize,
        values: &[f32],
    ) -> Result<Body> {
        let mut wire = Vec::new();
        self.codec(peer, phase, End::Sending)?
            .encode(offset, values, &mut wire);
        Ok(Body::Encoded {
            wire: wire.into(),
            len: values.len(),
            offset,
        })
    }

    /// Decodes `wire`, from `peer` in `phase`, the values at `offset` of
    /// the synced vector, into `out`.
    ///
    /// # Errors
    ///
    /// As [`Codec::decode`], or a codec its factory fails to make.
    pub(crate) fn decode(
        &mut self,
        peer: usize,
        phase: Phase,
        offset: usize,
        wire: &[u8],
        out: &mut [f32],
    ) -> Result<()> {
        self.codec(peer, phase, End::Receiving)?
            .decode(offset, wire, out)
    }
}

/// An error saying that `wire` does not hold what `codec` encodes for `len`
/// values: `why`.
fn malformed(codec: &str, len: usize, why: String) -> Error {
    Error::Layout(format!(
        "a {codec} message for {len} values does not decode: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_codecs_are_made_by_name_and_others_refused() {
        let codecs = Codecs::default();
        let mut config = SyncConfig::default();
        let made = |config: &SyncConfig| {
            codecs.make(&CodecContext {
                config,
                initial: &[0.0; 2],
            })
        };
        assert!(made(&config).unwrap().is_none());
        for name in ["fp16", "int8", "topk"] {
            config.compression = name.into();
            let (mut sender, mut receiver) = (made(&config).unwrap(), made(&config).unwrap());
            let mut wire = Vec::new();
            sender.as_mut().unwrap().encode(0, &[1.0, -2.0], &mut wire);
            let mut out = [0.0; 2];
            receiver
                .as_mut()
                .unwrap()
                .decode(0, &wire, &mut out)
                .unwrap();
            assert!(out.iter().any(|&x| x != 0.0), "{name}: {out:?}");
        }
        config.compression = "zip".into();
        let e = made(&config).unwrap_err().to_string();
        assert!(
            e.contains("sync.compression") && e.contains("none, fp16, int8, topk"),
            "{e}"
        );
        config.topk_ratio = 0.0;
        config.compression = "topk".into();
        let e = made(&config).unwrap_err().to_string();
        assert!(e.contains("sync.topk_ratio"), "{e}");
    }
}
