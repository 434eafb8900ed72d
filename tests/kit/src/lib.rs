//! What shadowsync's tests and benchmarks share, written once:
//!
//! * [`process`]: a child process run to a deadline (a hang fails the test
//!   showing where), its output as text, and the `mpirun` launcher;
//! * [`runtime`]: a learner that is not a CTR model (least squares), clusters
//!   of it, an event log and the soak harness;
//! * [`exclusive`]: one test at a time where figures or process-wide state
//!   must not be shared.

pub mod process;
pub mod runtime;

use std::sync::{Mutex, MutexGuard};

/// Held by a test that must run alone in its binary: one whose figures would
/// measure the other tests' load, or that seeds libtorch's process-wide random
/// generator. A test that failed holding it does not stop the others.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
