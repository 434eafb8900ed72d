//! Keys that only some runs read, where no shape of the settings can say so.
//!
//! A mode's section (`[sync.shadow]`, `[sync.easgd]`, `[model.deepfm]`, …)
//! lives inside the [`Algorithm`] or the [`ModelKind`] that reads it, so the
//! types refuse another mode's ([`SyncFile::unread`],
//! [`ModelFile::unread`](super::ModelFile::unread)). What is left here
//! depends on another key's value or on the process count: the embeddings'
//! width under `lr`, a link under `none`, a sharded table's bounds in one
//! process. A key set away from its default in a run that would not read it
//! is a mistake the user cannot see (the run goes on without it), so
//! [`Config::validate_for`] refuses it, naming the key, the mode and what
//! would read it.
//!
//! An experiment's grid is the exception: its base may set a key for the
//! cells that read it (a link for the shadow runs beside a `none` baseline).
//! [`clear_unread_sections_in_grid`] (before the cells are read) and
//! [`clear_ignored_in_grid`] (after) take such keys back to their defaults
//! in the other cells; a key no cell reads, or one a cell's own values set,
//! is still refused (that cell is skipped, or the grid fails naming it).

use super::{Config, EmbeddingsMode, ModelFile, ModelKind, OptimFile};
use serde::de::DeserializeOwned;
use shadowsync_actors::faults::{Fault, FaultSite};
use shadowsync_actors::sync::{Algorithm, Schedule, SyncFile};
use toml::{Table, Value};

/// A key that some runs ignore.
struct Modal {
    key: &'static str,
    /// Whether the config sets it away from its default.
    set: fn(&Config) -> bool,
    /// Takes it back to its default.
    clear: fn(&mut Config),
    /// Why a run of `processes` processes with this config would ignore it;
    /// `None` where the run reads it.
    ignored: fn(&Config, usize) -> Option<String>,
}

/// A [`Modal`] for the field at `path` of [`Config`], compared with and
/// cleared to [`Config::default`]'s.
macro_rules! modal {
    ($key:literal, $($field:ident).+, $ignored:expr) => {
        Modal {
            key: $key,
            set: |c| c.$($field).+ != Config::default().$($field).+,
            clear: |c| c.$($field).+ = Config::default().$($field).+,
            ignored: $ignored,
        }
    };
}

/// Under `none`, nobody syncs.
fn unsynced(c: &Config, _: usize) -> Option<String> {
    (c.sync.algorithm == Algorithm::None)
        .then(|| "sync.algorithm is none: no trainer syncs".to_string())
}

/// Read by the sync rounds (a group's, or EASGD's against its centre, which
/// refuses a codec with memory of a link): not without sync; but across
/// processes the tables' traffic reads a codec without memory (not `topk`)
/// whatever the algorithm.
fn uncompressed(c: &Config, p: usize) -> Option<String> {
    if p > 1 && c.sync.compression != "topk" {
        return None;
    }
    unsynced(c, p)
}

/// Read by a table sharded over the job's processes.
fn not_sharded(c: &Config, processes: usize) -> Option<String> {
    (c.train.embeddings_for(processes) != EmbeddingsMode::Sharded).then(|| {
        "it bounds a sharded table's fetches and pushes; this run's table is replicated \
         (train.embeddings, or one process)"
            .to_string()
    })
}

/// Read by every model with embeddings: not logistic regression (a model
/// of one's own may read it).
fn no_embeddings(c: &Config, _: usize) -> Option<String> {
    (c.model.kind == ModelKind::Lr)
        .then(|| "it sizes the embeddings of DLRM and DeepFM; model.kind lr has none".into())
}

/// Read when checkpoints are saved.
fn no_checkpoints(c: &Config, _: usize) -> Option<String> {
    c.checkpoint
        .dir
        .is_none()
        .then(|| "checkpoints need a directory: set checkpoint.dir (--checkpoint-dir)".to_string())
}

/// Why a fault would never be injected: its site does not run under the
/// algorithm.
fn fault_ignored(fault: &Fault, algorithm: &Algorithm) -> Option<String> {
    let runs = match fault.kind.site() {
        FaultSite::Step => true,
        FaultSite::SyncLoop => algorithm.is_shadow(),
        FaultSite::Coordinator => *algorithm != Algorithm::None,
        FaultSite::Server => algorithm.rule_name() == Some("easgd"),
    };
    (!runs).then(|| {
        format!(
            "{:?} of trainer {} hits a {:?} site, which {algorithm} does not run",
            fault.kind,
            fault.trainer,
            fault.kind.site()
        )
    })
}

/// Every key that some runs ignore, with what decides it.
fn modal_keys() -> Vec<Modal> {
    let mut keys = data_and_model_keys();
    keys.extend(sync_keys());
    keys.extend(checkpoint_and_fault_keys());
    keys
}

