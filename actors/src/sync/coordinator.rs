//! The DS-Sync group coordinator: the one place that says who averages with whom
//! in each round.
//!
//! [`Coordinator`] is the plain logic over a [`GroupSchedule`]: it hands a trainer its
//! group for a round and notes the first time each round's partition goes out.
//! [`GroupCoordinator`] is the actor around it, publishing each new partition as
//! [`Event::Regrouped`]; sync peers ask it through a [`CoordinatorClient`] and wait
//! for the answer on a channel of their own (they run on blocking threads). The
//! schedules are deterministic, so trainers could derive their groups alone; one
//! coordinator is what lets the grouping react to the cluster: a trainer its
//! group timed out of a round ([`CoordinatorClient::report_unresponsive`]) is
//! left out of every group from the first round nobody has been handed yet
//! (so that all members of a round always get the same groups), until it asks
//! for a group again — then it is told to go on from the first round not yet
//! handed out, in the groups again ([`Assignment::round`]).
//!
//! The members change the same way when trainers join or leave an elastic
//! cluster ([`CoordinatorClient::regroup`]): from the first round not handed
//! out, the groups are those of a plan for the new number of members, over
//! the members in order. A trainer placed in a round before it left takes
//! part in it; asked for a later one, it is told it has no more rounds.
//!
//! A request the coordinator fails on (a panic) leaves it as it was before the
//! request ([`Event::ServiceRecovered`]); the requester gets no answer and asks
//! again, up to [`CoordinatorClient::ATTEMPTS`] times.

use crate::events::{Event, EventBus};
use crate::faults::{faults_at, faults_due, Fault, FaultKind, FaultSite};
use crate::recovery::unpanicked;
use crate::sync::GroupSchedule;
use crate::system::deliver;
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// A trainer's group for a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    /// The round: the one asked for, or a later one for a trainer coming back
    /// after it was left out (it skips to it).
    pub(crate) round: u64,
    /// The members, the trainer among them.
    pub(crate) group: Vec<usize>,
}

/// What [`Coordinator::group_for`] answers, and what the cluster should hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The requester's group; `None` for a trainer that has left (or never
    /// joined): it has no more rounds.
    pub assignment: Option<Assignment>,
    /// The partition of a round handed out for the first time.
    pub announced: Option<(u64, Vec<Vec<usize>>)>,
    /// The requester was left out and is back from this round.
    pub rejoined: Option<u64>,
}

/// Who the members are from round `from` on, and the plan that groups them
/// (over their places in `members`).
#[derive(Debug, Clone)]
struct Epoch {
    from: u64,
    members: Vec<usize>,
    plan: Arc<dyn GroupSchedule>,
}

/// Hands out the groups of a [`GroupSchedule`], round by round, leaving out the
/// trainers that stopped answering.
#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    /// The members and their plan, oldest first.
    epochs: Vec<Epoch>,
    /// The latest round whose partition was handed out.
    announced: Option<u64>,
    /// From which round which trainers are left out, oldest first.
    left_out: Vec<(u64, BTreeSet<usize>)>,
}

impl Coordinator {
    /// A coordinator following `plan`, over all its trainers.
    pub(crate) fn new(plan: Arc<dyn GroupSchedule>) -> Self {
        let members = (0..plan.trainers()).collect();
        Self {
            epochs: vec![Epoch {
                from: 0,
                members,
                plan,
            }],
            announced: None,
            left_out: Vec::new(),
        }
    }

    /// The members and plan of `round`.
    fn epoch(&self, round: u64) -> &Epoch {
        let later = self.epochs.partition_point(|e| e.from <= round);
        &self.epochs[later.saturating_sub(1)]
    }

