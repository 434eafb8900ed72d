//! Starting an actix system on a thread of its own.

use crate::{Error, Result};
use actix::prelude::*;
use crossbeam_channel::bounded;
use std::thread::JoinHandle;

/// Runs an actix system on a new thread called `name`; `setup` runs inside it
/// first (to start actors) and what it returns comes back with the system.
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
        .map_err(|source| Error::Thread {
            thread: "actor system",
            source,
        })?;
    let (system, value) = ready_rx
        .recv()
        .map_err(|_| Error::Stopped("actor system"))?;
    Ok((system, thread, value))
}
