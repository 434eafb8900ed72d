//! Keys that moved, still read for one release: the flat EASGD and BMUF keys of
//! `[sync]` (`alpha`, `server_shards`; `eta`, `zeta`, `nesterov`) now live in
//! `[sync.easgd]` and `[sync.bmuf]`, the background loops' keys
//! (`write_back`, `shadow_threads`, `min_interval_ms`, `min_steps`,
//! `max_cpu_share`, `max_staleness`, `delay_ms`, `delay_jitter_ms`) in
//! `[sync.shadow]` (`shadow_threads` as `threads`), and the flat MLP widths of `[model]`
//! (`bottom_mlp`, `top_mlp`; `deep_mlp`) in `[model.dlrm]` and
//! `[model.deepfm]`. A config file, a results file or a checkpoint that has
//! them is read as if they were in their sections, with a warning naming the
//! new key; one that sets a key both ways is refused.

use super::ModelFile;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use shadowsync_actors::sync::SyncFile;

/// A section whose keys moved: its name, and each moved key's old name, its
/// new section and its name there.
struct Moves {
    section: &'static str,
    keys: &'static [(&'static str, &'static str, &'static str)],
}

const SYNC: Moves = Moves {
    section: "sync",
    keys: &[
        ("alpha", "easgd", "alpha"),
        ("server_shards", "easgd", "server_shards"),
        ("eta", "bmuf", "eta"),
        ("zeta", "bmuf", "zeta"),
        ("nesterov", "bmuf", "nesterov"),
        ("write_back", "shadow", "write_back"),
        ("shadow_threads", "shadow", "threads"),
        ("min_interval_ms", "shadow", "min_interval_ms"),
        ("min_steps", "shadow", "min_steps"),
        ("max_cpu_share", "shadow", "max_cpu_share"),
        ("max_staleness", "shadow", "max_staleness"),
        ("delay_ms", "shadow", "delay_ms"),
        ("delay_jitter_ms", "shadow", "delay_jitter_ms"),
    ],
};

const MODEL: Moves = Moves {
    section: "model",
    keys: &[
        ("bottom_mlp", "dlrm", "bottom_mlp"),
        ("top_mlp", "dlrm", "top_mlp"),
        ("deep_mlp", "deepfm", "deep_mlp"),
    ],
};

/// `[sync]`, its moved keys taken into their sections (see the module doc).
pub(super) fn sync<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SyncFile, D::Error> {
    read(deserializer, &SYNC)
}

/// `[model]`, its moved keys taken into their sections (see the module doc).
pub(super) fn model<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ModelFile, D::Error> {
    read(deserializer, &MODEL)
}

fn read<'de, D, T>(deserializer: D, moves: &Moves) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Serialize + Default,
{
    let mut table = Map::<String, Value>::deserialize(deserializer)?;
    for moved in move_keys::<T>(&mut table, moves).map_err(D::Error::custom)? {
        tracing::warn!("{moved}");
    }
    section_from(table, moves).map_err(D::Error::custom)
}

/// The section from its table; an error names the key under the section's
/// name (the file's line is then that of the section).
fn section_from<T: DeserializeOwned>(
    table: Map<String, Value>,
    moves: &Moves,
) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(table)).map_err(|e| {
        let key = match e.path().to_string() {
            path if path == "." => moves.section.to_string(),
            path => format!("{}.{path}", moves.section),
        };
        format!("{key}: {}", e.into_inner())
    })
}

