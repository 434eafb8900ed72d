//! Models and embedding row optimizers by name: what `model.kind` and
//! `optim.sparse` may name. The built-in ones register the same way as a
//! user's own ([`Models::with`], [`RowRules::with`]).

use super::ctr::{DeepFm, Dlrm, LogisticRegression};
use super::CtrModel;
use crate::config::{ModelConfig, OptimConfig};
use crate::Result;
use shadowsync_actors::embedding::{Adagrad, Ftrl, RowRule, Sgd};
use shadowsync_actors::Named;
use std::sync::Arc;
use tch::{nn, Device};

/// Makes a model's dense part from `[model]`, its variables under the path.
pub type ModelFactory =
    Arc<dyn Fn(&ModelConfig, &nn::Path) -> Result<Box<dyn CtrModel>> + Send + Sync>;

/// Makes the row rule of the embedding tables from `[optim]` (whose
/// `sparse_lr` is the rule's learning rate, given at every update).
pub type RowRuleFactory = Arc<dyn Fn(&OptimConfig) -> Result<Box<dyn RowRule>> + Send + Sync>;

/// CTR models by the name `model.kind` gives them: `lr`, `dlrm`, `deepfm`,
/// and those added with [`Models::with`].
#[derive(Clone, Debug)]
pub struct Models(Named<ModelFactory>);

impl Default for Models {
    fn default() -> Self {
        Self(Named::new("model.kind", "model"))
            .with("lr", |_, root| Ok(Box::new(LogisticRegression::new(root))))
            .with("dlrm", |config, root| {
                Ok(Box::new(Dlrm::new(root, config)?))
            })
            .with("deepfm", |config, root| {
                Ok(Box::new(DeepFm::new(root, config)))
            })
    }
}

impl Models {
    /// These models and `name`, made by `make` (in place of a model of that
    /// name).
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&ModelConfig, &nn::Path) -> Result<Box<dyn CtrModel>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// The model `config.kind` names, its variables under `root`.
    ///
    /// # Errors
    ///
    /// An unknown name (naming `model.kind` and the known ones), or the
    /// model's own.
    pub fn build(&self, config: &ModelConfig, root: &nn::Path) -> Result<Box<dyn CtrModel>> {
        let make = self.0.get(&config.kind)?;
        make(config, root)
    }

    /// The width of the embedding rows the model `config` names looks up.
    ///
    /// # Errors
    ///
    /// As [`Models::build`].
    pub fn embedding_width(&self, config: &ModelConfig) -> Result<i64> {
        let vars = nn::VarStore::new(Device::Cpu);
        Ok(self.build(config, &vars.root())?.embedding_width())
    }
}

/// Embedding row optimizers by the name `optim.sparse` gives them: `sgd`,
/// `adagrad`, `ftrl` (settings in `[optim.ftrl]`), and those added with
/// [`RowRules::with`].
#[derive(Clone, Debug)]
pub struct RowRules(Named<RowRuleFactory>);

impl Default for RowRules {
    fn default() -> Self {
        Self(Named::new("optim.sparse", "row optimizer"))
            .with("sgd", |_| Ok(Box::new(Sgd)))
            .with("adagrad", |_| Ok(Box::new(Adagrad::default())))
            .with("ftrl", |optim| {
                let f = &optim.ftrl;
                Ok(Box::new(Ftrl {
                    beta: f.beta,
                    l1: f.l1,
                    l2: f.l2,
                }))
            })
    }
}

impl RowRules {
    /// These rules and `name`, made by `make` (in place of a rule of that
    /// name).
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&OptimConfig) -> Result<Box<dyn RowRule>> + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(name, Arc::new(make));
        self
    }

    /// The row rule `optim.sparse` names.
    ///
    /// # Errors
    ///
    /// An unknown name (naming `optim.sparse` and the known ones), or the
    /// rule's own.
    pub fn build(&self, optim: &OptimConfig) -> Result<Box<dyn RowRule>> {
        let make = self.0.get(&optim.sparse)?;
        make(optim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_errors_naming_the_key_and_the_known_ones() {
        let model = ModelConfig {
            kind: "wide".into(),
            ..ModelConfig::default()
        };
        let e = Models::default().embedding_width(&model).unwrap_err();
        assert!(e.to_string().contains("model.kind"), "{e}");
        assert!(e.to_string().contains("deepfm, dlrm, lr"), "{e}");
        let optim = OptimConfig {
            sparse: "adam".into(),
            ..OptimConfig::default()
        };
        let e = RowRules::default().build(&optim).unwrap_err();
        assert!(e.to_string().contains("optim.sparse"), "{e}");
        assert!(e.to_string().contains("adagrad, ftrl, sgd"), "{e}");
    }

    #[test]
    fn a_registered_name_replaces_or_adds() {
        let models = Models::default().with("dlrm", |_, root| {
            Ok(Box::new(LogisticRegression::new(root)))
        });
        assert_eq!(models.embedding_width(&ModelConfig::default()).unwrap(), 1);
        let optim = OptimConfig {
            sparse: "plain".into(),
            ..OptimConfig::default()
        };
        let rules = RowRules::default().with("plain", |_| Ok(Box::new(Sgd)));
        assert!(rules.build(&optim).unwrap().state_names().is_empty());
    }
}
