//! [`ShadowHubActor`]: the hub ticked on its own arbiter, its thread's CPU
//! charged to the trainers, each trainer's end reported.

use super::ShadowHub;
use crate::events::EventBus;
use crate::recovery::unpanicked;
use crate::shadow::{report, ShadowExit};
use crate::{with_causes, Error};
use actix::prelude::*;
use cpu_time::ThreadTime;
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
