//! [`Run`]: one builder for a CTR run. What it needs besides the
//! configuration has a default: the fabric (this process alone), the names
//! (the built-in rules, schedules, models and row optimizers) and the
//! observer (nobody); its last call says whether the run starts fresh
//! ([`Run::train`]) or goes on from checkpoints ([`Run::resume`]).
//!
//! ```no_run
//! use shadowsync::config::Config;
//! use shadowsync::train::Run;
//!
//! # fn main() -> shadowsync::Result<()> {
//! let report = Run::new().train(&Config::default())?;
//! println!("NE {:.4}", report.final_metrics.ne);
//! # Ok(()) }
//! ```

use super::{resumed_from, run, Observer, TrainReport};
use crate::config::Config;
use crate::{Registry, Result};
use shadowsync_actors::sync::{Fabric, InProcess};
use std::path::Path;
use std::sync::Arc;

/// How a CTR run is started: on which fabric, with which names, watched by
/// whom. Built with [`Run::new`] and its setters; [`Run::train`] or
/// [`Run::resume`] runs it.
#[must_use = "a Run does nothing until `train` or `resume` is called"]
pub struct Run<'a> {
    fabric: Arc<dyn Fabric>,
    registry: Option<&'a Registry>,
    observer: Option<&'a mut dyn Observer>,
}

impl Default for Run<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Run<'a> {
    /// A run in this process alone, with the built-in names, watched by
    /// nobody.
    pub fn new() -> Self {
        Self {
            fabric: Arc::new(InProcess),
            registry: None,
            observer: None,
        }
    }

    /// This process's part of a run spread over `fabric`'s processes, each
    /// building the same run: `train.trainers` trainers here, on this
    /// process's part of the data (see [`crate::distributed`]). Every process
    /// gets the report of the same final model; each keeps its checkpoints
    /// in its own [`process_dir`](super::process_dir).
    pub fn fabric(mut self, fabric: Arc<dyn Fabric>) -> Self {
        self.fabric = fabric;
        self
    }

    /// Looks up the names the configuration gives (sync rule, schedule,
    /// model, row optimizer) in `registry`: the built-in ones and one's own.
    pub fn registry(mut self, registry: &'a Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Reports progress, evaluations and checkpoints to `observer`, asks it
    /// whether to stop, and runs its monitors beside the cluster.
    pub fn observer(mut self, observer: &'a mut dyn Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Trains `config.train.trainers` replicas for one pass over the data
    /// (each on the batches dealt to it, synchronized by `config.sync`) and
    /// evaluates the result.
    ///
    /// # Errors
    ///
    /// A configuration that cannot run (naming its key; a name the registry
    /// does not know among them), data that cannot be read, or the runtime's
    /// failure to start; a failure during training is in the report instead
    /// ([`TrainReport::error`]).
    pub fn train(self, config: &Config) -> Result<TrainReport> {
        self.go(|fabric, registry, observer| run(fabric, config, registry, None, observer))
    }

    /// Continues the run whose checkpoints are in `dir` from the newest one
    /// every process has whole, with that run's configuration, writing
    /// further checkpoints to `dir`. Across processes (as many as the job that
    /// wrote them), the sync rounds of all trainers go on from the furthest
    /// any had come to. The names are looked up in the registry the run was
    /// started with.
    ///
    /// # Errors
    ///
    /// No whole checkpoint in `dir` (each one passed over says why), a
    /// process whose checkpoints are missing (naming its directory), or as
    /// [`Run::train`].
    pub fn resume(self, dir: &Path) -> Result<TrainReport> {
        self.go(|fabric, registry, observer| {
            let (config, resumed, checkpoint) = resumed_from(fabric.as_ref(), dir)?;
            run(
                fabric,
                &config,
                registry,
                Some((resumed, checkpoint)),
                observer,
            )
        })
    }

    /// Runs `body` with the fabric, the registry and the observer, their
    /// defaults where none was given.
    fn go<T>(
        self,
        body: impl FnOnce(Arc<dyn Fabric>, &Registry, &mut dyn Observer) -> Result<T>,
    ) -> Result<T> {
        let built_in;
        let registry = match self.registry {
            Some(registry) => registry,
            None => {
                built_in = Registry::default();
                &built_in
            }
        };
        let mut nobody = ();
        let observer: &mut dyn Observer = match self.observer {
            Some(observer) => observer,
            None => &mut nobody,
        };
        body(self.fabric, registry, observer)
    }
}
