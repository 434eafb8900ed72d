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
use crate::sync::GroupSchedule;
use crate::trainer::{Control, SaveState, TrainerActor, WorkerState};
use crate::{Error, Learner, LearnerState, Result};
use actix::Addr;
use crossbeam_channel::{bounded, RecvTimeoutError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl<L: Learner> Cluster<L> {
    /// Adds a trainer stepping `learner`, from the mean of the trainers'
    /// replicas and with the state of the first trainer's learner (its
    /// optimizer's: Adagrad's sums, Adam's moments), so that it does not
    /// start cold; its number.
    ///
    /// # Errors
    ///
    /// As [`Cluster::add_trainers`].
    pub fn add_trainer(&self, learner: L) -> Result<usize> {
        let added = self.add_trainers(vec![learner])?;
        added
            .first()
            .copied()
            .ok_or(Error::Internal("a trainer added"))
    }

    /// Adds a trainer stepping each of `learners`, as
    /// [`Cluster::add_trainer`] does, all in one change: one regrouping,
    /// one mean and one donor's state for all of them; their numbers.
    ///
    /// # Errors
    ///
    /// A cluster that is not elastic or has too few seats left (naming
    /// `elastic_capacity`), a schedule not defined for the new number of
    /// trainers (naming `sync.group_size`), a cluster stopped or ended, or a
    /// learner whose parameters cannot be set (nothing changes then); or the
    /// environment's failure to start their actors.
    pub fn add_trainers(&self, mut learners: Vec<L>) -> Result<Vec<usize>> {
        let config = &self.inner.config;
        if learners.is_empty() {
            return Ok(Vec::new());
        }
        self.with_running(|running| {
            // Stopped, it tells no trainer started from now on to stop.
            if running.closed || self.stopped() {
                return Err(Error::Stopped("cluster"));
            }
            self.refuse_if_fixed()?;
            if running.spare.len() < learners.len() {
                return Err(Error::Config {
                    key: "elastic_capacity".into(),
                    reason: format!(
                        "{} seats left ({} trainers started): {} trainers cannot join",
                        running.spare.len(),
                        self.trainers(),
                        learners.len()
                    ),
                });
            }
            let seats = running.spare.iter().take(learners.len());
            let joining: Vec<usize> = seats.map(|(endpoint, _)| endpoint.id()).collect();
            let mut members = self.active_trainers();
            members.extend(&joining);
            let plan = group_plan(config, members.len(), members.len())?;
            let donor = members.first().and_then(|&t| running.trainers.get(t));
            let start = self.inner.roster().mean()?;
            let state = donor.map(donor_state).transpose()?.flatten();
            for learner in &mut learners {
                if let Some(state) = &state {
                    let position = learner.save_state().map_err(Error::learner)?.position;
                    let state = LearnerState {
                        position,
                        ..state.clone()
                    };
                    learner.restore_state(&state).map_err(Error::learner)?;
                }
                learner.dense_params().load_from(&start)?;
            }
            let (Some(&first), Some(&last)) = (joining.first(), joining.last()) else {
                return Err(Error::Internal("a seat for every joiner"));
            };
            let (endpoints, rules) = running.spare.drain(..joining.len()).unzip();
            let parts = build_parts(
                learners,
                &self.inner.counters[first..=last],
                endpoints,
                rules,
                &self.inner.groups,
                config,
                &start,
                &self.inner.server,
            )?
            .stopping_with(config, self.inner.control.stop_flags());
            let from = self.regroup(members, plan)?;
            {
                let mut roster = self.inner.roster.lock().unwrap_or_else(|p| p.into_inner());
                roster.replicas.extend(parts.replicas);
                roster.peers.extend(parts.peers);
            }
            let addrs = super::actors::start_actors(
                &running.system,
                (parts.cores, first),
                parts.shadows,
                running.actors.clone(),
            )?;
            let recipients = addrs.iter().map(|a| a.clone().recipient()).collect();
            self.inner.control.connect(recipients);
            running.trainers.extend(addrs);
            for &trainer in &joining {
                self.inner.events.publish(Event::TrainerJoined {
                    trainer,
                    round: from,
                });
            }
            Ok(joining)
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
            let from = self.regroup(members, plan)?;
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

    /// Has the coordinator group `members` by `plan` from the first round
    /// nobody has been handed yet, which it returns.
    fn regroup(&self, members: Vec<usize>, plan: Arc<dyn GroupSchedule>) -> Result<u64> {
        let group_size = plan.group_size();
        let from = self.inner.groups.regroup(members, plan)?;
        self.inner.group_size.store(group_size, Ordering::Relaxed);
        Ok(from)
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

/// The state of `donor`'s learner (its optimizer's), or `None` from a donor
/// that has just finished, or that did not answer in [`DONOR_TIMEOUT`] (with
/// a warning): the joiners then start as they are.
fn donor_state<L: Learner>(donor: &Addr<TrainerActor<L>>) -> Result<Option<LearnerState>> {
    let (reply, states) = bounded(1);
    donor.do_send(SaveState(reply));
    match states.recv_timeout(DONOR_TIMEOUT) {
        Ok(WorkerState { learner, .. }) => learner.map(Some),
        Err(RecvTimeoutError::Disconnected) => Ok(None),
        Err(RecvTimeoutError::Timeout) => {
            tracing::warn!(
                "the joining trainers start with fresh optimizer state: the trainer asked \
                 for its state did not answer within {} s (hung or stalled)",
                DONOR_TIMEOUT.as_secs()
            );
            Ok(None)
        }
    }
}
