//! Trainers joining and leaving a running cluster: [`Cluster::add_trainer`]
//! and [`Cluster::remove_trainer`].
//!
//! An elastic cluster (`elastic_capacity = C`) is wired for C seats from the
//! start: C endpoints, C sync rules, C trainers' counters. The trainers it
//! starts with take the first seats; a joining trainer takes the next free
//! one, and a seat is never taken twice (messages of a trainer that left
//! may still be on its links).
//!
//! Membership changes go through the group coordinator: from the first round
//! nobody has been handed yet, the groups are those of the schedule planned
//! for the new number of trainers, over the trainers in order
//! ([`CoordinatorClient::regroup`](crate::sync::CoordinatorClient::regroup)).
//! So every schedule works for any number of trainers it is defined for; a
//! change to a number it is not (`fixed` groups of 2 for 3 trainers) is
//! refused, naming `sync.group_size`, and changes nothing.
//!
//! * A joining trainer starts from the mean of the trainers' replicas as they
//!   are, its learner with the state of the first trainer's (its optimizer's:
//!   a fresh Adagrad's first steps are as large as its learning rate, and
//!   jolted the group's NE by 0.02 in E9 before this), and its shadow loop
//!   from the first round it is a member of.
//! * A leaving trainer stops stepping within a chunk; its shadow loop takes
//!   part in the rounds it was already placed in, then ends. Its learner comes
//!   back from [`Cluster::wait`] with the others' (with whatever data it had
//!   not read: the CTR run deals batches from one queue, so the others train
//!   them), and the report names it in
//!   [`departed`](super::ClusterReport::departed).

use super::handle::Cluster;
use super::wiring::{build_parts, group_plan};
use crate::events::Event;
use crate::trainer::{Control, SaveState, TrainerActor, WorkerState};
use crate::{Error, Learner, LearnerState, Result};
use actix::Addr;
use crossbeam_channel::bounded;
use std::time::Duration;

impl<L: Learner> Cluster<L> {
    /// Adds a trainer stepping `learner`, from the mean of the trainers'
    /// replicas and with the state of the first trainer's learner (its
    /// optimizer's: Adagrad's sums, Adam's moments), so that it does not
    /// start cold; its number.
    ///
    /// # Errors
    ///
    /// A cluster that is not elastic or has no seat left (naming
    /// `elastic_capacity`), a schedule not defined for one trainer more
    /// (naming `sync.group_size`), a cluster stopped or ended, or a learner
    /// whose parameters cannot be set (nothing changes then); or the
    /// environment's failure to start its actors.
    pub fn add_trainer(&self, mut learner: L) -> Result<usize> {
        let config = &self.inner.config;
        self.with_running(|running| {
            // Stopped, it tells no trainer started from now on to stop.
            if running.closed || self.stopped() {
                return Err(Error::Stopped("cluster"));
            }
            self.refuse_if_fixed()?;
            let Some((endpoint, _)) = running.spare.front() else {
                return Err(Error::Config {
                    key: "elastic_capacity".into(),
                    reason: format!(
                        "every seat is taken ({} trainers started): no trainer can join",
                        self.trainers()
                    ),
                });
            };
            let trainer = endpoint.id();
            let mut members = self.active_trainers();
            members.push(trainer);
            let plan = group_plan(config, members.len(), members.len())?;
            if let Some(donor) = members.first().and_then(|&t| running.trainers.get(t)) {
                warm_start(&mut learner, donor)?;
            }
            let start = self.inner.roster().mean()?;
            learner.dense_params().load_from(&start)?;
            let (endpoint, rule) = running.spare.pop_front().ok_or(Error::Internal("a seat"))?;
            let parts = build_parts(
                vec![learner],
                &self.inner.counters[trainer..=trainer],
                vec![endpoint],
                vec![rule],
                &self.inner.groups,
                config,
                &start,
                &self.inner.server,
            )?
            .bounding_staleness(config, &self.inner.stop);
            let from = self.inner.groups.regroup(members, plan)?;
            {
                let mut roster = self.inner.roster.lock().unwrap_or_else(|p| p.into_inner());
                roster.replicas.extend(parts.replicas);
                roster.peers.extend(parts.peers);
            }
            let addrs = super::actors::start_actors(
                &running.system,
                (parts.cores, trainer),
                parts.shadows,
                running.actors.clone(),
            )?;
            let recipients = addrs.iter().map(|a| a.clone().recipient()).collect();
            self.inner.control.connect(recipients);
            running.trainers.extend(addrs);
            self.inner.events.publish(Event::TrainerJoined {
                trainer,
                round: from,
            });
            Ok(trainer)
        })
    }

    /// Removes trainer `trainer`: it stops stepping within a chunk, and its
    /// shadow loop ends after the rounds it was placed in.
    ///
    /// # Errors
    ///
    /// A cluster that is not elastic (naming `elastic_capacity`), a trainer
    /// that is not training (naming `trainer`), the last trainer, a schedule
    /// not defined for one trainer fewer (naming `sync.group_size`), or a
    /// cluster that has ended. Nothing changes then.
    pub fn remove_trainer(&self, trainer: usize) -> Result<()> {
        let config = &self.inner.config;
        self.refuse_if_fixed()?;
        self.with_running(|running| {
            if running.closed {
                return Err(Error::Stopped("cluster"));
            }
            let mut members = self.active_trainers();
            let bad = |reason: &str| Error::Config {
                key: "trainer".into(),
                reason: format!("{trainer} {reason}"),
            };
            let place = (members.iter().position(|&t| t == trainer))
                .ok_or_else(|| bad("is not training (never started, or left)"))?;
            if members.len() == 1 {
                return Err(bad("is the last trainer: stop the cluster instead"));
            }
            if self.inner.counters[trainer].is_finished() {
                return Err(bad("has finished its data"));
            }
            members.remove(place);
            let plan = group_plan(config, members.len(), members.len())?;
            let from = self.inner.groups.regroup(members, plan)?;
            (self.inner.roster.lock().unwrap_or_else(|p| p.into_inner()))
                .departed
                .insert(trainer);
            if let Some(actor) = running.trainers.get(trainer) {
                actor.do_send(Control::Stop);
            }
            self.inner.events.publish(Event::TrainerLeft {
                trainer,
                round: from,
            });
            Ok(())
        })
    }

    /// An error naming `elastic_capacity` for a fixed cluster.
    fn refuse_if_fixed(&self) -> Result<()> {
        match self.inner.config.elastic_capacity {
            0 => Err(Error::Config {
                key: "elastic_capacity".into(),
                reason: "0: the cluster is fixed, no trainer joins or leaves it".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// How long a joining trainer waits for a training one's learner state.
const DONOR_TIMEOUT: Duration = Duration::from_secs(10);

/// Restores into `learner` the state of `donor`'s (its optimizer's), keeping
/// its own position in its data. A donor that has just finished has no state
/// to give: the learner then starts as it is.
fn warm_start<L: Learner>(learner: &mut L, donor: &Addr<TrainerActor<L>>) -> Result<()> {
    let (reply, states) = bounded(1);
    donor.do_send(SaveState(reply));
    let Ok(WorkerState { learner: state, .. }) = states.recv_timeout(DONOR_TIMEOUT) else {
        return Ok(());
    };
    let position = learner.save_state().map_err(Error::learner)?.position;
    let state = LearnerState { position, ..state? };
    learner.restore_state(&state).map_err(Error::learner)
}
