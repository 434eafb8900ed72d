//! Checkpoints on disk, to resume a run where it stopped.
//!
//! A checkpoint is a directory `ckpt-NNNNNN` inside the run's checkpoint
//! directory, holding two files:
//! * `state.safetensors`: every array of the run — each trainer's dense
//!   replica (`dense/T`), each learner's optimizer state (`learner/W/NAME`),
//!   the shared embedding table and its optimizer state (`table/NAME`), EASGD's
//!   centre (`center`), each trainer's sync rule's memory (`rule/T/NAME`:
//!   BMUF's `global` model and block `momentum`);
//! * `manifest.json` ([`Manifest`]): the run's configuration (with the group
//!   schedule's seed), each trainer's steps, examples and next sync round, each
//!   learner's position in its data, the training seconds and evaluations so
//!   far, the size and SHA-256 of the state file, and the size and SHA-256 of
//!   the first MiB of each data file ([`DataFile`]: a run is never resumed on
//!   other data than it trained on).
//!
//! [`CheckpointStore::save`] writes atomically: into `.tmp-ckpt-NNNNNN`, each
//! file synced, the directory renamed into place and its parent synced; then
//! only the newest `keep` checkpoints stay. [`CheckpointStore::load_latest`]
//! takes the newest checkpoint whose manifest parses, whose state file has the
//! recorded size and checksum and holds every array the manifest implies; each
//! one passed over is returned with the reason ([`Rejected`]). Only safetensors
//! is ever read: no pickled objects, no code.

use crate::config::Config;
use crate::data::ChunkSet;
use crate::metrics::EvalPoint;
use crate::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shadowsync_actors::embedding::Pushes;
use shadowsync_actors::sync::{PeerState, RuleState};
use shadowsync_actors::{ClusterState, LearnerState, TrainerState};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The manifest format this version writes and reads.
const VERSION: u32 = 1;
const STATE_FILE: &str = "state.safetensors";
const MANIFEST_FILE: &str = "manifest.json";
const PREFIX: &str = "ckpt-";
const TMP_PREFIX: &str = ".tmp-ckpt-";

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Every `checkpoint.every_steps` steps.
    Periodic,
    /// The run was interrupted (SIGINT, SIGTERM).
    Interrupted,
    /// The run finished.
    End,
}

/// One trainer's counts in a [`Manifest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainerCounts {
    /// Steps taken.
    pub steps: u64,
    /// Examples trained.
    pub examples: u64,
    /// Its sync peer's next round (0 in checkpoints from before rounds were kept).
    #[serde(default)]
    pub sync_round: u64,
}

/// What a checkpoint holds besides its arrays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Why it was taken.
    pub reason: Reason,
    /// The run it belongs to (kept by a resumed run): pruning removes only
    /// its own run's checkpoints (empty in checkpoints from before it was
    /// kept).
    #[serde(default)]
    pub run: String,
    /// Seconds since the Unix epoch when it was written.
    pub created_unix: u64,
    /// The configuration of the run.
    pub config: Config,
    /// Per trainer.
    pub trainers: Vec<TrainerCounts>,
    /// Per learner: chunks of its data shard consumed, or `None` if it had
    /// finished its data (static dealing).
    pub positions: Vec<Option<u64>>,
    /// Shared dealing: the chunks of the pass trained (none in checkpoints
    /// of statically dealt runs, and of runs from before shared dealing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dealt: Option<ChunkSet>,
    /// Training wall-clock seconds so far (of every run it continues).
    #[serde(default)]
    pub train_seconds: f64,
    /// The evaluations during training so far.
    #[serde(default)]
    pub history: Vec<EvalPoint>,
    /// The data files the run read (none in checkpoints from before they were
    /// kept).
    #[serde(default)]
    pub data: Vec<DataFile>,
    /// A sharded table's push ledger (see [`Checkpoint::pushes`]).
    #[serde(default)]
    pub pushes: Pushes,
    /// Bytes of the state file.
    pub state_bytes: u64,
    /// SHA-256 of the state file, in hex.
    pub state_sha256: String,
}

