//! Events of a running cluster, broadcast to whoever subscribed.
//!
//! Every subscriber gets its own bounded channel; a subscriber that does not keep
//! up misses events (counted) rather than slowing a trainer down. Publishing
//! takes no lock: the list of subscribers is an atomically swapped snapshot
//! (`arc-swap`), replaced only when someone subscribes or a closed one goes. Every event is
//! also a `tracing` event (`RUST_LOG=shadowsync_actors=debug` shows the groups of
//! each round and the trainers finishing, `trace` every sync).

use crate::Error;
use arc_swap::ArcSwap;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use serde::{Serialize, Serializer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Something that happened in the cluster. It serializes as a log record,
/// a failure's error by its message.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub enum Event {
    /// A sync round's average was written back into `trainer`'s replica.
    Synced {
        /// The trainer.
        trainer: usize,
        /// Its sync round.
        round: u64,
        /// Trainer steps between the round's snapshot and the write-back.
        staleness: u64,
    },
    /// `trainer` has consumed its data (or was stopped).
    TrainerFinished {
        /// The trainer.
        trainer: usize,
        /// Steps it took.
        steps: u64,
    },
    /// The group coordinator handed out the partition of a new round.
    Regrouped {
        /// The round.
        round: u64,
        /// Its groups of trainers.
        groups: Vec<Vec<usize>>,
    },
    /// A step of `trainer` failed or diverged; its replica was reloaded from its
    /// recovery point and it went on.
    TrainerRecovered {
        /// The trainer.
        trainer: usize,
        /// Its step count then.
        step: u64,
        /// What went wrong.
        cause: String,
    },
    /// A round of `trainer`'s shadow-sync loop failed; the loop goes on with
    /// the next round.
    SyncRecovered {
        /// The trainer.
        trainer: usize,
        /// The round that failed.
        round: u64,
        /// What went wrong.
        cause: String,
    },
    /// A request to a cluster service (the group coordinator, a parameter
    /// server shard) failed; the service went on from its state before it.
    ServiceRecovered {
        /// Which: `group coordinator` or `server shard S`.
        service: String,
        /// What went wrong, and for whom.
        cause: String,
    },
    /// `trainer`'s snapshot was not finite: it sat out `round`'s average (and
    /// took the group's).
    Abstained {
        /// The trainer.
        trainer: usize,
        /// Its sync round.
        round: u64,
    },
    /// `trainer` did not answer `by` in `round`: the round went on without it,
    /// and it is left out of the groups from round `left_out_from` until it
    /// asks for a group again.
    PeerTimedOut {
        /// The trainer.
        trainer: usize,
        /// The round it missed.
        round: u64,
        /// The member that waited for it in vain.
        by: usize,
        /// The first round without it.
        left_out_from: u64,
    },
    /// `trainer`, left out after a timeout, asked for a group again: it is in
    /// the groups from `round` on.
    PeerRejoined {
        /// The trainer.
        trainer: usize,
        /// Its first round back.
        round: u64,
    },
    /// `trainer` joined an elastic cluster; it is in the groups from
    /// `round` on.
    TrainerJoined {
        /// The trainer.
        trainer: usize,
        /// Its first round.
        round: u64,
    },
    /// `trainer` left an elastic cluster; it is in no group from `round` on.
    TrainerLeft {
        /// The trainer.
        trainer: usize,
        /// The first round without it.
        round: u64,
    },
    /// `trainer` failed; the error says why.
    TrainerFailed {
        /// The trainer.
        trainer: usize,
        /// What went wrong (for a learner's own error,
        /// [`Error::Learner`] holds it, to downcast).
        #[serde(serialize_with = "as_message")]
        error: Arc<Error>,
    },
    /// A live evaluation of the model finished (published by whoever
    /// evaluates: the CTR training run publishes each of its own).
    Evaluated {
        /// Examples trained when the evaluated snapshot was taken.
        examples: u64,
        /// Its figures by name (the CTR run's: `ne`, `auc`, `log_loss`, ...).
        metrics: Vec<(String, f64)>,
    },
}

impl actix::Message for Event {
    type Result = ();
}