/// The keys of `[data]`, `[model]` and `[train]` some runs ignore.
fn data_and_model_keys() -> Vec<Modal> {
    vec![
        // The data.
        modal!("data.synthetic", data.synthetic, |c, _| c
            .data
            .train
            .is_some()
            .then(|| {
                "it makes the built-in data; this run reads data.train and data.test".into()
            })),
        modal!("data.bad_lines", data.bad_lines, |c, _| c
            .data
            .train
            .is_none()
            .then(|| {
                "it handles malformed lines of data.train and data.test; the built-in data has none"
                    .into()
            })),
        modal!("data.table_size", data.table_size, |c, _| c
            .data
            .table_sizes
            .is_some()
            .then(|| "data.table_sizes sizes each table instead".into())),
        // The model.
        modal!("model.embedding_dim", model.embedding_dim, no_embeddings),
        // Tables across processes.
        modal!(
            "train.embedding_staleness",
            train.embedding_staleness,
            not_sharded
        ),
        modal!(
            "train.embedding_timeout_ms",
            train.embedding_timeout_ms,
            not_sharded
        ),
        modal!("train.table_sync_ms", train.table_sync_ms, |c, p| (p < 2
            || c.train.embeddings_for(p) != EmbeddingsMode::Replicated)
            .then(|| {
                "it paces the merges of tables replicated over processes; this run has one table"
                    .into()
            })),
    ]
}

/// The keys of `[sync]` some runs ignore.
fn sync_keys() -> Vec<Modal> {
    vec![
        modal!("sync.group_size", sync.group_size, unsynced),
        modal!("sync.schedule", sync.schedule, unsynced),
        modal!("sync.seed", sync.seed, |c, p| unsynced(c, p).or_else(
            || {
                (c.sync.schedule != Schedule::Random)
                    .then(|| "it seeds the random schedule; sync.schedule is not random".into())
            }
        )),
        modal!("sync.peer_timeout_ms", sync.peer_timeout_ms, unsynced),
        modal!("sync.link", sync.link, unsynced),
        modal!("sync.compression", sync.compression, uncompressed),
        modal!("sync.topk_ratio", sync.topk_ratio, |c, p| uncompressed(
            c, p
        )
        .or_else(|| {
            (c.sync.compression != "topk")
                .then(|| "it is topk's share of values; sync.compression is not topk".into())
        })),
    ]
}

/// The checkpoints' keys and the faults some runs ignore.
fn checkpoint_and_fault_keys() -> Vec<Modal> {
    vec![
        modal!(
            "checkpoint.every_steps",
            checkpoint.every_steps,
            no_checkpoints
        ),
        modal!("checkpoint.keep", checkpoint.keep, no_checkpoints),
        // Faults, one by one.
        Modal {
            key: "faults",
            set: |c| !c.faults.is_empty(),
            clear: |c| {
                let algorithm = c.sync.algorithm.clone();
                c.faults.retain(|f| fault_ignored(f, &algorithm).is_none());
            },
            ignored: |c, _| {
                c.faults
                    .iter()
                    .find_map(|f| fault_ignored(f, &c.sync.algorithm))
            },
        },
    ]
}

impl Config {
    /// The keys this config sets that a run of `processes` processes would
    /// ignore, each with why.
    pub fn ignored_keys(&self, processes: usize) -> Vec<(&'static str, String)> {
        modal_keys()
            .into_iter()
            .filter(|m| (m.set)(self))
            .filter_map(|m| (m.ignored)(self, processes).map(|why| (m.key, why)))
            .collect()
    }
}

/// The cells of an experiment's grid, each run in one process, each with the
/// dotted keys its own grid values set: a key the base sets, that some cells
/// read and others would ignore, is taken back to its default in the others
/// (a link for the shadow runs beside a `none` baseline). A key that no cell
/// reads, or that a cell's own values set, is left for [`Config::validate`]
/// to refuse.
pub fn clear_ignored_in_grid(cells: &mut [Config], own_keys: &[Vec<String>]) {
    for modal in modal_keys() {
        let read = |c: &Config| (modal.set)(c) && (modal.ignored)(c, 1).is_none();
        if !cells.iter().any(read) {
            continue;
        }
        let within = format!("{}.", modal.key);
        for (cell, own) in cells.iter_mut().zip(own_keys) {
            let own = own.iter().any(|k| k == modal.key || k.starts_with(&within));
            if !own && (modal.set)(cell) && (modal.ignored)(cell, 1).is_some() {
                (modal.clear)(cell);
            }
        }
    }
}

/// The tables with mode sections, and their sections (`sync.shadow`,
/// `model.deepfm`, `optim.ftrl`, …).
const MODE_SECTIONS: [(&str, &[&str]); 3] = [
    ("sync", &SyncFile::MODE_SECTIONS),
    ("model", &ModelFile::MODE_SECTIONS),
    ("optim", &OptimFile::MODE_SECTIONS),
];

