//! The EASGD centre variable on a parameter server, sharded.
//!
//! The flat parameter vector is cut into `S` contiguous shards, each behind its
//! own lock: an elastic update is atomic per shard (as on `S` real servers), and
//! trainers updating different shards never wait on each other.

use crate::sync::elastic;
use crate::{Error, Result};
use std::ops::Range;
use std::sync::Mutex;

/// The sharded centre copy `c` of EASGD.
#[derive(Debug)]
pub struct ParamServer {
    shards: Vec<(Range<usize>, Mutex<Vec<f32>>)>,
    len: usize,
}

impl ParamServer {
    /// A centre starting at `initial`, cut into `shards` (≥ 1) contiguous shards.
    pub fn new(initial: &[f32], shards: usize) -> Result<Self> {
        if shards == 0 {
            return Err(Error::Config {
                key: "sync.server_shards".into(),
                reason: "must be at least 1".into(),
            });
        }
        let per_shard = initial.len().div_ceil(shards).max(1);
        let shards = (0..shards)
            .map(|s| {
                let start = (s * per_shard).min(initial.len());
                let end = ((s + 1) * per_shard).min(initial.len());
                (start..end, Mutex::new(initial[start..end].to_vec()))
            })
            .collect();
        Ok(Self {
            shards,
            len: initial.len(),
        })
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The elastic step for one replica `snapshot` (see [`elastic`]), shard by
    /// shard; returns the replica's target.
    pub fn elastic(&self, snapshot: &[f32], alpha: f32) -> Result<Vec<f32>> {
        if snapshot.len() != self.len {
            return Err(Error::Layout(format!(
                "snapshot has {} values, the centre {}",
                snapshot.len(),
                self.len
            )));
        }
        let mut target = Vec::with_capacity(self.len);
        for (range, shard) in &self.shards {
            let mut center = shard
                .lock()
                .map_err(|_| Error::Layout("a server shard was poisoned".into()))?;
            target.extend(elastic(&snapshot[range.clone()], &mut center, alpha));
        }
        Ok(target)
    }

    /// A copy of the centre.
    pub fn center(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.len);
        for (_, shard) in &self.shards {
            out.extend_from_slice(
                &shard
                    .lock()
                    .map_err(|_| Error::Layout("a server shard was poisoned".into()))?,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharded_elastic_step_equals_the_unsharded_one() {
        let initial: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let snapshot: Vec<f32> = (0..10).map(|i| 2.0 * i as f32 + 1.0).collect();
        let mut expected_center = initial.clone();
        let expected = elastic(&snapshot, &mut expected_center, 0.5);
        for shards in [1, 3, 4, 10, 16] {
            let server = ParamServer::new(&initial, shards).unwrap();
            assert_eq!(
                server.elastic(&snapshot, 0.5).unwrap(),
                expected,
                "{shards} shards"
            );
            assert_eq!(server.center().unwrap(), expected_center);
        }
        assert!(ParamServer::new(&initial, 0).is_err());
    }
}
