//! The values that changed most, with error feedback.

use super::{malformed, Codec};
use crate::{Error, Result};
use std::ops::Range;
use std::sync::Arc;

/// Of each message's values, the `ratio` share (at least one) whose change
/// since last sent on this link is largest: each as its index and its
/// value, 8 bytes. The rest is held back, its change kept (the residual,
/// the error feedback) and sent once it is among the largest: nothing is
/// lost, only delayed. Both ends keep the values last sent over the link,
/// the initial parameters before anything was: the receiving end decodes a
/// message as those values with the ones it carries written in.
#[derive(Debug, Clone)]
pub struct TopK {
    ratio: f64,
    /// The values last sent at each position of `memory`'s window: encoded
    /// by this end, or decoded.
    memory: Window,
    /// Indices to select from, reused.
    order: Vec<u32>,
}

/// Values kept for a window of positions of the synced vector, grown on
/// demand from the initial parameters (a link carries only some slices).
#[derive(Debug, Clone)]
struct Window {
    initial: Arc<[f32]>,
    start: usize,
    values: Vec<f32>,
}

impl Window {
    /// The values at `range`, the window grown to cover it (0 past the
    /// initial parameters).
    fn at(&mut self, range: Range<usize>) -> &mut [f32] {
        let initial = |r: Range<usize>| -> Vec<f32> {
            r.map(|i| self.initial.get(i).copied().unwrap_or(0.0))
                .collect()
        };
        if self.values.is_empty() {
            self.start = range.start;
        }
        let end = self.start + self.values.len();
        if range.start < self.start {
            let mut grown = initial(range.start..self.start);
            grown.append(&mut self.values);
            (self.start, self.values) = (range.start, grown);
        }
        if range.end > end {
            let more = initial(end.max(self.start)..range.end);
            self.values.extend(more);
        }
        let from = range.start - self.start;
        &mut self.values[from..from + range.len()]
    }
}

impl TopK {
    /// Sends the `ratio` share of each message's values, `0 < ratio ≤ 1`,
    /// over a link whose ends both start from `initial`.
    ///
    /// # Errors
    ///
    /// A ratio out of that range ([`Error::Config`] naming `sync.topk_ratio`).
    pub fn new(ratio: f64, initial: &[f32]) -> Result<Self> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(Error::Config {
                key: "sync.topk_ratio".into(),
                reason: format!("{ratio} is not a share of values in (0, 1]"),
            });
        }
        Ok(Self {
            ratio,
            memory: Window {
                initial: initial.into(),
                start: 0,
                values: Vec::new(),
            },
            order: Vec::new(),
        })
    }

    /// Values sent of a message of `len`.
    pub fn kept(&self, len: usize) -> usize {
        ((len as f64 * self.ratio).ceil() as usize).clamp(len.min(1), len)
    }

    /// What this sending end holds back of `values` at `offset`: their
    /// change since last sent (the residual of error feedback).
    pub fn residual(&mut self, offset: usize, values: &[f32]) -> Vec<f32> {
        let sent = self.memory.at(offset..offset + values.len());
        values.iter().zip(sent.iter()).map(|(x, s)| x - s).collect()
    }
}

impl Codec for TopK {
    fn encode(&mut self, offset: usize, values: &[f32], wire: &mut Vec<u8>) {
        let k = self.kept(values.len());
        let sent = self.memory.at(offset..offset + values.len());
        let change = |i: u32| (values[i as usize] - sent[i as usize]).abs();
        self.order.clear();
        self.order.extend(0..values.len() as u32);
        if k < values.len() {
            self.order
                .select_nth_unstable_by(k, |&a, &b| change(b).total_cmp(&change(a)));
            self.order.truncate(k);
        }
        self.order.sort_unstable();
        wire.reserve(4 + 8 * k);
        wire.extend_from_slice(&(k as u32).to_le_bytes());
        for &i in &self.order {
            let value = values[i as usize];
            sent[i as usize] = value;
            wire.extend_from_slice(&i.to_le_bytes());
            wire.extend_from_slice(&value.to_le_bytes());
        }
    }