/// Moves the old keys of `table` into their sections; a warning for each
/// that set a value (a results file's `null`, or a default, is moved
/// silently). `T` is the section's type, whose defaults tell.
fn move_keys<T: Serialize + Default>(
    table: &mut Map<String, Value>,
    moves: &Moves,
) -> Result<Vec<String>, String> {
    let defaults = serde_json::to_value(T::default()).map_err(|e| e.to_string())?;
    let at = moves.section;
    let mut warnings = Vec::new();
    for &(old, section, new) in moves.keys {
        let Some(value) = table.remove(old) else {
            continue;
        };
        let entry = table
            .entry(section)
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(section_table) = entry else {
            return Err(format!("{at}.{section} must be a table"));
        };
        if section_table.contains_key(new) {
            return Err(format!(
                "{at}.{old} and {at}.{section}.{new} are both set: keep {at}.{section}.{new}"
            ));
        }
        if !value.is_null() && Some(&value) != defaults[section].get(new) {
            warnings.push(format!(
                "config: {at}.{old} is deprecated and will go in the next release: use \
                 {at}.{section}.{new} ([{at}.{section}] {new} = {value})"
            ));
        }
        section_table.insert(new.to_string(), value);
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use shadowsync_actors::sync::{ShadowThreads, SyncConfig};

    fn read(text: &str) -> Result<(SyncConfig, Vec<String>), String> {
        let mut table: Map<String, Value> = toml::from_str(text).map_err(|e| e.to_string())?;
        let warnings = move_keys::<SyncConfig>(&mut table, &SYNC)?;
        Ok((section_from(table, &SYNC)?, warnings))
    }

    #[test]
    fn flat_keys_are_read_into_their_sections_with_a_warning_naming_the_new_key() {
        let (sync, warnings) =
            read("algorithm = \"shadow-easgd\"\nalpha = 0.3\nserver_shards = 2").unwrap();
        assert_eq!(sync.alpha_for(4), 0.3);
        assert_eq!(sync.server_shards_for(16, 1), 2);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("use sync.easgd.alpha"), "{warnings:?}");
        // The new form reads the same, without a word.
        let (new, quiet) =
            read("algorithm = \"shadow-easgd\"\n[easgd]\nalpha = 0.3\nserver_shards = 2").unwrap();
        assert_eq!((new, quiet.len()), (sync, 0));
        let (bmuf, warnings) = read("algorithm = \"fr-bmuf:4\"\neta = 0.5").unwrap();
        assert_eq!((bmuf.bmuf_for(4).eta, warnings.len()), (0.5, 1));
        // Moved into a section the algorithm would not read: refused by it.
        let e = read("algorithm = \"shadow-easgd\"\neta = 0.5").unwrap_err();
        assert!(e.contains("sync.bmuf") && e.contains("ignore"), "{e}");
        // The background loops' keys, `shadow_threads` under its new name.
        let (sync, warnings) = read(
            "algorithm = \"shadow-ma\"\nmin_steps = 1\nshadow_threads = \"per-trainer\"\n\
             max_staleness = 4\ndelay_ms = 30.0",
        )
        .unwrap();
        let shadow = *sync.algorithm.loops().unwrap();
        assert_eq!(
            (shadow.min_steps, shadow.threads, shadow.max_staleness),
            (1, ShadowThreads::PerTrainer, Some(4))
        );
        assert_eq!(shadow.delay_ms, 30.0);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(
            warnings[0]
                .contains("use sync.shadow.threads ([sync.shadow] threads = \"per-trainer\")"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_results_files_defaults_move_silently_and_a_key_set_twice_is_refused() {
        // What results files and checkpoints of the release before hold.
        let old = r#"{"algorithm": "none", "alpha": null, "eta": null, "zeta": 1.0,
                      "nesterov": false, "server_shards": null, "write_back": "delta",
                      "shadow_threads": "per-process", "min_interval_ms": 20.0,
                      "min_steps": 4, "max_cpu_share": 0.027, "max_staleness": null,
                      "delay_ms": 0.0, "delay_jitter_ms": 0.0}"#;
        let mut table: Map<String, Value> = serde_json::from_str(old).unwrap();
        let warnings = move_keys::<SyncConfig>(&mut table, &SYNC).unwrap();
        assert_eq!(warnings, Vec::<String>::new());
        let sync: SyncConfig = section_from(table, &SYNC).unwrap();
        assert_eq!(sync, SyncConfig::default());
        // Errors name the key under `sync.`.
        let wrong = read("[bmuf]\nzeta = \"high\"").unwrap_err();
        assert!(wrong.starts_with("sync.bmuf.zeta: "), "{wrong}");
        // [sync] keeps registered rules' sections beside its keys, so a
        // misspelt key is refused once the rules are known.
        let (unknown, _) = read("alhpa = 0.3").unwrap();
        let e = shadowsync_actors::sync::Rules::default()
            .check_sections(&unknown)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sync.alhpa: unknown key"), "{e}");
        let twice = read("eta = 0.5\n[bmuf]\neta = 0.25").unwrap_err();
        assert!(twice.contains("sync.eta and sync.bmuf.eta"), "{twice}");
    }

    #[test]
    fn flat_model_widths_are_read_into_their_models_sections() {
        let text = "kind = \"deepfm\"\ndeep_mlp = [64]\nbottom_mlp = [512, 256, 64]";
        let mut table: Map<String, Value> = toml::from_str(text).unwrap();
        let warnings = move_keys::<ModelConfig>(&mut table, &MODEL).unwrap();
        let model: ModelConfig = section_from(table, &MODEL).unwrap();
        assert_eq!(model.deepfm().deep_mlp, [64]);
        assert_eq!(model.kind, "deepfm");
        // Only the width set away from its default is worth a warning.
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("use model.deepfm.deep_mlp"),
            "{warnings:?}"
        );
        let mut twice: Map<String, Value> =
            toml::from_str("top_mlp = [8]\n[dlrm]\ntop_mlp = [16]").unwrap();
        let e = move_keys::<ModelConfig>(&mut twice, &MODEL).unwrap_err();
        assert!(e.contains("model.top_mlp and model.dlrm.top_mlp"), "{e}");
    }
}
