//! [`TrainerActor`]: a [`TrainerCore`] stepped in chunks on its own arbiter,
//! answering control messages between chunks and parking for checkpoints.

use super::{Stepped, TrainerCore};
use crate::events::{Event, EventBus};
use crate::stats::TrainerCounters;
use crate::{Error, Learner, LearnerState, Result};
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
/// How a trainer actor ended: its learner back, and an error if it failed.
#[derive(Debug)]
pub(crate) struct TrainerExit<L> {
    /// Trainer index.
    pub trainer: usize,
    /// The learner's position among all the cluster's learners (a trainer's
    /// Hogwild workers are consecutive).
    pub worker: usize,
    /// The learner, as trained.
    pub learner: L,
    /// Why it stopped early, if it did.
    pub error: Option<Arc<Error>>,
}

/// Control messages a trainer answers within one chunk of steps.
#[derive(Debug, Clone, Copy, PartialEq, Message)]
#[rtype(result = "()")]
pub(crate) enum Control {
    /// Stop stepping until [`Control::Resume`].
    Pause,
    /// Resume stepping.
    Resume,
    /// Change the learning rate.
    SetLearningRate(f64),
    /// Stop and hand the learner back.
    Stop,
    /// Go on after a checkpoint (see [`Parking`]).
    Unpark,
}

/// Where trainers stop for checkpoints: every `every` steps (0: never), a
/// trainer parks, stepping no more until [`Control::Unpark`], and counts itself
/// in `parked` (which the checkpoint resets before unparking them). All
/// trainers park at the same step counts, so none of them can wait in a
/// foreground sync for one already parked (`every` is a multiple of the sync
/// period), nor starve another of data by not taking its batches, and the
/// cluster is still while its state is saved.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    every: u64,
    /// Where every trainer parks first: a resumed run's trainers start at
    /// different step counts (less than one period apart), and the one that
    /// stopped parked at a multiple must not run a whole period alone.
    first: u64,
    /// Workers parked right now, all trainers.
    pub(crate) parked: Arc<std::sync::atomic::AtomicUsize>,
}

impl Parking {
    /// Parking every `every` steps (0: never), first at the first multiple
    /// after `slowest`, the step count of the trainer furthest behind.
    pub(crate) fn new(every: u64, slowest: u64) -> Self {
        let mut parking = Self {
            every,
            first: 0,
            parked: Arc::default(),
        };
        parking.first = parking.next_after(slowest);
        parking
    }

    /// The first step count after `steps` at which to park.
    fn next_after(&self, steps: u64) -> u64 {
        match self.every {
            0 => u64::MAX,
            every => (steps / every + 1) * every,
        }
    }
}

/// Asks a trainer's worker for its state (sent on `reply`); answered while it
/// is parked or between chunks.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct SaveState(pub Sender<WorkerState>);

/// A worker's part of a checkpoint.
#[derive(Debug)]
pub(crate) struct WorkerState {
    /// The worker's position among the cluster's learners.
    pub worker: usize,
    /// Its learner's state.
    pub learner: Result<LearnerState>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Chunk;

/// How soon a trainer waiting for a fresher average looks again.
const WAITING_RECHECK: Duration = Duration::from_millis(1);

/// The actor running a [`TrainerCore`] on its own arbiter.
pub(crate) struct TrainerActor<L: Learner> {
    core: Option<TrainerCore<L>>,
    worker: usize,
    counters: Arc<TrainerCounters>,
    paused: bool,
    parking: Parking,
    next_park: u64,
    parked: bool,
    chunk: Duration,
    exits: Sender<TrainerExit<L>>,
    events: EventBus,
    /// Called once when the trainer finishes (ends the sync phase).
    on_finish: Box<dyn Fn() + Send>,
}

impl<L: Learner> TrainerActor<L> {
    /// An actor that steps `core` (learner number `worker` of the cluster) in
    /// chunks of about `chunk`, parks as `parking` says, and reports its end on
    /// `exits`.
    pub(crate) fn new(
        worker: usize,
        core: TrainerCore<L>,
        chunk: Duration,
        parking: Parking,
        exits: Sender<TrainerExit<L>>,
        events: EventBus,
        on_finish: Box<dyn Fn() + Send>,
    ) -> Self {
        let counters = Arc::clone(core.counters());
        Self {
            core: Some(core),
            worker,
            next_park: parking.first,
            counters,
            paused: false,
            parking,
            parked: false,
            chunk,
            exits,
            events,
            on_finish,
        }
    }

    fn finish(&mut self, ctx: &mut Context<Self>, mut error: Option<Error>) {
        let Some(mut core) = self.core.take() else {
            return;
        };
        // Stopped mid-pass, its last pushes land before the end's checkpoint.
        if error.is_none() {
            error = core.learner_mut().settle().err().map(Error::learner);
        }
        let last_worker = self.counters.finish();
        (self.on_finish)();
        let stats = self.counters.stats();
        let error = error.map(Arc::new);
        match &error {
            Some(e) => self.events.publish(Event::TrainerFailed {
                trainer: stats.trainer,
                error: Arc::clone(e),
            }),
            None if last_worker => self.events.publish(Event::TrainerFinished {
                trainer: stats.trainer,
                steps: stats.steps,
            }),
            None => {}
        }
        // The exits queue has room for every worker's one exit: a send fails
        // only when the cluster's handle is gone, with nobody to tell.
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
        if self.paused || self.parked {
            return;
        }
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let counters = Arc::clone(core.counters());
        let cpu = counters.charge_training();
        let start = Instant::now();
        while start.elapsed() < self.chunk {
            match core.step() {
                Ok(Stepped::Trained) => {
                    let steps = core.counters().steps();
                    if steps >= self.next_park {
                        // Its pushes land before it counts as parked: a
                        // checkpoint reads the tables they go to.
                        if let Err(e) = core.learner_mut().settle().map_err(Error::learner) {
                            drop(cpu);
                            return self.finish(ctx, Some(e));
                        }
                        self.next_park = self.parking.next_after(steps);
                        self.parked = true;
                        self.parking.parked.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                Ok(Stepped::Recovered { cause }) => {
                    let trainer = core.counters().trainer();
                    let step = core.counters().steps();
                    self.events.publish(Event::TrainerRecovered {
                        trainer,
                        step,
                        cause,
                    });
                }
                // Looked at again shortly, the mailbox answered meanwhile.
                Ok(Stepped::Waiting) => {
                    drop(cpu);
                    ctx.run_later(WAITING_RECHECK, |_, ctx| ctx.notify(Chunk));
                    return;
                }
                // The trainer's CPU is all counted before it reports its end.
                Ok(Stepped::Exhausted) => {
                    drop(cpu);
                    return self.finish(ctx, None);
                }
                Err(e) => {
                    drop(cpu);
                    return self.finish(ctx, Some(e));
                }
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
            Control::Unpark => {
                if std::mem::take(&mut self.parked) {
                    ctx.notify(Chunk);
                }
            }
        }
    }
}

impl<L: Learner> Handler<SaveState> for TrainerActor<L> {
    type Result = ();

    fn handle(&mut self, SaveState(reply): SaveState, _: &mut Context<Self>) {
        if let Some(core) = &self.core {
            let learner = core.learner().save_state().map_err(Error::learner);
            let _ = reply.send(WorkerState {
                worker: self.worker,
                learner,
            });
        }
    }
}
