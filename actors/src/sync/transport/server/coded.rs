//! [`CentreCodec`]: EASGD's steps against its centre, compressed.
//!
//! A compressed step sends each shard the replica's slice encoded, and the
//! shard answers the replica's move (its target minus the values it
//! decoded), encoded too: small values a codec keeps closely, where the
//! target itself would round the replica's own values away at every round.
//! The trainer adds the move to its snapshot, so its replica keeps every
//! bit of its own training; only the centre sees the rounded replica. Each
//! step's slices are encoded on their own, so the codec keeps no memory of
//! a link (`fp16`, `int8`; not `topk`).
//!
//! Across processes the values really cross encoded (the fabric's codec,
//! the same one). In one process the step is made as it would cross: the
//! trainer rounds its slice through the codec before the shard reads it,
//! and the shard's answer before adding it.

use super::super::codec::{codec_maker, CodecMaker};
use crate::sync::{Codec, Codecs, SyncConfig};
use crate::{Error, Result};
use std::fmt;

/// Values of the initial vector encoded once to measure the bytes a value
/// takes (for a simulated link's wire time).
const PROBE: usize = 1 << 16;

/// The codec of EASGD's centre traffic (see the module docs).
#[derive(Clone)]
pub struct CentreCodec {
    make: CodecMaker,
    /// Bytes a value takes on the wire, measured on the initial values.
    bytes_per_value: f64,
}

impl fmt::Debug for CentreCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CentreCodec")
            .field("bytes_per_value", &self.bytes_per_value)
            .finish_non_exhaustive()
    }
}

impl CentreCodec {
    /// The codec `config.compression` names among `codecs`, for a centre
    /// starting from `initial`; `None` for `none`.
    ///
    /// # Errors
    ///
    /// A name registered nowhere, the factory's own error, or a codec with
    /// memory of a link such as `topk` ([`Error::Config`] naming
    /// `sync.compression`).
    pub fn new(codecs: &Codecs, config: &SyncConfig, initial: &[f32]) -> Result<Option<Self>> {
        let Some(make) = codec_maker(codecs, config, initial)? else {
            return Ok(None);
        };
        let mut probe = make()?;
        if !probe.stateless() {
            return Err(Error::Config {
                key: "sync.compression".into(),
                reason: format!(
                    "EASGD's centre takes a codec without memory of a link (fp16, int8); {} keeps one",
                    config.compression
                ),
            });
        }
        let sample = &initial[..initial.len().min(PROBE)];
        let mut wire = Vec::new();
        probe.encode(0, sample, &mut wire);
        let bytes_per_value = match sample.len() {
            0 => 4.0,
            n => wire.len() as f64 / n as f64,
        };
        Ok(Some(Self {
            make,
            bytes_per_value,
        }))
    }

    /// A new instance of the codec.
    ///
    /// # Errors
    ///
    /// The factory's own error.
    pub(crate) fn instance(&self) -> Result<Box<dyn Codec>> {
        (self.make)()
    }

    /// Bytes a value takes on the wire (measured on the initial values).
    pub(crate) fn bytes_per_value(&self) -> f64 {
        self.bytes_per_value
    }

    /// `values`, at `offset` of the centre's vector, as they arrive at the
    /// other end of the wire, and the bytes they took on it.
    ///
    /// # Errors
    ///
    /// The factory's or the decoder's own error.
    pub(crate) fn crossed(&self, offset: usize, values: &[f32]) -> Result<(Vec<f32>, usize)> {
        let mut codec = self.instance()?;
        let mut wire = Vec::new();
        codec.encode(offset, values, &mut wire);
        let mut out = vec![0.0; values.len()];
        codec.decode(offset, &wire, &mut out)?;
        Ok((out, wire.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(name: &str, initial: &[f32]) -> Result<Option<CentreCodec>> {
        let config = SyncConfig {
            compression: name.into(),
            ..SyncConfig::default()
        };
        CentreCodec::new(&Codecs::default(), &config, initial)
    }

    #[test]
    fn stateless_codecs_cross_within_their_bound_and_topk_is_refused() {
        let values: Vec<f32> = (0..1000).map(|i| ((i * 37) as f32).sin() * 3.0).collect();
        assert!(codec("none", &values).unwrap().is_none());
        for (name, bytes_per_value, bound) in
            [("fp16", 2.0, 3.0 / 1024.0), ("int8", 1.0, 3.0 / 254.0)]
        {
            let codec = codec(name, &values).unwrap().unwrap();
            assert!(codec.bytes_per_value() >= bytes_per_value, "{name}");
            assert!(codec.bytes_per_value() < bytes_per_value + 0.1, "{name}");
            let (crossed, bytes) = codec.crossed(7, &values).unwrap();
            assert_eq!(
                bytes as f64,
                (codec.bytes_per_value() * 1000.0).round(),
                "{name}"
            );
            for (x, y) in values.iter().zip(&crossed) {
                assert!((x - y).abs() <= bound, "{name}: {x} crossed as {y}");
            }
        }
        let e = codec("topk", &values).unwrap_err().to_string();
        assert!(e.contains("sync.compression") && e.contains("topk"), "{e}");
        assert!(codec("zip", &values).is_err());
    }
}
