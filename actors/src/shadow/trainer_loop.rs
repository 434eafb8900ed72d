//! One trainer's shadow sync: [`ShadowLoop`] holds what a trainer's rounds
//! need (its replica's alias, its peer, its snapshot) and runs a round
//! through the transport ([`ShadowLoop::round`]); [`ShadowActor`] runs
//! rounds on the loop's own arbiter thread until syncing stops. The
//! [`ShadowHub`](super::ShadowHub) runs the same loops' snapshots and
//! write-backs for a whole process on one thread.

use super::{catching_panics, report, Pacing, RoundOutcome, ShadowExit};
use crate::events::EventBus;
use crate::faults::{faults_at, faults_due, Fault, FaultKind, FaultSite};
use crate::hogwild::ParamAlias;
use crate::recovery::RecoveryPoint;
use crate::stats::TrainerCounters;
use crate::sync::transport::sleep_until;
use crate::sync::{resident_zeros, Combined, Payload, SyncPeer, WriteBack};
use crate::{with_causes, Error, Result};
use actix::prelude::*;
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One trainer's background synchronization.
#[derive(Debug)]
pub(crate) struct ShadowLoop {
    replica: ParamAlias,
    pub(super) peer: SyncPeer,
    write_back: WriteBack,
    counters: Arc<TrainerCounters>,
    recovery: Arc<RecoveryPoint>,
    snapshot: Payload,
    /// The target kept whole on the rounds it is offered to the recovery
    /// point.
    whole_target: Vec<f32>,
    /// When the last snapshot was taken, and the trainer's steps then.
    last_snapshot: (Instant, u64),
    /// Faults injected into this loop, and the round they last hit.
    faults: Vec<Fault>,
    injected_at: Option<u64>,
}

/// How a round's target lands in the replica (see [`ShadowLoop::landing`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Landing {
    pub(super) round: u64,
    pub(super) contributed: bool,
    /// Whether the target is kept whole for the recovery point.
    pub(super) offer: bool,
}

impl ShadowLoop {
    /// A loop syncing `replica` (an alias of the trainer's parameters), handing
    /// group averages to the trainer's `recovery` point.
    pub(crate) fn new(
        replica: ParamAlias,
        peer: SyncPeer,
        write_back: WriteBack,
        counters: Arc<TrainerCounters>,
        recovery: Arc<RecoveryPoint>,
    ) -> Self {
        let snapshot = Payload::zeros(replica.len());
        let whole_target = resident_zeros(replica.len());
        let last_snapshot = (Instant::now(), counters.steps());
        Self {
            replica,
            peer,
            write_back,
            counters,
            recovery,
            snapshot,
            whole_target,
            last_snapshot,
            faults: Vec::new(),
            injected_at: None,
        }
    }

    /// Injects the `sync-*` faults of `faults` that name this loop's trainer.
    pub(crate) fn with_faults(mut self, faults: &[Fault]) -> Self {
        let trainer = self.counters.trainer();
        self.faults = faults_at(faults, FaultSite::SyncLoop);
        self.faults.retain(|f| f.trainer == trainer);
        self
    }

    /// Its trainer's counters.
    pub(crate) fn counters(&self) -> &Arc<TrainerCounters> {
        &self.counters
    }

    /// How long to wait before its next round as `pacing` allows (zero:
    /// now), from the time and the trainer's steps since the last snapshot
    /// and the training CPU time the trainer owes the loop (only for the
    /// interval while the trainer is held back waiting for the round).
    pub(super) fn wait(&self, pacing: &Pacing) -> Duration {
        let (at, steps) = self.last_snapshot;
        let finished = self.counters.is_finished();
        if !finished && pacing.holds(self.counters.average_age()) {
            return pacing.wait_held(at.elapsed());
        }
        let stepped = (!finished).then(|| self.counters.steps().saturating_sub(steps));
        let cpu_debt = self.counters.sync_cpu_debt(pacing.max_cpu_share);
        let wait = pacing.wait(at.elapsed(), stepped, cpu_debt);
        match stepped {
            Some(_) => wait.min(pacing.recheck()),
            None => wait,
        }
    }

