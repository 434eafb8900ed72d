//! One thread serving the shadow rounds of every trainer of a process.
//!
//! [`ShadowHub`] keeps each trainer's [`ShadowLoop`] (its replica's alias, its
//! peer, its snapshot) and moves each trainer through its rounds:
//! * *idle*: it asks the coordinator for its group; the answer assigns every
//!   idle member of the group at that round, so one request serves the group;
//! * *assigned*: it takes its snapshot as soon as [`Pacing`] lets it go (as
//!   a loop of its own would), and once every member has, the group's round
//!   is *in flight*;
//! * after the time the round would take on the simulated link
//!   ([`LinkModel::group_round_time`]), it *lands*: chunk by chunk, the
//!   group's mean of the snapshots, and each member's target written back
//!   while the chunk is in cache.
//!
//! An injected hang takes its trainer *away*: its group goes on without it
//! and reports it to the coordinator, which leaves it out until it asks again.
//! An injected panic, or an error, fails that trainer's round only.
//! [`ShadowHubActor`] runs the hub on its own arbiter thread, charging the
//! thread's CPU time to the trainers in equal shares.

mod actor;
#[cfg(test)]
mod tests;

use super::trainer_loop::Landing;
use super::{catching_panics, Pacing, RoundOutcome, ShadowLoop};
use crate::recovery::unpanicked;
use crate::sync::LinkModel;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use actor::ShadowHubActor;

/// Values of a group's mean made and written back at a time: the chunk of
/// every member's snapshot and of the mean stay in cache between the two.
const CHUNK: usize = 4096;

/// Every local trainer's shadow rounds, run by one thread.
#[derive(Debug)]
pub(crate) struct ShadowHub {
    /// Trainer `t`'s at index `t`.
    members: Vec<Member>,
    pacing: Pacing,
    link: LinkModel,
    flights: Vec<Flight>,
    /// One chunk of a group's mean.
    mean: Vec<f32>,
}

#[derive(Debug)]
struct Member {
    shadow: ShadowLoop,
    state: State,
}

/// Where a trainer is in its rounds.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Between rounds: asks for its next group.
    Idle,
    /// In its group of `round`; takes its snapshot once paced.
    Assigned { round: u64, group: Arc<[usize]> },
    /// Its snapshot for `round` is taken (finite or not: `contributed`); its
    /// group's round goes in flight once every member's is.
    Snapped {
        round: u64,
        group: Arc<[usize]>,
        contributed: bool,
    },
    /// Its group's round is in flight; it lands with it.
    Flying,
    /// An injected hang: out of every round until then.
    Away { until: Instant },
}

/// A group's round between its snapshots and its landing.
#[derive(Debug)]
struct Flight {
    round: u64,
    /// The members taking part, with whether their snapshot is finite (and
    /// so goes into the mean).
    members: Vec<(usize, bool)>,
    due: Instant,
}

/// What a trainer's round came to.
#[derive(Debug)]
pub(crate) struct MemberReport {
    /// The trainer.
    pub trainer: usize,
    /// Its round.
    pub round: u64,
    /// What the round did, or why it failed.
    pub result: Result<RoundOutcome>,
}

impl ShadowHub {
    /// A hub running `shadows`, trainer `t`'s at index `t`, as `pacing`
    /// allows, over `link` (see [`ShadowHub::serves`]).
    pub(crate) fn new(shadows: Vec<ShadowLoop>, pacing: Pacing, link: LinkModel) -> Result<Self> {
        if !Self::serves(&shadows) {
            return Err(Error::Internal(
                "a shadow hub serves trainers 0..n of a job of one process",
            ));
        }
        let len = shadows.first().map_or(0, |s| s.snapshot().len());
        if shadows.iter().any(|s| s.snapshot().len() != len) {
            return Err(Error::Layout(
                "the trainers of a shadow hub have dense parameters of different sizes".into(),
            ));
        }
        Ok(Self {
            members: shadows
                .into_iter()
                .map(|shadow| Member {
                    shadow,
                    state: State::Idle,
                })
                .collect(),
            pacing,
            link,
            flights: Vec::new(),
            mean: vec![0.0; CHUNK],
        })
    }

