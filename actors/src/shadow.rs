//! ShadowSync's background loop: beside each trainer, forever, snapshot the dense
//! parameters → combine with the group (or server) → write back, without ever
//! blocking the trainer.
//!
//! [`ShadowLoop`] is the plain logic (one [`ShadowLoop::round`] at a time);
//! [`ShadowActor`] runs rounds back to back on its own arbiter thread, paced by
//! the transport's own waiting (and an optional minimum interval), until syncing
//! stops.

use crate::events::{Event, EventBus};
use crate::hogwild::ParamAlias;
use crate::stats::TrainerCounters;
use crate::sync::{SyncPeer, WriteBack};
use crate::Result;
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One trainer's background synchronization.
#[derive(Debug)]
pub struct ShadowLoop {
    replica: ParamAlias,
    peer: SyncPeer,
    write_back: WriteBack,
    counters: Arc<TrainerCounters>,
    snapshot: Vec<f32>,
}

/// What a completed round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundOutcome {
    /// The peer's round number.
    pub round: u64,
    /// Trainer steps between the snapshot and the write-back.
    pub staleness: u64,
}

impl ShadowLoop {
    /// A loop syncing `replica` (an alias of the trainer's parameters).
    pub fn new(
        replica: ParamAlias,
        peer: SyncPeer,
        write_back: WriteBack,
        counters: Arc<TrainerCounters>,
    ) -> Self {
        let snapshot = vec![0.0; replica.len()];
        Self {
            replica,
            peer,
            write_back,
            counters,
            snapshot,
        }
    }

    /// One round; `Ok(None)` once syncing has stopped.
    pub fn round(&mut self) -> Result<Option<RoundOutcome>> {
        let steps_at_snapshot = self.counters.steps();
        self.replica.snapshot_into(&mut self.snapshot)?;
        let round = self.peer.round();
        let Some(target) = self.peer.target(&self.snapshot)? else {
            return Ok(None);
        };
        self.replica
            .write_back(self.write_back, &target, &self.snapshot)?;
        let staleness = self.counters.steps().saturating_sub(steps_at_snapshot);
        self.counters.record_sync(staleness);
        Ok(Some(RoundOutcome { round, staleness }))
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Round;

/// The actor running a [`ShadowLoop`].
pub struct ShadowActor {
    shadow: ShadowLoop,
    min_interval: Duration,
    events: EventBus,
    exits: Sender<(usize, Option<String>)>,
    trainer: usize,
    /// Raised when this loop fails, so that no peer waits for it.
    stop: Arc<AtomicBool>,
}

impl ShadowActor {
    /// An actor looping `shadow` for `trainer`, at most one round per
    /// `min_interval`; reports its end on `exits` and, if it fails, ends syncing
    /// for everyone through `stop`.
    pub fn new(
        trainer: usize,
        shadow: ShadowLoop,
        min_interval: Duration,
        events: EventBus,
        exits: Sender<(usize, Option<String>)>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            shadow,
            min_interval,
            events,
            exits,
            trainer,
            stop,
        }
    }

    fn end(&mut self, ctx: &mut Context<Self>, error: Option<String>) {
        if error.is_some() {
            self.stop.store(true, Ordering::Relaxed);
        }
        let _ = self.exits.send((self.trainer, error));
        ctx.stop();
    }
}

impl Actor for ShadowActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Round);
    }
}

impl Handler<Round> for ShadowActor {
    type Result = ();

    fn handle(&mut self, _: Round, ctx: &mut Context<Self>) {
        let start = Instant::now();
        match self.shadow.round() {
            Ok(Some(outcome)) => {
                self.events.publish(Event::Synced {
                    trainer: self.trainer,
                    round: outcome.round,
                    staleness: outcome.staleness,
                });
                let wait = self.min_interval.saturating_sub(start.elapsed());
                ctx.run_later(wait, |_, ctx| ctx.notify(Round));
            }
            Ok(None) => self.end(ctx, None),
            Err(e) => self.end(ctx, Some(e.to_string())),
        }
    }
}