    /// The number of the next round.
    pub(crate) fn next_round(&self) -> u64 {
        self.peer.round()
    }

    /// True once syncing has stopped for everyone.
    pub(crate) fn stopped(&self) -> bool {
        self.peer.stopped()
    }

    /// Injects the faults due at the next round (each round's once): panics
    /// for an injected panic; how long an injected hang lasts (zero: none).
    pub(super) fn injected_hang(&mut self) -> Duration {
        let round = self.peer.round();
        if self.injected_at == Some(round) {
            return Duration::ZERO;
        }
        self.injected_at = Some(round);
        let mut hang = Duration::ZERO;
        for fault in faults_due(&self.faults, self.counters.trainer(), round) {
            match fault.kind {
                FaultKind::SyncPanic => {
                    crate::faults::inject_panic(format!("injected sync panic at round {round}"))
                }
                _ => hang += fault.hang(),
            }
        }
        hang
    }

    /// Takes the round's snapshot of the replica; whether it is finite (and
    /// so goes into the group's combination).
    pub(super) fn take_snapshot(&mut self) -> Result<bool> {
        self.last_snapshot = (Instant::now(), self.counters.steps());
        let replica = &self.replica;
        let mut contributed = false;
        self.snapshot.refill(|out| {
            contributed = replica.snapshot_into(out)?;
            Ok(())
        })?;
        if !contributed {
            self.counters.record_abstention();
        }
        Ok(contributed)
    }

    /// The last snapshot's values.
    pub(super) fn snapshot(&self) -> &[f32] {
        self.snapshot.values()
    }

    /// Prepares the write-back of `round`'s target: now and then it is kept
    /// whole too, for the recovery point.
    pub(super) fn landing(&mut self, round: u64, contributed: bool) -> Landing {
        let offer = contributed && round % RecoveryPoint::OFFER_EVERY == 0;
        Landing {
            round,
            contributed,
            offer,
        }
    }

    /// Writes the rule's target for the `combined` values from `offset` on
    /// back into the replica, block by block while each is in cache (a
    /// diverged replica takes the group's values outright).
    pub(super) fn write_back_span(
        &mut self,
        landing: &Landing,
        offset: usize,
        combined: &[f32],
    ) -> Result<()> {
        let mode = if landing.contributed {
            self.write_back
        } else {
            WriteBack::Overwrite
        };
        let (peer, whole) = (&self.peer, &mut self.whole_target);
        self.replica
            .write_back_blocks(mode, self.snapshot.values(), |write| {
                peer.target_span(offset, combined, |at, block| {
                    let kept = landing.offer.then(|| whole.get_mut(at..at + block.len()));
                    if let Some(Some(kept)) = kept {
                        kept.copy_from_slice(block);
                    }
                    write(at, block)
                })
            })
    }

    /// Ends a round whose target has landed whole.
    pub(super) fn landed(&mut self, landing: Landing) -> RoundOutcome {
        if landing.offer {
            self.recovery.offer(&self.whole_target);
        }
        let staleness = self.counters.record_sync_since(self.last_snapshot.1);
        RoundOutcome {
            round: landing.round,
            staleness,
            contributed: landing.contributed,
            written_back: true,
        }
    }

    /// One round through the transport, its write-back held back `delay`;
    /// `Ok(None)` once syncing has stopped.
    pub(crate) fn round(&mut self, delay: Duration) -> Result<Option<RoundOutcome>> {
        let hang = self.injected_hang();
        self.sleep(hang);
        let contributed = self.take_snapshot()?;
        let combined = self.peer.combine(&self.snapshot, contributed);
        self.sleep(delay);
        // The round just taken (the coordinator may have moved the peer on).
        let round = self.peer.round().saturating_sub(1);
        self.write_back_combined(round, contributed, combined)
    }

    /// Sleeps for `duration`, or until syncing stops.
    fn sleep(&self, duration: Duration) {
        if !duration.is_zero() {
            sleep_until(Instant::now() + duration, || self.peer.stopped());
        }
    }

