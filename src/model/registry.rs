//! Models and embedding row optimizers by name: what `model.kind` and
//! `optim.sparse` may name. The built-in ones register the same way as a
//! user's own ([`Models::with`], [`RowRules::with`]).

use super::ctr::{DeepFm, Dlrm, LogisticRegression};
use super::CtrModel;
use crate::config::{Config, FtrlConfig, ModelConfig, OptimConfig, RowOptimizer};
use crate::Result;
use shadowsync_actors::embedding::{Adagrad, Ftrl, RowRule, Sgd};
use shadowsync_actors::Named;
use std::sync::Arc;
use tch::{nn, Device};

/// Makes a model's dense part from `[model]`, its variables under the path.
pub type ModelFactory =
    Arc<dyn Fn(&ModelConfig, &nn::Path) -> Result<Box<dyn CtrModel>> + Send + Sync>;

/// Makes the row rule of the embedding tables from the run's config (its
/// `[optim]` section, and the batch its gradients are the mean of); the
/// learning rate is given at every update ([`Config::row_lr`]).
pub type RowRuleFactory = Arc<dyn Fn(&Config) -> Result<Box<dyn RowRule>> + Send + Sync>;

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
        let make = self.0.get(config.kind.name())?;
        make(config, root)
    }

    /// An error unless every key of `config.registered` is the section of a
    /// registered model, and of the one `config.kind` names: a typo, or a
    /// section the run would ignore, is refused before anything runs.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) naming the key.
    pub fn check_sections(&self, config: &ModelConfig) -> Result<()> {
        let choice = format!("model.kind is {}", config.kind);
        let chosen = Some(config.kind.name());
        Ok(self.0.check_sections(&config.registered, chosen, &choice)?)
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
            .with("ftrl", |config| {
                let f = match &config.optim.sparse {
                    RowOptimizer::Ftrl(ftrl) => *ftrl,
                    _ => FtrlConfig::default(),
                };
                let batch = config.train.batch_size;
                Ok(Box::new(Ftrl::per_example(f.beta, f.l1, f.l2, batch)))
            })
    }
}

impl RowRules {
    /// These rules and `name`, made by `make` (in place of a rule of that
    /// name).
    pub fn with(
        mut self,
        name: &str,
        make: impl Fn(&Config) -> Result<Box<dyn RowRule>> + Send + Sync + 'static,
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
    pub fn build(&self, config: &Config) -> Result<Box<dyn RowRule>> {
        let make = self.0.get(config.optim.sparse.name())?;
        make(config)
    }

    /// An error unless every key of `optim.registered` is the section of a
    /// registered row optimizer, and of the one `optim.sparse` names: a
    /// typo, or a section the run would ignore, is refused before anything
    /// runs.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) naming the key.
    pub fn check_sections(&self, optim: &OptimConfig) -> Result<()> {
        let choice = format!("optim.sparse is {}", optim.sparse);
        let chosen = Some(optim.sparse.name());
        Ok(self.0.check_sections(&optim.registered, chosen, &choice)?)
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
        let mut config = Config::default();
        config.optim.sparse = "adam".into();
        let e = RowRules::default().build(&config).unwrap_err();
        assert!(e.to_string().contains("optim.sparse"), "{e}");
        assert!(e.to_string().contains("adagrad, ftrl, sgd"), "{e}");
    }

    #[test]
    fn a_registered_name_replaces_or_adds() {
        let models = Models::default().with("dlrm", |_, root| {
            Ok(Box::new(LogisticRegression::new(root)))
        });
        assert_eq!(models.embedding_width(&ModelConfig::default()).unwrap(), 1);
        let mut config = Config::default();
        config.optim.sparse = "plain".into();
        let rules = RowRules::default().with("plain", |_| Ok(Box::new(Sgd)));
        assert!(rules.build(&config).unwrap().state_names().is_empty());
    }

    #[test]
    fn a_section_is_refused_unless_it_is_the_chosen_registered_models() {
        let models =
            Models::default().with("dcn", |_, root| Ok(Box::new(LogisticRegression::new(root))));
        let mut model = ModelConfig::default();
        model
            .registered
            .insert("dcn", serde_json::json!({"cross_layers": 2}));
        let e = models.check_sections(&model).unwrap_err().to_string();
        assert!(e.contains("model.dcn") && e.contains("ignore"), "{e}");
        model.kind = "dcn".into();
        models.check_sections(&model).unwrap();
        model.registered.insert("embeding_dim", 8.into());
        let e = models.check_sections(&model).unwrap_err().to_string();
        assert!(
            e.contains("model.embeding_dim") && e.contains("unknown key"),
            "{e}"
        );
    }

    /// A batch's mean gradient is 1/B of the per-example sum the paper's β,
    /// λ₁ and λ₂ are given for, so the rule gets each divided by B; and FTRL
    /// runs at its own α unless `optim.sparse_lr` says otherwise.
    #[test]
    fn ftrl_takes_its_settings_per_example_and_its_own_learning_rate() {
        let mut config = Config::default();
        config.optim.sparse = RowOptimizer::Ftrl(FtrlConfig {
            l1: 2.0,
            ..FtrlConfig::default()
        });
        config.train.batch_size = 64;
        let rule = RowRules::default().build(&config).unwrap();
        let expected = Ftrl {
            beta: 1.0 / 64.0,
            l1: 2.0 / 64.0,
            l2: 0.0,
        };
        assert_eq!(format!("{rule:?}"), format!("{expected:?}"));
        assert_eq!(config.row_lr(&*rule), 0.1);
        config.optim.sparse = "adagrad".into();
        let rule = RowRules::default().build(&config).unwrap();
        assert_eq!(config.row_lr(&*rule), 0.05);
        config.optim.sparse_lr = Some(0.3);
        assert_eq!(config.row_lr(&*rule), 0.3);
    }
}