    /// Whether a hub can run `shadows`: trainers `0..n`, the whole job.
    pub(crate) fn serves(shadows: &[ShadowLoop]) -> bool {
        shadows.iter().enumerate().all(|(t, s)| s.peer.id() == t)
    }

    /// The trainers it serves.
    pub(crate) fn trainers(&self) -> usize {
        self.members.len()
    }

    /// Charges `spent` CPU time to its trainers' sync, in equal shares.
    pub(crate) fn charge(&self, spent: Duration) {
        let share = spent / u32::try_from(self.members.len().max(1)).unwrap_or(u32::MAX);
        for member in &self.members {
            member.shadow.counters().add_sync_cpu(share);
        }
    }

    /// Moves every trainer's rounds on as far as they can go now, reporting
    /// what each round came to in `reports`; how long until there may be more
    /// to do, or `None` once syncing has stopped.
    pub(crate) fn tick(&mut self, reports: &mut Vec<MemberReport>) -> Option<Duration> {
        if self.members.iter().any(|m| m.shadow.stopped()) {
            return None;
        }
        let mut wait = Pacing::RECHECK;
        // Twice: a round on an ideal link lands as soon as it starts, and its
        // members are assigned their next round and paced at once.
        for _ in 0..2 {
            self.write_back_due_flights(reports);
            if !self.assign(reports) {
                return None;
            }
            wait = self.start_ready(reports);
        }
        let now = Instant::now();
        let landing = self
            .flights
            .iter()
            .map(|f| f.due.saturating_duration_since(now));
        Some(landing.fold(wait, Duration::min))
    }

    /// Writes back the flights that are due.
    fn write_back_due_flights(&mut self, reports: &mut Vec<MemberReport>) {
        let now = Instant::now();
        let (due, pending) = std::mem::take(&mut self.flights)
            .into_iter()
            .partition(|f| f.due <= now);
        self.flights = pending;
        for flight in due {
            self.write_back_flight(flight, reports);
        }
    }

    /// Asks the coordinator the group of every idle trainer (back from a
    /// hang, too); false once syncing has stopped.
    fn assign(&mut self, reports: &mut Vec<MemberReport>) -> bool {
        let now = Instant::now();
        for t in 0..self.members.len() {
            let member = &mut self.members[t];
            if matches!(member.state, State::Away { until } if until <= now) {
                member.state = State::Idle;
            }
            if member.state != State::Idle {
                continue;
            }
            let round = member.shadow.next_round();
            if !member.shadow.peer.meets_group() {
                // A round against the centre: no group to ask for.
                member.state = State::Assigned {
                    round,
                    group: Arc::from([t]),
                };
                continue;
            }
            let assignment = match catching_panics(|| member.shadow.peer.next_assignment()) {
                Ok(Some(assignment)) => assignment,
                Ok(None) => return false,
                Err(cause) => {
                    reports.push(MemberReport::failed(t, round, cause));
                    continue;
                }
            };
            let group: Arc<[usize]> = assignment.group.into();
            for &m in group.iter() {
                let Some(other) = self.members.get_mut(m) else {
                    continue;
                };
                let same_round =
                    other.state == State::Idle && other.shadow.next_round() == assignment.round;
                if m == t || same_round {
                    other.state = State::Assigned {
                        round: assignment.round,
                        group: Arc::clone(&group),
                    };
                }
            }
        }
        true
    }

