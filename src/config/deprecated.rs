//! Keys that moved, still read for one release: the flat EASGD and BMUF keys of
//! `[sync]` (`alpha`, `server_shards`; `eta`, `zeta`, `nesterov`) now live in
//! `[sync.easgd]` and `[sync.bmuf]`. A config file, a results file or a
//! checkpoint that has them is read as if they were in their sections, with a
//! warning naming the new key; one that sets a key both ways is refused.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use shadowsync_actors::sync::SyncConfig;

/// Each moved key of `[sync]`: its old name, its section, its name there.
const MOVED: [(&str, &str, &str); 5] = [
    ("alpha", "easgd", "alpha"),
    ("server_shards", "easgd", "server_shards"),
    ("eta", "bmuf", "eta"),
    ("zeta", "bmuf", "zeta"),
    ("nesterov", "bmuf", "nesterov"),
];

/// `[sync]`, its moved keys taken into their sections (see the module doc).
pub(super) fn sync<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SyncConfig, D::Error> {
    let mut table = Map::<String, Value>::deserialize(deserializer)?;
    for moved in move_keys(&mut table).map_err(D::Error::custom)? {
        tracing::warn!("{moved}");
    }
    sync_from(table).map_err(D::Error::custom)
}

/// `[sync]` from its table; an error names the key under `sync.` (the file's
/// line is then that of the section).
fn sync_from(table: Map<String, Value>) -> Result<SyncConfig, String> {
    serde_path_to_error::deserialize(Value::Object(table)).map_err(|e| {
        let key = match e.path().to_string() {
            path if path == "." => "sync".to_string(),
            path => format!("sync.{path}"),
        };
        format!("{key}: {}", e.into_inner())
    })
}

/// Moves the old keys of `table` into their sections; a warning for each
/// that set a value (a results file's `null`, or a default, is moved silently).
fn move_keys(table: &mut Map<String, Value>) -> Result<Vec<String>, String> {
    let defaults = serde_json::to_value(SyncConfig::default()).map_err(|e| e.to_string())?;
    let mut warnings = Vec::new();
    for (old, section, new) in MOVED {
        let Some(value) = table.remove(old) else {
            continue;
        };
        let entry = table
            .entry(section)
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(section_table) = entry else {
            return Err(format!("sync.{section} must be a table"));
        };
        if section_table.contains_key(new) {
            return Err(format!(
                "sync.{old} and sync.{section}.{new} are both set: keep sync.{section}.{new}"
            ));
        }
        if !value.is_null() && Some(&value) != defaults[section].get(new) {
            warnings.push(format!(
                "config: sync.{old} is deprecated and will go in the next release: use \
                 sync.{section}.{new} ([sync.{section}] {new} = {value})"
            ));
        }
        section_table.insert(new.to_string(), value);
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<(SyncConfig, Vec<String>), String> {
        let mut table: Map<String, Value> = toml::from_str(text).map_err(|e| e.to_string())?;
        let warnings = move_keys(&mut table)?;
        Ok((sync_from(table)?, warnings))
    }

    #[test]
    fn flat_keys_are_read_into_their_sections_with_a_warning_naming_the_new_key() {
        let (sync, warnings) =
            read("algorithm = \"shadow-easgd\"\nalpha = 0.3\nserver_shards = 2\neta = 0.5")
                .unwrap();
        assert_eq!(sync.easgd.alpha, Some(0.3));
        assert_eq!(sync.easgd.server_shards, Some(2));
        assert_eq!(sync.bmuf.eta, Some(0.5));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("use sync.easgd.alpha"), "{warnings:?}");
        // The new form reads the same, without a word.
        let (new, quiet) =
            read("algorithm = \"shadow-easgd\"\n[easgd]\nalpha = 0.3\nserver_shards = 2\n[bmuf]\neta = 0.5")
                .unwrap();
        assert_eq!((new, quiet.len()), (sync, 0));
    }

    #[test]
    fn a_results_files_defaults_move_silently_and_a_key_set_twice_is_refused() {
        // What results files and checkpoints of the release before hold.
        let old = r#"{"algorithm": "none", "alpha": null, "eta": null, "zeta": 1.0,
                      "nesterov": false, "server_shards": null}"#;
        let mut table: Map<String, Value> = serde_json::from_str(old).unwrap();
        assert_eq!(move_keys(&mut table).unwrap(), Vec::<String>::new());
        assert_eq!(sync_from(table).unwrap(), SyncConfig::default());
        // Errors name the key under `sync.`.
        let wrong = read("[bmuf]\nzeta = \"high\"").unwrap_err();
        assert!(wrong.starts_with("sync.bmuf.zeta: "), "{wrong}");
        let unknown = read("alhpa = 0.3").unwrap_err();
        assert!(
            unknown.starts_with("sync.alhpa: unknown field"),
            "{unknown}"
        );
        let twice = read("eta = 0.5\n[bmuf]\neta = 0.25").unwrap_err();
        assert!(twice.contains("sync.eta and sync.bmuf.eta"), "{twice}");
    }
}
