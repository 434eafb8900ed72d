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

use super::trainer_loop::Landing;
use super::{catching_panics, report, Pacing, RoundOutcome, ShadowExit, ShadowLoop};
use crate::events::EventBus;
use crate::recovery::unpanicked;
use crate::sync::LinkModel;
use crate::{with_causes, Error, Result};
use actix::prelude::*;
use cpu_time::ThreadTime;
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            let due = peer.centre_due();
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
            due: Instant::now() + self.link.group_round_time(&ids, len),
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

#[derive(Message)]
#[rtype(result = "()")]
struct Tick;

/// The actor running a [`ShadowHub`].
pub(crate) struct ShadowHubActor {
    hub: ShadowHub,
    events: EventBus,
    exits: Sender<ShadowExit>,
    /// Raised when a trainer's rounds keep failing, so that nothing waits on
    /// the hub.
    stop: Arc<AtomicBool>,
    /// Each trainer's failed rounds in a row.
    failures: Vec<u32>,
}

impl ShadowHubActor {
    /// An actor running `hub`; reports each trainer's end on `exits` and, if
    /// a trainer's rounds keep failing, ends syncing for everyone through
    /// `stop`.
    pub(crate) fn new(
        hub: ShadowHub,
        events: EventBus,
        exits: Sender<ShadowExit>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let failures = vec![0; hub.trainers()];
        Self {
            hub,
            events,
            exits,
            stop,
            failures,
        }
    }

    /// Ends syncing; `failed` names the trainer whose rounds ended it, and why.
    fn end(&mut self, ctx: &mut Context<Self>, failed: Option<(usize, Error)>) {
        let (failing, mut error) = match failed {
            Some((trainer, error)) => {
                let text = with_causes(&error);
                tracing::warn!(trainer, error = %text, "shadow sync failed; syncing ends");
                self.stop.store(true, Ordering::Relaxed);
                (Some(trainer), Some(error))
            }
            None => (None, None),
        };
        for trainer in 0..self.hub.trainers() {
            let error = error.take_if(|_| failing == Some(trainer));
            // A blocking send into a queue with room for every trainer's one exit:
            // it fails only when the cluster's handle is gone, with nobody to tell.
            let _ = self.exits.send((trainer, error));
        }
        ctx.stop();
    }
}

impl Actor for ShadowHubActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Tick);
    }
}