    /// Takes the snapshot of every assigned trainer its pacing lets go, and
    /// puts in flight every group whose members have all taken theirs (or are
    /// away, or past its round: left out of it); how long until a member not
    /// paced yet may be, or a recheck period.
    fn start_ready(&mut self, reports: &mut Vec<MemberReport>) -> Duration {
        let mut wait = Pacing::RECHECK;
        let mut seen: Vec<(u64, usize)> = Vec::new();
        for t in 0..self.members.len() {
            let (round, group) = match &self.members[t].state {
                State::Assigned { round, group } | State::Snapped { round, group, .. } => {
                    (*round, Arc::clone(group))
                }
                _ => continue,
            };
            if seen.contains(&(round, group[0])) {
                continue;
            }
            seen.push((round, group[0]));
            let (mut away, mut complete) = (Vec::new(), true);
            for &m in group.iter() {
                let Some(member) = self.members.get(m) else {
                    continue;
                };
                match &member.state {
                    State::Snapped { round: r, .. } if *r == round => {}
                    // Each member's snapshot as soon as its own pacing lets
                    // it (as a loop of its own would take it).
                    State::Assigned { round: r, .. } if *r == round => {
                        let pace = member.shadow.wait(&self.pacing);
                        if !pace.is_zero() {
                            wait = wait.min(pace);
                            complete = false;
                        } else if self.snap(m, round, &group, reports) {
                            away.push(m);
                        }
                    }
                    State::Away { .. } => away.push(m),
                    _ if member.shadow.next_round() > round => {}
                    _ => complete = false,
                }
            }
            if complete {
                self.launch(round, &group, &away);
            }
        }
        wait
    }

    /// Takes trainer `t`'s snapshot for its group's `round`; true if an
    /// injected hang takes it away instead.
    fn snap(
        &mut self,
        t: usize,
        round: u64,
        group: &Arc<[usize]>,
        reports: &mut Vec<MemberReport>,
    ) -> bool {
        let member = &mut self.members[t];
        let shadow = &mut member.shadow;
        let attempt = catching_panics(|| match shadow.injected_hang() {
            hang if hang.is_zero() => shadow.take_snapshot().map(Ok),
            hang => Ok(Err(hang)),
        });
        member.state = match attempt {
            Ok(Err(hang)) => {
                member.state = State::Away {
                    until: Instant::now() + hang,
                };
                return true;
            }
            Ok(Ok(contributed)) => State::Snapped {
                round,
                group: Arc::clone(group),
                contributed,
            },
            Err(cause) => {
                reports.push(MemberReport::failed(t, round, cause));
                State::Idle
            }
        };
        // The round is taken, or lost.
        member.shadow.peer.enter(round);
        false
    }

    /// Puts `group`'s `round` in flight with the members that took their
    /// snapshot; the members `away` are reported to the coordinator.
    fn launch(&mut self, round: u64, group: &[usize], away: &[usize]) {
        let mut flying = Vec::with_capacity(group.len());
        for &t in group {
            let Some(member) = self.members.get_mut(t) else {
                continue;
            };
            if let State::Snapped {
                round: r,
                contributed,
                ..
            } = member.state
            {
                if r == round {
                    member.state = State::Flying;
                    flying.push((t, contributed));
                }
            }
        }
        let Some(&(by, _)) = flying.first() else {
            return;
        };
        for &t in away {
            self.members[by].shadow.peer.report_unresponsive(t, round);
        }
        let peer = &self.members[by].shadow.peer;
        if !peer.meets_group() {
            let due = peer.centre_due() + self.pacing.delay.draw();
            self.flights.push(Flight {
                round,
                members: flying,
                due,
            });
            return;
        }
        let ids: Vec<usize> = flying.iter().map(|&(t, _)| t).collect();
        let len = self.mean_len();
        for &t in &ids {
            let sent = bytes_sent_per_member(len, ids.len());
            self.members[t].shadow.peer.count_sent(sent);
        }
        self.flights.push(Flight {
            round,
            members: flying,
            due: Instant::now() + self.link.group_round_time(&ids, len) + self.pacing.delay.draw(),
        });
    }