    /// From the first round not handed out, the groups are `plan`'s over
    /// `members` (in order: the plan's trainer `i` is `members[i]`);
    /// returns that round.
    ///
    /// # Errors
    ///
    /// A plan not for as many trainers as there are members.
    pub(crate) fn regroup(
        &mut self,
        members: Vec<usize>,
        plan: Arc<dyn GroupSchedule>,
    ) -> Result<u64> {
        if plan.trainers() != members.len() {
            return Err(Error::Internal("a plan for another number of members"));
        }
        let from = self.next_round();
        if self.epochs.last().is_some_and(|e| e.from == from) {
            self.epochs.pop();
        }
        self.epochs.push(Epoch {
            from,
            members,
            plan,
        });
        Ok(from)
    }

    /// The first round from `round` on that `trainer` is a member of, if
    /// any (a trainer that has joined later skips to its first).
    fn member_from(&self, trainer: usize, round: u64) -> Option<u64> {
        if self.epoch(round).members.contains(&trainer) {
            return Some(round);
        }
        let mut later = self.epochs.iter().filter(|e| e.from > round);
        later.find(|e| e.members.contains(&trainer)).map(|e| e.from)
    }

    /// The first round nobody has been handed yet.
    fn next_round(&self) -> u64 {
        self.announced.map_or(0, |latest| latest + 1)
    }

    /// The trainers left out of `round`.
    fn left_out_of(&self, round: u64) -> BTreeSet<usize> {
        self.left_out
            .iter()
            .rev()
            .find(|(from, _)| *from <= round)
            .map(|(_, out)| out.clone())
            .unwrap_or_default()
    }

    /// Changes who is left out from round `from` on (never earlier than a
    /// change before: `from` is at least the first round not handed out).
    fn change_from(&mut self, from: u64, change: impl FnOnce(&mut BTreeSet<usize>)) {
        let mut out = self.left_out_of(from);
        change(&mut out);
        match self.left_out.last_mut() {
            Some((last, set)) if *last == from => *set = out,
            _ => self.left_out.push((from, out)),
        }
    }

    /// `round`'s partition of its members, without those left out of it.
    fn groups(&self, round: u64) -> Vec<Vec<usize>> {
        let out = self.left_out_of(round);
        let epoch = self.epoch(round);
        let member = |place: usize| epoch.members.get(place).copied();
        epoch
            .plan
            .groups(round)
            .into_iter()
            .map(|g| {
                let members = g.into_iter().filter_map(member);
                members.filter(|t| !out.contains(t)).collect()
            })
            .filter(|g: &Vec<usize>| !g.is_empty())
            .collect()
    }

    /// `trainer`'s group in `round` (or, if it had been left out, in the
    /// first round not handed out yet, where it is back), with the round's
    /// whole partition the first time a round later than every one before is
    /// asked about.
    pub(crate) fn group_for(&mut self, trainer: usize, round: u64) -> Answer {
        let Some(mut round) = self.member_from(trainer, round) else {
            return Answer {
                assignment: None,
                announced: None,
                rejoined: None,
            };
        };
        let mut rejoined = None;
        if self.left_out_of(round).contains(&trainer) {
            let back = self.next_round().max(round);
            self.change_from(back, |out| {
                out.remove(&trainer);
            });
            (round, rejoined) = (back, Some(back));
        }
        let groups = self.groups(round);
        let group = groups
            .iter()
            .find(|g| g.contains(&trainer))
            .cloned()
            .unwrap_or_else(|| vec![trainer]);
        let new_round = self.announced.is_none_or(|latest| round > latest);
        if new_round {
            self.announced = Some(round);
        }
        Answer {
            assignment: Some(Assignment { round, group }),
            announced: new_round.then_some((round, groups)),
            rejoined,
        }
    }

    /// `trainer` did not answer its group in `round`: it is left out from the
    /// first round not handed out yet; returns that round, or `None` if it is
    /// left out already.
    pub(crate) fn report_unresponsive(&mut self, trainer: usize, round: u64) -> Option<u64> {
        let from = self.next_round().max(round + 1);
        if self.left_out_of(from).contains(&trainer) {
            return None;
        }
        self.change_from(from, |out| {
            out.insert(trainer);
        });
        Some(from)
    }
}

/// A trainer's request for its group; the answer goes to `reply`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct GroupRequest {
    trainer: usize,
    round: u64,
    reply: Sender<Option<Assignment>>,
}

