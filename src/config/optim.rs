//! The optimizers' settings (config section `[optim]`): the dense
//! parameters' optimizer and rate, the embedding rows' optimizer and rate,
//! and a section for each row optimizer that has settings of its own,
//! `[optim.ftrl]` and a registered one's `[optim.NAME]`.
//!
//! In Rust FTRL's section lives inside the [`RowOptimizer`] that reads it,
//! so it cannot be set under another. The file's flat form is
//! [`OptimFile`]: an [`OptimConfig`] is read through it, refusing
//! `[optim.ftrl]` set away from its defaults under another row optimizer.

use crate::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shadowsync_actors::Sections;

/// Optimizers of the dense parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Plain SGD.
    Sgd,
    /// Adagrad.
    Adagrad,
    /// Adam.
    Adam,
}

/// Optimizers of the dense parameters and of the embeddings (config
/// section `[optim]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "OptimFile")]
#[non_exhaustive]
pub struct OptimConfig {
    /// Dense optimizer.
    pub dense: OptimizerKind,
    /// Dense learning rate.
    pub dense_lr: f64,
    /// The embeddings' row optimizer, with its settings.
    pub sparse: RowOptimizer,
    /// Embedding learning rate (FTRL's α); unset, the row optimizer's own
    /// default ([`RowRule::default_lr`](shadowsync_actors::embedding::RowRule::default_lr):
    /// 0.05 for `sgd` and `adagrad`, 0.1 for `ftrl`).
    pub sparse_lr: Option<f64>,
    /// The sections of registered row optimizers, by name (`[optim.NAME]`),
    /// as read: a row optimizer's factory reads its own with
    /// [`OptimConfig::section`]. [`Registry::check`](crate::Registry::check)
    /// refuses a key here that names no registered row optimizer.
    pub registered: Sections,
}

/// An embedding row optimizer, by its name in
/// [`RowRules`](crate::model::RowRules), with the settings only it reads.
/// Parsed from its name (`"ftrl".into()`) with its settings at their
/// defaults; serialized as its name alone.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOptimizer {
    /// Plain SGD (`sgd`).
    Sgd,
    /// Adagrad (`adagrad`).
    Adagrad,
    /// FTRL-Proximal (`ftrl`), with `[optim.ftrl]`.
    Ftrl(FtrlConfig),
    /// A row optimizer of one's own, by the name it is registered under
    /// ([`Registry::row_rule`](crate::Registry::row_rule)); it reads
    /// `[optim.NAME]`.
    Own(String),
}

impl RowOptimizer {
    /// The row optimizer called `name`, its settings at their defaults.
    pub fn named(name: &str) -> Self {
        match name {
            "sgd" => RowOptimizer::Sgd,
            "adagrad" => RowOptimizer::Adagrad,
            "ftrl" => RowOptimizer::Ftrl(FtrlConfig::default()),
            own => RowOptimizer::Own(own.to_string()),
        }
    }

    /// The row optimizer's name.
    pub fn name(&self) -> &str {
        match self {
            RowOptimizer::Sgd => "sgd",
            RowOptimizer::Adagrad => "adagrad",
            RowOptimizer::Ftrl(_) => "ftrl",
            RowOptimizer::Own(name) => name,
        }
    }
}

chosen_by_name!(RowOptimizer);

/// FTRL-Proximal's settings besides its learning rate α
/// (`optim.sparse_lr`); see [`Ftrl`](shadowsync_actors::embedding::Ftrl).
/// All three are per example, as the paper gives them: the rule is given
/// each divided by `train.batch_size`, since a row's gradient is the batch's
/// mean ([`Ftrl::per_example`](shadowsync_actors::embedding::Ftrl::per_example)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct FtrlConfig {
    /// β, the learning rate's smoothing.
    pub beta: f32,
    /// λ₁: above 0, a value whose gradients' sum stays within it is exactly 0.
    pub l1: f32,
    /// λ₂, the L2 strength.
    pub l2: f32,
}

impl Default for FtrlConfig {
    /// The paper's β = 1, no regularization (tune λ₁ and λ₂ for sparsity).
    fn default() -> Self {
        Self {
            beta: 1.0,
            l1: 0.0,
            l2: 0.0,
        }
    }
}