impl Handler<Tick> for ShadowHubActor {
    type Result = ();

    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        let cpu = ThreadTime::try_now().ok();
        let mut reports = Vec::new();
        let next = unpanicked(|| self.hub.tick(&mut reports));
        if let Some(spent) = cpu.and_then(|start| start.try_elapsed().ok()) {
            self.hub.charge(spent);
        }
        for r in reports {
            let Some(failures) = self.failures.get_mut(r.trainer) else {
                continue;
            };
            if let Some(error) = report(&self.events, r.trainer, r.round, r.result, failures) {
                return self.end(ctx, Some((r.trainer, error)));
            }
        }
        match next {
            Ok(Some(wait)) if wait.is_zero() => ctx.notify(Tick),
            Ok(Some(wait)) => {
                ctx.run_later(wait, |_, ctx| ctx.notify(Tick));
            }
            Ok(None) => self.end(ctx, None),
            Err(panic) => self.end(
                ctx,
                Some((
                    0,
                    Error::RoundPanicked(format!(
                        "in the shadow hub serving this process: {panic}"
                    )),
                )),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::{CoordinatorClient, GroupCoordinator};
    use crate::recovery::RecoveryPoint;
    use crate::stats::TrainerCounters;
    use crate::sync::{mesh, GroupPlan, ModelAveraging, Schedule, SyncPeer, WriteBack};
    use crate::system::spawn_system;
    use crate::{FlatParams, ParamAlias};
    use tch::nn;

    /// Trainers in one group, trainer `t`'s replica holding `values[t]`.
    struct Group {
        hub: ShadowHub,
        replicas: Vec<ParamAlias>,
        _vars: Vec<nn::VarStore>,
        system: actix::System,
    }

    const UNPACED: Pacing = Pacing {
        min_interval: Duration::ZERO,
        min_steps: 0,
        max_cpu_share: 0.0,
    };

    fn group_of(values: &[Vec<f32>], link: LinkModel) -> Group {
        let n = values.len();
        let plan = GroupPlan::new(Schedule::Global, n, n).unwrap();
        let coordinated = Arc::new(plan.clone());
        let (system, _thread, addr) = spawn_system("hub-test", move || {
            GroupCoordinator::new(coordinated, EventBus::default()).start()
        })
        .unwrap();
        let client = CoordinatorClient::new(addr, &plan);
        let endpoints = mesh(n, link, Arc::new(AtomicBool::new(false)));
        let (mut shadows, mut replicas, mut vars) = (Vec::new(), Vec::new(), Vec::new());
        for (endpoint, values) in endpoints.into_iter().zip(values) {
            let vs = nn::VarStore::new(tch::Device::Cpu);
            let dim = values.len() as i64;
            let _ = vs.root().zeros("w", &[dim]);
            let params = FlatParams::adopt(&vs).unwrap();
            let replica = ParamAlias::new(&params).unwrap();
            replica
                .write_back(WriteBack::Overwrite, values, values)
                .unwrap();
            let id = endpoint.id();
            let peer =
                SyncPeer::new(endpoint, client.clone(), Box::new(ModelAveraging), None).unwrap();
            shadows.push(ShadowLoop::new(
                ParamAlias::new(&params).unwrap(),
                peer,
                WriteBack::Delta,
                Arc::new(TrainerCounters::new(id)),
                Arc::new(RecoveryPoint::new(values)),
            ));
            replicas.push(replica);
            vars.push(vs);
        }
        Group {
            hub: ShadowHub::new(shadows, UNPACED, link).unwrap(),
            replicas,
            _vars: vars,
            system,
        }
    }

    fn values_of(replica: &ParamAlias) -> Vec<f32> {
        let mut out = vec![0.0; replica.len()];
        replica.snapshot_into(&mut out).unwrap();
        out
    }

    #[test]
    fn a_round_writes_the_mean_of_the_finite_snapshots_into_every_member() {
        // Longer than a chunk, not a multiple of it: three chunks, the last short.
        let len = 2 * CHUNK + 5;
        let at = |t: usize| (0..len).map(|j| (t * 1000 + j % 97) as f32).collect();
        let mut diverged: Vec<f32> = at(2);
        diverged[CHUNK + 1] = f32::NAN;
        let mut group = group_of(&[at(0), at(1), diverged], LinkModel::default());
        let mut reports = Vec::new();
        assert!(group.hub.tick(&mut reports).is_some());
        // On an ideal link the round lands in the tick it starts.
        assert_eq!(reports.len(), 3, "{reports:?}");
        for r in &reports {
            let outcome = r.result.as_ref().unwrap();
            assert_eq!(outcome.round, 0);
            assert!(outcome.written_back);
            assert_eq!(outcome.contributed, r.trainer != 2, "{r:?}");
        }
        // Trainers 0 and 1's mean, worked out on its own; trainer 2 diverged,
        // sits out and takes it outright.
        let mean: Vec<f32> = (0..len)
            .map(|j| ((j % 97) as f32 + (1000 + j % 97) as f32) / 2.0)
            .collect();
        for replica in &group.replicas {
            assert_eq!(values_of(replica), mean);
        }
        group.system.stop();
    }

    #[test]
    fn a_round_lands_once_the_simulated_link_has_carried_it() {
        let link = LinkModel {
            latency_us: 30_000.0,
            ..LinkModel::default()
        };
        let mut group = group_of(&[vec![1.0; 8], vec![3.0; 8]], link);
        let mut reports = Vec::new();
        let wait = group.hub.tick(&mut reports).unwrap();
        // Two phases of one 30 ms message each: nothing has landed yet.
        assert!(reports.is_empty(), "{reports:?}");
        assert_eq!(link.group_round_time(&[0, 1], 8), Duration::from_millis(60));
        assert!(wait <= Duration::from_millis(60), "{wait:?}");
        assert_eq!(values_of(&group.replicas[0]), vec![1.0; 8]);
        std::thread::sleep(Duration::from_millis(60));
        group.hub.tick(&mut reports).unwrap();
        assert_eq!(reports.len(), 2, "{reports:?}");
        for replica in &group.replicas {
            assert_eq!(values_of(replica), vec![2.0; 8]);
        }
        group.system.stop();
    }

    #[test]
    fn the_bytes_a_member_sends_are_the_transports() {
        // 10 values in 3 slices of 4, 4, 2: member 0 sends 6 values, then 4
        // to each of 2 others.
        assert_eq!(bytes_sent_per_member(10, 3), (6 + 2 * 4) * 4);
        assert_eq!(bytes_sent_per_member(10, 2), (5 + 5) * 4);
        assert_eq!(bytes_sent_per_member(10, 1), 0);
    }
}
