//! The trainer: local SGD on a learner, continuously, with the foreground
//! algorithms (synchronous SGD, `fr-*:k`) done in line.
//!
//! [`TrainerCore`] is the plain logic (one [`TrainerCore::step`] at a time);
//! [`TrainerActor`] runs it on its own arbiter thread in short chunks, yielding to
//! its mailbox between chunks so that control messages (pause, resume, learning
//! rate, stats, stop) are answered within one chunk.
//!
//! A step that fails (an error the learner deems recoverable, a panic) or leaves
//! the replica diverged (a non-finite loss or parameters) does not end the
//! trainer ([`Stepped::Recovered`]): finite parameters are kept as the last good
//! state; diverged ones are reloaded from the trainer's [`RecoveryPoint`] (its
//! group's latest average) and the dense optimizer state is reset. Only
//! [`TrainerCore::MAX_CONSECUTIVE_FAULTS`] failures in a row give it up.

mod actor;
mod stepping;

pub(crate) use actor::{Control, Parking, SaveState, TrainerActor, TrainerExit, WorkerState};
pub(crate) use stepping::{Foreground, StalenessBound, Stepped, TrainerCore};
