//! Half precision: two bytes a value.

use super::{malformed, Codec};
use crate::Result;
use half::f16;
use half::slice::HalfFloatSliceExt;

/// Each value as an IEEE half-precision float: relative error at most
/// 2⁻¹¹ (absolute 2⁻²⁵ below 2⁻¹⁴), magnitudes beyond 65504 saturated.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fp16;

/// Values converted at a time (on the stack, with the CPU's conversion
/// instructions where it has them).
const CHUNK: usize = 256;

impl Codec for Fp16 {
    fn encode(&mut self, _offset: usize, values: &[f32], wire: &mut Vec<u8>) {
        wire.reserve(2 * values.len());
        let (mut clamped, mut halves) = ([0f32; CHUNK], [f16::ZERO; CHUNK]);
        let most = f32::from(f16::MAX);
        for chunk in values.chunks(CHUNK) {
            let (clamped, halves) = (&mut clamped[..chunk.len()], &mut halves[..chunk.len()]);
            for (c, &x) in clamped.iter_mut().zip(chunk) {
                *c = x.clamp(-most, most);
            }
            halves.convert_from_f32_slice(clamped);
            for half in halves.iter() {
                wire.extend_from_slice(&half.to_le_bytes());
            }
        }
    }

    fn decode(&mut self, _offset: usize, wire: &[u8], out: &mut [f32]) -> Result<()> {
        if wire.len() != 2 * out.len() {
            return Err(malformed(
                "fp16",
                out.len(),
                format!("{} bytes, not 2 a value", wire.len()),
            ));
        }
        let mut halves = [f16::ZERO; CHUNK];
        for (out, bytes) in out.chunks_mut(CHUNK).zip(wire.chunks(2 * CHUNK)) {
            let halves = &mut halves[..out.len()];
            for (half, pair) in halves.iter_mut().zip(bytes.chunks_exact(2)) {
                *half = f16::from_le_bytes([pair[0], pair[1]]);
            }
            halves.convert_to_f32_slice(out);
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

    #[test]
    fn decoding_the_encoding_is_within_half_precision() {
        let values = [0.0, 1.0, -1.0 / 3.0, 1e-6, 1234.567, -70_000.0, 65_504.0];
        let mut wire = Vec::new();
        Fp16.encode(0, &values, &mut wire);
        assert_eq!(wire.len(), 2 * values.len());
        let mut out = [9.0; 7];
        Fp16.decode(0, &wire, &mut out).unwrap();
        for (&x, &y) in values.iter().zip(&out).take(5) {
            let bound = (x.abs() * 2f32.powi(-11)).max(2f32.powi(-25));
            assert!((x - y).abs() <= bound, "{x} → {y}");
        }
        // Golden: 1/3 is 0x3555 in half precision, 0.333251953125.
        assert_eq!(out[2], -0.333_251_95);
        assert_eq!(&out[5..], &[-65_504.0, 65_504.0]);
    }

    #[test]
    fn a_message_of_another_length_is_refused() {
        let e = Fp16
            .decode(0, &[0; 3], &mut [0.0; 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("fp16") && e.contains("3 bytes"), "{e}");
    }
}
