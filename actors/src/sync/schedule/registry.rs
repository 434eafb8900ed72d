//! Group schedules of one's own, by name ([`Schedules`]), and what their
//! factories are handed ([`ScheduleContext`]: the job's trainers and the
//! `[sync]` settings).

use super::{GroupSchedule, Schedule, BUILT_IN};
use crate::sync::SyncConfig;
use crate::{Error, Named, Result};
use std::sync::Arc;

/// What a schedule of one's own is made for.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleContext<'a> {
    /// Trainers in the job (every process's).
    pub trainers: usize,
    /// Trainers in each process.
    pub per_process: usize,
    /// The `[sync]` settings (`group_size`, `seed`, ...).
    pub config: &'a SyncConfig,
}

/// Makes a schedule of one's own.
pub type ScheduleFactory =
    Arc<dyn Fn(&ScheduleContext<'_>) -> Result<Arc<dyn GroupSchedule>> + Send + Sync>;

/// Group schedules of one's own, by the name `sync.schedule` gives them
/// (the built-in ones are [`Schedule`]'s other variants).
#[derive(Clone, Debug)]
pub struct Schedules(Named<ScheduleFactory>);

impl Default for Schedules {
    fn default() -> Self {
        let built_in = BUILT_IN.iter().map(|(name, _)| *name);
        Self(Named::new("sync.schedule", "schedule").also_taking(built_in))
    }
}

impl Schedules {
    /// These schedules and `name`, made by `make`.
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&ScheduleContext<'_>) -> Result<Arc<dyn GroupSchedule>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// An error naming `sync.schedule` unless `schedule` is built in or
    /// registered here.
    ///
    /// # Errors
    ///
    /// A name registered nowhere, with the known ones.
    pub fn check(&self, schedule: &Schedule) -> Result<()> {
        match schedule {
            Schedule::Registered(name) => self.0.get(name).map(drop),
            _ => Ok(()),
        }
    }

    /// The schedule of one's own called `name`, for `context`'s trainers.
    ///
    /// # Errors
    ///
    /// An unknown name, a factory's error, or a schedule for another number
    /// of trainers.
    pub fn make(
        &self,
        name: &str,
        context: &ScheduleContext<'_>,
    ) -> Result<Arc<dyn GroupSchedule>> {
        let schedule = (self.0.get(name)?)(context)?;
        if schedule.trainers() != context.trainers {
            return Err(Error::Config {
                key: "sync.schedule".into(),
                reason: format!(
                    "the schedule {name:?} is for {} trainers, the job has {}",
                    schedule.trainers(),
                    context.trainers
                ),
            });
        }
        Ok(schedule)
    }
}