/// From the first round not handed out, `plan` groups `members`; that
/// round goes to `reply`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Regroup {
    members: Vec<usize>,
    plan: Arc<dyn GroupSchedule>,
    reply: Sender<Result<u64>>,
}

/// `trainer` did not answer `by` in `round`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Unresponsive {
    trainer: usize,
    round: u64,
    by: usize,
}

/// The actor running a [`Coordinator`].
pub(crate) struct GroupCoordinator {
    coordinator: Coordinator,
    events: EventBus,
    /// Injected `coordinator-panic` faults.
    faults: Vec<Fault>,
    /// Per trainer, the last round a fault was injected into (once each).
    injected: HashMap<usize, u64>,
}

impl GroupCoordinator {
    /// An actor handing out `plan`'s groups and publishing them on `events`.
    pub(crate) fn new(plan: Arc<dyn GroupSchedule>, events: EventBus) -> Self {
        Self {
            coordinator: Coordinator::new(plan),
            events,
            faults: Vec::new(),
            injected: HashMap::new(),
        }
    }

    /// Injects the `coordinator-panic` faults of `faults`.
    pub(crate) fn with_faults(mut self, faults: &[Fault]) -> Self {
        self.faults = faults_at(faults, FaultSite::Coordinator);
        self
    }

    /// Runs `work`; if it fails, the coordinator is put back as it was, the
    /// failure (while doing `what`) reported, and `None` returned.
    fn contained<T>(
        &mut self,
        what: impl FnOnce() -> String,
        work: impl FnOnce(&mut Self) -> T,
    ) -> Option<T> {
        let before = self.coordinator.clone();
        match unpanicked(|| work(self)) {
            Ok(done) => Some(done),
            Err(panic) => {
                self.coordinator = before;
                self.events.publish(Event::ServiceRecovered {
                    service: "group coordinator".into(),
                    cause: format!("{}: {panic}", what()),
                });
                None
            }
        }
    }

    /// Panics if a fault is due on `trainer`'s request for `round` (once).
    fn inject(&mut self, trainer: usize, round: u64) {
        if self.injected.get(&trainer) == Some(&round) {
            return;
        }
        if faults_due(&self.faults, trainer, round).any(|f| f.kind == FaultKind::CoordinatorPanic) {
            self.injected.insert(trainer, round);
            crate::faults::inject_panic("injected coordinator panic".into());
        }
    }
}

impl Actor for GroupCoordinator {
    type Context = Context<Self>;
}

impl Handler<GroupRequest> for GroupCoordinator {
    type Result = ();

    fn handle(&mut self, request: GroupRequest, _: &mut Context<Self>) {
        let (trainer, round) = (request.trainer, request.round);
        let Some(answer) = self.contained(
            || format!("answering trainer {trainer} for round {round}"),
            |actor| {
                actor.inject(trainer, round);
                actor.coordinator.group_for(trainer, round)
            },
        ) else {
            // No answer: the requester asks again.
            return;
        };
        if let Some(round) = answer.rejoined {
            self.events.publish(Event::PeerRejoined {
                trainer: request.trainer,
                round,
            });
        }
        if let Some((round, groups)) = answer.announced {
            self.events.publish(Event::Regrouped { round, groups });
        }
        // A requester that gave up (the cluster is stopping) no longer listens.
        let _ = request.reply.send(answer.assignment);
    }
}

impl Handler<Regroup> for GroupCoordinator {
    type Result = ();

    fn handle(&mut self, request: Regroup, _: &mut Context<Self>) {
        let Regroup {
            members,
            plan,
            reply,
        } = request;
        let count = members.len();
        let from = self.contained(
            || format!("regrouping {count} members"),
            |actor| actor.coordinator.regroup(members, plan),
        );
        // No answer (it failed): the requester's wait ends in an error.
        if let Some(from) = from {
            // One answer into a queue of one: it fails only when the
            // requester is gone, and then nobody needs it.
            let _ = reply.send(from);
        }
    }
}

impl Handler<Unresponsive> for GroupCoordinator {
    type Result = ();

