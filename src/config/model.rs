//! The model's settings (config section `[model]`): which model, its
//! embeddings' width, and a section for each model that has settings of its
//! own, `[model.dlrm]`, `[model.deepfm]` and a registered model's
//! `[model.NAME]`.
//!
//! In Rust a built-in model's section lives inside the [`ModelKind`] that
//! reads it, so another model's cannot be expressed. The file's flat form,
//! where every section can be written, is [`ModelFile`]: a [`ModelConfig`]
//! is read through it, keeping the section of its model and refusing another
//! set away from its defaults (a results file of an earlier release holds
//! both at their defaults: those are dropped).

use crate::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shadowsync_actors::Sections;

/// Model architecture and sizes (config section `[model]`): the model with
/// its own settings, and its embeddings' width.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "ModelFile")]
#[non_exhaustive]
pub struct ModelConfig {
    /// The model, with its settings.
    pub kind: ModelKind,
    /// Embedding dimension (DLRM, DeepFM, and models of one's own that read it).
    pub embedding_dim: i64,
    /// The sections of registered models, by name (`[model.NAME]`), as read:
    /// a model's factory reads its own with [`ModelConfig::section`].
    /// [`Registry::check`](crate::Registry::check) refuses a key here that
    /// names no registered model.
    pub registered: Sections,
}

/// A model, by its name in [`Models`](crate::model::Models), with the
/// settings only it reads. Parsed from its name (`"dlrm".into()`) with its
/// settings at their defaults; serialized as its name alone (the settings
/// are [`ModelConfig`]'s sections).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelKind {
    /// Logistic regression (`lr`).
    Lr,
    /// DLRM, dot interactions (`dlrm`), with `[model.dlrm]`.
    Dlrm(DlrmSettings),
    /// DeepFM (`deepfm`), with `[model.deepfm]`.
    DeepFm(DeepFmSettings),
    /// A model of one's own, by the name it is registered under
    /// ([`Registry::model`](crate::Registry::model)); it reads `[model.NAME]`.
    Own(String),
}

impl ModelKind {
    /// The model called `name`, its settings at their defaults.
    pub fn named(name: &str) -> Self {
        match name {
            "lr" => ModelKind::Lr,
            "dlrm" => ModelKind::Dlrm(DlrmSettings::default()),
            "deepfm" => ModelKind::DeepFm(DeepFmSettings::default()),
            own => ModelKind::Own(own.to_string()),
        }
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        match self {
            ModelKind::Lr => "lr",
            ModelKind::Dlrm(_) => "dlrm",
            ModelKind::DeepFm(_) => "deepfm",
            ModelKind::Own(name) => name,
        }
    }
}

chosen_by_name!(ModelKind);

/// DLRM's settings (`[model.dlrm]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DlrmSettings {
    /// Bottom MLP hidden widths (its output width is `model.embedding_dim`).
    pub bottom_mlp: Vec<i64>,
    /// Top MLP hidden widths (its output is the logit).
    pub top_mlp: Vec<i64>,
}

impl Default for DlrmSettings {
    /// DLRM's Criteo Kaggle shape: 13-512-256-64-dim, then 512-256-1.
    fn default() -> Self {
        Self {
            bottom_mlp: vec![512, 256, 64],
            top_mlp: vec![512, 256],
        }
    }
}

/// DeepFM's settings (`[model.deepfm]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DeepFmSettings {
    /// Deep MLP hidden widths (its output is added to the logit).
    pub deep_mlp: Vec<i64>,
}

impl Default for DeepFmSettings {
    /// The DeepFM paper's 400-400-400.
    fn default() -> Self {
        Self {
            deep_mlp: vec![400, 400, 400],
        }
    }
}

impl Default for ModelConfig {
    /// DLRM's Criteo Kaggle shape.
    fn default() -> Self {
        Self {
            kind: ModelKind::named("dlrm"),
            embedding_dim: 16,
            registered: Sections::default(),
        }
    }
}

impl ModelConfig {
    /// The section `[model.NAME]` of a registered model, as its type `T`;
    /// `T::default()` when the config has none.
    ///
    /// # Errors
    ///
    /// A section `T` cannot read, naming it (`model.NAME`) and the key.
    pub fn section<T: DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        Ok(self.registered.get("model", name)?)
    }

    /// DLRM's MLPs (`[model.dlrm]`; their defaults under another model).
    pub fn dlrm(&self) -> DlrmSettings {
        match &self.kind {
            ModelKind::Dlrm(dlrm) => dlrm.clone(),
            _ => DlrmSettings::default(),
        }
    }

    /// DeepFM's deep MLP (`[model.deepfm]`; its default under another model).
    pub fn deepfm(&self) -> DeepFmSettings {
        match &self.kind {
            ModelKind::DeepFm(deepfm) => deepfm.clone(),
            _ => DeepFmSettings::default(),
        }
    }
}

