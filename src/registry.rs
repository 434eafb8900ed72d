//! What a run names that one can add to: sync rules (`sync.algorithm =
//! "shadow-RULE"`), group schedules (`sync.schedule`), codecs of the sync's
//! payloads (`sync.compression`), models (`model.kind`) and embedding row
//! optimizers (`optim.sparse`). The built-in ones are
//! registered the same way as one's own; a [`Registry`] goes to the training
//! API ([`Run::registry`](crate::train::Run::registry)) or to the command line
//! ([`cli::main`](crate::cli::main)), where its names work in configs and
//! flags like the built-in ones.
//!
//! ```no_run
//! use shadowsync::runtime::sync::ModelAveraging;
//! use shadowsync::Registry;
//!
//! /// `shadowsync` with one more rule: `train --sync shadow-plain-mean`
//! /// runs model averaging under a name of one's own.
//! fn main() -> std::process::ExitCode {
//!     let registry = Registry::default().rule("plain-mean", |_| Ok(Box::new(ModelAveraging)));
//!     shadowsync::cli::main(registry)
//! }
//! ```
//!
//! Closed on purpose: how a rule's round moves values between trainers
//! ([`Exchange`](shadowsync_actors::sync::Exchange): a group mean, or
//! EASGD's centre). A new exchange needs a transport of its own; a rule of
//! one's own computes what it wants from the group's contributions
//! ([`SyncRule::reduce`](shadowsync_actors::sync::SyncRule::reduce)) and
//! keeps its memory between rounds instead.

use crate::config::{Config, ModelConfig, RowShape};
use crate::data::TableLayout;
use crate::model::{CtrModel, Models, RowRules, Table};
use crate::Result;
use shadowsync_actors::embedding::{check_rule, RowRule};
use shadowsync_actors::sync::{
    Codec, CodecContext, Codecs, GroupSchedule, RuleContext, Rules, ScheduleContext, Schedules,
    SyncConfig, SyncRule,
};
use std::sync::Arc;
use tch::nn;

/// Sync rules, group schedules, codecs, models and row optimizers by name:
/// the built-in ones and those added with [`Registry::rule`],
/// [`Registry::schedule`], [`Registry::codec`], [`Registry::model`] and
/// [`Registry::row_rule`].
#[derive(Clone, Debug, Default)]
pub struct Registry {
    rules: Rules,
    schedules: Schedules,
    codecs: Codecs,
    models: Models,
    row_rules: RowRules,
}