    fn decode(&mut self, offset: usize, wire: &[u8], out: &mut [f32]) -> Result<()> {
        let len = out.len();
        let fault = |why: String| malformed("topk", len, why);
        let Some((count, pairs)) = wire.split_first_chunk::<4>() else {
            return Err(fault(format!("{} bytes, no count", wire.len())));
        };
        let count = u32::from_le_bytes(*count) as usize;
        if pairs.len() != 8 * count {
            return Err(fault(format!("{} bytes for {count} values", pairs.len())));
        }
        let known = self.memory.at(offset..offset + len);
        for pair in pairs.chunks_exact(8) {
            let index = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]) as usize;
            let value = f32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
            let Some(x) = known.get_mut(index) else {
                return Err(fault(format!("index {index}")));
            };
            *x = value;
        }
        out.copy_from_slice(known);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(ratio: f64, initial: &[f32]) -> (TopK, TopK) {
        let end = || TopK::new(ratio, initial).unwrap();
        (end(), end())
    }

    #[test]
    fn it_sends_the_largest_changes_and_the_receiver_keeps_the_last_sent() {
        let (mut sender, mut receiver) = link(0.4, &[0.0, 0.0, 1.0, 0.0, 0.0, 5.0]);
        let values = [0.1, -3.0, 1.2, 2.0, -0.05];
        let mut wire = Vec::new();
        sender.encode(0, &values, &mut wire);
        // ⌈0.4 × 5⌉ = 2 values: 4 bytes of count, 8 a value.
        assert_eq!(wire.len(), 4 + 2 * 8);
        let mut out = [7.0; 5];
        receiver.decode(0, &wire, &mut out).unwrap();
        // The rest as last sent: the initial values.
        assert_eq!(out, [0.0, -3.0, 1.0, 2.0, 0.0]);
        // Then what changed most since: 0.2 and 0.1 (held back) against
        // the 0.05 that 2.0 moved since sent.
        let next = [0.1, -3.0, 1.2, 2.05, -0.05];
        wire.clear();
        sender.encode(0, &next, &mut wire);
        receiver.decode(0, &wire, &mut out).unwrap();
        assert_eq!(out, [0.1, -3.0, 1.2, 2.0, 0.0]);
    }

    #[test]
    fn a_window_at_an_offset_grows_both_ways_from_the_initial_values() {
        let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let (mut sender, mut receiver) = link(1.0, &initial);
        let mut out = [0.0; 2];
        for (offset, values) in [(6, [60.0, 70.0]), (2, [20.0, 30.0]), (8, [80.0, 90.0])] {
            let mut wire = Vec::new();
            sender.encode(offset, &values, &mut wire);
            receiver.decode(offset, &wire, &mut out).unwrap();
            assert_eq!(out, values);
        }
        let mut wire = Vec::new();
        let mut three = [0.0; 3];
        TopK::new(1e-9, &initial)
            .unwrap()
            .encode(4, &[4.0, 5.0, 99.0], &mut wire);
        receiver.decode(4, &wire, &mut three).unwrap();
        assert_eq!(three, [4.0, 5.0, 99.0]);
        assert_eq!(receiver.memory.at(0..10)[..4], [0.0, 1.0, 20.0, 30.0]);
    }

    #[test]
    fn error_feedback_loses_no_mass_over_rounds() {
        // A stream of 64 values whose changes are the inputs; the receiving
        // end decodes every message; what it has (the sum of what was sent)
        // plus the sending end's residual is the sum of the inputs.
        let (len, offset) = (64, 100);
        let (mut sender, mut receiver) = link(0.1, &[0.0; 200]);
        let mut values = vec![0f32; len];
        let mut received = vec![0f32; len];
        let mut inputs = vec![0f64; len];
        let mut seed = 12345u64;
        for round in 0..200 {
            for (i, (x, total)) in values.iter_mut().zip(&mut inputs).enumerate() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let change = if round < 150 {
                    ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + i % 5) as f32
                } else {
                    0.0
                };
                *x += change;
                *total += f64::from(change);
            }
            let mut wire = Vec::new();
            sender.encode(offset, &values, &mut wire);
            receiver.decode(offset, &wire, &mut received).unwrap();
            let residual = sender.residual(offset, &values);
            let mass: f64 = received
                .iter()
                .zip(&residual)
                .map(|(r, e)| f64::from(r + e))
                .sum();
            let inputs_sum: f64 = inputs.iter().sum();
            assert!(
                (mass - inputs_sum).abs() < 1e-3,
                "round {round}: {mass} ≠ {inputs_sum}"
            );
            for (r, (e, x)) in received.iter().zip(residual.iter().zip(&values)) {
                assert!(
                    (r + e - x).abs() <= 1e-6 * x.abs().max(1.0),
                    "{r} + {e} ≠ {x}"
                );
            }
        }
        // Once the inputs stop changing, everything held back is sent.
        assert!(sender.residual(offset, &values).iter().all(|&e| e == 0.0));
        assert_eq!(received, values);
    }

    #[test]
    fn a_ratio_out_of_range_and_a_malformed_message_are_refused() {
        for ratio in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(TopK::new(ratio, &[]).is_err(), "{ratio}");
        }
        let (_, mut receiver) = link(1.0, &[0.0; 3]);
        let mut wire = 1u32.to_le_bytes().to_vec();
        wire.extend(9u32.to_le_bytes());
        wire.extend(1f32.to_le_bytes());
        let e = receiver
            .decode(0, &wire, &mut [0.0; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("index 9"), "{e}");
        let e = receiver
            .decode(0, &wire[..6], &mut [0.0; 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 bytes for 1 values"), "{e}");
    }
}
