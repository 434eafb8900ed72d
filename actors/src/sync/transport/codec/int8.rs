//! Eight bits a value, with a scale per block.

use super::{malformed, Codec};
use crate::Result;

/// Each block of [`Int8::BLOCK`] values as its scale (`f32`: the largest
/// magnitude over 127) and a signed byte per value, rounded to the nearest
/// step: error at most half a step, the block's largest magnitude / 254.
#[derive(Debug, Clone, Copy, Default)]
pub struct Int8;

impl Int8 {
    /// Values sharing a scale.
    pub const BLOCK: usize = 256;

    /// The bytes of `len` values on the wire.
    pub fn wire_len(len: usize) -> usize {
        len + 4 * len.div_ceil(Self::BLOCK)
    }
}

impl Codec for Int8 {
    fn encode(&mut self, _offset: usize, values: &[f32], wire: &mut Vec<u8>) {
        wire.reserve(Self::wire_len(values.len()));
        for block in values.chunks(Self::BLOCK) {
            let largest = block.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = largest / 127.0;
            wire.extend(scale.to_le_bytes());
            let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            // Half away from zero, as `f32::round` (which is not inlined):
            // truncating `q ± ½`, in range by construction (`as` saturates).
            wire.extend(block.iter().map(|x| {
                let q = x * inverse;
                (q + 0.5f32.copysign(q)) as i8 as u8
            }));
        }
    }

    fn decode(&mut self, _offset: usize, wire: &[u8], out: &mut [f32]) -> Result<()> {
        if wire.len() != Self::wire_len(out.len()) {
            return Err(malformed(
                "int8",
                out.len(),
                format!("{} bytes, not {}", wire.len(), Self::wire_len(out.len())),
            ));
        }
        let blocks = wire.chunks(Self::BLOCK + 4);
        for (values, block) in out.chunks_mut(Self::BLOCK).zip(blocks) {
            let (scale, steps) = block.split_at(4);
            let scale = f32::from_le_bytes([scale[0], scale[1], scale[2], scale[3]]);
            for (x, &q) in values.iter_mut().zip(steps) {
                *x = f32::from(q as i8) * scale;
            }
        }
        Ok(())
    }

    fn stateless(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(values: &[f32]) -> (Vec<u8>, Vec<f32>) {
        let mut wire = Vec::new();
        Int8.encode(0, values, &mut wire);
        let mut out = vec![f32::NAN; values.len()];
        Int8.decode(0, &wire, &mut out).unwrap();
        (wire, out)
    }

    #[test]
    fn golden_steps_of_a_block() {
        // Scale 1/127: 1 → 127, −0.5 → −63.5 → −64, 0.25 → 31.75 → 32.
        let (wire, out) = round_trip(&[1.0, -0.5, 0.25]);
        assert_eq!(wire.len(), 4 + 3);
        assert_eq!(&wire[4..], &[127, (-64i8) as u8, 32]);
        let step = 1.0f32 / 127.0;
        assert_eq!(out, [127.0 * step, -64.0 * step, 32.0 * step]);
        assert_eq!(round_trip(&[0.0, 0.0]).1, [0.0, 0.0]);
    }

    #[test]
    fn every_value_is_within_half_a_step_of_its_block() {
        let values: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0 + (i / 256) as f32 * 40.0)
            .collect();
        let (wire, out) = round_trip(&values);
        assert_eq!(wire.len(), 1000 + 4 * 4);
        for (block, decoded) in values.chunks(Int8::BLOCK).zip(out.chunks(Int8::BLOCK)) {
            let largest = block.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (x, y) in block.iter().zip(decoded) {
                assert!((x - y).abs() <= largest / 254.0 * 1.0001, "{x} → {y}");
            }
        }
    }

    #[test]
    fn a_message_of_another_length_is_refused() {
        let e = Int8
            .decode(0, &[0; 6], &mut [0.0; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("int8") && e.contains("not 7"), "{e}");
    }
}