/// Logs `event` through `tracing`: syncs at trace level, regroupings and
/// trainers finishing at debug, failures as warnings.
fn trace(event: &Event) {
    match event {
        Event::Synced {
            trainer,
            round,
            staleness,
        } => tracing::trace!(trainer, round, staleness, "synced"),
        Event::Regrouped { round, groups } => tracing::debug!(round, ?groups, "regrouped"),
        Event::TrainerFinished { trainer, steps } => {
            tracing::debug!(trainer, steps, "trainer finished")
        }
        Event::TrainerRecovered {
            trainer,
            step,
            cause,
        } => tracing::warn!(trainer, step, %cause, "trainer recovered"),
        Event::ServiceRecovered { service, cause } => {
            tracing::warn!(%service, %cause, "service recovered")
        }
        Event::Abstained { trainer, round } => {
            tracing::warn!(
                trainer,
                round,
                "non-finite replica left out of its group's average"
            )
        }
        Event::PeerTimedOut {
            trainer,
            round,
            by,
            left_out_from,
        } => tracing::warn!(
            trainer,
            round,
            by,
            left_out_from,
            "unresponsive sync peer timed out of its round and left out of the groups"
        ),
        Event::SyncRecovered {
            trainer,
            round,
            cause,
        } => tracing::warn!(trainer, round, %cause, "shadow sync round failed; the loop goes on"),
        Event::PeerRejoined { trainer, round } => {
            tracing::info!(
                trainer,
                round,
                "sync peer answers again and is back in the groups"
            )
        }
        Event::TrainerFailed { trainer, error } => {
            tracing::warn!(trainer, %error, "trainer failed")
        }
        Event::TrainerJoined { trainer, round } => {
            tracing::info!(trainer, round, "trainer joined")
        }
        Event::TrainerLeft { trainer, round } => {
            tracing::info!(trainer, round, "trainer left")
        }
        Event::Evaluated { examples, metrics } => {
            tracing::debug!(examples, ?metrics, "evaluated")
        }
    }
}

/// Capacity of each subscriber's channel.
const CAPACITY: usize = 4096;

/// A cloneable broadcaster of [`Event`]s.
#[derive(Debug, Clone, Default)]
pub struct EventBus {
    subscribers: Arc<ArcSwap<Vec<Sender<Event>>>>,
    dropped: Arc<AtomicU64>,
}

impl EventBus {
    /// A new receiver of every event from now on.
    pub fn subscribe(&self) -> Receiver<Event> {
        let (tx, rx) = bounded(CAPACITY);
        self.subscribers.rcu(|subscribers| {
            let mut with = Vec::clone(subscribers);
            with.push(tx.clone());
            with
        });
        rx
    }

    /// Sends `event` to every subscriber that has room; forgets closed ones.
    pub fn publish(&self, event: Event) {
        trace(&event);
        let mut closed = Vec::new();
        for tx in self.subscribers.load().iter() {
            match tx.try_send(event.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => closed.push(tx.clone()),
            }
        }
        if !closed.is_empty() {
            self.subscribers.rcu(|subscribers| {
                let open: Vec<_> = subscribers
                    .iter()
                    .filter(|tx| !closed.iter().any(|c| c.same_channel(tx)))
                    .cloned()
                    .collect();
                open
            });
        }
    }

    /// Events that subscribers missed because they were full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Serializes an error as its message.
fn as_message<S: Serializer>(error: &Arc<Error>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced(round: u64) -> Event {
        Event::Synced {
            trainer: 0,
            round,
            staleness: 0,
        }
    }

    #[test]
    fn subscribers_get_events_from_then_on_and_closed_ones_are_forgotten() {
        let bus = EventBus::default();
        bus.publish(synced(0)); // nobody listens yet
        let kept = bus.subscribe();
        let gone = bus.subscribe();
        bus.publish(synced(1));
        drop(gone);
        bus.publish(synced(2));
        assert_eq!(bus.subscribers.load().len(), 1);
        let rounds = kept.try_iter().map(|event| match event {
            Event::Synced { round, .. } => Some(round),
            _ => None,
        });
        assert_eq!(rounds.collect::<Vec<_>>(), [Some(1), Some(2)]);
        assert_eq!(bus.dropped(), 0);
    }

    #[test]
    fn a_full_subscriber_misses_events_counted_without_blocking() {
        let bus = EventBus::default();
        let slow = bus.subscribe();
        for round in 0..CAPACITY as u64 + 3 {
            bus.publish(synced(round));
        }
        assert_eq!(bus.dropped(), 3);
        assert_eq!(slow.try_iter().count(), CAPACITY);
    }
}
