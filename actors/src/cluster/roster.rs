//! The trainers a cluster has started, in order, and which of them have left:
//! a fixed cluster's roster is its start; an elastic one's grows as trainers
//! join and marks those that leave (see `elastic.rs`).

use crate::hogwild::ParamAlias;
use crate::sync::SharedPeer;
use crate::Result;
use std::collections::BTreeSet;

/// Every trainer started, by number, and those that left.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    /// Each started trainer's replica: read for checkpoints, the consensus
    /// distance and a joining trainer's start.
    pub(crate) replicas: Vec<ParamAlias>,
    /// Each started trainer's sync peer's state, read for checkpoints.
    pub(crate) peers: Vec<SharedPeer>,
    /// The trainers that left.
    pub(crate) departed: BTreeSet<usize>,
}

impl Roster {
    /// Trainers started (those that left included).
    pub(crate) fn started(&self) -> usize {
        self.replicas.len()
    }

    /// The trainers training now, in order.
    pub(crate) fn active(&self) -> Vec<usize> {
        let started = 0..self.started();
        started.filter(|t| !self.departed.contains(t)).collect()
    }

    /// The replicas of the trainers training now.
    pub(crate) fn active_replicas(&self) -> impl Iterator<Item = &ParamAlias> {
        let departed = &self.departed;
        let each = self.replicas.iter().enumerate();
        each.filter_map(move |(t, r)| (!departed.contains(&t)).then_some(r))
    }

    /// The mean of the active replicas, read as they train: one replica
    /// copied at a time (not all at once, as [`super::mean_replica`] takes
    /// them), so that a thousand replicas cost two buffers.
    pub(crate) fn mean(&self) -> Result<Vec<f32>> {
        let replicas: Vec<&ParamAlias> = self.active_replicas().collect();
        let len = replicas.first().map_or(0, |r| r.len());
        let (mut mean, mut replica) = (vec![0f32; len], vec![0f32; len]);
        let share = 1.0 / replicas.len().max(1) as f32;
        for alias in replicas {
            alias.snapshot_into(&mut replica)?;
            mean.iter_mut()
                .zip(&replica)
                .for_each(|(m, r)| *m += r * share);
        }
        Ok(mean)
    }
}