impl FtrlConfig {
    /// Checks that β, λ₁ and λ₂ are finite and ≥ 0.
    ///
    /// # Errors
    ///
    /// The first that is not, naming its key.
    pub fn validate(&self) -> Result<()> {
        for (key, value) in [
            ("optim.ftrl.beta", self.beta),
            ("optim.ftrl.l1", self.l1),
            ("optim.ftrl.l2", self.l2),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::config(
                    key,
                    format!("{value} must be finite and ≥ 0"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for OptimConfig {
    /// Adagrad, dense 0.01 and embeddings at the row optimizer's own rate
    /// (Adagrad's 0.05): the best test NE per second of a grid on the
    /// built-in data (docs/results/foundation.md).
    fn default() -> Self {
        Self {
            dense: OptimizerKind::Adagrad,
            dense_lr: 0.01,
            sparse: RowOptimizer::Adagrad,
            sparse_lr: None,
            registered: Sections::default(),
        }
    }
}

impl OptimConfig {
    /// The section `[optim.NAME]` of a registered row optimizer, as its type
    /// `T`; `T::default()` when the config has none.
    ///
    /// # Errors
    ///
    /// A section `T` cannot read, naming it (`optim.NAME`) and the key.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        Ok(self.registered.get("optim", name)?)
    }
}

/// Named optimizer settings (`--optim-preset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum OptimPreset {
    /// The default: Adagrad, dense 0.01, embeddings 0.05.
    Default,
    /// DLRM's Kaggle reference: plain SGD at 0.1 for both.
    DlrmReference,
}

impl From<OptimPreset> for OptimConfig {
    fn from(preset: OptimPreset) -> Self {
        match preset {
            OptimPreset::Default => Self::default(),
            OptimPreset::DlrmReference => Self {
                dense: OptimizerKind::Sgd,
                dense_lr: 0.1,
                sparse: RowOptimizer::Sgd,
                sparse_lr: Some(0.1),
                registered: Sections::default(),
            },
        }
    }
}

/// `[optim]` as a file writes it: `[optim.ftrl]` whatever the row
/// optimizer. [`OptimConfig::try_from`] gives it to FTRL and refuses it set
/// away from its defaults under another; an [`OptimConfig`] writes FTRL's
/// settings or their defaults (so a file lists every key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct OptimFile {
    /// See [`OptimConfig::dense`].
    pub dense: OptimizerKind,
    /// See [`OptimConfig::dense_lr`].
    pub dense_lr: f64,
    /// The row optimizer, by name (FTRL's settings are `ftrl`).
    pub sparse: RowOptimizer,
    /// See [`OptimConfig::sparse_lr`].
    pub sparse_lr: Option<f64>,
    /// `[optim.ftrl]`, read by `ftrl`.
    pub ftrl: FtrlConfig,
    /// See [`OptimConfig::registered`].
    #[serde(flatten)]
    pub registered: Sections,
}

impl OptimFile {
    /// The sections of row optimizers (`ftrl`).
    pub const MODE_SECTIONS: [&'static str; 1] = ["ftrl"];

    /// The sections set away from their defaults that the row optimizer
    /// would not read, each with why (`optim.ftrl` under `adagrad`).
    pub fn unread(&self) -> Vec<(&'static str, String)> {
        let set = self.ftrl != FtrlConfig::default();
        let ftrl = matches!(self.sparse, RowOptimizer::Ftrl(_));
        (set && !ftrl)
            .then(|| {
                let sparse = &self.sparse;
                let why = format!("it sets FTRL's β, λ₁ and λ₂; optim.sparse is {sparse}");
                ("optim.ftrl", why)
            })
            .into_iter()
            .collect()
    }
}

impl Default for OptimFile {
    fn default() -> Self {
        OptimConfig::default().into()
    }
}

impl TryFrom<OptimFile> for OptimConfig {
    type Error = Error;

    /// The row optimizer with its section; `[optim.ftrl]` set under another
    /// is refused ([`Error::Config`] naming it).
    fn try_from(file: OptimFile) -> Result<Self> {
        if let Some((key, why)) = file.unread().into_iter().next() {
            return Err(Error::config(
                key,
                format!("is set, but this run would ignore it: {why}"),
            ));
        }
        let sparse = match file.sparse {
            RowOptimizer::Ftrl(_) => RowOptimizer::Ftrl(file.ftrl),
            other => other,
        };
        Ok(OptimConfig {
            dense: file.dense,
            dense_lr: file.dense_lr,
            sparse,
            sparse_lr: file.sparse_lr,
            registered: file.registered,
        })
    }
}

impl<'de> Deserialize<'de> for OptimConfig {
    /// Through [`OptimFile`] (see the module's doc).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        super::through_file::<D, OptimFile, Self>(d)
    }
}

impl From<OptimConfig> for OptimFile {
    fn from(config: OptimConfig) -> Self {
        let ftrl = match &config.sparse {
            RowOptimizer::Ftrl(ftrl) => *ftrl,
            _ => FtrlConfig::default(),
        };
        OptimFile {
            dense: config.dense,
            dense_lr: config.dense_lr,
            sparse: config.sparse,
            sparse_lr: config.sparse_lr,
            ftrl,
            registered: config.registered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml: &str) -> std::result::Result<OptimConfig, String> {
        toml::from_str(toml).map_err(|e| e.to_string())
    }

    #[test]
    fn ftrl_has_its_section_and_another_row_optimizer_refuses_it() {
        let c = read("sparse = \"ftrl\"\n[ftrl]\nl1 = 0.5\n").unwrap();
        let RowOptimizer::Ftrl(ftrl) = c.sparse else {
            panic!("{:?}", c.sparse)
        };
        assert_eq!((ftrl.l1, ftrl.beta), (0.5, 1.0));
        let written = toml::Table::try_from(&c).unwrap();
        assert_eq!(written["ftrl"]["l1"].as_float(), Some(0.5));
        assert_eq!(read(&toml::to_string(&written).unwrap()).unwrap(), c);
        let e = read("sparse = \"adagrad\"\n[ftrl]\nl1 = 0.5\n").unwrap_err();
        assert!(
            e.contains("optim.ftrl") && e.contains("ignore") && e.contains("adagrad"),
            "{e}"
        );
        // At its defaults (a results file lists it): dropped.
        let c = read("sparse = \"sgd\"\n[ftrl]\nbeta = 1.0\n").unwrap();
        assert_eq!(c.sparse, RowOptimizer::Sgd);
        // A registered row optimizer's section is kept for it, by name.
        let c = read("sparse = \"lazy\"\n[lazy]\ndecay = 0.5\n").unwrap();
        assert_eq!(c.sparse, "lazy");
        let lazy: serde_json::Map<String, serde_json::Value> = c.section("lazy").unwrap();
        assert_eq!(lazy["decay"], 0.5);
    }
}