/// The mode sections set in `cell` that its algorithm or model would not
/// read (none of a table that does not read: the cell's own reading names
/// that).
fn unread_sections(cell: &Table) -> Vec<&'static str> {
    fn unread<T: DeserializeOwned>(
        cell: &Table,
        table: &str,
        unread: fn(&T) -> Vec<(&'static str, String)>,
    ) -> Vec<&'static str> {
        let section = cell.get(table).cloned();
        let section = section.unwrap_or_else(|| Value::Table(Table::new()));
        section
            .try_into::<T>()
            .map(|file| unread(&file).into_iter().map(|(key, _)| key).collect())
            .unwrap_or_default()
    }
    let mut keys = unread(cell, "sync", SyncFile::unread);
    keys.extend(unread(cell, "model", ModelFile::unread));
    keys.extend(unread(cell, "optim", OptimFile::unread));
    keys
}

/// [`clear_ignored_in_grid`] for the mode sections (`[sync.shadow]`,
/// `[model.deepfm]`, …), on the cells' tables before they are read (a cell
/// whose mode does not read a section cannot hold it): such a section the
/// base sets, that some cell reads, is removed from the cells that would not.
pub fn clear_unread_sections_in_grid(cells: &mut [Table], own_keys: &[Vec<String>]) {
    let unread: Vec<_> = cells.iter().map(unread_sections).collect();
    let sections = MODE_SECTIONS
        .into_iter()
        .flat_map(|(table, sections)| sections.iter().map(move |section| (table, *section)));
    for (table, section) in sections {
        let key = format!("{table}.{section}");
        let set = |cell: &Table| cell.get(table).and_then(|t| t.get(section)).is_some();
        let read_somewhere = (cells.iter().zip(&unread))
            .any(|(cell, unread)| set(cell) && !unread.contains(&key.as_str()));
        if !read_somewhere {
            continue;
        }
        let within = format!("{key}.");
        for ((cell, unread), own) in cells.iter_mut().zip(&unread).zip(own_keys) {
            let own = own.iter().any(|k| *k == key || k.starts_with(&within));
            if !own && unread.contains(&key.as_str()) {
                if let Some(Value::Table(t)) = cell.get_mut(table) {
                    t.remove(section);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shadowsync_actors::faults::FaultKind;

    fn shadow_ma() -> Config {
        let mut c = Config::default();
        c.train.trainers = 4;
        c.sync.algorithm = "shadow-ma".parse().unwrap();
        c
    }

    #[test]
    fn the_defaults_set_nothing_that_any_mode_ignores() {
        for algorithm in ["none", "sync-sgd", "fr-ma:4", "shadow-easgd", "shadow-bmuf"] {
            for kind in ["lr", "dlrm", "deepfm"] {
                let mut c = Config::default();
                c.sync.algorithm = algorithm.parse().unwrap();
                c.model.kind = kind.into();
                for processes in [1, 4] {
                    assert_eq!(c.ignored_keys(processes), vec![], "{algorithm} {kind}");
                }
            }
        }
    }

    #[test]
    fn each_mode_names_the_keys_it_would_ignore() {
        let mut c = shadow_ma();
        c.model.kind = "lr".into();
        c.model.embedding_dim = 8;
        c.checkpoint.keep = 5;
        let keys: Vec<&str> = c.ignored_keys(1).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["model.embedding_dim", "checkpoint.keep"]);
        let mut c = Config::default();
        c.sync.link.latency_us = 100.0;
        c.train.embedding_staleness = 4;
        c.train.table_sync_ms = 10;
        let why = c.ignored_keys(1);
        let keys: Vec<&str> = why.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "train.embedding_staleness",
                "train.table_sync_ms",
                "sync.link"
            ]
        );
        assert!(why[2].1.contains("none"), "{why:?}");
        // Across processes a sharded table reads the staleness; a replicated
        // one the merge period.
        assert_eq!(c.ignored_keys(2)[0].0, "train.table_sync_ms");
        c.train.embeddings = Some(EmbeddingsMode::Replicated);
        assert_eq!(c.ignored_keys(2)[0].0, "train.embedding_staleness");
        // Without sync a codec compresses nothing in one process, and the
        // tables' traffic across processes (but not topk's, dense only).
        let mut c = Config::default();
        c.sync.compression = "int8".into();
        assert_eq!(c.ignored_keys(1)[0].0, "sync.compression");
        assert!(c.ignored_keys(2).is_empty());
        c.sync.compression = "topk".into();
        assert_eq!(c.ignored_keys(2)[0].0, "sync.compression");
    }

    #[test]
    fn a_fault_whose_site_never_runs_is_ignored() {
        let fault = |kind| Fault {
            trainer: 0,
            at_step: 3,
            every: 0,
            kind,
        };
        let mut c = Config {
            faults: vec![fault(FaultKind::Panic), fault(FaultKind::SyncPanic)],
            ..Config::default()
        };
        let why = c.ignored_keys(1);
        assert_eq!(why.len(), 1);
        assert!(why[0].1.contains("SyncPanic"), "{why:?}");
        c.sync.algorithm = "shadow-ma".parse().unwrap();
        assert_eq!(c.ignored_keys(1), vec![]);
    }

    #[test]
    fn a_grid_clears_a_key_only_in_the_cells_that_ignore_it() {
        let mut none = Config::default();
        none.sync.link.latency_us = 100.0;
        none.checkpoint.keep = 5;
        let mut shadow = shadow_ma();
        shadow.sync.link.latency_us = 100.0;
        shadow.checkpoint.keep = 5;
        let mut cells = [none, shadow];
        clear_ignored_in_grid(&mut cells, &[vec![], vec![]]);
        assert_eq!(cells[0].sync.link, Config::default().sync.link);
        assert_eq!(cells[1].sync.link.latency_us, 100.0);
        // Read by no cell: left, to be refused.
        assert_eq!(cells[0].checkpoint.keep, 5);
        assert_eq!(cells[1].ignored_keys(1)[0].0, "checkpoint.keep");
        // A fault of the shadow loop is dropped from the `none` cell only.
        let fault = Fault {
            trainer: 0,
            at_step: 3,
            every: 0,
            kind: FaultKind::SyncPanic,
        };
        let mut cells = [Config::default(), shadow_ma()];
        for cell in &mut cells {
            cell.faults = vec![fault];
        }
        clear_ignored_in_grid(&mut cells, &[vec![], vec![]]);
        assert_eq!((cells[0].faults.len(), cells[1].faults.len()), (0, 1));
        // A key the cell's own grid value sets stays, to be refused.
        let mut cells = [Config::default(), shadow_ma()];
        for cell in &mut cells {
            cell.sync.link.latency_us = 100.0;
        }
        let own = vec!["sync.link.latency_us".to_string()];
        clear_ignored_in_grid(&mut cells, &[own, vec![]]);
        assert_eq!(cells[0].ignored_keys(1)[0].0, "sync.link");
    }

    #[test]
    fn a_grid_removes_a_modes_section_from_the_cells_whose_algorithm_has_none() {
        let cell = |algorithm: &str| -> Table {
            toml::from_str(&format!(
                "[sync]\nalgorithm = \"{algorithm}\"\n[sync.shadow]\nmin_steps = 8\n\
                 [sync.bmuf]\neta = 0.5\n"
            ))
            .unwrap()
        };
        let section = |cell: &Table, name: &str| cell["sync"].get(name).is_some();
        let mut cells = [cell("none"), cell("shadow-bmuf"), cell("fr-bmuf:4")];
        let none = vec![vec![]; 3];
        clear_unread_sections_in_grid(&mut cells, &none);
        let shadow: Vec<bool> = cells.iter().map(|c| section(c, "shadow")).collect();
        let bmuf: Vec<bool> = cells.iter().map(|c| section(c, "bmuf")).collect();
        assert_eq!(
            (shadow, bmuf),
            (vec![false, true, false], vec![false, true, true])
        );
        for cell in cells {
            assert!(Value::Table(cell).try_into::<Config>().is_ok());
        }
        // Read by no cell, or set by the cell's own values: left, to be
        // refused by the cell's reading.
        let mut cells = [cell("none"), cell("fr-ma:4")];
        clear_unread_sections_in_grid(&mut cells, &none[..2]);
        assert!(section(&cells[1], "shadow") && section(&cells[1], "bmuf"));
        let mut cells = [cell("none"), cell("shadow-bmuf")];
        let own = [vec!["sync.shadow.min_steps".to_string()], vec![]];
        clear_unread_sections_in_grid(&mut cells, &own);
        assert!(section(&cells[0], "shadow") && !section(&cells[0], "bmuf"));
        let e = Value::Table(cells[0].clone())
            .try_into::<Config>()
            .unwrap_err();
        assert!(e.to_string().contains("sync.shadow"), "{e}");
        // A model's section the same way.
        let model = |kind: &str| -> Table {
            toml::from_str(&format!(
                "[model]\nkind = \"{kind}\"\n[model.deepfm]\ndeep_mlp = [8]\n"
            ))
            .unwrap()
        };
        let deepfm = |cell: &Table| cell["model"].get("deepfm").is_some();
        let mut cells = [model("lr"), model("deepfm")];
        clear_unread_sections_in_grid(&mut cells, &none[..2]);
        assert!(!deepfm(&cells[0]) && deepfm(&cells[1]));
    }
}