/// A checkpoint's contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Why it was taken.
    pub reason: Reason,
    /// The run it belongs to ([`new_run_id`]; a resumed run keeps its
    /// checkpoint's).
    pub run: String,
    /// The configuration of the run.
    pub config: Config,
    /// The runtime's state.
    pub cluster: ClusterState,
    /// The shared embedding table's arrays, by name.
    pub table: Vec<(String, Vec<f32>)>,
    /// The pushes this process had sent and its shard of a sharded table had
    /// applied: equal across the processes' checkpoints, since every push
    /// sent before the checkpoint was applied before any shard was read.
    pub pushes: Pushes,
    /// Training wall-clock seconds so far (of every run it continues).
    pub train_seconds: f64,
    /// The evaluations during training so far.
    pub history: Vec<EvalPoint>,
    /// The data files the run read.
    pub data: Vec<DataFile>,
    /// Shared dealing: the chunks of the pass trained (this process's and
    /// every other process's below its cursor).
    pub dealt: Option<ChunkSet>,
}

/// A data file as a run read it: its size and the SHA-256 of its first MiB,
/// enough to tell another file, or the same one changed, from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    /// The file (absolute).
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// SHA-256 of its first MiB, in hex.
    pub head_sha256: String,
}

impl DataFile {
    /// How much of a file's start is hashed.
    const HEAD: u64 = 1 << 20;

    /// The fingerprint of `path`; `None` for what is not a regular file (a
    /// pipe or standard input must not be read ahead of the run).
    ///
    /// # Errors
    ///
    /// A file that cannot be inspected ([`Error::Io`] naming it).
    pub fn of(path: &Path) -> Result<Option<Self>> {
        use std::io::Read;
        if path == Path::new(crate::data::criteo::STDIN) {
            return Ok(None);
        }
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Ok(None);
        }
        let mut head = Vec::new();
        File::open(path)
            .and_then(|f| f.take(Self::HEAD).read_to_end(&mut head))
            .map_err(|e| Error::io(path, e))?;
        Ok(Some(Self {
            path: std::path::absolute(path).map_err(|e| Error::io(path, e))?,
            bytes: meta.len(),
            head_sha256: sha256_hex(&head),
        }))
    }

    /// An error unless the file at `self.path` is still the one fingerprinted.
    ///
    /// # Errors
    ///
    /// A file that changed or moved since it was fingerprinted ([`Error::Config`]
    /// naming `resume`, and the file), or one that cannot be inspected ([`Error::Io`]).
    pub fn check_unchanged(&self) -> Result<()> {
        let now = Self::of(&self.path)?;
        let changed = match &now {
            Some(now) if now == self => return Ok(()),
            Some(now) if now.bytes != self.bytes => {
                format!("it had {} bytes, it has {} now", self.bytes, now.bytes)
            }
            Some(_) => "its first MiB differs".to_string(),
            None => "it is not a regular file any more".to_string(),
        };
        Err(Error::config(
            "resume",
            format!(
                "{} changed since the checkpoint was written ({changed}): resuming would skip \
                 examples of other data; start a new run for new data",
                self.path.display()
            ),
        ))
    }
}

/// Whether `dir` is one checkpoint (`ckpt-NNNNNN`, its manifest inside),
/// rather than the directory that holds them.
pub fn is_one_checkpoint(dir: &Path) -> bool {
    dir.join(MANIFEST_FILE).is_file()
}

impl Checkpoint {
    /// Examples trained, all trainers.
    pub fn examples(&self) -> u64 {
        self.cluster.trainers.iter().map(|t| t.examples).sum()
    }

    /// Every array, by its name in the state file.
    fn arrays(&self) -> Vec<(String, &[f32])> {
        let mut arrays: Vec<(String, &[f32])> = Vec::new();
        for (t, trainer) in self.cluster.trainers.iter().enumerate() {
            arrays.push((format!("dense/{t}"), &trainer.dense));
            for (name, values) in &trainer.sync.rule.arrays {
                arrays.push((format!("rule/{t}/{name}"), values));
            }
        }
        for (w, learner) in self.cluster.learners.iter().enumerate() {
            for (name, values) in learner.iter().flat_map(|l| &l.arrays) {
                arrays.push((format!("learner/{w}/{name}"), values));
            }
        }
        if let Some(center) = &self.cluster.center {
            arrays.push(("center".into(), center));
        }
        for (name, values) in &self.table {
            arrays.push((format!("table/{name}"), values));
        }
        arrays
    }

