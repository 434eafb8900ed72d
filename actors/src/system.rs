//! Starting an actix system on a thread of its own, and handing messages to
//! its actors from plain threads.
//!
//! An actor's mailbox is bounded (16 messages by default): the crate's `deliver` waits
//! for room instead of failing, so that a full mailbox (more senders than
//! places, or a burst) is backpressure on the sender, never a lost request
//! nor an actor reported stopped while it is alive.

use crate::{Error, Result};
use actix::dev::ToEnvelope;
use actix::prelude::*;
use crossbeam_channel::bounded;
use std::thread::JoinHandle;
use std::time::Duration;

/// What a shard (of the EASGD centre or of a table) answers: its index and
/// its part of the result.
pub(crate) type ShardReply = (usize, Result<Vec<f32>>);

/// The longest a sender sleeps before it looks at a full mailbox again.
const FULL_MAILBOX_RECHECK: Duration = Duration::from_millis(1);

/// Hands `message` to the actor at `addr`, waiting while its mailbox is full;
/// fails only once the actor (named `actor` in the error) has stopped.
///
/// It blocks the calling thread: call it from threads outside the actor's
/// own system (trainers, shadow loops, the MPI communication thread), which
/// is where every caller in this crate runs.
pub(crate) fn deliver<A, M>(addr: &Addr<A>, message: M, actor: &'static str) -> Result<()>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    let mut message = message;
    let mut pause = Duration::from_micros(20);
    loop {
        match addr.try_send(message) {
            Ok(()) => return Ok(()),
            Err(SendError::Full(back)) => {
                message = back;
                std::thread::sleep(pause);
                pause = (pause * 2).min(FULL_MAILBOX_RECHECK);
            }
            Err(SendError::Closed(_)) => return Err(Error::Stopped(actor)),
        }
    }
}

/// Runs an actix system on a new thread called `name`; `setup` runs inside it
/// first (to start actors) and what it returns comes back with the system.
///
/// # Errors
///
/// A thread or actix system that cannot start, or a `setup` that panicked.
pub fn spawn_system<T: Send + 'static>(
    name: &str,
    setup: impl FnOnce() -> T + Send + 'static,
) -> Result<(System, JoinHandle<()>, T)> {
    let (ready_tx, ready_rx) = bounded(1);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let runner = System::new();
            runner.block_on(async move {
                let _ = ready_tx.send((System::current(), setup()));
            });
            let _ = runner.run();
        })
        .map_err(|error| Error::Thread {
            thread: "actor system",
            error,
        })?;
    let (system, value) = ready_rx
        .recv()
        .map_err(|_| Error::Stopped("actor system"))?;
    Ok((system, thread, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its messages, slowly.
    struct Slow(Arc<AtomicUsize>);

    impl Actor for Slow {
        type Context = Context<Self>;
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Tick;

    impl Handler<Tick> for Slow {
        type Result = ();
        fn handle(&mut self, _: Tick, _: &mut Context<Self>) {
            std::thread::sleep(Duration::from_micros(200));
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_full_mailbox_makes_senders_wait_and_loses_nothing() {
        let handled = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&handled);
        let (system, thread, addr) =
            spawn_system("deliver-test", move || Slow(counter).start()).unwrap();
        // Four senders of 50 each: far more than the 16 places of a mailbox.
        let senders: Vec<_> = (0..4)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || (0..50).map(|_| deliver(&addr, Tick, "slow")).collect())
            })
            .collect();
        for sender in senders {
            let sent: Result<Vec<()>> = sender.join().unwrap();
            sent.unwrap();
        }
        while handled.load(Ordering::Relaxed) < 200 {
            std::thread::sleep(Duration::from_millis(1));
        }
        system.stop();
        thread.join().unwrap();
        assert_eq!(handled.load(Ordering::Relaxed), 200);
        // Once the actor has stopped, delivering fails and names it.
        let err = deliver(&addr, Tick, "slow").unwrap_err();
        assert_eq!(err.to_string(), Error::Stopped("slow").to_string());
    }
}