    /// Writes back a trainer's elastic step against the centre: the server's
    /// shards answer, and the target is written back.
    fn write_back_centre_flight(&mut self, flight: Flight, reports: &mut Vec<MemberReport>) {
        for (t, contributed) in flight.members {
            let member = &mut self.members[t];
            member.state = State::Idle;
            let shadow = &mut member.shadow;
            let result = match catching_panics(|| shadow.centre_round(flight.round, contributed)) {
                Ok(Some(outcome)) => Ok(outcome),
                Ok(None) => continue,
                Err(cause) => Err(cause),
            };
            reports.push(MemberReport {
                trainer: t,
                round: flight.round,
                result,
            });
        }
    }

    /// The length of the parameter vectors.
    fn mean_len(&self) -> usize {
        self.members
            .first()
            .map_or(0, |m| m.shadow.snapshot().len())
    }

    /// Writes back `flight`: chunk by chunk, the mean of the finite snapshots, and
    /// each member's target written back (nothing when none was finite).
    fn write_back_flight(&mut self, flight: Flight, reports: &mut Vec<MemberReport>) {
        // A trainer's elastic step against EASGD's centre, not a group's mean.
        let first = flight.members.first().map(|&(t, _)| t);
        if first.is_some_and(|t| !self.members[t].shadow.peer.meets_group()) {
            return self.write_back_centre_flight(flight, reports);
        }
        let Flight { round, members, .. } = flight;
        let contributors: Vec<usize> = members.iter().filter(|m| m.1).map(|m| m.0).collect();
        let mut landings: Vec<(usize, Result<Landing>)> = members
            .iter()
            .map(|&(t, contributed)| (t, Ok(self.members[t].shadow.landing(round, contributed))))
            .collect();
        let len = match contributors.first() {
            Some(_) => self.mean_len(),
            None => 0,
        };
        let (all, mean) = (&mut self.members, &mut self.mean);
        for offset in (0..len).step_by(CHUNK) {
            let end = (offset + CHUNK).min(len);
            let mean = &mut mean[..end - offset];
            let reduced = unpanicked(|| {
                let of = |t: usize| &all[t].shadow.snapshot()[offset..end];
                let contributions: Vec<&[f32]> = contributors.iter().map(|&t| of(t)).collect();
                all[contributors[0]]
                    .shadow
                    .peer
                    .reduce(mean, &contributions);
            });
            if let Err(panic) = reduced {
                let cause = format!("in the group's reduction: {panic}");
                landings
                    .iter_mut()
                    .for_each(|(_, l)| *l = Err(Error::RoundPanicked(cause.clone())));
                break;
            }
            for (t, landing) in landings.iter_mut() {
                let Ok(l) = landing else {
                    continue;
                };
                let l = *l;
                if let Err(cause) =
                    catching_panics(|| all[*t].shadow.write_back_span(&l, offset, mean))
                {
                    *landing = Err(cause);
                }
            }
        }
        for (t, landing) in landings {
            let member = &mut self.members[t];
            member.state = State::Idle;
            let result = match (landing, len) {
                (Ok(landing), 0) => Ok(RoundOutcome {
                    round,
                    staleness: 0,
                    contributed: landing.contributed,
                    written_back: false,
                }),
                (Ok(landing), _) => Ok(member.shadow.landed(landing)),
                (Err(cause), _) => Err(cause),
            };
            reports.push(MemberReport {
                trainer: t,
                round,
                result,
            });
        }
    }
}

/// The bytes each of `m` members sends in a group mean of `len` values
/// through the transport (see [`LinkModel::group_round_time`]): the others'
/// slices of its values, then its reduced slice to each of them (the slices
/// counted as the first, the longest).
fn bytes_sent_per_member(len: usize, m: usize) -> u64 {
    let slice = len.div_ceil(m.max(1));
    let values = match m {
        0 | 1 => 0,
        _ => len - slice + (m - 1) * slice,
    };
    (values * std::mem::size_of::<f32>()) as u64
}

impl MemberReport {
    fn failed(trainer: usize, round: u64, cause: Error) -> Self {
        Self {
            trainer,
            round,
            result: Err(cause),
        }
    }
}