    /// Rebuilds a checkpoint from its manifest and its state file's arrays.
    fn from_parts(manifest: Manifest, state: &SafeTensors) -> Result<Self, String> {
        let state = StateArrays(state);
        let trainers = manifest
            .trainers
            .iter()
            .enumerate()
            .map(|(t, counts)| {
                Ok(TrainerState {
                    steps: counts.steps,
                    examples: counts.examples,
                    dense: state.read(&format!("dense/{t}"))?,
                    sync: PeerState {
                        round: counts.sync_round,
                        rule: RuleState {
                            arrays: state.under(&format!("rule/{t}/"))?,
                        },
                    },
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let learners = manifest
            .positions
            .iter()
            .enumerate()
            .map(|(w, position)| {
                let Some(position) = *position else {
                    return Ok(None);
                };
                let arrays = state.under(&format!("learner/{w}/"))?;
                Ok(Some(LearnerState { arrays, position }))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let center = state
            .has("center")
            .then(|| state.read("center"))
            .transpose()?;
        Ok(Self {
            reason: manifest.reason,
            run: manifest.run,
            train_seconds: manifest.train_seconds,
            history: manifest.history,
            data: manifest.data,
            dealt: manifest.dealt,
            pushes: manifest.pushes,
            config: manifest.config,
            cluster: ClusterState {
                trainers,
                learners,
                center,
            },
            table: state.under("table/")?,
        })
    }
}

/// A checkpoint's state file, read by array name.
struct StateArrays<'a>(&'a SafeTensors<'a>);

impl StateArrays<'_> {
    /// Whether it holds the array `name`.
    fn has(&self, name: &str) -> bool {
        self.0.names().iter().any(|n| *n == name)
    }

    /// The `f32` array `name`.
    fn read(&self, name: &str) -> Result<Vec<f32>, String> {
        let view = self
            .0
            .tensor(name)
            .map_err(|e| format!("array {name:?}: {e}"))?;
        if view.dtype() != Dtype::F32 {
            return Err(format!("array {name:?} is {:?}, not F32", view.dtype()));
        }
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// The arrays whose names start with `prefix`, by the rest of their
    /// names, in name order.
    fn under(&self, prefix: &str) -> Result<Vec<(String, Vec<f32>)>, String> {
        let mut names: Vec<&str> = (self.0.names().into_iter())
            .filter_map(|n| n.strip_prefix(prefix))
            .collect();
        names.sort_unstable();
        names
            .into_iter()
            .map(|name| Ok((name.to_string(), self.read(&format!("{prefix}{name}"))?)))
            .collect()
    }
}

/// A checkpoint [`CheckpointStore::load_latest`] passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Its directory.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The checkpoints of a run, in one directory.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    keep: usize,
}

impl CheckpointStore {
    /// The store in `dir` (created if missing), keeping the newest `keep`.
    ///
    /// # Errors
    ///
    /// A directory that cannot be created ([`Error::Io`] naming the part of the path at fault).
    pub fn open(dir: &Path, keep: usize) -> Result<Self> {
        crate::output::create_dir(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `checkpoint` as the newest, atomically, then removes all but
    /// the newest `keep` of its run's ([`CheckpointStore::prune`]).
    ///
    /// # Errors
    ///
    /// A checkpoint that cannot be written ([`Error::Io`], [`Error::Checkpoint`]);
    /// old ones that cannot be removed are [`Saved::unpruned`], not an error.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<Saved> {
        let number = self.numbered()?.last().map_or(1, |(n, _)| n + 1);
        let tmp = self.dir.join(format!("{TMP_PREFIX}{number:06}"));
        let fail = |e: std::io::Error| Error::io(&tmp, e);
        if tmp.exists() {
            remove_unfinished(&tmp)?;
        }
        std::fs::create_dir(&tmp).map_err(fail)?;
        // A write that fails (a full disk) leaves no temporary directory.
        if let Err(e) = write_checkpoint(&tmp, checkpoint) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        let path = self.path(number);
        std::fs::rename(&tmp, &path).map_err(fail)?;
        sync_dir(&self.dir)?;
        let unpruned = self.prune(&checkpoint.run).err();
        Ok(Saved { path, unpruned })
    }

    /// Refuses a directory that already holds checkpoints (or entries named
    /// as they are), for a run that starts afresh: its own would be numbered
    /// among them and a resume would mix the two.
    ///
    /// # Errors
    ///
    /// Entries named `ckpt-N` ([`Error::Config`] naming `checkpoint.dir`).
    pub fn refuse_taken(&self) -> Result<()> {
        let numbered = self.numbered()?;
        let (Some((_, first)), Some((_, last))) = (numbered.first(), numbered.last()) else {
            return Ok(());
        };
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        Err(Error::config(
            "checkpoint.dir",
            format!(
                "{} already holds {} checkpoint{} ({}{}) of a run: continue it with --resume {}, \
                 or give a directory of its own to this run; nothing in it was changed",
                self.dir.display(),
                numbered.len(),
                if numbered.len() == 1 { "" } else { "s" },
                name(first).unwrap_or_default(),
                match numbered.len() {
                    1 => String::new(),
                    _ => format!(" … {}", name(last).unwrap_or_default()),
                },
                self.dir.display()
            ),
        ))
    }

    /// The newest checkpoint that is whole, and those newer than it that were
    /// not (with why); an error if there is none to resume from.
    ///
    /// # Errors
    ///
    /// No whole checkpoint in the directory ([`Error::Checkpoint`], with why each was
    /// rejected), or a directory that cannot be read.
    pub fn load_latest(&self) -> Result<(PathBuf, Checkpoint, Vec<Rejected>)> {
        let mut rejected = Vec::new();
        for number in self.numbers()?.into_iter().rev() {
            match self.load(number) {
                Ok((path, checkpoint)) => return Ok((path, checkpoint, rejected)),
                Err(r) => rejected.push(r),
            }
        }
        Err(self.none_usable(&rejected))
    }

    /// The numbers of the checkpoints in the directory, oldest first.
    ///
    /// # Errors
    ///
    /// A directory that cannot be read ([`Error::Io`]).
    pub fn numbers(&self) -> Result<Vec<u64>> {
        Ok(self.numbered()?.into_iter().map(|(n, _)| n).collect())
    }

    /// Where checkpoint `number` is (or would be).
    pub fn path(&self, number: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{number:06}"))
    }

    /// Checkpoint `number` if it is whole, or why not.
    ///
    /// # Errors
    ///
    /// Why checkpoint `number` is not whole: missing, truncated, unreadable or of another
    /// version ([`Rejected`]).
    pub fn load(&self, number: u64) -> std::result::Result<(PathBuf, Checkpoint), Rejected> {
        let path = self.path(number);
        load(&path).map(|c| (path.clone(), c)).map_err(|reason| {
            tracing::warn!(checkpoint = %path.display(), %reason, "checkpoint rejected");
            Rejected { path, reason }
        })
    }

    /// Moves checkpoint `number` out of the numbered ones, to
    /// `passed-over-ckpt-NNNNNN` beside them (`…-2` and on if taken; kept,
    /// not read again), so that the next one saved takes the number after
    /// those that remain.
    ///
    /// # Errors
    ///
    /// A checkpoint that cannot be renamed ([`Error::Io`]).
    pub fn set_aside(&self, number: u64) -> Result<PathBuf> {
        let from = self.path(number);
        let name = format!("passed-over-{PREFIX}{number:06}");
        let mut to = self.dir.join(&name);
        for k in 2.. {
            if !to.exists() {
                break;
            }
            to = self.dir.join(format!("{name}-{k}"));
        }
        std::fs::rename(&from, &to).map_err(|e| Error::io(&from, e))?;
        Ok(to)
    }

    /// The error of a directory without a checkpoint to resume from, naming
    /// those `rejected`.
    pub fn none_usable(&self, rejected: &[Rejected]) -> Error {
        let reason = if rejected.is_empty() {
            "no checkpoint in it".to_string()
        } else {
            format!(
                "no usable checkpoint in it: {}",
                rejected
                    .iter()
                    .map(|r| format!("{}: {}", r.path.display(), r.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        Error::Checkpoint {
            path: self.dir.clone(),
            reason,
        }
    }

    /// The checkpoint directories, oldest first, with their numbers.
    fn numbered(&self) -> Result<Vec<(u64, PathBuf)>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let mut numbered = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let name = entry.file_name();
            let number = name
                .to_str()
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(number) = number {
                numbered.push((number, entry.path()));
            }
        }
        numbered.sort();
        Ok(numbered)
    }

    /// Removes all but the newest `keep` checkpoints of `run` (those whose
    /// manifest names it: never another run's, nor a directory that only
    /// looks like a checkpoint), and unfinished writes (directories
    /// `.tmp-ckpt-N` holding nothing but a checkpoint's files).
    ///
    /// # Errors
    ///
    /// A directory that cannot be read or removed ([`Error::Io`]).
    pub fn prune(&self, run: &str) -> Result<()> {
        let ours: Vec<PathBuf> = (self.numbered()?.into_iter())
            .filter(|(_, path)| run_of(path).as_deref() == Some(run))
            .map(|(_, path)| path)
            .collect();
        for path in &ours[..ours.len().saturating_sub(self.keep)] {
            std::fs::remove_dir_all(path).map_err(|e| Error::io(path, e))?;
        }
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                remove_unfinished(&entry.path())?;
            }
        }
        Ok(())
    }
}

/// A checkpoint written: where, and why older ones of its run are still
/// there, if they are.
#[derive(Debug)]
pub struct Saved {
    /// Its directory.
    pub path: PathBuf,
    /// Why the older checkpoints could not be removed.
    pub unpruned: Option<Error>,
}

/// A new run's identity, kept in its checkpoints (random, 64 bits in hex).
pub fn new_run_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The run a checkpoint directory's manifest names, if it has one that
/// parses.
fn run_of(checkpoint: &Path) -> Option<String> {
    #[derive(Deserialize)]
    struct RunOnly {
        #[serde(default)]
        run: String,
    }
    let text = std::fs::read(checkpoint.join(MANIFEST_FILE)).ok()?;
    serde_json::from_slice::<RunOnly>(&text).ok().map(|m| m.run)
}

/// Removes an unfinished write, a directory holding nothing but files a
/// checkpoint is made of; anything else there is left as it is.
fn remove_unfinished(tmp: &Path) -> Result<()> {
    let ours = std::fs::read_dir(tmp)
        .map_err(|e| Error::io(tmp, e))?
        .flatten()
        .all(|e| {
            let name = e.file_name();
            e.file_type().is_ok_and(|t| t.is_file())
                && (name == STATE_FILE || name == MANIFEST_FILE)
        });
    if ours {
        std::fs::remove_dir_all(tmp).map_err(|e| Error::io(tmp, e))
    } else {
        Ok(())
    }
}

/// Reads and checks the checkpoint in `path`; the reason it is unusable.
fn load(path: &Path) -> Result<Checkpoint, String> {
    let manifest_path = path.join(MANIFEST_FILE);
    let text = std::fs::read(&manifest_path).map_err(|e| format!("{MANIFEST_FILE}: {e}"))?;
    let manifest: Manifest =
        serde_json::from_slice(&text).map_err(|e| format!("{MANIFEST_FILE}: {e}"))?;
    if manifest.version != VERSION {
        return Err(format!(
            "{MANIFEST_FILE}: format version {} (this build reads {VERSION})",
            manifest.version
        ));
    }
    let state = std::fs::read(path.join(STATE_FILE)).map_err(|e| format!("{STATE_FILE}: {e}"))?;
    if state.len() as u64 != manifest.state_bytes {
        return Err(format!(
            "{STATE_FILE}: {} bytes, the manifest says {} (truncated?)",
            state.len(),
            manifest.state_bytes
        ));
    }
    let digest = sha256_hex(&state);
    if digest != manifest.state_sha256 {
        return Err(format!(
            "{STATE_FILE}: SHA-256 {digest}, the manifest says {} (corrupted)",
            manifest.state_sha256
        ));
    }
    let tensors = SafeTensors::deserialize(&state).map_err(|e| format!("{STATE_FILE}: {e}"))?;
    let checkpoint =
        Checkpoint::from_parts(manifest, &tensors).map_err(|e| format!("{STATE_FILE}: {e}"))?;
    let train = &checkpoint.config.train;
    let (trainers, workers) = (train.trainers, train.workers.max(1));
    let held = (
        checkpoint.cluster.trainers.len(),
        checkpoint.cluster.learners.len(),
    );
    if held.0 != trainers || Some(held.1) != trainers.checked_mul(workers) {
        return Err(format!(
            "{MANIFEST_FILE}: its config says train.trainers = {trainers} (of \
             train.workers = {workers} each), but it holds the state of {} trainers ({} \
             learners): the run was {} trainers, and the config was edited since",
            held.0, held.1, held.0
        ));
    }
    Ok(checkpoint)
}

/// The safetensors file of `arrays` (1-D F32 each).
fn serialize(arrays: &[(String, &[f32])]) -> Result<Vec<u8>, String> {
    let bytes: Vec<(String, Vec<u8>)> = arrays
        .iter()
        .map(|(name, values)| {
            (
                name.clone(),
                values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, data)| {
            TensorView::new(Dtype::F32, vec![data.len() / 4], data)
                .map(|view| (name.as_str(), view))
                .map_err(|e| format!("array {name:?}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    safetensors::tensor::serialize(views, &None).map_err(|e| e.to_string())
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `checkpoint`'s state and manifest into the directory `tmp`,
/// synced.
fn write_checkpoint(tmp: &Path, checkpoint: &Checkpoint) -> Result<()> {
    let state = serialize(&checkpoint.arrays()).map_err(|reason| Error::Checkpoint {
        path: tmp.to_path_buf(),
        reason,
    })?;
    write_synced(&tmp.join(STATE_FILE), &state)?;
    let manifest = Manifest {
        version: VERSION,
        reason: checkpoint.reason,
        run: checkpoint.run.clone(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        config: checkpoint.config.clone(),
        trainers: checkpoint
            .cluster
            .trainers
            .iter()
            .map(|t| TrainerCounts {
                steps: t.steps,
                examples: t.examples,
                sync_round: t.sync.round,
            })
            .collect(),
        positions: checkpoint
            .cluster
            .learners
            .iter()
            .map(|l| l.as_ref().map(|l| l.position))
            .collect(),
        dealt: checkpoint.dealt.clone(),
        train_seconds: checkpoint.train_seconds,
        history: checkpoint.history.clone(),
        data: checkpoint.data.clone(),
        pushes: checkpoint.pushes.clone(),
        state_bytes: state.len() as u64,
        state_sha256: sha256_hex(&state),
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Checkpoint {
        path: tmp.to_path_buf(),
        reason: format!("cannot write the manifest: {e}"),
    })?;
    write_synced(&tmp.join(MANIFEST_FILE), &json)?;
    sync_dir(tmp)
}

/// Writes `bytes` to `path` and syncs it to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let fail = |e| Error::io(path, e);
    let mut file = File::create(path).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)
}

/// Syncs a directory's entries to disk.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shadowsync_actors::sync::{RuleContext, Rules};

    fn sample(examples: u64) -> Checkpoint {
        let mut config = Config::default();
        config.train.trainers = 2;
        config.sync.algorithm = "shadow-bmuf".parse().unwrap();
        let bmuf = |x: f32| RuleState {
            arrays: vec![
                ("global".into(), vec![x, 2.0 * x, -x]),
                ("momentum".into(), vec![0.5 * x, 0.0, 1e-8]),
            ],
        };
        Checkpoint {
            reason: Reason::Periodic,
            run: "run-a".into(),
            config,
            cluster: ClusterState {
                trainers: vec![
                    TrainerState {
                        steps: 3,
                        examples,
                        dense: vec![1.0, -2.5, f32::MIN_POSITIVE],
                        sync: PeerState {
                            round: 12,
                            rule: bmuf(1.5),
                        },
                    },
                    TrainerState {
                        steps: 4,
                        examples: 7,
                        dense: vec![0.5, 0.25, 1e30],
                        sync: PeerState {
                            round: 11,
                            rule: bmuf(-3.0),
                        },
                    },
                ],
                learners: vec![
                    Some(LearnerState {
                        arrays: vec![("sum".into(), vec![0.1, 0.2, 0.3])],
                        position: 3,
                    }),
                    None,
                ],
                center: Some(vec![9.0, 8.0, 7.0]),
            },
            table: vec![
                ("sum".into(), vec![0.0; 8]),
                ("weight".into(), (0..8).map(|i| i as f32 / 3.0).collect()),
            ],
            pushes: Pushes {
                sent: shadowsync_actors::embedding::PushCounts {
                    pushes: vec![0, 41],
                    rows: vec![0, 9_000],
                },
                applied: shadowsync_actors::embedding::PushCounts {
                    pushes: vec![3, 0],
                    rows: vec![70, 0],
                },
            },
            dealt: Some(ChunkSet {
                below: 40,
                above: vec![[42, 43], [45, 48]],
            }),
            train_seconds: 12.5,
            history: vec![EvalPoint {
                examples: 4,
                train_seconds: 3.25,
                metrics: crate::metrics::evaluate(&[0.25, 0.5], &[0.0, 1.0]),
            }],
            data: vec![DataFile {
                path: "/data/day_0.tsv".into(),
                bytes: 1234,
                head_sha256: "ab".repeat(32),
            }],
        }
    }

    #[test]
    fn a_checkpoint_reads_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 2).unwrap();
        let saved = sample(5);
        let path = store.save(&saved).unwrap().path;
        assert!(path.ends_with("ckpt-000001"));
        let (latest, loaded, rejected) = store.load_latest().unwrap();
        assert_eq!((latest, rejected), (path, Vec::new()));
        assert_eq!(loaded, saved);
        assert_eq!(loaded.examples(), 12);
    }

    #[test]
    fn a_bmuf_checkpoint_without_its_block_momentum_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 2).unwrap();
        let mut damaged = sample(5);
        let rule = &mut damaged.cluster.trainers[1].sync.rule;
        rule.arrays.retain(|(name, _)| name != "momentum");
        store.save(&damaged).unwrap();
        let (_, loaded, _) = store.load_latest().unwrap();
        // Resuming gives each trainer's rule its saved memory back.
        let context = RuleContext {
            trainer: 1,
            trainers: 2,
            group_size: 2,
            initial: &[0.0; 3],
            config: &loaded.config.sync,
        };
        let mut bmuf = Rules::default().make("bmuf", &context).unwrap();
        bmuf.restore(&loaded.cluster.trainers[0].sync.rule).unwrap();
        let saved = &loaded.cluster.trainers[1].sync.rule;
        let message = bmuf.restore(saved).unwrap_err().to_string();
        assert!(message.contains("\"momentum\""), "{message}");
    }

    #[test]
    fn only_the_newest_are_kept_and_unfinished_writes_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 2).unwrap();
        std::fs::create_dir(dir.path().join(".tmp-ckpt-000009")).unwrap();
        for examples in 1..=4 {
            store.save(&sample(examples)).unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["ckpt-000003", "ckpt-000004"]);
        assert_eq!(store.load_latest().unwrap().1, sample(4));
    }

    /// Pruning removes the run's own checkpoints only: another run's, a
    /// user's folders named like checkpoints and a temporary directory
    /// holding anything else stay; a fresh run refuses such a directory.
    #[test]
    fn pruning_removes_only_this_runs_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 1).unwrap();
        assert!(store.refuse_taken().is_ok());
        let other = Checkpoint {
            run: "run-b".into(),
            ..sample(9)
        };
        store.save(&other).unwrap();
        let users = dir.path().join("ckpt-000002");
        std::fs::create_dir(&users).unwrap();
        std::fs::write(users.join("notes.txt"), b"mine").unwrap();
        let unfinished_of_users = dir.path().join(".tmp-ckpt-000010");
        std::fs::create_dir(&unfinished_of_users).unwrap();
        std::fs::write(unfinished_of_users.join("photo.jpg"), b"mine").unwrap();
        let e = store.refuse_taken().unwrap_err().to_string();
        assert!(
            e.contains("checkpoint.dir") && e.contains("--resume") && e.contains("ckpt-000002"),
            "{e}"
        );
        for examples in 1..=3 {
            let saved = store.save(&sample(examples)).unwrap();
            assert!(saved.unpruned.is_none(), "{:?}", saved.unpruned);
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ".tmp-ckpt-000010",
                "ckpt-000001",
                "ckpt-000002",
                "ckpt-000005"
            ]
        );
        assert_eq!(load(&dir.path().join("ckpt-000001")).unwrap(), other);
        assert_eq!(std::fs::read(users.join("notes.txt")).unwrap(), b"mine");
    }

    /// A job resuming from an older checkpoint than its newest sets the newer
    /// ones aside: kept, never read or pruned, and the numbers go on from the
    /// one resumed (as in the job's other processes).
    #[test]
    fn checkpoints_set_aside_are_kept_and_numbering_goes_on_below_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 2).unwrap();
        for examples in 1..=3 {
            store.save(&sample(examples)).unwrap();
        }
        assert_eq!(store.numbers().unwrap(), [2, 3]);
        let aside = store.set_aside(3).unwrap();
        assert!(aside.ends_with("passed-over-ckpt-000003"));
        assert_eq!(store.numbers().unwrap(), [2]);
        assert_eq!(store.load(2).unwrap().1, sample(2));
        assert!(store.load(3).unwrap_err().reason.contains("manifest.json"));
        let next = store.save(&sample(4)).unwrap().path;
        assert!(next.ends_with("ckpt-000003"));
        assert!(store
            .set_aside(3)
            .unwrap()
            .ends_with("passed-over-ckpt-000003-2"));
        for examples in 5..=7 {
            store.save(&sample(examples)).unwrap();
        }
        let read = |name: &str| load(&dir.path().join(name)).unwrap();
        assert_eq!(read("passed-over-ckpt-000003"), sample(3));
        assert_eq!(read("passed-over-ckpt-000003-2"), sample(4));
    }

    /// Damages the newest checkpoint's `file` with `damage`; the previous one
    /// must be loaded, and the newest reported with `expected` in the reason.
    fn falls_back(file: &str, damage: impl Fn(&Path), expected: &str) {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 3).unwrap();
        store.save(&sample(1)).unwrap();
        let newest = store.save(&sample(2)).unwrap().path;
        damage(&newest.join(file));
        let (path, loaded, rejected) = store.load_latest().unwrap();
        assert!(path.ends_with("ckpt-000001"));
        assert_eq!(loaded, sample(1));
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].path, newest);
        assert!(
            rejected[0].reason.contains(expected),
            "{}",
            rejected[0].reason
        );
    }

    #[test]
    fn a_corrupted_state_file_is_caught_by_its_checksum() {
        falls_back(
            STATE_FILE,
            |path| {
                let mut bytes = std::fs::read(path).unwrap();
                let last = bytes.len() - 3;
                bytes[last] ^= 0x40;
                std::fs::write(path, bytes).unwrap();
            },
            "corrupted",
        );
    }

    #[test]
    fn a_truncated_state_file_is_caught_by_its_size() {
        falls_back(
            STATE_FILE,
            |path| {
                let bytes = std::fs::read(path).unwrap();
                std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
            },
            "truncated",
        );
    }

    #[test]
    fn a_manifest_whose_trainer_count_was_edited_is_reported_naming_both() {
        falls_back(
            MANIFEST_FILE,
            |path| {
                let text = std::fs::read_to_string(path).unwrap();
                let mut manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
                manifest["config"]["train"]["trainers"] = 3.into();
                std::fs::write(path, manifest.to_string()).unwrap();
            },
            "train.trainers = 3 (of train.workers = 1 each), but it holds the state of 2 \
             trainers",
        );
    }

    #[test]
    fn a_damaged_or_missing_manifest_is_reported() {
        falls_back(
            MANIFEST_FILE,
            |path| std::fs::write(path, b"{\"version\": 1,").unwrap(),
            MANIFEST_FILE,
        );
        falls_back(
            MANIFEST_FILE,
            |path| std::fs::remove_file(path).unwrap(),
            MANIFEST_FILE,
        );
    }

    #[test]
    fn no_usable_checkpoint_is_an_error_naming_the_directory_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 3).unwrap();
        let message = store.load_latest().unwrap_err().to_string();
        assert!(message.contains("no checkpoint"), "{message}");
        let only = store.save(&sample(1)).unwrap().path;
        std::fs::remove_file(only.join(STATE_FILE)).unwrap();
        let message = store.load_latest().unwrap_err().to_string();
        assert!(
            message.contains(&dir.path().display().to_string()) && message.contains(STATE_FILE),
            "{message}"
        );
    }
}