    fn handle(&mut self, report: Unresponsive, _: &mut Context<Self>) {
        let (trainer, round) = (report.trainer, report.round);
        let left_out = self.contained(
            || format!("leaving trainer {trainer} out after round {round}"),
            |actor| actor.coordinator.report_unresponsive(trainer, round),
        );
        if let Some(from) = left_out.flatten() {
            self.events.publish(Event::PeerTimedOut {
                trainer: report.trainer,
                round: report.round,
                by: report.by,
                left_out_from: from,
            });
        }
    }
}

/// How long a waiting peer sleeps between two looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// A sync peer's line to the [`GroupCoordinator`].
#[derive(Debug, Clone)]
pub(crate) struct CoordinatorClient {
    addr: Addr<GroupCoordinator>,
}

impl CoordinatorClient {
    /// How many times a request the coordinator failed on is sent.
    pub(crate) const ATTEMPTS: usize = 3;

    /// A client of the coordinator at `addr`.
    pub(crate) fn new(addr: Addr<GroupCoordinator>) -> Self {
        Self { addr }
    }

    /// Tells the coordinator that `trainer` did not answer `by` in `round`.
    pub(crate) fn report_unresponsive(&self, trainer: usize, round: u64, by: usize) {
        // A full mailbox drops the report: another member's will do.
        let _ = self.addr.try_send(Unresponsive { trainer, round, by });
    }

    /// From the first round nobody has been handed yet, `plan` groups
    /// `members` (the plan's trainer `i` is `members[i]`); returns that round.
    ///
    /// # Errors
    ///
    /// A plan for another number of trainers, or a coordinator that is gone
    /// or failed on the request.
    pub(crate) fn regroup(&self, members: Vec<usize>, plan: Arc<dyn GroupSchedule>) -> Result<u64> {
        let (reply, answer) = bounded(1);
        let request = Regroup {
            members,
            plan,
            reply,
        };
        deliver(&self.addr, request, "group coordinator")?;
        answer
            .recv()
            .map_err(|_| Error::Stopped("group coordinator"))?
    }

