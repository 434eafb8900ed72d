//! What a process's memory holds: its embedding rows (the whole table, or
//! its shard) and its peak resident set, reported with every run, and the
//! memory still free, checked before a table is allocated.

use crate::distributed::every_process_u64s;
use crate::Result;
use serde::{Deserialize, Serialize};
use shadowsync_actors::stats::proc_bytes;
use shadowsync_actors::sync::Fabric;

/// One process's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryReport {
    /// Bytes of the embedding rows this process keeps and of their optimizer
    /// state (Adagrad's sums): the whole table, or its shard.
    pub table_bytes: u64,
    /// The process's peak resident set size (`VmHWM`), if the system says.
    pub peak_rss_bytes: Option<u64>,
}

impl MemoryReport {
    /// This process's, with `table_bytes` of embedding rows.
    pub fn now(table_bytes: u64) -> Self {
        Self {
            table_bytes,
            peak_rss_bytes: proc_bytes("/proc/self/status", "VmHWM:"),
        }
    }

    /// Every process's, in process order (a collective).
    ///
    /// # Errors
    ///
    /// As [`Fabric::gather`](shadowsync_actors::sync::Fabric::gather).
    pub fn every_process(self, fabric: &dyn Fabric) -> Result<Vec<Self>> {
        let mine = [self.table_bytes, self.peak_rss_bytes.unwrap_or(u64::MAX)];
        Ok(every_process_u64s(fabric, &mine)?
            .into_iter()
            .map(|words| Self {
                table_bytes: words.first().copied().unwrap_or(0),
                peak_rss_bytes: words.get(1).copied().filter(|&b| b != u64::MAX),
            })
            .collect())
    }
}

/// Bytes of memory available to a new allocation (`MemAvailable`), if the
/// system says.
pub(super) fn available_memory() -> Option<u64> {
    proc_bytes("/proc/meminfo", "MemAvailable:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_peak_resident_set_at_least_its_table() {
        let table = vec![1u8; 64 << 20];
        let memory = MemoryReport::now(table.len() as u64);
        let peak = memory.peak_rss_bytes.unwrap();
        assert!(peak >= 64 << 20, "{peak}");
        assert!(available_memory().unwrap() > 0);
        assert_eq!(table.iter().map(|&b| b as usize).sum::<usize>(), 64 << 20);
    }
}