    /// The landing of a round against the centre, once its elastic step is
    /// off the wire (see [`SyncPeer::centre_due`]); `Ok(None)` once syncing
    /// has stopped. When this process serves every shard of the centre, the
    /// step is made here and each block of its target written back as it is
    /// made; otherwise it is sent to the shards.
    pub(super) fn centre_round(
        &mut self,
        round: u64,
        contributed: bool,
    ) -> Result<Option<RoundOutcome>> {
        let Some((server, alpha)) = self.peer.centre_here() else {
            let combined = self.peer.centre_step(&self.snapshot, contributed, round);
            return self.write_back_combined(round, contributed, combined);
        };
        match self.peer.centre_ready(contributed) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return self.write_back_combined(round, contributed, Err(e)),
        }
        let landing = self.landing(round, contributed);
        let (snapshot, trainer) = (self.snapshot.clone(), self.peer.id());
        server.elastic_on_this_thread(
            snapshot.values(),
            alpha,
            trainer,
            round,
            |offset, target| self.write_back_span(&landing, offset, target),
        )?;
        self.peer.count_centre_step(snapshot.values().len());
        Ok(Some(self.landed(landing)))
    }

    /// Writes back the target of `round`'s `combined` values (none when
    /// nobody had finite values).
    fn write_back_combined(
        &mut self,
        round: u64,
        contributed: bool,
        combined: Result<Option<Combined>>,
    ) -> Result<Option<RoundOutcome>> {
        let combined = match combined {
            Ok(Some(combined)) => combined,
            Ok(None) => return Ok(None),
            Err(Error::NonFinite { .. }) => {
                return Ok(Some(RoundOutcome {
                    round,
                    staleness: 0,
                    contributed,
                    written_back: false,
                }))
            }
            Err(e) => return Err(e),
        };
        let landing = self.landing(round, contributed);
        for (offset, part) in combined.parts() {
            self.write_back_span(&landing, offset, part)?;
        }
        if let Some(spare) = combined.into_spare() {
            self.peer.recycle(spare);
        }
        Ok(Some(self.landed(landing)))
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Round;

/// The actor running a [`ShadowLoop`].
pub(crate) struct ShadowActor {
    shadow: ShadowLoop,
    pacing: Pacing,
    events: EventBus,
    exits: Sender<ShadowExit>,
    trainer: usize,
    /// Raised when this loop fails, so that no peer waits for it.
    stop: Arc<AtomicBool>,
    consecutive_failures: u32,
}

impl ShadowActor {
    /// An actor looping `shadow` for `trainer` as `pacing` allows; reports its
    /// end on `exits` and, if it fails, ends syncing for everyone through `stop`.
    pub(crate) fn new(
        trainer: usize,
        shadow: ShadowLoop,
        pacing: Pacing,
        events: EventBus,
        exits: Sender<ShadowExit>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            shadow,
            pacing,
            events,
            exits,
            trainer,
            stop,
            consecutive_failures: 0,
        }
    }

    fn end(&mut self, ctx: &mut Context<Self>, error: Option<Error>) {
        if let Some(error) = &error {
            let error = with_causes(error);
            tracing::warn!(trainer = self.trainer, %error, "shadow sync failed; syncing ends");
            self.stop.store(true, Ordering::Relaxed);
        }
        // A blocking send into a queue with room for every trainer's one exit:
        // it fails only when the cluster's handle is gone, with nobody to tell.
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
        if self.shadow.stopped() {
            return self.end(ctx, None);
        }
        let counters = Arc::clone(self.shadow.counters());
        let _cpu = counters.charge_sync();
        let wait = self.shadow.wait(&self.pacing);
        if !wait.is_zero() {
            ctx.run_later(wait, |_, ctx| ctx.notify(Round));
            return;
        }
        let round = self.shadow.next_round();
        let delay = self.pacing.delay.draw();
        let result = match catching_panics(|| self.shadow.round(delay)) {
            Ok(None) => return self.end(ctx, None),
            Ok(Some(outcome)) => Ok(outcome),
            Err(cause) => Err(cause),
        };
        let failures = &mut self.consecutive_failures;
        match report(&self.events, self.trainer, round, result, failures) {
            Some(error) => self.end(ctx, Some(error)),
            None => ctx.notify(Round),
        }
    }
}
