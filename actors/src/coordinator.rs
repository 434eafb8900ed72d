//! The DS-Sync group coordinator: the one place that says who averages with whom
//! in each round.
//!
//! [`Coordinator`] is the plain logic over a [`GroupPlan`]: it hands a trainer its
//! group for a round and notes the first time each round's partition goes out.
//! [`GroupCoordinator`] is the actor around it, publishing each new partition as
//! [`Event::Regrouped`]; sync peers ask it through a [`CoordinatorClient`] and wait
//! for the answer on a channel of their own (they run on blocking threads). The
//! schedules are deterministic, so trainers could derive their groups alone; one
//! coordinator is what lets the grouping react to the cluster (for example leave
//! out a trainer that stopped answering).

use crate::events::{Event, EventBus};
use crate::sync::GroupPlan;
use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::time::Duration;

/// Hands out the groups of a [`GroupPlan`], round by round.
#[derive(Debug, Clone)]
pub struct Coordinator {
    plan: GroupPlan,
    /// The latest round whose partition was handed out.
    announced: Option<u64>,
}

impl Coordinator {
    /// A coordinator following `plan`.
    pub fn new(plan: GroupPlan) -> Self {
        Self {
            plan,
            announced: None,
        }
    }

    /// `trainer`'s group in `round`, with the round's whole partition the first
    /// time a round later than every one before is asked about.
    pub fn group_for(
        &mut self,
        trainer: usize,
        round: u64,
    ) -> (Vec<usize>, Option<Vec<Vec<usize>>>) {
        let group = self.plan.group_of(trainer, round);
        let new_round = self.announced.is_none_or(|latest| round > latest);
        if new_round {
            self.announced = Some(round);
        }
        (group, new_round.then(|| self.plan.groups(round)))
    }
}

/// A trainer's request for its group; the answer goes to `reply`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct GroupRequest {
    trainer: usize,
    round: u64,
    reply: Sender<Vec<usize>>,
}

/// The actor running a [`Coordinator`].
pub struct GroupCoordinator {
    coordinator: Coordinator,
    events: EventBus,
}

impl GroupCoordinator {
    /// An actor handing out `plan`'s groups and publishing them on `events`.
    pub fn new(plan: GroupPlan, events: EventBus) -> Self {
        Self {
            coordinator: Coordinator::new(plan),
            events,
        }
    }
}

impl Actor for GroupCoordinator {
    type Context = Context<Self>;
}

impl Handler<GroupRequest> for GroupCoordinator {
    type Result = ();

    fn handle(&mut self, request: GroupRequest, _: &mut Context<Self>) {
        let (group, partition) = self.coordinator.group_for(request.trainer, request.round);
        if let Some(groups) = partition {
            self.events.publish(Event::Regrouped {
                round: request.round,
                groups,
            });
        }
        // A requester that gave up (the cluster is stopping) no longer listens.
        let _ = request.reply.send(group);
    }
}

/// How long a waiting peer sleeps between two looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// A sync peer's line to the [`GroupCoordinator`].
#[derive(Debug, Clone)]
pub struct CoordinatorClient {
    addr: Addr<GroupCoordinator>,
    trainers: usize,
    group_size: usize,
}

impl CoordinatorClient {
    /// A client of the coordinator at `addr`, which follows `plan`.
    pub fn new(addr: Addr<GroupCoordinator>, plan: &GroupPlan) -> Self {
        Self {
            addr,
            trainers: plan.trainers(),
            group_size: plan.group_size(),
        }
    }

    /// Number of trainers.
    pub fn trainers(&self) -> usize {
        self.trainers
    }

    /// Members of each group.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// `trainer`'s group in `round`; `Ok(None)` if `stopped()` turns true while
    /// waiting.
    pub fn group_of(
        &self,
        trainer: usize,
        round: u64,
        stopped: impl Fn() -> bool,
    ) -> Result<Option<Vec<usize>>> {
        let (reply, answer) = bounded(1);
        self.addr
            .try_send(GroupRequest {
                trainer,
                round,
                reply,
            })
            .map_err(|e| Error::System(format!("the group coordinator is unreachable: {e}")))?;
        loop {
            match answer.recv_timeout(POLL) {
                Ok(group) => return Ok(Some(group)),
                Err(RecvTimeoutError::Timeout) if !stopped() => {}
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::System(
                        "the group coordinator stopped before answering".into(),
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Schedule;
    use crate::system::spawn_system;

    #[test]
    fn each_round_is_announced_once_and_groups_follow_the_plan() {
        let plan = GroupPlan::new(Schedule::Random, 4, 2).unwrap().with_seed(9);
        let mut c = Coordinator::new(plan);
        let (group, partition) = c.group_for(1, 0);
        assert_eq!(group, plan.group_of(1, 0));
        assert_eq!(partition, Some(plan.groups(0)));
        assert_eq!(c.group_for(2, 0).1, None, "round 0 was announced");
        assert_eq!(c.group_for(0, 1).1, Some(plan.groups(1)));
        assert_eq!(c.group_for(3, 0), (plan.group_of(3, 0), None));
    }

    #[test]
    fn the_actor_answers_from_another_thread_and_publishes_each_partition() {
        let plan = GroupPlan::new(Schedule::Alternating, 4, 2).unwrap();
        let events = EventBus::default();
        let subscriber = events.subscribe();
        let (sys, system, addr) = spawn_system("coordinator-test", move || {
            GroupCoordinator::new(plan, events).start()
        })
        .unwrap();
        let client = CoordinatorClient::new(addr, &plan);
        assert_eq!((client.trainers(), client.group_size()), (4, 2));
        for round in 0..3 {
            for trainer in 0..4 {
                let group = client.group_of(trainer, round, || false).unwrap();
                assert_eq!(group, Some(plan.group_of(trainer, round)));
            }
        }
        let announced: Vec<_> = subscriber.try_iter().collect();
        assert_eq!(announced.len(), 3);
        assert_eq!(
            announced[1],
            Event::Regrouped {
                round: 1,
                groups: plan.groups(1)
            }
        );
        sys.stop();
        system.join().unwrap();
        // With the system gone, a request fails instead of hanging.
        assert!(client.group_of(0, 3, || false).is_err());
    }
}