/// `[model]` as a file writes it: both built-in models' sections, whatever
/// the model. [`ModelConfig::try_from`] puts the model's own section into
/// it and refuses another's set away from its defaults; a [`ModelConfig`]
/// writes its model's settings and the other's defaults (so a file lists
/// every key). Command-line flags edit a config in this form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ModelFile {
    /// The model, by name (its settings are the sections below).
    pub kind: ModelKind,
    /// See [`ModelConfig::embedding_dim`].
    pub embedding_dim: i64,
    /// `[model.dlrm]`, read by `dlrm`.
    pub dlrm: DlrmSettings,
    /// `[model.deepfm]`, read by `deepfm`.
    pub deepfm: DeepFmSettings,
    /// See [`ModelConfig::registered`].
    #[serde(flatten)]
    pub registered: Sections,
}

impl ModelFile {
    /// The sections of models (`dlrm`, `deepfm`).
    pub const MODE_SECTIONS: [&'static str; 2] = ["dlrm", "deepfm"];

    /// The sections set away from their defaults that the model would not
    /// read, each with why (`model.deepfm` under `lr`, say).
    pub fn unread(&self) -> Vec<(&'static str, String)> {
        let kind = &self.kind;
        let why = |what: &str| format!("it sizes {what}; model.kind {kind} has none");
        let dlrm = (self.dlrm != DlrmSettings::default() && !matches!(kind, ModelKind::Dlrm(_)))
            .then(|| ("model.dlrm", why("DLRM's MLPs")));
        let deepfm = (self.deepfm != DeepFmSettings::default()
            && !matches!(kind, ModelKind::DeepFm(_)))
        .then(|| ("model.deepfm", why("DeepFM's deep MLP")));
        dlrm.into_iter().chain(deepfm).collect()
    }
}

impl Default for ModelFile {
    fn default() -> Self {
        ModelConfig::default().into()
    }
}

impl TryFrom<ModelFile> for ModelConfig {
    type Error = Error;

    /// The model with its section; another model's section, set away from
    /// its defaults, is refused ([`Error::Config`] naming it).
    fn try_from(file: ModelFile) -> Result<Self> {
        if let Some((key, why)) = file.unread().into_iter().next() {
            return Err(Error::config(
                key,
                format!("is set, but this run would ignore it: {why}"),
            ));
        }
        let kind = match file.kind {
            ModelKind::Dlrm(_) => ModelKind::Dlrm(file.dlrm),
            ModelKind::DeepFm(_) => ModelKind::DeepFm(file.deepfm),
            other => other,
        };
        Ok(ModelConfig {
            kind,
            embedding_dim: file.embedding_dim,
            registered: file.registered,
        })
    }
}

impl<'de> Deserialize<'de> for ModelConfig {
    /// Through [`ModelFile`] (see the module's doc).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        super::through_file::<D, ModelFile, Self>(d)
    }
}

impl From<ModelConfig> for ModelFile {
    fn from(config: ModelConfig) -> Self {
        ModelFile {
            dlrm: config.dlrm(),
            deepfm: config.deepfm(),
            kind: config.kind,
            embedding_dim: config.embedding_dim,
            registered: config.registered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> std::result::Result<ModelConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_gives_the_model_its_section_and_refuses_another_models() {
        let c = read(r#"{"kind": "deepfm", "deepfm": {"deep_mlp": [8]}}"#).unwrap();
        assert_eq!(c.deepfm().deep_mlp, [8]);
        assert_eq!(c.kind, "deepfm");
        // Written back, both sections are there (DLRM's at its defaults),
        // and read back the same.
        let written = serde_json::to_value(&c).unwrap();
        assert_eq!(written["deepfm"]["deep_mlp"][0], 8);
        assert_eq!(written["dlrm"]["top_mlp"][0], 512);
        assert_eq!(read(&written.to_string()).unwrap(), c);
        for (json, key, why) in [
            (
                r#"{"kind": "lr", "deepfm": {"deep_mlp": [8]}}"#,
                "model.deepfm",
                "lr has none",
            ),
            (
                r#"{"kind": "deepfm", "dlrm": {"top_mlp": [8]}}"#,
                "model.dlrm",
                "DLRM's MLPs",
            ),
            (
                r#"{"kind": "dcn", "dlrm": {"top_mlp": [8]}}"#,
                "model.dlrm",
                "dcn has none",
            ),
        ] {
            let e = read(json).unwrap_err();
            assert!(
                e.contains(key) && e.contains("ignore") && e.contains(why),
                "{json}: {e}"
            );
        }
        // At their defaults (a results file lists both): dropped.
        let c = read(r#"{"kind": "lr", "deepfm": {"deep_mlp": [400, 400, 400]}}"#).unwrap();
        assert_eq!(c.kind, ModelKind::Lr);
    }
}
