//! The trainer: local SGD on a learner, continuously, with the foreground
//! algorithms (synchronous SGD, `fr-*:k`) done in line.
//!
//! [`TrainerCore`] is the plain logic (one [`TrainerCore::step`] at a time);
//! [`TrainerActor`] runs it on its own arbiter thread in short chunks, yielding to
//! its mailbox between chunks so that control messages (pause, resume, learning
//! rate, stats, stop) are answered within one chunk.

use crate::events::{Event, EventBus};
use crate::stats::{TrainerCounters, TrainerStats};
use crate::sync::{Payload, SyncPeer};
use crate::{Error, Learner, Result};
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the trainer itself does to synchronize.
#[derive(Debug)]
pub enum Foreground {
    /// Nothing (no sync, or a shadow loop does it).
    Nothing,
    /// All-reduce the gradients with the group before every update.
    SyncSgd(SyncPeer),
    /// Run the peer's rule every `every` steps, waiting for it.
    Every {
        /// Steps between syncs.
        every: u64,
        /// The trainer's sync state.
        peer: SyncPeer,
    },
}

/// A learner plus its in-line synchronization and counters.
#[derive(Debug)]
pub struct TrainerCore<L> {
    learner: L,
    foreground: Foreground,
    counters: Arc<TrainerCounters>,
    buffer: Payload,
}

impl<L: Learner> TrainerCore<L> {
    /// A trainer around `learner`.
    pub fn new(learner: L, foreground: Foreground, counters: Arc<TrainerCounters>) -> Self {
        let buffer = Payload::zeros(learner.dense_params().numel());
        Self {
            learner,
            foreground,
            counters,
            buffer,
        }
    }

    /// The learner.
    pub fn learner(&self) -> &L {
        &self.learner
    }

    /// Mutable access to the learner (learning rate changes).
    pub fn learner_mut(&mut self) -> &mut L {
        &mut self.learner
    }

    /// Gives the learner back.
    pub fn into_learner(self) -> L {
        self.learner
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<TrainerCounters> {
        &self.counters
    }

    /// One step (plus any in-line sync); `Ok(false)` once the data is exhausted.
    pub fn step(&mut self) -> Result<bool> {
        let Some(outcome) = self.learner.compute_gradients().map_err(Error::learner)? else {
            return Ok(false);
        };
        if let Foreground::SyncSgd(peer) = &mut self.foreground {
            let params = self.learner.dense_params();
            self.buffer.refill(|b| params.copy_grad_to(b))?;
            if let Some(mean) = peer.group_mean(&self.buffer)? {
                params.load_grad_from(&mean)?;
                self.counters.record_sync(0);
            }
            self.learner
                .scale_shared_gradients(1.0 / peer.group_size() as f64)
                .map_err(Error::learner)?;
        }
        self.learner.apply_gradients().map_err(Error::learner)?;
        self.counters.record_step(outcome.examples);
        if let Foreground::Every { every, peer } = &mut self.foreground {
            if self.counters.steps() % *every == 0 {
                let params = self.learner.dense_params();
                self.buffer.refill(|b| params.copy_to(b))?;
                if let Some(target) = peer.target(&self.buffer)? {
                    params.load_from(&target)?;
                    self.counters.record_sync(0);
                }
            }
        }
        Ok(true)
    }
}

/// How a trainer actor ended: its learner back, and an error if it failed.
#[derive(Debug)]
pub struct TrainerExit<L> {
    /// Trainer index.
    pub trainer: usize,
    /// The learner's position among all the cluster's learners (a trainer's
    /// Hogwild workers are consecutive).
    pub worker: usize,
    /// The learner, as trained.
    pub learner: L,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
}

/// Control messages a trainer answers within one chunk of steps.
#[derive(Debug, Clone, Copy, PartialEq, Message)]
#[rtype(result = "()")]
pub enum Control {
    /// Stop stepping until [`Control::Resume`].
    Pause,
    /// Resume stepping.
    Resume,
    /// Change the learning rate.
    SetLearningRate(f64),
    /// Stop and hand the learner back.
    Stop,
}

/// Asks a trainer for its [`TrainerStats`].
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "TrainerStats")]
pub struct GetStats;

#[derive(Message)]
#[rtype(result = "()")]
struct Chunk;

/// The actor running a [`TrainerCore`] on its own arbiter.
pub struct TrainerActor<L: Learner> {
    core: Option<TrainerCore<L>>,
    worker: usize,
    counters: Arc<TrainerCounters>,
    paused: bool,
    chunk: Duration,
    exits: Sender<TrainerExit<L>>,
    events: EventBus,
    /// Called once when the trainer finishes (ends the sync phase).
    on_finish: Box<dyn Fn() + Send>,
}

impl<L: Learner> TrainerActor<L> {
    /// An actor that steps `core` (learner number `worker` of the cluster) in
    /// chunks of about `chunk` and reports its end on `exits`.
    pub fn new(
        worker: usize,
        core: TrainerCore<L>,
        chunk: Duration,
        exits: Sender<TrainerExit<L>>,
        events: EventBus,
        on_finish: Box<dyn Fn() + Send>,
    ) -> Self {
        let counters = Arc::clone(core.counters());
        Self {
            core: Some(core),
            worker,
            counters,
            paused: false,
            chunk,
            exits,
            events,
            on_finish,
        }
    }

    fn finish(&mut self, ctx: &mut Context<Self>, error: Option<String>) {
        let Some(core) = self.core.take() else { return };
        let last_worker = self.counters.finish();
        (self.on_finish)();
        let stats = self.counters.stats();
        match &error {
            Some(e) => self.events.publish(Event::TrainerFailed {
                trainer: stats.trainer,
                error: e.clone(),
            }),
            None if last_worker => self.events.publish(Event::TrainerFinished {
                trainer: stats.trainer,
                steps: stats.steps,
            }),
            None => {}
        }
        let _ = self.exits.send(TrainerExit {
            trainer: stats.trainer,
            worker: self.worker,
            learner: core.into_learner(),
            error,
        });
        ctx.stop();
    }
}

impl<L: Learner> Actor for TrainerActor<L> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Chunk);
    }
}

impl<L: Learner> Handler<Chunk> for TrainerActor<L> {
    type Result = ();

    fn handle(&mut self, _: Chunk, ctx: &mut Context<Self>) {
        if self.paused {
            return;
        }
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let start = Instant::now();
        while start.elapsed() < self.chunk {
            match core.step() {
                Ok(true) => {}
                Ok(false) => return self.finish(ctx, None),
                Err(e) => return self.finish(ctx, Some(e.to_string())),
            }
        }
        // Yield to the mailbox (control messages) before the next chunk.
        ctx.run_later(Duration::ZERO, |_, ctx| ctx.notify(Chunk));
    }
}

impl<L: Learner> Handler<Control> for TrainerActor<L> {
    type Result = ();

    fn handle(&mut self, message: Control, ctx: &mut Context<Self>) {
        match message {
            Control::Pause => self.paused = true,
            Control::Resume => {
                if std::mem::take(&mut self.paused) {
                    ctx.notify(Chunk);
                }
            }
            Control::SetLearningRate(lr) => {
                if let Some(core) = self.core.as_mut() {
                    core.learner_mut().set_learning_rate(lr);
                }
            }
            Control::Stop => self.finish(ctx, None),
        }
    }
}

impl<L: Learner> Handler<GetStats> for TrainerActor<L> {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.counters.stats())
    }
}