    /// `trainer`'s group in `round` (or a later round, see [`Assignment`]);
    /// `Ok(None)` if `stopped()` turns true while waiting, or once `trainer`
    /// has left the cluster (it has no more rounds).
    pub(crate) fn group_of(
        &self,
        trainer: usize,
        round: u64,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Assignment>> {
        for _ in 0..Self::ATTEMPTS {
            let (reply, answer) = bounded(1);
            let request = GroupRequest {
                trainer,
                round,
                reply,
            };
            deliver(&self.addr, request, "group coordinator")?;
            loop {
                match answer.recv_timeout(POLL) {
                    Ok(group) => return Ok(group),
                    Err(RecvTimeoutError::Timeout) if !stopped() => {}
                    Err(RecvTimeoutError::Timeout) => return Ok(None),
                    // It failed on the request, and is still there: ask again.
                    Err(RecvTimeoutError::Disconnected) if self.addr.connected() => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        return Err(Error::Stopped("group coordinator"))
                    }
                }
            }
        }
        Err(Error::CoordinatorFailed {
            trainer,
            round,
            attempts: Self::ATTEMPTS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{GroupPlan, Schedule};
    use crate::system::spawn_system;

    #[test]
    fn each_round_is_announced_once_and_groups_follow_the_plan() {
        let plan = GroupPlan::new(Schedule::Random, 4, 2).unwrap().with_seed(9);
        let mut c = Coordinator::new(Arc::new(plan.clone()));
        let answer = c.group_for(1, 0);
        assert_eq!(answer.assignment.unwrap().group, plan.group_of(1, 0));
        assert_eq!(answer.announced, Some((0, plan.groups(0))));
        assert_eq!(c.group_for(2, 0).announced, None, "round 0 was announced");
        assert_eq!(c.group_for(0, 1).announced, Some((1, plan.groups(1))));
        let late = c.group_for(3, 0);
        assert_eq!(
            late.assignment,
            Some(Assignment {
                round: 0,
                group: plan.group_of(3, 0)
            })
        );
        assert_eq!((late.announced, late.rejoined), (None, None));
    }

    #[test]
    fn an_unresponsive_trainer_is_left_out_from_the_next_round_until_it_asks_again() {
        let plan = GroupPlan::new(Schedule::Random, 6, 3).unwrap().with_seed(4);
        let mut c = Coordinator::new(Arc::new(plan.clone()));
        for trainer in 0..6 {
            c.group_for(trainer, 0);
        }
        c.group_for(0, 1); // round 1 handed out: changes start at 2
        assert_eq!(c.report_unresponsive(5, 0), Some(2));
        assert_eq!(c.report_unresponsive(5, 1), None, "already left out");
        // Rounds handed out before keep their groups: everyone agrees on them.
        assert_eq!(
            c.group_for(1, 1).assignment.unwrap().group,
            plan.group_of(1, 1)
        );
        for round in 2..5 {
            let answer = c.group_for(0, round);
            let groups = answer.announced.unwrap().1;
            let members: Vec<usize> = groups.iter().flatten().copied().collect();
            assert_eq!(members.len(), 5, "round {round}: {groups:?}");
            assert!(!members.contains(&5));
            let mut expected = plan.group_of(0, round);
            expected.retain(|&t| t != 5);
            assert_eq!(answer.assignment.unwrap().group, expected);
        }
        // Trainer 5 catches up on rounds it was still in ...
        assert_eq!(
            c.group_for(5, 1).assignment.unwrap().group,
            plan.group_of(5, 1)
        );
        // ... and asking for one it is left out of brings it back from round 5.
        let back = c.group_for(5, 2);
        assert_eq!(back.rejoined, Some(5));
        assert_eq!(
            back.assignment,
            Some(Assignment {
                round: 5,
                group: plan.group_of(5, 5)
            })
        );
        assert_eq!(
            c.group_for(0, 5).assignment.unwrap().group,
            plan.group_of(0, 5)
        );
        assert!(c
            .group_for(3, 4)
            .assignment
            .unwrap()
            .group
            .iter()
            .all(|&t| t != 5));
    }

    #[test]
    fn members_change_from_the_next_round_and_one_that_left_has_no_more_rounds() {
        let plan = |n| Arc::new(GroupPlan::new(Schedule::Global, n, n).unwrap());
        let mut c = Coordinator::new(plan(2));
        let group = |c: &mut Coordinator, t, r| c.group_for(t, r).assignment;
        assert_eq!(group(&mut c, 0, 0).unwrap().group, vec![0, 1]);
        // Trainers 2 and 3 join: from round 1, the first nobody was handed.
        assert_eq!(c.regroup(vec![0, 1, 2, 3], plan(4)).unwrap(), 1);
        assert_eq!(group(&mut c, 1, 0).unwrap().group, vec![0, 1]);
        let joiner = group(&mut c, 3, 0).unwrap();
        assert_eq!((joiner.round, joiner.group), (1, vec![0, 1, 2, 3]));
        // Trainer 1 leaves from round 2; it still takes part in round 1.
        assert_eq!(c.regroup(vec![0, 2, 3], plan(3)).unwrap(), 2);
        assert_eq!(group(&mut c, 1, 1).unwrap().group, vec![0, 1, 2, 3]);
        assert_eq!(group(&mut c, 1, 2), None, "no more rounds");
        assert_eq!(group(&mut c, 2, 2).unwrap().group, vec![0, 2, 3]);
        // A plan for another number of members is refused, changing nothing.
        assert!(c.regroup(vec![0, 2], plan(3)).is_err());
        assert_eq!(group(&mut c, 0, 3).unwrap().group, vec![0, 2, 3]);
        // A smaller group size over the members' places.
        let pairs = GroupPlan::new(Schedule::Fixed, 2, 1).unwrap();
        assert_eq!(c.regroup(vec![0, 3], Arc::new(pairs)).unwrap(), 4);
        assert_eq!(group(&mut c, 3, 4).unwrap().group, vec![3]);
        assert_eq!(group(&mut c, 2, 4), None);
        assert_eq!(group(&mut c, 4, 0), None, "never joined");
    }

    #[test]
    fn a_request_the_coordinator_fails_on_leaves_it_as_it_was() {
        let plan = GroupPlan::new(Schedule::Random, 4, 2).unwrap().with_seed(3);
        let events = EventBus::default();
        let subscriber = events.subscribe();
        let mut actor = GroupCoordinator::new(Arc::new(plan.clone()), events);
        let failed = actor.contained(
            || "a test".into(),
            |actor| {
                actor.coordinator.group_for(0, 0);
                actor.coordinator.report_unresponsive(3, 0);
                panic!("half-way");
            },
        );
        assert_eq!(failed, None::<()>);
        // Round 0 is announced afresh, round 1 still has trainer 3.
        let answer = actor.coordinator.group_for(1, 0);
        assert_eq!(answer.announced, Some((0, plan.groups(0))));
        assert_eq!(
            actor.coordinator.group_for(3, 1).assignment.unwrap().group,
            plan.group_of(3, 1)
        );
        assert!(matches!(
            subscriber.try_recv().unwrap(),
            Event::ServiceRecovered { service, cause }
                if service == "group coordinator" && cause == "a test: half-way"
        ));
    }

    #[test]
    fn a_trainer_asks_again_when_the_coordinator_failed_on_its_request() {
        let plan = GroupPlan::new(Schedule::Alternating, 4, 2).unwrap();
        let events = EventBus::default();
        let subscriber = events.subscribe();
        let fault = |trainer, at_step, every| Fault {
            trainer,
            kind: FaultKind::CoordinatorPanic,
            at_step,
            every,
        };
        let faults = [fault(1, 2, 0), fault(2, 0, 1)];
        let coordinated = Arc::new(plan.clone());
        let (sys, system, addr) = spawn_system("coordinator-fault-test", move || {
            GroupCoordinator::new(coordinated, events)
                .with_faults(&faults)
                .start()
        })
        .unwrap();
        let client = CoordinatorClient::new(addr);
        for round in 0..4 {
            for trainer in 0..4 {
                let assignment = client.group_of(trainer, round, || false).unwrap();
                assert_eq!(
                    assignment.map(|a| a.group),
                    Some(plan.group_of(trainer, round))
                );
            }
        }
        let recovered: Vec<String> = subscriber
            .try_iter()
            .filter_map(|e| match e {
                Event::ServiceRecovered { cause, .. } => Some(cause),
                _ => None,
            })
            .collect();
        assert_eq!(recovered.len(), 5, "{recovered:?}");
        assert!(recovered[0].contains("answering trainer 2 for round 0"));
        assert!(recovered[0].contains("injected coordinator panic"));
        sys.stop();
        system.join().unwrap();
    }

    #[test]
    fn the_actor_answers_from_another_thread_and_publishes_each_partition() {
        let plan = GroupPlan::new(Schedule::Alternating, 4, 2).unwrap();
        let events = EventBus::default();
        let subscriber = events.subscribe();
        let coordinated = Arc::new(plan.clone());
        let (sys, system, addr) = spawn_system("coordinator-test", move || {
            GroupCoordinator::new(coordinated, events).start()
        })
        .unwrap();
        let client = CoordinatorClient::new(addr);
        for round in 0..3 {
            for trainer in 0..4 {
                let assignment = client.group_of(trainer, round, || false).unwrap();
                assert_eq!(
                    assignment,
                    Some(Assignment {
                        round,
                        group: plan.group_of(trainer, round)
                    })
                );
            }
        }
        let announced: Vec<_> = subscriber.try_iter().collect();
        assert_eq!(announced.len(), 3);
        assert!(matches!(
            &announced[1],
            Event::Regrouped { round: 1, groups } if *groups == plan.groups(1)
        ));
        sys.stop();
        system.join().unwrap();
        // With the system gone, a request fails instead of hanging.
        assert!(client.group_of(0, 3, || false).is_err());
    }
}
