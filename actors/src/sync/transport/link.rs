//! The simulated network between trainers: [`LinkModel`] says when a message
//! sent now is delivered, and [`sleep_until`] waits for it.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A simulated network link between every pair of trainers.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkModel {
    /// One-way latency per message, in microseconds.
    pub latency_us: f64,
    /// Bandwidth in Gbit/s (0 = unlimited).
    pub bandwidth_gbps: f64,
    /// One trainer whose link is `slow_factor` times slower (both directions);
    /// the EASGD parameter server is trainer [`LinkModel::SERVER`].
    pub slow_trainer: Option<usize>,
    /// How much slower that link is (≥ 1).
    pub slow_factor: f64,
}

impl LinkModel {
    /// The endpoint index of the parameter server in [`LinkModel::wire_time`].
    pub const SERVER: usize = usize::MAX;

    /// Whether the link adds any delay at all.
    pub fn is_ideal(&self) -> bool {
        self.latency_us <= 0.0 && self.bandwidth_gbps <= 0.0
    }

    /// Time on the wire of `bytes` between `from` and `to`.
    pub fn wire_time(&self, from: usize, to: usize, bytes: usize) -> Duration {
        let transfer = if self.bandwidth_gbps > 0.0 {
            bytes as f64 * 8.0 / (self.bandwidth_gbps * 1e9)
        } else {
            0.0
        };
        let mut seconds = self.latency_us * 1e-6 + transfer;
        if self.slow_trainer.is_some_and(|t| t == from || t == to) {
            seconds *= self.slow_factor.max(1.0);
        }
        // A day at most: a link that slow is a link that never delivers.
        Duration::try_from_secs_f64(seconds.min(86_400.0)).unwrap_or(Duration::ZERO)
    }

    /// How long a group mean of `len` values over `group` takes on this link
    /// as [`Endpoint::group_reduce`](super::Endpoint::group_reduce) moves it: two phases (reduce-scatter,
    /// all-gather), each over when the member whose messages, sent one after
    /// another, take longest has delivered its last.
    pub fn group_round_time(&self, group: &[usize], len: usize) -> Duration {
        let m = group.len();
        let phase = |bytes_to: &dyn Fn(usize, usize) -> usize| {
            let sending = group.iter().enumerate().map(|(i, &from)| {
                let to = group.iter().enumerate().filter(|&(k, _)| k != i);
                to.map(|(k, &to)| self.wire_time(from, to, bytes_to(i, k)))
                    .sum::<Duration>()
            });
            sending.max().unwrap_or(Duration::ZERO)
        };
        let f32s = std::mem::size_of::<f32>();
        // Scatter: member i sends member k its values of k's slice; gather:
        // member i sends everyone its own reduced slice.
        phase(&|_, k| slice(len, m, k).len() * f32s) + phase(&|i, _| slice(len, m, i).len() * f32s)
    }
}

/// How often a wait looks at its stop flag.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Sleeps until `deadline` (a simulated delivery); false if `stopped()`
/// turns true first.
pub(crate) fn sleep_until(deadline: Instant, stopped: impl Fn() -> bool) -> bool {
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if stopped() {
            return false;
        }
        std::thread::sleep(left.min(POLL));
    }
    true
}

/// The `k`-th of `m` near-equal contiguous slices of `0..len`.
pub(crate) fn slice(len: usize, m: usize, k: usize) -> std::ops::Range<usize> {
    let per = len.div_ceil(m.max(1));
    (k * per).min(len)..((k + 1) * per).min(len)
}