impl Registry {
    /// Adds the sync rule `name` (`sync.algorithm = "shadow-NAME"` or
    /// `"fr-NAME:K"`), made for each trainer by `make`.
    pub fn rule(
        mut self,
        name: &str,
        make: impl Fn(&RuleContext<'_>) -> shadowsync_actors::Result<Box<dyn SyncRule>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.rules = self.rules.with(name, make);
        self
    }

    /// Adds the group schedule `name` (`sync.schedule = "NAME"`), made once
    /// for the job's trainers by `make`.
    pub fn schedule(
        mut self,
        name: &str,
        make: impl Fn(&ScheduleContext<'_>) -> shadowsync_actors::Result<Arc<dyn GroupSchedule>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.schedules = self.schedules.with(name, make);
        self
    }

    /// Adds the codec `name` (`sync.compression = "NAME"`), made by `make`
    /// for each stream of a trainer's messages.
    pub fn codec(
        mut self,
        name: &str,
        make: impl Fn(&CodecContext<'_>) -> shadowsync_actors::Result<Box<dyn Codec>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.codecs = self.codecs.with(name, make);
        self
    }

    /// Adds the model `name` (`model.kind = "NAME"`), built by `make` for
    /// every replica, its variables under the path given.
    pub fn model(
        mut self,
        name: &str,
        make: impl Fn(&ModelConfig, &nn::Path) -> Result<Box<dyn CtrModel>> + Send + Sync + 'static,
    ) -> Self {
        self.models = self.models.with(name, make);
        self
    }

    /// Adds the embedding row optimizer `name` (`optim.sparse = "NAME"`),
    /// made by `make` for the table (or each process's shard of it).
    pub fn row_rule(
        mut self,
        name: &str,
        make: impl Fn(&Config) -> Result<Box<dyn RowRule>> + Send + Sync + 'static,
    ) -> Self {
        self.row_rules = self.row_rules.with(name, make);
        self
    }

    /// The sync rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The group schedules of one's own.
    pub fn schedules(&self) -> &Schedules {
        &self.schedules
    }

    /// The codecs.
    pub fn codecs(&self) -> &Codecs {
        &self.codecs
    }

    /// The codec of the tables' traffic across processes (a sharded table's
    /// rows and gradients, a replicated one's merged changes):
    /// `sync.compression`'s if it keeps no memory of a link (`fp16`, `int8`);
    /// none for `none` and for the others (`topk`), which compress the dense
    /// sync only.
    ///
    /// # Errors
    ///
    /// A codec registered nowhere, or its factory's error.
    pub fn row_codec(&self, sync: &SyncConfig) -> Result<Option<Box<dyn Codec>>> {
        let context = CodecContext {
            config: sync,
            initial: &[],
        };
        Ok(self
            .codecs
            .make(&context)?
            .filter(|codec| codec.stateless()))
    }

    /// The models.
    pub fn models(&self) -> &Models {
        &self.models
    }

    /// The row optimizers.
    pub fn row_rules(&self) -> &RowRules {
        &self.row_rules
    }

    /// A fresh embedding table of this process's own for `config`'s model
    /// and row optimizer, for trainers to share.
    ///
    /// # Errors
    ///
    /// A name registered nowhere, or a table libtorch cannot allocate.
    pub fn local_table(&self, config: &Config, layout: &TableLayout) -> Result<Table> {
        let width = self.models.embedding_width(&config.model)?;
        let rule = self.row_rules.build(config)?;
        let lr = config.row_lr(&*rule);
        Table::local(layout, width, rule, lr)
    }

    /// Checks every name `config` gives against the registry (building the
    /// model and the row rule once) and says what an embedding row holds.
    ///
    /// # Errors
    ///
    /// A name registered nowhere (naming its key and the known names), or a
    /// factory's error.
    pub fn check(&self, config: &Config) -> Result<RowShape> {
        if let Some(rule) = config.sync.algorithm.rule_name() {
            self.rules.check(rule)?;
        }
        self.rules.check_sections(&config.sync)?;
        self.schedules.check(&config.sync.schedule)?;
        self.codecs.check(&config.sync.compression)?;
        self.models.check_sections(&config.model)?;
        self.row_rules.check_sections(&config.optim)?;
        let width = self.models.embedding_width(&config.model)?;
        let rule = self.row_rules.build(config)?;
        check_rule(&*rule)?;
        Ok(RowShape {
            width: width.max(0) as u64,
            state_arrays: rule.state_names().len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_of_a_config_is_checked_against_the_registry() {
        let mut config = Config::default();
        let shape = Registry::default().check(&config).unwrap();
        assert_eq!(
            shape,
            RowShape {
                width: 16,
                state_arrays: 1
            }
        );
        config.optim.sparse = "ftrl".into();
        assert_eq!(Registry::default().check(&config).unwrap().state_arrays, 2);
        for (key, value, error) in [
            ("sync.algorithm", "shadow-gossip", "\"gossip\""),
            ("sync.schedule", "ring", "\"ring\""),
            ("sync.compression", "zip", "\"zip\""),
            ("model.kind", "wide", "\"wide\""),
            ("optim.sparse", "adam", "\"adam\""),
        ] {
            let mut bad = Config::default();
            match key {
                "sync.algorithm" => bad.sync.algorithm = value.parse().unwrap(),
                "sync.schedule" => bad.sync.schedule = value.parse().unwrap(),
                "sync.compression" => bad.sync.compression = value.into(),
                "model.kind" => bad.model.kind = value.into(),
                _ => bad.optim.sparse = value.into(),
            }
            let e = Registry::default().check(&bad).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(error), "{e}");
        }
        let own = Registry::default().rule("gossip", |_| {
            Ok(Box::new(shadowsync_actors::sync::ModelAveraging))
        });
        let mut gossip = Config::default();
        gossip.sync.algorithm = "shadow-gossip".parse().unwrap();
        own.check(&gossip).unwrap();
        let own = own.codec("zip", |_| Ok(Box::new(shadowsync_actors::sync::Fp16)));
        gossip.sync.compression = "zip".into();
        own.check(&gossip).unwrap();
    }
}
